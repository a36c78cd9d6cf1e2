"""Checkpoints keyed by Keras variable paths.

`tf.train.Checkpoint(model=keras_model)` misses the sublayers a Keras 3 model keeps in
Python lists, so tfeff checkpoints dicts `{variable.path: variable}` (the names are the
contract) and restoring asserts that every model variable was found. A checkpoint written
before tasks took a backbone is read under its old keys (`tfeff.models.legacy`).
"""

import contextlib
import json
import logging
import os
import re
import signal
import threading
import time
import uuid
import weakref

import tensorflow as tf

from tfeff.training.errors import CheckpointError
from tfeff.training.errors import error_message

# What each checkpoint of `make_checkpoint` was made of, for `restore`'s old keys.
_MADE_OF = weakref.WeakKeyDictionary()


def _by_path(variables, what, renamed=lambda key: key):
    out = {}
    for v in variables:
        key = renamed(v.path.replace("/", "."))
        if key in out:
            raise ValueError(f"Two {what} variables share the path {v.path!r}")
        out[key] = v
    return out


def make_checkpoint(model, optimizer=None):
    """A `tf.train.Checkpoint` over the model's (and optimizer's) variables."""
    checkpoint = _checkpoint(model, optimizer)
    _MADE_OF[checkpoint] = (model, optimizer)
    return checkpoint


def _checkpoint(model, optimizer, renamed=lambda key: key):
    objects = {"model": _by_path(model.weights, "model", renamed)}
    if optimizer is not None:
        objects["optimizer"] = _by_path(optimizer.variables, "optimizer", renamed)
    return tf.train.Checkpoint(**objects)


def _restore_old_keys(checkpoint, path):
    """The status of restoring `path` under the keys written before tasks took a backbone,
    or None if `checkpoint` is no task's or `path` does not hold those keys."""
    from tfeff.models import legacy

    model, optimizer = _MADE_OF.get(checkpoint, (None, None))
    if getattr(model, "backbone", None) is None:
        return None
    old = _checkpoint(model, optimizer, lambda key: legacy.checkpoint_key(model, key))
    status = old.restore(path)
    try:
        return status.expect_partial().assert_existing_objects_matched()
    except AssertionError:
        return None


def restore(checkpoint, path):
    """Restores `path`; raises ValueError if a variable of `checkpoint` is missing from it."""
    status = checkpoint.restore(path)
    try:
        return status.expect_partial().assert_existing_objects_matched()
    except AssertionError as e:
        old = _restore_old_keys(checkpoint, path)
        if old is not None:
            return old
        missing = [name for group in ("model", "optimizer")
                   for name, v in getattr(checkpoint, group, {}).items()
                   if getattr(v, "_update_uid", None) is None or v._update_uid < 0]
        hint = f" (e.g. {', '.join(missing[:5])})" if missing else ""
        raise ValueError(
            f"{path} does not hold every variable of this model{hint}: it was written by a "
            "different model or optimizer configuration.") from e


def verify_checkpoint(prefix):
    """Reads every tensor of checkpoint `prefix` (checksums included); returns their names.
    A missing, truncated or corrupted file is a `CheckpointError` naming the files."""
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
            f"truncated: {error_message(e)}", prefix) from e
    return set(dtypes)


