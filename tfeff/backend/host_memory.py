"""Constant tables kept in host memory, and gathering their rows.

TensorFlow places a constant and a gather on `/CPU:0` even inside a step that
runs on an accelerator, so a large frozen table costs no device memory and
only the gathered rows are copied to the device. JAX and PyTorch have no
per-op host placement inside a compiled step: there the table is a backend
constant on the default device.

TensorFlow is imported only inside the functions, on TensorFlow.
"""

import keras
from keras import ops


def host_constant(array, init_scope=False):
    """A constant tensor of the NumPy `array`, in host memory where the backend can.

    TensorFlow: `tf.constant` under `tf.device("/CPU:0")`, and with
    `init_scope` under `tf.init_scope()` too (made eagerly, outside any graph
    being traced, so a layer built inside a `tf.function` keeps an eager
    constant). Other backends: `ops.convert_to_tensor(array)` on the default
    device (`init_scope` does nothing there).
    """
    if keras.backend.backend() != "tensorflow":
        return ops.convert_to_tensor(array)
    import contextlib

    import tensorflow as tf

    with tf.init_scope() if init_scope else contextlib.nullcontext(), tf.device("/CPU:0"):
        return tf.constant(array)


def host_take(table, ids):
    """The rows `table[ids]`, `ids.shape + table.shape[1:]`, ids cast to int32.

    TensorFlow: `tf.gather` on `/CPU:0`, where `host_constant` put the table
    (the rows are then copied to the device of the op that uses them). Other
    backends: `ops.take(table, ids, axis=0)` on the default device.
    """
    if keras.backend.backend() != "tensorflow":
        return ops.take(table, ops.cast(ids, "int32"), axis=0)
    import tensorflow as tf

    with tf.device("/CPU:0"):
        return tf.gather(table, tf.cast(ids, tf.int32))
