"""TensorFlow's traced graphs and tracked objects: what a layer reuses within one
trace, and what it writes into `tf.train.Checkpoint`s besides its variables (None on
other backends).
"""

import keras


def trace_key():
    """`(graph, replica)` of the `tf.function` being traced (replica -1 outside
    `tf.distribute`); None eagerly, for a replica id that is not static, or off
    TensorFlow (under `jax.jit`, XLA merges equal work)."""
    if keras.backend.backend() != "tensorflow":
        return None
    import tensorflow as tf

    if tf.executing_eagerly():
        return None
    ctx = tf.distribute.get_replica_context()
    replica = -1 if ctx is None else tf.get_static_value(ctx.replica_id_in_sync_group)
    return None if replica is None else (tf.compat.v1.get_default_graph(), int(replica))


def checkpointed_fingerprint(fingerprint, check):
    """A `Trackable` (None off TensorFlow) that saves the string `fingerprint` (key
    "fingerprint") with the layer it is assigned to; an eager restore calls
    `check(stored)`, which raises when it does not match."""
    if keras.backend.backend() != "tensorflow":
        return None
    import tensorflow as tf
    from tensorflow.python.trackable import base as trackable_base

    class FilterFingerprint(trackable_base.Trackable):
        def _serialize_to_tensors(self):
            return {"fingerprint": tf.constant(fingerprint)}

        def _restore_from_tensors(self, restored_tensors):
            value = restored_tensors["fingerprint"]
            if hasattr(value, "numpy"):
                check(value.numpy().decode("utf-8"))
            return tf.no_op()

    return FilterFingerprint()
