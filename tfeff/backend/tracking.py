"""TensorFlow's traced graphs and tracked objects: what a layer reuses within one
trace, and what it writes into `tf.train.Checkpoint`s besides its variables.

Other backends have neither (nothing is reused across calls; `.keras` files
are written by the layers' own `save_own_variables`): there the functions
return None.

TensorFlow is imported only inside the functions, on TensorFlow.
"""

import keras


def trace_key():
    """`(graph, replica)` of the TensorFlow graph being traced, or None when nothing
    may be reused.

    TensorFlow, inside a `tf.function`: the default graph and the static
    replica id in sync group (-1 outside `tf.distribute`); None eagerly or
    when the replica id is not static. Other backends: None (under
    `jax.jit`, XLA merges equal work).
    """
    if keras.backend.backend() != "tensorflow":
        return None
    import tensorflow as tf

    if tf.executing_eagerly():
        return None
    ctx = tf.distribute.get_replica_context()
    replica = -1 if ctx is None else tf.get_static_value(ctx.replica_id_in_sync_group)
    if replica is None:
        return None
    return tf.compat.v1.get_default_graph(), int(replica)


def checkpointed_fingerprint(fingerprint, check):
    """A trackable that writes the string `fingerprint` into checkpoints and checks
    it on restore; None off TensorFlow.

    TensorFlow: a `Trackable` whose one saved tensor is `fingerprint` (key
    "fingerprint"); an eager restore calls `check(stored)` with the stored
    string, which raises when it does not match. Assigned to a layer
    attribute, it is saved and restored with the layer. Other backends: None.
    """
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