@contextlib.contextmanager
def signals_deferred(signals=(signal.SIGTERM, signal.SIGINT)):
    """SIGTERM and SIGINT received inside the block are delivered when it ends (a
    checkpoint's files and its index are written together); outside the main thread,
    where Python runs no signal handlers, it does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received = []
    previous = {sig: signal.signal(sig, lambda signum, frame: received.append(signum))
                for sig in signals}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        for sig in dict.fromkeys(received):
            signal.raise_signal(sig)


def files_missing(prefix):
    """Whether a file of checkpoint `prefix` is gone: its index or a data shard."""
    if not tf.io.gfile.exists(prefix + ".index"):
        return True
    shards = tf.io.gfile.glob(prefix + ".data-*-of-*")
    return not shards or len(shards) < int(shards[0].rsplit("-of-", 1)[1])


def checkpoint_step(prefix):
    return int(prefix.rsplit("-", 1)[-1])


INDEX_FILE = "checkpoint"


def checkpoint_files(directory):
    """The checkpoints whose `.index` file lies in `directory`, newest first (whatever the
    checkpoint index says)."""
    prefixes = [p[:-len(".index")] for p in
                tf.io.gfile.glob(os.path.join(directory, "ckpt-*.index"))]
    return sorted((p for p in prefixes if re.fullmatch(r"ckpt-\d+", os.path.basename(p))),
                  key=checkpoint_step, reverse=True)


def has_checkpoints(directory):
    """Whether `directory` holds a checkpoint index or a checkpoint's files."""
    return (tf.io.gfile.exists(os.path.join(directory, INDEX_FILE))
            or bool(checkpoint_files(directory)))


def _read_index(directory):
    """`(state, None)`, or `(None, why)` when the index is missing or not parsable
    (TensorFlow raises for an empty one and only logs other failures)."""
    if not tf.io.gfile.exists(os.path.join(directory, INDEX_FILE)):
        return None, "is missing"
    try:
        state = tf.train.get_checkpoint_state(directory)
    except (tf.errors.OpError, ValueError) as e:
        return None, f"cannot be parsed ({error_message(e)})"
    if state is None or not (state.model_checkpoint_path or state.all_model_checkpoint_paths):
        return None, "cannot be read or parsed"
    return state, None


# `set_aside`'s prefix: out of the index and of `ckpt-*`, nothing reads, counts or rotates them.
SET_ASIDE_PREFIX = "corrupt-"


def _files_of(prefix):
    """The files of checkpoint `prefix`, by name (a directory name is never a glob)."""
    directory, name = os.path.split(prefix)
    if not tf.io.gfile.isdir(directory):
        return []
    return [os.path.join(directory, entry) for entry in sorted(tf.io.gfile.listdir(directory))
            if entry == f"{name}.index" or entry.startswith(f"{name}.data-")]


def set_aside(prefix):
    """Renames the files of checkpoint `prefix` (`ckpt-30.index`, `ckpt-30.data-*`) to
    `corrupt-ckpt-30...` (`corrupt-2-ckpt-30...` when taken); returns the new prefix."""
    directory, name = os.path.split(prefix)
    taken = set(tf.io.gfile.listdir(directory))
    tag, n = SET_ASIDE_PREFIX, 1
    while any(entry.startswith(f"{tag}{name}.") for entry in taken):
        n += 1
        tag = f"{SET_ASIDE_PREFIX}{n}-"
    target = os.path.join(directory, tag + name)
    for path in _files_of(prefix):
        tf.io.gfile.rename(path, target + path[len(prefix):])
    return target


