"""Checkpoints keyed by Keras variable paths.

`tf.train.Checkpoint(model=keras_model)` does not see sublayers that a Keras 3
model keeps in Python lists (its own tracking is not TensorFlow's object
graph), so such a checkpoint silently misses most weights. tfeff therefore
checkpoints explicit dicts `{variable.path: variable}`: the names are the
contract (`elmo_lm/forward_lstm_0/kernel`), and restoring asserts that every
model variable was found.
"""

import tensorflow as tf


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
