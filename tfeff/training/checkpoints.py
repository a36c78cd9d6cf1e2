"""Checkpoints keyed by Keras variable paths.

`tf.train.Checkpoint(model=keras_model)` does not see sublayers that a Keras 3
model keeps in Python lists (its own tracking is not TensorFlow's object
graph), so such a checkpoint silently misses most weights. tfeff therefore
checkpoints explicit dicts `{variable.path: variable}`: the names are the
contract (`elmo_lm/forward_lstm_0/kernel`), and restoring asserts that every
model variable was found.
"""

import logging
import os

import tensorflow as tf

from tfeff.training.errors import CheckpointError
from tfeff.training.errors import error_message


def _by_path(variables, what):
    out = {}
    for v in variables:
        key = v.path.replace("/", ".")
        if key in out:
            raise ValueError(f"Two {what} variables share the path {v.path!r}")
        out[key] = v
    return out


def make_checkpoint(model, optimizer=None):
    """A `tf.train.Checkpoint` over the model's (and optimizer's) variables."""
    objects = {"model": _by_path(model.weights, "model")}
    if optimizer is not None:
        objects["optimizer"] = _by_path(optimizer.variables, "optimizer")
    return tf.train.Checkpoint(**objects)


def restore(checkpoint, path):
    """Restores `path`; raises ValueError if a variable of `checkpoint` is missing from it."""
    status = checkpoint.restore(path)
    try:
        status.expect_partial().assert_existing_objects_matched()
    except AssertionError as e:
        missing = [name for group in ("model", "optimizer")
                   for name, v in getattr(checkpoint, group, {}).items()
                   if getattr(v, "_update_uid", None) is None or v._update_uid < 0]
        hint = f" (e.g. {', '.join(missing[:5])})" if missing else ""
        raise ValueError(
            f"{path} does not hold every variable of this model{hint}: it was written by a "
            "different model or optimizer configuration."
        ) from e
    return status


def verify_checkpoint(prefix):
    """Reads every tensor of checkpoint `prefix` (checksums included).

    Raises:
        CheckpointError: naming the checkpoint's files, when one is missing,
            truncated or fails its checksum.
    """
    try:
        reader = tf.train.load_checkpoint(prefix)
        dtypes = reader.get_variable_to_dtype_map()
        for name, dtype in dtypes.items():
            # RestoreV2 reads variant tensors (iterator states) too, unlike the reader.
            tf.raw_ops.RestoreV2(prefix=prefix, tensor_names=[name], shape_and_slices=[""],
                                 dtypes=[dtype])
    except (tf.errors.OpError, ValueError) as e:
        raise CheckpointError(
            f"checkpoint {prefix} ({prefix}.index, {prefix}.data-*) is corrupted or "
            f"truncated: {error_message(e)}") from e
    return set(dtypes)


def checkpoint_step(prefix):
    return int(prefix.rsplit("-", 1)[-1])


def select_checkpoint(directory, fallback=False):
    """The newest readable checkpoint of `directory` and its tensor names, or `(None, set())`.

    Raises:
        CheckpointError: the newest checkpoint (or, with `fallback`, every
            one) is unreadable; the message names it and the way out.
    """
    try:
        state = tf.train.get_checkpoint_state(directory)
    except (tf.errors.OpError, ValueError) as e:
        raise CheckpointError(
            f"{os.path.join(directory, 'checkpoint')} (the checkpoint index) cannot be "
            f"parsed: {error_message(e)}") from e
    if state is None:
        return None, set()
    # The names only: a copied or moved model directory still lists its old paths.
    candidates = [os.path.join(directory, os.path.basename(p)) for p in
                  (list(state.all_model_checkpoint_paths) or [state.model_checkpoint_path])]
    candidates = sorted(set(candidates), key=checkpoint_step, reverse=True)
    errors = []
    for prefix in candidates:
        try:
            names = verify_checkpoint(prefix)
        except CheckpointError as e:
            if not fallback:
                older = f" ({candidates[1]})" if len(candidates) > 1 else ""
                raise CheckpointError(
                    f"{e}. Rerun with --restore_fallback to restore the previous "
                    f"checkpoint{older} instead.") from e
            logging.warning("Skipping unreadable checkpoint: %s", e)
            errors.append(str(e))
            continue
        if errors:
            logging.warning("Falling back to %s", prefix)
        return prefix, names
    raise CheckpointError(f"no readable checkpoint in {directory}: " + "; ".join(errors))


def relative_checkpoint_state(directory):
    """Rewrites the `checkpoint` index with names relative to `directory`.

    `tf.train.CheckpointManager` records absolute paths; in a copied or moved
    model directory they point at the old place, where the manager would then
    delete old checkpoints. Relative names keep the directory self-contained.
    """
    try:
        state = tf.train.get_checkpoint_state(directory)
    except (tf.errors.OpError, ValueError):
        return  # select_checkpoint reports it
    if state is None or not os.path.isabs(state.model_checkpoint_path):
        return
    tf.compat.v1.train.update_checkpoint_state(
        directory, os.path.basename(state.model_checkpoint_path),
        [os.path.basename(p) for p in state.all_model_checkpoint_paths])
