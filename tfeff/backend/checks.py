"""Input checks of the layers and models, on every backend: ranks, mask and per-row
shapes, id ranges, float dtypes, right padding.

Static shapes raise a `ValueError` when the call is traced; a size unknown while tracing,
and values in a TensorFlow graph, are checked by assertions that run with the graph
(`InvalidArgumentError`, the same message): use the returned tensor, which depends on
them. Values are checked eagerly too; compiled code (XLA, `jax.jit`) cannot check them.
"""

import keras
import numpy as np
from keras import ops

# Of a row that is not right-padded, at most this many entries are quoted.
_QUOTED_STEPS = 32


def check_float_inputs(layer, inputs, what="inputs"):
    """Raises ValueError (hinting at an embedding for ids) unless `inputs` are floats."""
    dtype = keras.backend.standardize_dtype(inputs.dtype)
    if "float" in dtype:
        return
    hint = (" Integer inputs look like token ids: embed them first (e.g. with "
            "`keras.layers.Embedding`).") if "int" in dtype else ""
    raise ValueError(
        f"{_who(layer)} takes float vectors (e.g. the output of an embedding layer), not "
        f"{dtype} `{what}`.{hint} Received: {what}.dtype={dtype}")


def _who(layer):
    return f"{type(layer).__name__} `{layer.name}`"


def static_shape(x):
    """`x`'s shape as known now (None for unknown sizes), or None if the rank is unknown."""
    shape = getattr(x, "shape", None)
    if shape is None:
        shape = np.shape(x)
    try:
        return tuple(None if d is None else int(d) for d in shape)
    except (TypeError, ValueError):  # TensorShape(None): no rank to iterate
        return None


def _in_tf_graph():
    if keras.backend.backend() != "tensorflow":
        return False
    import tensorflow as tf

    return not tf.executing_eagerly()


def _shape_text(axes):
    return "(" + ", ".join(str(a) for a in axes) + ")"


def check_rank_of_shape(layer, shape, axes, what="inputs", hint=None):
    """`check_rank` of a shape, as `build` gets it."""
    try:
        shape = tuple(None if d is None else int(d) for d in shape)
    except (TypeError, ValueError):  # None, or a TensorShape of unknown rank
        return
    rank = len(axes)
    if len(shape) == rank:
        return
    if hint is None:
        hint = ""
        if len(shape) == rank - 1 and axes[0] == "batch":
            hint = f" One sequence needs a batch axis of size 1 (`{what}[None]`)."
    raise ValueError(
        f"{_who(layer)} takes `{what}` of shape {_shape_text(axes)}, rank {rank}.{hint} "
        f"Received: {what}.shape={shape}")


def check_rank(layer, x, axes, what="inputs", hint=None):
    """`x`, checked to have one dimension per name in `axes` (`("batch", "time", ...)`);
    `hint`, a sentence, is added to the message (default: how to add a missing batch axis)."""
    shape = static_shape(x)
    if shape is not None:
        check_rank_of_shape(layer, shape, axes, what, hint)
    return x


def check_dims(layer, x, expected, what, requirement, reference=None,
               reference_what="inputs"):
    """`x`, checked to have rank `len(expected)` and, per axis, the size `expected` asks:
    None (any size), an int (that size) or `(name, axis)`: the size of `reference`'s
    dimension `axis` (`("batch", 0)`). `requirement` is the message's sentence that says so.
    """
    shape = static_shape(x)
    reference_shape = None if reference is None else static_shape(reference)
    received = f"{what}.shape={shape}"
    if reference is not None:
        received += f", {reference_what}.shape={reference_shape}"
    if shape is not None and len(shape) != len(expected):
        raise ValueError(f"{requirement} Received: {received}")
    pairs = [(axis, e) for axis, e in enumerate(expected) if e is not None]
    unknown = shape is None
    for axis, e in pairs:
        size = e
        if isinstance(e, tuple):  # None while `reference`'s dimension is unknown
            known = reference_shape is not None and len(reference_shape) > e[1]
            size = reference_shape[e[1]] if known else None
        actual = None if shape is None else shape[axis]
        if actual is not None and size is not None and actual != size:
            raise ValueError(f"{requirement} Received: {received}")
        unknown = unknown or actual is None or size is None
    if unknown and pairs and _in_tf_graph():
        import tensorflow as tf

        x_shape = tf.shape(x)
        checks = [tf.debugging.assert_rank(x, len(expected), message=requirement)]
        with tf.control_dependencies(checks):
            actual = tf.stack([x_shape[axis] for axis, _ in pairs])
        wanted = tf.stack([tf.shape(reference)[e[1]] if isinstance(e, tuple)
                           else tf.constant(e, tf.int32) for _, e in pairs])
        checks.append(tf.debugging.assert_equal(actual, wanted, message=requirement))
        with tf.control_dependencies(checks):
            return tf.identity(x)
    return x


def check_mask_shape(layer, inputs, mask, what="mask", axes=(0, 1), inputs_what="inputs"):
    """`mask`, checked to have the (batch, time) sizes of `inputs`' dimensions `axes` (a
    mask of another batch or length, or a `(batch, 1)` one, would broadcast silently)."""
    dims = ("first two dimensions" if tuple(axes) == (0, 1)
            else "dimensions " + " and ".join(str(a) for a in axes))
    equal = (f"its inputs' {dims}" if inputs_what == "inputs"
             else f"the {dims} of `{inputs_what}`")
    article = "a " if what.split("[")[0].endswith("mask") else ""
    requirement = (f"{_who(layer)} needs {article}`{what}` of shape (batch, time) equal to "
                   f"{equal}.")
    return check_dims(layer, mask, (("batch", axes[0]), ("time", axes[1])), what, requirement,
                      reference=inputs, reference_what=inputs_what)


