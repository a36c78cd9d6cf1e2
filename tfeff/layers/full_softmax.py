"""FullSoftmax: the exact softmax over the whole vocabulary (`keras.ops`: every backend)."""

import keras
from keras import ops

from tfeff.layers import softmax_common


class _Tie:
    """Holds the tied embedding layer out of Keras tracking (its owner tracks it)."""

    def __init__(self, layer):
        self.layer = layer


@keras.saving.register_keras_serializable(package="tfeff")
class FullSoftmax(softmax_common.ExactSoftmaxMixin, keras.layers.Layer):
    """A softmax over every class: the baseline that the other output layers approximate.

    Logits are `inputs @ embeddings^T + bias`, with `embeddings` of shape
    `(vocabulary_size, input_dim)`, the layout of an input embedding (see
    `tie_to`). Every step costs `O(tokens x vocabulary_size x input_dim)`.

    Args:
        vocabulary_size: int >= 2.
        use_bias: whether to add a per-class bias.
        ignore_index: targets equal to this value are ignored; None disables.
        kernel_initializer: initializer of `embeddings` (when not tied).
        **kwargs: base `Layer` arguments.

    Call arguments:
        As `AdaptiveSoftmax` (`training` is unused).

    Returns:
        As `AdaptiveSoftmax`.

    Example:

    >>> layer = FullSoftmax(vocabulary_size=50)
    >>> log_probs, loss = layer(keras.ops.ones((2, 8)), keras.ops.array([3, 7]),
    ...                         return_loss=True)
    >>> tuple(layer(keras.ops.ones((2, 8))).shape)
    (2, 50)
    """

    def __init__(self, vocabulary_size, use_bias=True, ignore_index=None,
                 kernel_initializer="glorot_uniform", **kwargs):
        super().__init__(**kwargs)
        softmax_common.validate_vocabulary_size(vocabulary_size)
        self.supports_masking = True  # `mask` marks the targets to ignore
        self.vocabulary_size = vocabulary_size
        self.use_bias = bool(use_bias)
        self.ignore_index = ignore_index
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self._tie = _Tie(None)

    def tie_to(self, embedding_layer):
        """Uses `embedding_layer.embeddings` `(vocabulary_size, dim)` as the output matrix.

        Call before the layer is built. Not in `get_config`: the owning model re-ties.
        """
        if self.built:
            raise ValueError("`tie_to` must be called before the layer is built.")
        self._tie = _Tie(embedding_layer)

    @property
    def tied(self):
        return self._tie.layer is not None

    def build(self, inputs_shape, targets_shape=None):
        input_dim = int(inputs_shape[-1])
        if self._tie.layer is None:
            self._embeddings = self.add_weight(
                name="embeddings", shape=(self.vocabulary_size, input_dim),
                initializer=self.kernel_initializer)
        self.bias = None
        if self.use_bias:
            self.bias = self.add_weight(name="bias", shape=(self.vocabulary_size,),
                                        initializer="zeros")
        self.built = True

    @property
    def embeddings(self):
        return self._embeddings if self._tie.layer is None else self._tie.layer.embeddings

    def _matrix(self, dtype):
        return ops.cast(self.embeddings, dtype)

    def get_config(self):
        config = super().get_config()
        config.update({
            "vocabulary_size": self.vocabulary_size,
            "use_bias": self.use_bias,
            "ignore_index": self.ignore_index,
            "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
        })
        return config
