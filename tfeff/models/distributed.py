"""Helpers for losses computed per replica under tf.distribute."""

import keras
from keras import ops


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


def global_mean(loss_sum, count):
    """`loss_sum` over the all-reduced `count` (at least 1): a replica's share of the
    global batch's mean, so the replicas' losses and gradients add up exactly."""
    return loss_sum / ops.maximum(all_reduce_sum(count), 1.0)


def layer_losses(model):
    """The sum of `model.losses` (the layers' `add_loss` terms), float32."""
    total = 0.0
    for loss in model.losses:
        total += ops.cast(ops.sum(loss), "float32")
    return total
