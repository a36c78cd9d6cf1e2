"""Helpers for losses computed per replica under tf.distribute (TensorFlow-only)."""

import tensorflow as tf


def all_reduce_sum(value):
    """Sum of `value` over the replicas in sync (itself outside a replica context)."""
    ctx = tf.distribute.get_replica_context()
    if ctx is None or ctx.num_replicas_in_sync == 1:
        return value
    return ctx.all_reduce(tf.distribute.ReduceOp.SUM, value)