def select_checkpoint(directory, fallback=False, write_index=True):
    """The newest readable checkpoint of `directory` and its tensor names, or `(None, set())`.

    A missing or unreadable index beside checkpoint files is never taken for a fresh
    start. Without `fallback`, that or an unreadable newest checkpoint is a
    `CheckpointError` naming the files and the way out. With it, the newest readable
    checkpoint is chosen and (with `write_index`: the chief) the newer unreadable ones
    set aside and the index written again (timed by the files, so they rotate as usual)
    naming it as the latest: their steps are saved again.
    """
    index = os.path.join(directory, INDEX_FILE)
    state, problem = _read_index(directory)
    on_disk = checkpoint_files(directory)
    listed = ", ".join(os.path.basename(p) for p in on_disk)
    if state is None:
        if not on_disk:
            if problem == "is missing":
                return None, set()
            raise CheckpointError(
                f"{index} (the checkpoint index) {problem}, and {directory} holds no "
                "checkpoint files: delete that file to start from step 0.")
        if not fallback:
            raise CheckpointError(
                f"{index} (the checkpoint index) {problem}, but {directory} holds the "
                f"checkpoints {listed}: not starting from step 0 over them. Rerun tfeff-pretrain "
                f"with --restore_fallback to restore the newest readable one ({on_disk[0]}) "
                "and write the index again.", on_disk[0])
        logging.warning("%s (the checkpoint index) %s; choosing among the checkpoint files "
                        "%s", index, problem, listed)
        candidates = on_disk
    else:
        # The names only: a copied or moved model directory still lists its old paths.
        candidates = [os.path.join(directory, os.path.basename(p)) for p in
                      (list(state.all_model_checkpoint_paths) or [state.model_checkpoint_path])]
        candidates = sorted(set(candidates), key=checkpoint_step, reverse=True)
    errors, unreadable = [], []
    for prefix in candidates:
        try:
            names = verify_checkpoint(prefix)
        except CheckpointError as e:
            if not fallback:
                older = f" ({candidates[1]})" if len(candidates) > 1 else ""
                raise CheckpointError(
                    f"{e}. Rerun with --restore_fallback to restore the previous "
                    f"checkpoint{older} instead (the unreadable one is then renamed to "
                    f"{SET_ASIDE_PREFIX}{os.path.basename(prefix)}.*).", prefix) from e
            logging.warning("Skipping unreadable checkpoint: %s", e)
            errors.append(str(e))
            unreadable.append(prefix)
            continue
        if errors:
            logging.warning("Falling back to %s", prefix)
        if write_index:
            for bad in unreadable:
                if _files_of(bad):  # (a listed one may have no files left)
                    logging.warning("Set the unreadable checkpoint %s aside as %s.*", bad,
                                    set_aside(bad))
            if state is None:
                _write_index(directory, [p for p in on_disk
                                         if checkpoint_step(p) <= checkpoint_step(prefix)])
                logging.warning("Wrote %s again from the checkpoint files", index)
            elif unreadable:
                _drop_from_index(directory, state, prefix)
                logging.warning("Wrote %s again without the unreadable checkpoints "
                                "(%s is the latest)", index, os.path.basename(prefix))
        return prefix, names
    raise CheckpointError(f"no readable checkpoint in {directory}: " + "; ".join(errors))


def _drop_from_index(directory, state, latest):
    """Writes the checkpoint index `state` again without the checkpoints after `latest`
    (which becomes the latest), keeping the others' times."""
    paths = [os.path.basename(p) for p in state.all_model_checkpoint_paths]
    times = list(state.all_model_checkpoint_timestamps)
    keep = [i for i, p in enumerate(paths) if checkpoint_step(p) <= checkpoint_step(latest)]
    write_checkpoint_state(
        directory, os.path.basename(latest), [paths[i] for i in keep],
        [times[i] for i in keep] if len(times) == len(paths) else None,
        state.last_preserved_timestamp or None)


def write_checkpoint_state(directory, latest, paths, timestamps=None, last_preserved=None):
    """Writes `directory`'s checkpoint index atomically: the `CheckpointState` text proto of
    `latest`, `paths` (oldest first) and their times (TensorFlow's own writer,
    `tf.compat.v1.train.update_checkpoint_state`, is deprecated and logs so)."""
    lines = [f"model_checkpoint_path: {json.dumps(latest)}"]
    lines += [f"all_model_checkpoint_paths: {json.dumps(p)}" for p in paths]
    lines += [f"all_model_checkpoint_timestamps: {float(t)!r}" for t in timestamps or ()]
    if last_preserved is not None:
        lines.append(f"last_preserved_timestamp: {float(last_preserved)!r}")
    path = os.path.join(directory, INDEX_FILE)
    temporary = f"{path}.tmp-{uuid.uuid4().hex[:8]}"
    with tf.io.gfile.GFile(temporary, "w") as f:
        f.write("\n".join(lines) + "\n")
    tf.io.gfile.rename(temporary, path, overwrite=True)


