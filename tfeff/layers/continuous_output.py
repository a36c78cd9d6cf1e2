"""ContinuousOutput: predict the pre-trained embedding of the target word."""

import keras
from keras import ops

from tfeff.layers.output_head import OutputHead
from tfeff.losses import continuous as continuous_losses

LOSSES = tuple(continuous_losses.LOSSES)


@keras.saving.register_keras_serializable(package="tfeff")
class ContinuousOutput(OutputHead, keras.layers.Layer):
    """Continuous output layer of ELMo-C (Li et al., TACL 2019).

    The language model predicts the fixed, pre-trained embedding of the
    target word (e.g. its fastText vector) instead of a softmax over the
    vocabulary: an optional linear projection of the hidden state, trained
    with the distance `loss` to the target embedding. Its cost does not depend
    on the vocabulary size and it owns no output-embedding variable. See
    docs/guides/layers.md#continuousoutput-and-the-losses.

    Under a stock `compile`/`fit`, the targets `y` are the target words' fixed
    vectors and `make_loss()` is the matching `keras.losses.Loss`; Keras masks
    pass through to it. As an output head (`tfeff.layers.output_head`) it
    takes target *ids* and looks their vectors up in `target_embedding`;
    `ranking_scores` is the cosine similarity with every vector, and it has
    no distribution over the vocabulary (`log_prob` raises `ValueError`).

    Args:
        embedding_dim: positive int, the size of the target embeddings.
        loss: `"cosine"` (1 - cos), `"l2"` (squared Euclidean distance) or
            `"vmf"` (von Mises-Fisher negative log-likelihood).
        use_projection: if True, a `Dense(embedding_dim)` maps the hidden state
            to the prediction; if False the hidden state (of `embedding_dim`) is it.
        vmf_regularization1: lambda_1 of the vMF loss (penalty on ||e_hat||), >= 0.
        vmf_regularization2: lambda_2 of the vMF loss (scale of the dot product), in (0, 1].
        kernel_initializer: initializer of the projection kernel.
        target_embedding: optional `FixedEmbedding` `(vocabulary_size,
            embedding_dim)` of the target vectors (not a weight), needed by
            `per_position_loss` and `ranking_scores`.
        **kwargs: base `Layer` arguments (`name`, `dtype`, ...).

    Call arguments:
        inputs: hidden states `(..., hidden_dim)`.

    Returns:
        Predicted embeddings `(..., embedding_dim)`. Masks pass through unchanged.

    Raises:
        ValueError: `embedding_dim` is not a positive integer (or is below 2
            with the vMF loss), `loss` is unknown, a `vmf_regularization` is
            out of range, or `target_embedding` has another dimension.

    Example:

    >>> layer = ContinuousOutput(embedding_dim=4, loss="cosine")
    >>> predictions = layer(keras.ops.ones((2, 3, 8)))
    >>> tuple(predictions.shape)
    (2, 3, 4)
    >>> tuple(layer.position_loss(keras.ops.ones((2, 3, 4)), predictions).shape)
    (2, 3)
    >>> layer.make_loss().name
    'cosine_distance'
    >>> from tfeff.layers import FixedEmbedding
    >>> head = ContinuousOutput(4, target_embedding=FixedEmbedding(np.eye(10, 4, dtype="float32")))
    >>> features = head.features(keras.ops.ones((2, 3, 8)))
    >>> tuple(head.per_position_loss(features, keras.ops.ones((2, 3), "int32")).shape)
    (2, 3)
    >>> tuple(head.ranking_scores(features).shape)
    (2, 3, 10)

    Reference:
        Li, Chen, Hsieh & Chang, "Efficient Contextual Representation
        Learning With Continuous Outputs", TACL 2019. Kumar & Tsvetkov,
        "Von Mises-Fisher Loss for Training Sequence to Sequence Models with
        Continuous Outputs", ICLR 2019.
    """

    def __init__(
        self,
        embedding_dim,
        loss="cosine",
        use_projection=True,
        vmf_regularization1=0.0,
        vmf_regularization2=1.0,
        kernel_initializer="glorot_uniform",
        target_embedding=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        if not isinstance(embedding_dim, int) or embedding_dim <= 0:
            raise ValueError(
                "Received an invalid value for `embedding_dim`, expected a positive "
                f"integer. Received: embedding_dim={embedding_dim}")
        if loss not in LOSSES:
            raise ValueError(f"Received an invalid value for `loss`, expected one of {LOSSES}. "
                             f"Received: loss={loss!r}")
        if loss == "vmf" and embedding_dim < 2:
            raise ValueError("The vMF loss needs `embedding_dim` >= 2. "
                             f"Received: embedding_dim={embedding_dim}")
        continuous_losses.check_vmf_regularization(vmf_regularization1, vmf_regularization2,
                                                   prefix="vmf_")
        if isinstance(target_embedding, dict):
            target_embedding = keras.saving.deserialize_keras_object(target_embedding)
        if target_embedding is not None and target_embedding.output_dim != embedding_dim:
            raise ValueError(
                f"`target_embedding` has dimension {target_embedding.output_dim}, expected "
                f"embedding_dim={embedding_dim}.")
        self.target_embedding = target_embedding
        self.embedding_dim = embedding_dim
        self.loss = loss
        self.use_projection = bool(use_projection)
        self.vmf_regularization1 = float(vmf_regularization1)
        self.vmf_regularization2 = float(vmf_regularization2)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.supports_masking = True
        self.projection = None
        if self.use_projection:
            self.projection = keras.layers.Dense(
                embedding_dim, kernel_initializer=self.kernel_initializer,
                dtype=self.dtype_policy, name="projection")

    def build(self, input_shape):
        if self.use_projection:
            self.projection.build(input_shape)
        elif input_shape[-1] is not None and input_shape[-1] != self.embedding_dim:
            raise ValueError(
                "With `use_projection=False` the inputs' last dimension must equal "
                f"`embedding_dim`. Received: inputs.shape={input_shape}, "
                f"embedding_dim={self.embedding_dim}")

    def call(self, inputs):
        return self.projection(inputs) if self.use_projection else inputs

    def make_loss(self, reduction="sum_over_batch_size", name=None):
        """The `keras.losses.Loss` of this layer's `loss` and regularizers.

        Args:
            reduction: a Keras reduction; `None` gives one loss per position.
            name: optional loss name.

        Returns:
            A `tfeff.losses.CosineDistance`, `L2Distance` or `VonMisesFisherLoss`.
        """
        kwargs = {"reduction": reduction}
        if name is not None:
            kwargs["name"] = name
        if self.loss == "vmf":
            kwargs.update(regularization1=self.vmf_regularization1,
                          regularization2=self.vmf_regularization2)
        return continuous_losses.LOSSES[self.loss](**kwargs)

    def position_loss(self, y_true, y_pred):
        """float32 loss `(...)` between target embeddings `y_true` and predictions `y_pred`
        `(..., embedding_dim)` at each position, ignoring Keras masks (`Loss.call`)."""
        return self.make_loss(reduction=None).call(keras.ops.cast(y_true, "float32"),
                                                   keras.ops.cast(y_pred, "float32"))

    def features(self, hidden):
        """The predicted target vectors `(..., embedding_dim)` (`call`)."""
        return self(hidden)

    def _targets(self):
        if self.target_embedding is None:
            raise ValueError(
                f"ContinuousOutput `{self.name}` scores target ids against fixed vectors: "
                "construct it with `target_embedding` (a FixedEmbedding).")
        return self.target_embedding

    def per_position_loss(self, features, targets, mask=None, training=False):
        """The loss between each prediction and its target id's fixed vector, float32
        `targets.shape`; ids where `mask` is False are not looked up (loss 0)."""
        del training
        ids = ops.cast(targets, "int32")
        if mask is not None:
            mask = ops.cast(mask, "bool")
            ids = ops.where(mask, ids, ops.zeros_like(ids))
        losses = self.position_loss(self._targets()(ids), features)
        return losses if mask is None else ops.where(mask, losses, ops.zeros_like(losses))

    def ranking_scores(self, features):
        """Cosine similarity `(..., vocabulary_size)` of each prediction with every vector."""
        table = ops.cast(self._targets().table, "float32")  # (vocabulary_size, embedding_dim)
        return ops.matmul(_unit(ops.cast(features, "float32")), ops.transpose(_unit(table)))

    def log_prob(self, features):
        """A continuous output has no distribution over the vocabulary: raises ValueError."""
        raise ValueError("A continuous output has no distribution over the vocabulary.")

    def compute_output_shape(self, input_shape):
        return tuple(input_shape[:-1]) + (self.embedding_dim,)

    def compute_mask(self, inputs, mask=None):
        return mask

    def get_config(self):
        config = super().get_config()
        config.update({
            "embedding_dim": self.embedding_dim,
            "loss": self.loss,
            "use_projection": self.use_projection,
            "vmf_regularization1": self.vmf_regularization1,
            "vmf_regularization2": self.vmf_regularization2,
            "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
            "target_embedding": (
                None if self.target_embedding is None
                else keras.saving.serialize_keras_object(self.target_embedding)
            ),
        })
        return config


def _unit(x):
    """`x` scaled to unit L2 norm along its last axis (zero rows stay zero)."""
    norm = ops.sqrt(ops.sum(ops.square(x), axis=-1, keepdims=True))
    return x / ops.maximum(norm, 1e-12)
