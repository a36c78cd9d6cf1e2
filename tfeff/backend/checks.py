"""Input checks of the layers and models, on every backend.

Eagerly the values are checked on the host; in a TensorFlow graph the checks are
assertions that run with it; compiled code (XLA, `jax.jit`) cannot check.

* `check_ids`: ids in `[0, vocabulary_size)`.

* `check_float_inputs`: layers that compute on float vectors reject integer
  (token id) and other non-float inputs with a message naming the layer,
  instead of a backend's op-level dtype error or a silent integer result.
* `check_mask_shape`: a mask's (batch, time) must be the inputs' (a mask of
  another batch once returned rows that were never input).
* `check_right_padded`: the recurrent layers and models run each sequence
  from its first position and reverse it by its length, so their masks must
  be right-padded (True at the real positions, then False). A mask in which
  a True follows a False (left padding, holes) would give wrong numbers
  without any error; the check makes it fail instead.
"""

import keras
import numpy as np
from keras import ops

# Of a row that is not right-padded, at most this many entries are quoted.
_QUOTED_STEPS = 32


def check_float_inputs(layer, inputs, what="inputs"):
    """Raises ValueError unless `inputs` has a floating-point dtype."""
    dtype = keras.backend.standardize_dtype(inputs.dtype)
    if "float" in dtype:
        return
    hint = ""
    if "int" in dtype:
        hint = (" Integer inputs look like token ids: embed them first (e.g. with "
                "`keras.layers.Embedding`).")
    raise ValueError(
        f"{type(layer).__name__} `{layer.name}` takes float vectors (e.g. the output of an "
        f"embedding layer), not {dtype} `{what}`.{hint} Received: {what}.dtype={dtype}")


def check_mask_shape(layer, inputs, mask, what="mask"):
    """`mask`, checked to have `inputs`' (batch, time) shape: a mask of another batch
    or length would mask rows or steps that were never input.

    Raises ValueError when the static shapes differ. Shapes unknown while tracing are
    checked when they are known: in a TensorFlow graph at run time, an
    `InvalidArgumentError` with the same message. There the returned mask depends on
    the check, so the layer's first product with the mask cannot fail first with
    TensorFlow's bare "Incompatible shapes": use the returned mask."""
    message = (f"{type(layer).__name__} `{layer.name}` needs a `{what}` of shape (batch, "
               "time) equal to its inputs' first two dimensions.")
    static_mask, static_inputs = tuple(mask.shape), tuple(inputs.shape)[:2]
    if len(static_mask) != 2 or any(
            a is not None and b is not None and a != b
            for a, b in zip(static_mask, static_inputs)):
        raise ValueError(f"{message} Received: {what}.shape={static_mask}, "
                         f"inputs.shape={tuple(inputs.shape)}")
    if keras.backend.backend() == "tensorflow" and None in static_mask + static_inputs:
        import tensorflow as tf

        if not tf.executing_eagerly():
            check = tf.debugging.assert_equal(tf.shape(mask), tf.shape(inputs)[:2],
                                              message=message)
            with tf.control_dependencies([check]):
                return tf.identity(mask)
    return mask


def check_right_padded(layer, mask, what="mask"):
    """`mask` as bool, checked to be right-padded: no row has a True after a False.

    Rows that are all True, all False, or True then False pass. Eagerly (on
    every backend, where the values are concrete), a row with a True after a
    False raises `ValueError` naming the layer and the first such row. Inside
    a TensorFlow `tf.function` the check is a runtime assertion that raises
    `InvalidArgumentError` with the same message and the row's index.
    Compiled code cannot check: under XLA (`jit_compile=True`) TensorFlow
    compiles assertions out, and under `jax.jit` the mask is abstract; such
    a mask then gives wrong outputs without an error.
    """
    mask = ops.cast(mask, "bool")
    message = (f"{type(layer).__name__} `{layer.name}` needs a right-padded `{what}` (True at "
               "each sequence's real positions, then False at its padding); left padding "
               "or holes would give wrong outputs.")
    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf

        if not tf.executing_eagerly():
            bad_rows = tf.reduce_any(tf.logical_and(mask[:, 1:], tf.logical_not(mask[:, :-1])),
                                     axis=1)
            # A trailing 1 keeps the argmax defined on an empty batch (a replica's
            # share of a short last batch); the Assert computes its data either way.
            first = tf.argmax(tf.concat([tf.cast(bad_rows, tf.int32), [1]], 0),
                              output_type=tf.int32)
            # No control dependency: tf.function runs this stateful op before it returns
            # (and fails then), without holding back the layer's own computation.
            tf.debugging.Assert(tf.logical_not(tf.reduce_any(bad_rows)),
                                [message, "First row with a True after a False:", first])
            return mask
    try:
        values = ops.convert_to_numpy(mask)
    except Exception:  # traced (jax.jit, torch.compile): nothing concrete to check
        return mask
    if values.ndim < 2:
        return mask
    bad = values[:, 1:] & ~values[:, :-1]
    rows = np.flatnonzero(bad.any(axis=1))
    if rows.size:
        row = int(rows[0])
        step = int(np.argmax(bad[row])) + 1
        quoted = ", ".join(str(v) for v in values[row, :_QUOTED_STEPS].tolist())
        more = ", ..." if values.shape[1] > _QUOTED_STEPS else ""
        raise ValueError(
            f"{message} Row {row} is True at position {step} after a False. Received: "
            f"{what}[{row}]=[{quoted}{more}]")
    return mask


def check_ids(layer, ids, what="ids"):
    """`ids`, checked to lie in `[0, layer.vocabulary_size)`.

    On TensorFlow, eagerly and inside a `tf.function`, an id out of range
    raises `InvalidArgumentError` naming the layer and `vocabulary_size`; on
    another backend, eager (concrete) ids raise `ValueError` with the same
    message. Compiled code cannot check: under XLA TensorFlow compiles the
    assertions out, and under `jax.jit` the ids are abstract.
    """
    prefix = f"{type(layer).__name__} `{layer.name}`: {what}"
    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf

        checks = [
            tf.debugging.assert_non_negative(ids, message=f"{prefix} must be >= 0"),
            tf.debugging.assert_less(
                ids, tf.constant(layer.vocabulary_size, ids.dtype),
                message=f"{prefix} must be < vocabulary_size={layer.vocabulary_size}"),
        ]
        with tf.control_dependencies(checks):
            return tf.identity(ids)
    try:
        values = ops.convert_to_numpy(ids)
    except Exception:  # traced (jax.jit, torch.compile): nothing concrete to check
        return ids
    if values.size and values.min() < 0:
        raise ValueError(f"{prefix} must be >= 0")
    if values.size and values.max() >= layer.vocabulary_size:
        raise ValueError(f"{prefix} must be < vocabulary_size={layer.vocabulary_size}")
    return ids