def _write_index(directory, prefixes):
    """The checkpoint index of `prefixes` (newest first), timed by their index files."""
    oldest_first = list(reversed(prefixes))
    times = [tf.io.gfile.stat(p + ".index").mtime_nsec / 1e9 for p in oldest_first]
    write_checkpoint_state(directory, os.path.basename(prefixes[0]),
                           [os.path.basename(p) for p in oldest_first], times, min(times) - 1)


# Checkpoints chosen in turn by `restore_newest` before it gives up.
RESTORE_ATTEMPTS = 4


def choose_checkpoint(directory):
    """The newest checkpoint of `directory` (`select_checkpoint`), or None; one whose files
    vanish while it is verified is returned all the same (`restore_newest` chooses again)."""
    try:
        return select_checkpoint(directory)[0]
    except CheckpointError as e:
        if e.prefix and files_missing(e.prefix):
            return e.prefix
        raise


def restore_newest(checkpoint, directory, prefix, owner, attempts=RESTORE_ATTEMPTS):
    """Restores checkpoint `prefix` of `directory` (None: choose now) into `checkpoint`;
    returns the prefix restored. Safe beside a run still training there: when the chosen
    checkpoint's files vanish, the newest is chosen again, up to `attempts` in all, and
    the `CheckpointError` names `owner` (the model directory). A checkpoint whose files
    are all there but unreadable is reported, not retried.
    """
    vanished = []
    for attempt in range(attempts):
        if attempt > 1:
            time.sleep(0.25 * (attempt - 1))  # the run may be between delete and record
        try:
            if prefix is None:
                prefix, _ = select_checkpoint(directory)
                if prefix is None:
                    raise CheckpointError(
                        f"every checkpoint of {owner} vanished while it was being read "
                        f"({', '.join(vanished)} were deleted): is a run still training "
                        "there? Try again.")
            restore(checkpoint, prefix)
            return prefix
        except (CheckpointError, tf.errors.OpError) as e:
            failed = getattr(e, "prefix", None) or prefix
            if failed is None or not files_missing(failed):
                raise
            vanished.append(os.path.basename(failed))
            if attempt + 1 == attempts:
                break
            logging.warning("Checkpoint %s vanished while it was being read (a run training "
                            "in %s deletes its old checkpoints); choosing the newest again",
                            failed, owner)
            prefix = None
    if len(set(vanished)) == 1:
        raise CheckpointError(
            f"{owner}: files of its newest checkpoint {vanished[0]} are missing "
            f"({os.path.join(directory, vanished[0])}.index, .data-*), though its checkpoint "
            f"index still lists it after {attempts} tries: they were deleted. A run training "
            "there replaces the index with its next checkpoint.")
    raise CheckpointError(
        f"{owner}: {attempts} checkpoints in turn vanished while they were being read "
        f"({', '.join(vanished)}): a run training there deletes them faster than they are "
        "read. Try again, or copy a checkpoint out of the model directory first.")


def relative_checkpoint_state(directory):
    """Rewrites the `checkpoint` index with names relative to `directory`.

    `tf.train.CheckpointManager` records absolute paths: in a copied or moved model
    directory it would delete old checkpoints at the old place.
    """
    try:
        state = tf.train.get_checkpoint_state(directory)
    except (tf.errors.OpError, ValueError):
        return  # select_checkpoint reports it
    if state is None or not os.path.isabs(state.model_checkpoint_path):
        return
    # The times too: without them `tf.train.CheckpointManager` never deletes those.
    write_checkpoint_state(
        directory, os.path.basename(state.model_checkpoint_path),
        [os.path.basename(p) for p in state.all_model_checkpoint_paths],
        list(state.all_model_checkpoint_timestamps),
        state.last_preserved_timestamp or None)
