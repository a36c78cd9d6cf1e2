"""Input checks of the layers and models, on every backend.

Shapes are checked when the call is traced: static shapes (eager, `tf.function`,
`jax.jit`, a symbolic `keras.Input`) raise a `ValueError` before anything runs;
a dimension unknown while tracing (a TensorFlow graph with a `None` size) is
checked by an assertion that runs with the graph (`InvalidArgumentError`, the
same message). Values are checked eagerly on the host; in a TensorFlow graph
by assertions that run with it; compiled code (XLA, `jax.jit`) cannot check
values.

* `check_rank`: a layer's or model's input has one dimension per named axis
  (`(batch, time, features)`), checked before the first backend op that
  would fail on it with its own message; `check_token_ids` for the models'
  ids, `check_attention_inputs` for the attention layers' three inputs.
* `check_mask_shape`: a mask's (batch, time) must be the inputs' (a mask of
  another batch once returned rows that were never input; a `(batch, 1)` or
  `(1, time)` mask broadcast silently). `check_batch_size` and `check_dims`
  check other per-row inputs (masked positions, initial states) the same way;
  `check_sequence_length` ids against the learned positions.
* `check_ids`: ids in `[0, vocabulary_size)`.
* `check_float_inputs`: layers that compute on float vectors reject integer
  (token id) and other non-float inputs with a message naming the layer,
  instead of a backend's op-level dtype error or a silent integer result.
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


def _who(layer):
    return f"{type(layer).__name__} `{layer.name}`"


def _static_shape(x):
    """`x`'s shape as known now: a tuple of ints and None (unknown sizes), or None
    when even the rank is unknown (a TensorFlow graph input of unknown shape)."""
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
    """Raises ValueError unless `shape` (a shape, as `build` gets it) has one dimension
    per name in `axes`; see `check_rank`."""
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
    """`x`, checked to have one dimension per name in `axes`, such as
    `("batch", "time", "features")`.

    A wrong rank raises `ValueError` naming the layer, the argument, the
    expected shape and the received one, when the call is traced: the rank is
    static on every backend (a TensorFlow graph input of unknown rank is not
    checked; Keras' layers do not take one). `hint` (a sentence) is added to
    the message; by default, when the batch axis seems to be missing, how to
    add it.
    """
    shape = _static_shape(x)
    if shape is not None:
        check_rank_of_shape(layer, shape, axes, what, hint)
    return x


def check_dims(layer, x, expected, what, requirement, reference=None,
               reference_what="inputs"):
    """`x`, checked to have rank `len(expected)` and, per axis, the size `expected` asks.

    `expected` has one entry per axis of `x`: None (any size), an int (that
    size) or `(name, axis)`: the size of `reference`'s dimension `axis`
    (`("batch", 0)`). `requirement` is the message's sentence that says so.

    Raises `ValueError` (the requirement, then the received shapes of `x` and
    `reference`) when the static shapes disagree. Sizes unknown while tracing
    are checked when they are known: in a TensorFlow graph at run time, an
    `InvalidArgumentError` with the same requirement. There the returned tensor
    depends on the check, so the first op that uses it cannot fail first with
    TensorFlow's bare "Incompatible shapes": use the returned tensor.
    """
    shape = _static_shape(x)
    reference_shape = None if reference is None else _static_shape(reference)
    received = f"{what}.shape={shape}"
    if reference is not None:
        received += f", {reference_what}.shape={reference_shape}"
    if shape is not None and len(shape) != len(expected):
        raise ValueError(f"{requirement} Received: {received}")
    pairs, unknown = [], shape is None
    for axis, e in enumerate(expected):
        if e is None:
            continue
        if isinstance(e, tuple):
            if reference_shape is None or len(reference_shape) <= e[1]:
                unknown = True
                pairs.append((axis, e))
                continue
            size = reference_shape[e[1]]
        else:
            size = e
        actual = None if shape is None else shape[axis]
        if actual is not None and size is not None and actual != size:
            raise ValueError(f"{requirement} Received: {received}")
        if actual is None or size is None:
            unknown = True
        pairs.append((axis, e))
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
    """`mask`, checked to have `inputs`' (batch, time) shape: the sizes of its
    dimensions `axes` (a mask of another batch or length would mask rows or steps
    that were never input, and a `(batch, 1)` or `(1, time)` mask would broadcast).

    Raises ValueError when the static shapes differ. Shapes unknown while tracing are
    checked when they are known: in a TensorFlow graph at run time, an
    `InvalidArgumentError` with the same message. There the returned mask depends on
    the check, so the layer's first product with the mask cannot fail first with
    TensorFlow's bare "Incompatible shapes": use the returned mask."""
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
    """`x`, checked to have one dimension per name in `axes`, the first (batch) of
    `inputs`' batch size: `check_dims` with only the batch tied (masked positions,
    per-row states)."""
    expected = (("batch", 0),) + tuple(
        a if isinstance(a, int) else None for a in axes[1:])
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
    """`x`, checked to have at most `max_length` positions (its dimension 1): what a
    model with `max_length` learned positions can embed. A longer static length
    raises `ValueError`; an unknown one is asserted in a TensorFlow graph. (Unchecked,
    TensorFlow fails on the CPU with a bare gather error, and on a GPU and on JAX the
    extra positions silently read zeros or the last position.)"""
    message = (f"{_who(layer)} has {max_length} learned positions (`max_sequence_length`); "
               f"`{what}` must have at most {max_length} positions.")
    length = (_static_shape(x) or (None, None))[1]
    if length is not None:
        if length > max_length:
            raise ValueError(f"{message} Received: {what}.shape={_static_shape(x)}")
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
    """Raises ValueError unless the shapes `build` gets are rank 3: attention over one
    sequence axis (`keras.layers.MultiHeadAttention` would build einsums of another
    rank, and fail on later calls that are right)."""
    for what, shape in (("query", query_shape), ("value", value_shape), ("key", key_shape)):
        if shape is not None:
            check_rank_of_shape(layer, shape, _ATTENTION_AXES[what], what)


def check_attention_inputs(layer, query, value=None, key=None, query_mask=None,
                           value_mask=None, key_mask=None):
    """`(query, value, key, query_mask, value_mask, key_mask)`, checked: each input
    `(batch, length, dim)` (`check_rank`), `value` and `key` with `query`'s batch and
    each other's length, and each padding mask `(batch, length)` of its input
    (`check_mask_shape`). None stays None; `key` is checked against `value`."""
    query = check_rank(layer, query, _ATTENTION_AXES["query"], "query")
    if value is not None:
        value = check_rank(layer, value, _ATTENTION_AXES["value"], "value")
        value = check_dims(
            layer, value, (("batch", 0), None, None), "value",
            f"{_who(layer)} needs `value` of shape (batch, s, value_dim), with the batch "
            "size of `query`.", reference=query, reference_what="query")
    if key is not None:
        key = check_rank(layer, key, _ATTENTION_AXES["key"], "key")
        if value is None:
            key = check_dims(
                layer, key, (("batch", 0), None, None), "key",
                f"{_who(layer)} needs `key` of shape (batch, s, key_dim), with the batch "
                "size of `query`.", reference=query, reference_what="query")
        else:
            key = check_dims(
                layer, key, (("batch", 0), ("s", 1), None), "key",
                f"{_who(layer)} needs `key` of shape (batch, s, key_dim), with the batch "
                "size and length s of `value`.", reference=value, reference_what="value")
    if query_mask is not None:
        query_mask = check_mask_shape(layer, query, query_mask, "query_mask",
                                      inputs_what="query")
    for what, mask in (("value_mask", value_mask), ("key_mask", key_mask)):
        if mask is None:
            continue
        owner, owner_what = (value, "value") if value is not None else (query, "query")
        if what == "key_mask" and key is not None:
            owner, owner_what = key, "key"
        mask = check_mask_shape(layer, owner, mask, what, inputs_what=owner_what)
        if what == "value_mask":
            value_mask = mask
        else:
            key_mask = mask
    return query, value, key, query_mask, value_mask, key_mask


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
