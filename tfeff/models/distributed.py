"""Helpers for losses computed per replica under tf.distribute."""

import keras


def all_reduce_sum(value):
    """Sum of `value` over the replicas in sync (itself outside a replica context, and on
    backends other than TensorFlow, whose data parallelism is not tf.distribute's)."""
    if keras.backend.backend() != "tensorflow":
        return value
    import tensorflow as tf

    ctx = tf.distribute.get_replica_context()
    if ctx is None or ctx.num_replicas_in_sync == 1:
        return value
    return ctx.all_reduce(tf.distribute.ReduceOp.SUM, value)