def check_batch_size(layer, inputs, x, axes, what, inputs_what="inputs"):
    """`x`, checked to have one dimension per name in `axes`, the first `inputs`' batch."""
    expected = (("batch", 0),) + tuple(a if isinstance(a, int) else None for a in axes[1:])
    names = ("batch",) + tuple(str(a) for a in axes[1:])
    requirement = (f"{_who(layer)} needs `{what}` of shape {_shape_text(names)}, one row per "
                   f"sequence (the batch size of `{inputs_what}`).")
    return check_dims(layer, x, expected, what, requirement, reference=inputs,
                      reference_what=inputs_what)


def check_token_ids(model, ids, what="token_ids"):
    """`ids` as int32, checked to be `(batch, time)` (`check_rank`): what every model's
    `call` and `encode` take. Float ids are cast, as `keras.layers.Embedding` casts them."""
    return ops.cast(check_rank(model, ids, ("batch", "time"), what), "int32")


def check_sequence_length(layer, x, max_length, what="token_ids"):
    """`x`, checked to have at most `max_length` positions (dimension 1), the learned
    positions (unchecked, GPUs and JAX would silently read zeros or the last one)."""
    message = (f"{_who(layer)} has {max_length} learned positions (`max_sequence_length`); "
               f"`{what}` must have at most {max_length} positions.")
    length = (static_shape(x) or (None, None))[1]
    if length is not None:
        if length > max_length:
            raise ValueError(f"{message} Received: {what}.shape={static_shape(x)}")
        return x
    if _in_tf_graph():
        import tensorflow as tf

        check = tf.debugging.assert_less_equal(tf.shape(x)[1], max_length, message=message)
        with tf.control_dependencies([check]):
            return tf.identity(x)
    return x


# The axes of attention layers' inputs (`keras.layers.MultiHeadAttention`'s names).
_ATTENTION_AXES = {"query": ("batch", "n", "query_dim"), "value": ("batch", "s", "value_dim"),
                   "key": ("batch", "s", "key_dim")}


def check_attention_shapes(layer, query_shape, value_shape=None, key_shape=None):
    """Raises ValueError unless the shapes `build` gets are rank 3 (one sequence axis)."""
    for what, shape in (("query", query_shape), ("value", value_shape), ("key", key_shape)):
        if shape is not None:
            check_rank_of_shape(layer, shape, _ATTENTION_AXES[what], what)


def check_attention_inputs(layer, query, value=None, key=None, query_mask=None,
                           value_mask=None, key_mask=None):
    """`(query, value, key, query_mask, value_mask, key_mask)`, checked: each input
    `(batch, length, dim)`, `value` and `key` with `query`'s batch and each other's
    length, each mask `(batch, length)` of its input. None stays None."""
    query = check_rank(layer, query, _ATTENTION_AXES["query"], "query")
    if value is not None:
        value = check_rank(layer, value, _ATTENTION_AXES["value"], "value")
        value = check_dims(
            layer, value, (("batch", 0), None, None), "value",
            f"{_who(layer)} needs `value` of shape (batch, s, value_dim), with the batch "
            "size of `query`.", reference=query, reference_what="query")
    if key is not None:
        key = check_rank(layer, key, _ATTENTION_AXES["key"], "key")
        tied = "batch size" if value is None else "batch size and length s"
        ref, ref_what = (query, "query") if value is None else (value, "value")
        key = check_dims(
            layer, key, (("batch", 0), None if value is None else ("s", 1), None), "key",
            f"{_who(layer)} needs `key` of shape (batch, s, key_dim), with the {tied} of "
            f"`{ref_what}`.", reference=ref, reference_what=ref_what)
    if query_mask is not None:
        query_mask = check_mask_shape(layer, query, query_mask, "query_mask",
                                      inputs_what="query")
    owner, owner_what = (value, "value") if value is not None else (query, "query")
    if value_mask is not None:
        value_mask = check_mask_shape(layer, owner, value_mask, "value_mask",
                                      inputs_what=owner_what)
    if key_mask is not None:
        owner, owner_what = (key, "key") if key is not None else (owner, owner_what)
        key_mask = check_mask_shape(layer, owner, key_mask, "key_mask", inputs_what=owner_what)
    return query, value, key, query_mask, value_mask, key_mask


def check_right_padded(layer, mask, what="mask"):
    """`mask` as bool, checked to be right-padded: no row has a True after a False (the
    recurrent layers reverse each sequence by its length: holes give wrong outputs)."""
    mask = ops.cast(mask, "bool")
    message = (f"{_who(layer)} needs a right-padded `{what}` (True at each sequence's real "
               "positions, then False at its padding); left padding or holes would give "
               "wrong outputs.")
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
    """`ids`, checked to lie in `[0, layer.vocabulary_size)`: `InvalidArgumentError` on
    TensorFlow (also eagerly), `ValueError` on concrete ids elsewhere."""
    negative = f"{_who(layer)}: {what} must be >= 0"
    too_large = f"{_who(layer)}: {what} must be < vocabulary_size={layer.vocabulary_size}"
    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf

        checks = [tf.debugging.assert_non_negative(ids, message=negative),
                  tf.debugging.assert_less(ids, tf.constant(layer.vocabulary_size, ids.dtype),
                                           message=too_large)]
        with tf.control_dependencies(checks):
            return tf.identity(ids)
    try:
        values = ops.convert_to_numpy(ids)
    except Exception:  # traced (jax.jit, torch.compile): nothing concrete to check
        return ids
    if values.size and values.min() < 0:
        raise ValueError(negative)
    if values.size and values.max() >= layer.vocabulary_size:
        raise ValueError(too_large)
    return ids
