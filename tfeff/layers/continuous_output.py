"""ContinuousOutput: predict the pre-trained embedding of the target word."""

import keras
from keras import ops

from tfeff.layers.output_head import OutputHead
from tfeff.losses import continuous as continuous_losses

LOSSES = tuple(continuous_losses.LOSSES)


@keras.saving.register_keras_serializable(package="tfeff")
class ContinuousOutput(OutputHead, keras.layers.Layer):
    """Continuous output layer of ELMo-C (Li et al., TACL 2019).

    Instead of a softmax over the vocabulary, the language model predicts the
    fixed, pre-trained embedding of the target word (for example its fastText
    vector). The layer is an optional linear projection of the hidden state to
    the embedding dimension; `distance` is the training loss between that
    prediction and the target embedding. Its cost does not depend on the
    vocabulary size, it owns no output-embedding variable, and the target rows
    are gathered per batch by the caller (on the host, see
    `tfeff.layers.FixedEmbedding`).

    On a user's own encoder it trains under a stock `compile`/`fit`: the
    targets `y` are the target words' fixed vectors and `make_loss()` is the
    matching `keras.losses.Loss` (`tfeff.losses.CosineDistance`, `L2Distance`
    or `VonMisesFisherLoss` with this layer's regularizers). Keras masks
    (e.g. from `Embedding(mask_zero=True)`) pass through to the loss.

    As an output head of a language model (`tfeff.layers.output_head`), the
    layer takes target *ids*: given `target_embedding` (the fixed vectors, a
    `tfeff.layers.FixedEmbedding`), `features(hidden)` is the prediction,
    `per_position_loss(features, target_ids, mask)` the distance to each
    target's vector and `ranking_scores(features)` the cosine similarity with
    every vector. It has no distribution over the vocabulary: `log_prob`
    raises `ValueError`.

    Args:
        embedding_dim: positive int, the size of the target embeddings.
        loss: `"cosine"` (1 - cos), `"l2"` (squared Euclidean distance) or
            `"vmf"` (von Mises-Fisher negative log-likelihood).
        use_projection: if True (default), a `Dense(embedding_dim)` maps the
            hidden state to the prediction. If False the hidden state is the
            prediction and must already have `embedding_dim` features.
        vmf_regularization1: lambda_1 of the vMF loss (penalty on ||e_hat||).
        vmf_regularization2: lambda_2 of the vMF loss (scale of the dot product).
        kernel_initializer: initializer of the projection kernel.
        target_embedding: optional `FixedEmbedding` `(vocabulary_size,
            embedding_dim)` of the target vectors, needed by
            `per_position_loss` and `ranking_scores` (not a weight; gathered
            per batch on the host).
        **kwargs: base `Layer` arguments (`name`, `dtype`, ...).

    Call arguments:
        inputs: hidden states `(..., hidden_dim)`.

    Returns:
        Predicted embeddings `(..., embedding_dim)`. Masks pass through unchanged.

    Raises:
        ValueError: `embedding_dim` is not a positive integer (or is below 2
            with the vMF loss), `loss` is unknown, `vmf_regularization1` is
            negative, `vmf_regularization2` is not in (0, 1], or
            `target_embedding` does not have `embedding_dim` features.

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
                f"integer. Received: embedding_dim={embedding_dim}"
            )
        if loss not in LOSSES:
            raise ValueError(
                f"Received an invalid value for `loss`, expected one of {LOSSES}. "
                f"Received: loss={loss!r}"
            )
        if loss == "vmf" and embedding_dim < 2:
            raise ValueError(
                "The vMF loss needs `embedding_dim` >= 2. "
                f"Received: embedding_dim={embedding_dim}"
            )
        if vmf_regularization1 < 0:
            raise ValueError(
                "Received an invalid value for `vmf_regularization1`, expected >= 0. "
                f"Received: vmf_regularization1={vmf_regularization1}"
            )
        if not 0 < vmf_regularization2 <= 1:
            raise ValueError(
                "Received an invalid value for `vmf_regularization2`, expected a value "
                f"in (0, 1]. Received: vmf_regularization2={vmf_regularization2}"
            )
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
                embedding_dim,
                kernel_initializer=self.kernel_initializer,
                dtype=self.dtype_policy,
                name="projection",
            )

    def build(self, input_shape):
        hidden_dim = input_shape[-1]
        if self.use_projection:
            self.projection.build(input_shape)
        elif hidden_dim is not None and hidden_dim != self.embedding_dim:
            raise ValueError(
                "With `use_projection=False` the inputs' last dimension must equal "
                f"`embedding_dim`. Received: inputs.shape={input_shape}, "
                f"embedding_dim={self.embedding_dim}"
            )

    def call(self, inputs):
        if self.use_projection:
            return self.projection(inputs)  # (..., embedding_dim)
        return inputs

    def make_loss(self, reduction="sum_over_batch_size", name=None):
        """The `keras.losses.Loss` of this layer's `loss` and regularizers.

        Args:
            reduction: a Keras reduction; `None` gives one loss per position.
            name: optional loss name.

        Returns:
            A `tfeff.losses.CosineDistance`, `L2Distance` or
            `VonMisesFisherLoss`, computed in float32.
        """
        kwargs = {"reduction": reduction}
        if name is not None:
            kwargs["name"] = name
        if self.loss == "vmf":
            kwargs.update(regularization1=self.vmf_regularization1,
                          regularization2=self.vmf_regularization2)
        return continuous_losses.LOSSES[self.loss](**kwargs)

    def position_loss(self, y_true, y_pred):
        """Per-position loss between target embeddings and predictions (Keras order).

        Computed in float32 (also under mixed precision). Unlike `make_loss()`,
        it ignores Keras masks: the caller weighs positions itself.

        Args:
            y_true: `(..., embedding_dim)`, the fixed target embeddings.
            y_pred: `(..., embedding_dim)`, output of `call`.

        Returns:
            float32 tensor `(...)`.
        """
        # `Loss.call` is the bare per-position loss: no mask, no reduction.
        return self.make_loss(reduction=None).call(keras.ops.cast(y_true, "float32"),
                                                   keras.ops.cast(y_pred, "float32"))

    # -- the output-head contract (`tfeff.layers.output_head`) ------------------

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
        """The loss between each prediction and its target id's fixed vector.

        Args:
            features: `(..., embedding_dim)` predictions (`features`).
            targets: int `(...)` target ids.
            mask: optional bool `(...)`; False entries get loss 0 (their ids
                are not looked up).
            training: unused.

        Returns:
            float32 tensor `(...)`.
        """
        del training
        ids = ops.cast(targets, "int32")
        if mask is not None:
            mask = ops.cast(mask, "bool")
            ids = ops.where(mask, ids, ops.zeros_like(ids))
        losses = self.position_loss(self._targets()(ids), features)
        if mask is None:
            return losses
        return ops.where(mask, losses, ops.zeros_like(losses))

    def ranking_scores(self, features):
        """Cosine similarity `(..., vocabulary_size)` of each prediction with every vector."""
        table = ops.cast(self._targets().table, "float32")  # (vocabulary_size, embedding_dim)
        features = ops.cast(features, "float32")
        return ops.matmul(_unit(features), ops.transpose(_unit(table)))

    def log_prob(self, features):
        """A continuous output has no distribution over the vocabulary: raises ValueError."""
        raise ValueError("A continuous output has no distribution over the vocabulary.")

    def compute_output_shape(self, input_shape):
        return tuple(input_shape[:-1]) + (self.embedding_dim,)

    def compute_mask(self, inputs, mask=None):
        return mask

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "embedding_dim": self.embedding_dim,
                "loss": self.loss,
                "use_projection": self.use_projection,
                "vmf_regularization1": self.vmf_regularization1,
                "vmf_regularization2": self.vmf_regularization2,
                "kernel_initializer": keras.initializers.serialize(
                    self.kernel_initializer
                ),
                "target_embedding": (
                    None if self.target_embedding is None
                    else keras.saving.serialize_keras_object(self.target_embedding)
                ),
            }
        )
        return config


def _unit(x):
    """`x` scaled to unit L2 norm along its last axis (zero rows stay zero)."""
    norm = ops.sqrt(ops.sum(ops.square(x), axis=-1, keepdims=True))
    return x / ops.maximum(norm, 1e-12)
