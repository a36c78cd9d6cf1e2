"""SampledSoftmax: log-uniform candidate sampling, optionally against a fixed table.

`keras.ops` code. On TensorFlow, training draws distinct negatives with
`tf.random.log_uniform_candidate_sampler(unique=True)` (no XLA kernel);
elsewhere `tfeff.backend.sampling.log_uniform_sample` draws them with
replacement (TensorFlow's `unique=False`: expected count `num_sampled * P(c)`)
in static shapes that `jax.jit` compiles.
"""

import keras
from keras import ops

from tfeff.backend import sampling
from tfeff.layers import softmax_common

# Added to the logits of sampled classes that are the true class ("accidental hits").
_HIT_PENALTY = -1e9


@keras.saving.register_keras_serializable(package="tfeff")
class SampledSoftmax(softmax_common.ExactSoftmaxMixin, keras.layers.Layer):
    """Sampled softmax (Jean et al. 2015) with a log-uniform (Zipfian) sampler.

    In training, each step draws `num_sampled` negative classes shared by the
    batch from the log-uniform distribution
    `P(c) = log((c + 2) / (c + 1)) / log(vocabulary_size + 1)` (ids ordered by
    decreasing frequency), and the loss is the softmax cross-entropy over
    `[true class, samples]` with the logits corrected by `-log(expected
    count)`, as `tf.nn.sampled_softmax_loss` does. Only the rows that the
    targets and samples name are gathered (a sparse gradient). Outside
    training (and in `log_prob` / `predict`) the full softmax is used.

    With `output_embedding` (a `tfeff.layers.FixedEmbedding`), the output
    matrix is that frozen table and the layer owns no output weights: the
    FIXED baseline of Li et al. (2019). Inputs must have the table's dimension.

    Args:
        vocabulary_size: int >= 2.
        num_sampled: int in `[1, vocabulary_size)`, negatives per step.
        use_bias: whether to add a trainable per-class bias.
        remove_accidental_hits: mask samples that equal the target.
        ignore_index: targets equal to this value are ignored; None disables.
        seed: sampler seed (None: nondeterministic).
        output_embedding: optional `FixedEmbedding` used as the output matrix.
        kernel_initializer: initializer of `embeddings` `(vocabulary_size, input_dim)`.
        **kwargs: base `Layer` arguments.

    Call arguments:
        As `AdaptiveSoftmax`; `training` selects the sampled loss.

    Returns:
        As `AdaptiveSoftmax` (with targets in training: the sampled softmax's).

    Raises:
        ValueError: `vocabulary_size` is not an integer >= 2, `num_sampled` is
            not an integer in `[1, vocabulary_size)`, or `output_embedding`
            does not have `vocabulary_size` rows.

    Example:

    >>> layer = SampledSoftmax(vocabulary_size=1000, num_sampled=64, seed=1)
    >>> _, loss = layer(keras.ops.ones((4, 16)), keras.ops.array([1, 2, 3, 4]),
    ...                 training=True, return_loss=True)
    >>> tuple(loss.shape)
    ()

    Reference:
        Jean, Cho, Memisevic & Bengio, "On Using Very Large Target Vocabulary
        for Neural Machine Translation", ACL 2015. Li et al., "Efficient
        Contextual Representation Learning With Continuous Outputs", TACL 2019.
    """

    # Why `supports_jit` is False on TensorFlow (`tfeff.training.precision` names it).
    jit_unsupported_reason = "TensorFlow's candidate sampler has no XLA kernel"

    def __init__(self, vocabulary_size, num_sampled, use_bias=True,
                 remove_accidental_hits=True, ignore_index=None, seed=None,
                 output_embedding=None, kernel_initializer="glorot_uniform", **kwargs):
        super().__init__(**kwargs)
        softmax_common.validate_vocabulary_size(vocabulary_size)
        self.supports_masking = True  # `mask` marks the targets to ignore
        self.supports_jit = sampling.sampler_compiles()  # not on TensorFlow: no XLA kernel
        if not isinstance(num_sampled, int) or not 0 < num_sampled < vocabulary_size:
            raise ValueError(
                "Received an invalid value for `num_sampled`, expected an integer in "
                f"[1, vocabulary_size={vocabulary_size}). Received: num_sampled={num_sampled}")
        if isinstance(output_embedding, dict):
            output_embedding = keras.saving.deserialize_keras_object(output_embedding)
        if output_embedding is not None and output_embedding.vocabulary_size != vocabulary_size:
            raise ValueError(
                f"`output_embedding` has {output_embedding.vocabulary_size} rows, expected "
                f"vocabulary_size={vocabulary_size}")
        self.vocabulary_size = vocabulary_size
        self.num_sampled = num_sampled
        self.use_bias = bool(use_bias)
        self.remove_accidental_hits = bool(remove_accidental_hits)
        self.ignore_index = ignore_index
        self.seed = seed
        self.output_embedding = output_embedding
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        # Off TensorFlow the sampler's state (not a weight: never saved); None on TensorFlow.
        self.seed_generator = sampling.sampler_seed_generator(seed)

    def build(self, inputs_shape, targets_shape=None):
        input_dim = int(inputs_shape[-1])
        if self.output_embedding is None:
            self.embeddings = self.add_weight(
                name="embeddings", shape=(self.vocabulary_size, input_dim),
                initializer=self.kernel_initializer)
        elif self.output_embedding.output_dim != input_dim:
            raise ValueError(f"The inputs have {input_dim} features but `output_embedding` has "
                             f"dimension {self.output_embedding.output_dim}.")
        self.bias = None
        if self.use_bias:
            self.bias = self.add_weight(name="bias", shape=(self.vocabulary_size,),
                                        initializer="zeros")
        self.built = True

    def _rows(self, ids, dtype):
        """Output-matrix rows of `ids` (a sparse-gradient gather)."""
        if self.output_embedding is not None:
            return ops.cast(self.output_embedding(ids), dtype)
        return ops.take(ops.cast(self.embeddings, dtype), ids, axis=0)

    def _matrix(self, dtype):
        if self.output_embedding is not None:
            return ops.cast(self.output_embedding.table, dtype)
        return ops.cast(self.embeddings, dtype)

    def _target_log_probs(self, inputs, targets, mask, training):
        if not training:
            return super()._target_log_probs(inputs, targets, mask, training)
        x, t, keep = softmax_common.flatten_inputs(self, inputs, targets, mask)
        return self._sampled_log_probs(x, t, keep, targets, *self._sample(t))

    def sampled_loss(self, inputs, targets, sampled_values, mask=None):
        """The training loss with given negatives instead of a fresh draw, as
        `tf.nn.sampled_softmax_loss` with its `sampled_values`.

        Args:
            inputs: `(..., input_dim)` hidden states.
            targets: int `(...)` class ids.
            sampled_values: `(candidates, true_expected_count,
                sampled_expected_count)`: int `(k,)` class ids, float
                `targets.shape` and float `(k,)` expected counts.
            mask: optional bool `(...)`; False entries are ignored.

        Returns:
            `(target_log_probs, loss)` as a training call with `return_loss=True`.
        """
        inputs, _ = self._flat_rows(inputs)
        softmax_common.check_targets_shape(self, inputs, targets, mask)
        x, t, keep = softmax_common.flatten_inputs(self, inputs, targets, mask)
        candidates, true_expected, sampled_expected = sampled_values
        return self._sampled_log_probs(
            x, t, keep, targets, ops.cast(candidates, "int32"),
            ops.reshape(ops.cast(true_expected, "float32"), (-1,)),
            ops.cast(sampled_expected, "float32"))

    def _sampled_log_probs(self, x, t, keep, targets, sampled, true_expected,
                           sampled_expected):
        true_logits = ops.cast(ops.sum(x * self._rows(t, x.dtype), axis=-1), "float32")  # (n,)
        sampled_logits = ops.cast(  # (n, S)
            ops.matmul(x, ops.transpose(self._rows(sampled, x.dtype))), "float32")
        if self.bias is not None:
            bias = ops.cast(self.bias, "float32")
            true_logits += ops.take(bias, t, axis=0)
            sampled_logits += ops.take(bias, sampled, axis=0)[None, :]
        true_logits -= ops.log(true_expected)
        sampled_logits -= ops.log(sampled_expected)[None, :]
        if self.remove_accidental_hits:
            hits = ops.equal(sampled[None, :], t[:, None])
            sampled_logits = ops.where(hits, _HIT_PENALTY, sampled_logits)
        logits = ops.concatenate([true_logits[:, None], sampled_logits], axis=1)
        log_probs = ops.log_softmax(logits, axis=-1)[:, 0]
        return softmax_common.finish(log_probs, keep, targets)

    def _sample(self, t):
        """`(sampled (S,), true expected counts (n,), sampled expected counts (S,))`."""
        return sampling.log_uniform_candidates(t, self.num_sampled, self.vocabulary_size,
                                               self.seed, self.seed_generator)

    def get_config(self):
        config = super().get_config()
        config.update({
            "vocabulary_size": self.vocabulary_size,
            "num_sampled": self.num_sampled,
            "use_bias": self.use_bias,
            "remove_accidental_hits": self.remove_accidental_hits,
            "ignore_index": self.ignore_index,
            "seed": self.seed,
            "output_embedding": (
                None if self.output_embedding is None
                else keras.saving.serialize_keras_object(self.output_embedding)
            ),
            "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
        })
        return config
