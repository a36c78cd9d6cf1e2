"""`tf.distribute` replica contexts, for the per-replica parts of losses and model state
(one replica outside a replica context and off TensorFlow)."""

import keras
from keras import ops


def _replica_context():
    """The current `tf.distribute` replica context, or None (off TensorFlow, or none)."""
    if keras.backend.backend() != "tensorflow":
        return None
    import tensorflow as tf

    return tf.distribute.get_replica_context()


def num_replicas():
    """The number of replicas in sync (a Python int; 1 outside tf.distribute)."""
    ctx = _replica_context()
    return 1 if ctx is None else ctx.num_replicas_in_sync


def replica_index():
    """This replica's index in its sync group (0 with one replica)."""
    ctx = _replica_context()
    if ctx is None:
        return 0
    replica = ctx.replica_id_in_sync_group
    return replica if isinstance(replica, int) else ops.cast(replica, "int32")


def all_reduce_sum(value):
    """Sum of `value` over the replicas in sync (itself with one replica)."""
    ctx = _replica_context()
    if ctx is None or ctx.num_replicas_in_sync == 1:
        return value
    import tensorflow as tf

    return ctx.all_reduce(tf.distribute.ReduceOp.SUM, value)


def all_gather(value, axis=0):
    """Every replica's `value`, concatenated along `axis` (itself with one replica)."""
    ctx = _replica_context()
    if ctx is None or ctx.num_replicas_in_sync == 1:
        return value
    return ctx.all_gather(value, axis=axis)


def global_mean(loss_sum, count):
    """`loss_sum` over the all-reduced `count` (at least 1): a replica's share of the
    global batch's mean, so the replicas' losses and gradients add up exactly."""
    return loss_sum / ops.maximum(all_reduce_sum(count), 1.0)


def unscale_loss(loss):
    """A replica's loss share (`global_mean`), as the global loss: what Keras' loss
    tracker, which averages the replicas, must receive."""
    return loss * num_replicas()


def layer_losses(model):
    """The sum of `model.losses` (the layers' `add_loss` terms), float32."""
    return sum((ops.cast(ops.sum(loss), "float32") for loss in model.losses), 0.0)
