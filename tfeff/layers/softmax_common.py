"""Shared pieces of the softmax output layers (TensorFlow-only; not a public layer).

Every softmax output layer of tfeff has the same contract:

* `call(inputs, targets, mask=None)` -> `(target_log_probs, loss)`: the log
  probability of each target, shaped like `targets` (0 where ignored), and
  the mean negative log-likelihood over the targets that are not ignored.
* `log_prob(inputs)` -> the full distribution `(..., vocabulary_size)`.
* `predict(inputs)` -> the most probable class `(...)`.

Log-softmaxes are computed in float32 whatever the compute dtype, so the
layers work under `mixed_float16` / `mixed_bfloat16` policies.
"""

import tensorflow as tf


def flatten_inputs(inputs, targets, mask, ignore_index):
    """Flattens to `(n, dim)`, `(n,)` and a float32 `(n,)` weight of kept targets."""
    dim = inputs.shape[-1]
    x = tf.reshape(inputs, [-1, dim])
    t = tf.reshape(tf.cast(targets, tf.int32), [-1])
    keep = tf.ones_like(t, dtype=tf.bool)
    if mask is not None:
        keep = tf.logical_and(keep, tf.reshape(tf.cast(mask, tf.bool), [-1]))
    if ignore_index is not None:
        keep = tf.logical_and(keep, tf.not_equal(t, ignore_index))
    # Ignored targets may hold any value (e.g. -100): point them at class 0.
    t = tf.where(keep, t, tf.zeros_like(t))
    return x, t, keep


def finish(target_log_probs, keep, targets):
    """Zeroes ignored entries, reshapes like `targets`, and returns the mean NLL."""
    keep_f = tf.cast(keep, tf.float32)
    target_log_probs = target_log_probs * keep_f
    count = tf.reduce_sum(keep_f)
    loss = -tf.reduce_sum(target_log_probs) / tf.maximum(count, 1.0)
    return tf.reshape(target_log_probs, tf.shape(targets)), loss


def validate_vocabulary_size(vocabulary_size):
    if not isinstance(vocabulary_size, int) or vocabulary_size < 2:
        raise ValueError(
            "Received an invalid value for `vocabulary_size`, expected an integer "
            f">= 2. Received: vocabulary_size={vocabulary_size}"
        )


def check_frequency_sorted(counts, first_id=0, name="vocabulary"):
    """Raises ValueError unless `counts[first_id:]` is non-increasing.

    Adaptive softmax clusters and log-uniform sampling both assume that ids
    are ordered by decreasing frequency.
    """
    previous = None
    for i in range(first_id, len(counts)):
        if previous is not None and counts[i] > previous:
            raise ValueError(
                f"The {name} is not sorted by decreasing frequency: id {i} has count "
                f"{counts[i]} > {previous} of id {i - 1}. Adaptive softmax and "
                "log-uniform sampling need frequency-ordered ids."
            )
        previous = counts[i]


class SoftmaxOutputMixin:
    """Shape and mask methods of the softmax output layers (mix in before `Layer`)."""

    def compute_output_shape(self, inputs_shape, targets_shape=None):
        return tuple(inputs_shape[:-1]), ()

    def compute_mask(self, inputs, targets=None, mask=None):
        return None


class ExactSoftmaxMixin(SoftmaxOutputMixin):
    """`log_prob` and `predict` of layers whose `logits(x)` covers every class."""

    def log_prob(self, inputs):
        """Full log-distribution `(..., vocabulary_size)`, float32."""
        x = tf.reshape(inputs, [-1, inputs.shape[-1]])
        out = tf.nn.log_softmax(self.logits(x), axis=-1)
        return tf.reshape(out, tf.concat([tf.shape(inputs)[:-1], [self.vocabulary_size]], 0))

    def predict(self, inputs):
        """Most probable class `(...)`, int32."""
        x = tf.reshape(inputs, [-1, inputs.shape[-1]])
        best = tf.argmax(self.logits(x), axis=-1, output_type=tf.int32)
        return tf.reshape(best, tf.shape(inputs)[:-1])
