"""Constant tables kept in host memory, and gathering their rows.

TensorFlow places both on `/CPU:0`, so a large frozen table costs no device memory.
JAX and PyTorch have no per-op host placement: there it is on the default device.
"""

import keras
from keras import ops


def host_constant(array, init_scope=False):
    """A constant tensor of the NumPy `array`, in host memory where the backend can;
    with `init_scope` (TensorFlow), made eagerly outside any graph being traced."""
    if keras.backend.backend() != "tensorflow":
        return ops.convert_to_tensor(array)
    import contextlib

    import tensorflow as tf

    with tf.init_scope() if init_scope else contextlib.nullcontext(), tf.device("/CPU:0"):
        return tf.constant(array)


def host_take(table, ids):
    """The rows `table[ids]`, `ids.shape + table.shape[1:]`, ids cast to int32 (on
    `/CPU:0` on TensorFlow, where `host_constant` put the table)."""
    if keras.backend.backend() != "tensorflow":
        return ops.take(table, ops.cast(ids, "int32"), axis=0)
    import tensorflow as tf

    with tf.device("/CPU:0"):
        return tf.gather(table, tf.cast(ids, tf.int32))
