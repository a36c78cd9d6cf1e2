"""Small tensor ops whose best form depends on the backend: integer widths, `unique`,
`scan_carries`, `reverse_sequence`. TensorFlow is imported only inside the functions.
"""

import keras
from keras import ops


def ids_dtype():
    """The dtype of ids in a lookup (JAX has no int64 without `jax_enable_x64`)."""
    return "int64" if keras.backend.backend() == "tensorflow" else "int32"


def hash_dtype():
    """The dtype of `hashing.hash32` on the device (the same values in each)."""
    return "int64" if keras.backend.backend() == "tensorflow" else "uint32"


def unique(flat):
    """`(unique, index)` of 1-D int `flat`: `unique[index] == flat`; off TensorFlow, one
    slot per entry (static shapes), the distinct values first (sorted), then zeros."""
    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf

        return tf.unique(flat)
    n = ops.shape(flat)[0]
    if n == 0:
        return flat, flat
    order = ops.argsort(flat)
    ordered = ops.take(flat, order)
    first = ops.concatenate([ops.ones((1,), "bool"), ordered[1:] != ordered[:-1]])
    group = ops.cumsum(ops.cast(first, "int32")) - 1  # sorted position -> distinct slot
    unique = ops.segment_max(ordered, group, num_segments=n, sorted=True)
    unique = ops.where(ops.arange(n) <= group[-1], unique, 0)  # empty slots: 0
    index = ops.take(group, ops.argsort(order))  # entry -> its value's slot
    return unique, index


def scan_carries(step, elems, initializer):
    """Every step's carry (a tuple of tensors), stacked: `tf.scan`'s semantics. On PyTorch,
    `keras.ops.scan`'s slice `elems[t]` per step would cost a zero tensor of all of `elems`
    in the backward pass (5x slower steps at 64 steps), so it loops over `unstack`."""
    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        return tf.scan(step, elems, initializer=initializer)
    if backend == "torch":
        carry, carries = initializer, []
        for elem in ops.unstack(elems, axis=0):
            carry = step(carry, elem)
            carries.append(carry)
        return tuple(ops.stack(parts) for parts in zip(*carries))

    def scan_step(carry, elem):
        carry = step(carry, elem)
        return carry, carry

    _, stacked = ops.scan(scan_step, initializer, elems)
    return stacked


def reverse_sequence(x, lengths):
    """Reverse the first `lengths[b]` steps of each row of `x` (batch, time, ...)."""
    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf

        return tf.reverse_sequence(x, tf.cast(lengths, tf.int64), seq_axis=1, batch_axis=0)
    steps = ops.arange(ops.shape(x)[1], dtype="int32")[None, :]  # (1, time)
    lengths = ops.cast(lengths, "int32")[:, None]  # (batch, 1)
    source = ops.where(steps < lengths, lengths - 1 - steps, steps)  # (batch, time)
    source = ops.reshape(source, tuple(ops.shape(source)) + (1,) * (len(x.shape) - 2))
    return ops.take_along_axis(x, source, axis=1)
