"""ElmoBackbone: ELMo's encoder, the token layer and the forward and backward LSTM stacks."""

import keras
from keras import ops

from tfeff import layers as tfeff_layers
from tfeff.backend.checks import check_mask_shape
from tfeff.backend.checks import check_rank
from tfeff.backend.checks import check_right_padded
from tfeff.backend.checks import check_token_ids
from tfeff.models.language_model import LanguageModelBackbone
from tfeff.models.language_model import check_positive_int


@keras.saving.register_keras_serializable(package="tfeff")
class ElmoBackbone(LanguageModelBackbone):
    """ELMo's biLM encoder, with no output layer and no loss (what `ElmoLM` trains).

    * Input: each token's pre-trained (fastText) vector, gathered in host
      memory (`FixedEmbedding`), or a trainable `Embedding`, or an
      `AloneEmbedding` (`input_embedding`), linearly projected to
      `projection_dim`.
    * Forward and backward stacks of `num_layers` LSTMs with a recurrent
      projection (`ProjectedLSTM`: `units` cells, `projection_dim` outputs;
      `projection_dim=None`: plain LSTMs of `units` outputs), each followed by
      layer normalization (Li et al.'s addition to ELMo; `layer_norm=False`
      leaves it out, as ELMo has none) and dropout; from the second layer on,
      a residual connection adds the layer's input.

    The representation stack used for feature extraction is
    `[concat(x, x), concat(f_1, b_1), ..., concat(f_L, b_L)]`, each of size
    `2 * width`, where the width is `projection_dim` (or `units` without a
    projection; ELMo's layer 0 duplicates the token layer).

    Args:
        vocabulary_size: number of ids (row 0 is padding); may be left out
            when `embedding_table` is given.
        num_layers: LSTM layers per direction.
        units: LSTM cell size.
        projection_dim: LSTM projection (and token-projection) size; None:
            LSTMs without a projection, the width is `units`.
        dropout_rate: dropout after each LSTM layer, in [0, 1).
        embedding_table: path of the `.npy` vocabulary vectors, or an array
            `(vocabulary_size, dim)`; row 0 is padding. Required by the fixed
            input embedding.
        input_embedding: `"fixed"` (the table), `"trainable"` or `"alone"`.
        token_embedding_dim: size of a trainable or ALONE input embedding
            (default: the table's dimension, else `projection_dim`).
        alone: dict of `AloneEmbedding` arguments for `input_embedding="alone"`
            (see `LanguageModelBackbone`).
        cell_clip: None or the bound of each LSTM's cell state (ELMo: 3).
        proj_clip: None or the bound of each LSTM's projected state (ELMo: 3).
        layer_norm: whether each LSTM layer's output is layer-normalized.
        **kwargs: base `Model` arguments.

    Call arguments:
        inputs: int ids `(batch, time)`, right-padded with 0.
        training: bool.

    Returns:
        dict with the top layer of each direction, `"forward"` and
        `"backward"`, `(batch, time, width)`, zero at padding.

    Raises:
        ValueError: `num_layers` or `units` is not a positive integer,
            `projection_dim` is neither None nor one, or `dropout_rate` is not in [0, 1) (and, from
            `LanguageModelBackbone`, a bad `vocabulary_size`, table or
            input embedding; a `vocabulary_size` that is no integer, such as
            fixed vectors passed first, raises `TypeError`).

    Example:

    >>> backbone = ElmoBackbone(20, num_layers=1, units=8, projection_dim=4,
    ...                         input_embedding="trainable")
    >>> ids = np.array([[2, 5, 6, 3, 0]], "int32")  # <s> w w </s> <pad>
    >>> tuple(backbone(ids)["forward"].shape)
    (1, 5, 4)
    >>> tuple(backbone.embedding_layers(ids, ids > 0).shape)
    (1, 2, 5, 8)
    """

    def __init__(self, vocabulary_size=None, num_layers=2, units=4096, projection_dim=512,
                 dropout_rate=0.1, embedding_table=None, input_embedding="fixed",
                 token_embedding_dim=None, alone=None, cell_clip=None, proj_clip=None,
                 layer_norm=True, **kwargs):
        for arg, value in (
            ("num_layers", num_layers),
            ("units", units),
            ("projection_dim", projection_dim),
        ):
            if value is not None or arg != "projection_dim":
                check_positive_int(arg, value)
        if not 0 <= dropout_rate < 1:
            raise ValueError(
                "Received an invalid value for `dropout_rate`, expected a value in "
                f"[0, 1). Received: dropout_rate={dropout_rate}"
            )
        width = projection_dim or units
        super().__init__(vocabulary_size, hidden_dim=width,
                         embedding_table=embedding_table, input_embedding=input_embedding,
                         token_embedding_dim=token_embedding_dim, alone=alone, **kwargs)
        self.num_layers = num_layers
        self.units = units
        self.projection_dim = projection_dim
        self.layer_norm = bool(layer_norm)
        self.dropout_rate = float(dropout_rate)
        self.token_projection = keras.layers.Dense(width, name="token_projection")
        self.forward_lstms, self.backward_lstms = [], []
        self.forward_norms, self.backward_norms = [], []
        for i in range(num_layers):
            for direction, lstms, norms in (
                ("forward", self.forward_lstms, self.forward_norms),
                ("backward", self.backward_lstms, self.backward_norms),
            ):
                lstms.append(
                    tfeff_layers.ProjectedLSTM(
                        units,
                        projection_dim,
                        go_backwards=direction == "backward",
                        cell_clip=cell_clip,
                        proj_clip=proj_clip,
                        name=f"{direction}_lstm_{i}",
                    )
                )
                if self.layer_norm:
                    norms.append(keras.layers.LayerNormalization(
                        epsilon=1e-6, name=f"{direction}_norm_{i}"))
        self.dropout = keras.layers.Dropout(self.dropout_rate, name="dropout")

    def build_layers(self):
        hidden_shape = (None, None, self.width)
        self.build_token_embedding()
        self.token_projection.build((None, None, self.token_embedding_dim))
        for layer in self.forward_lstms + self.backward_lstms + self.forward_norms + \
                self.backward_norms:
            layer.build(hidden_shape)

    def encode(self, vectors, mask, training=False):
        """Runs the biLSTM stacks on token vectors.

        Args:
            vectors: float `(batch, time, token_embedding_dim)` token vectors.
            mask: bool `(batch, time)`, right-padded: a True after a False
                raises (`tfeff.backend.checks.check_right_padded`:
                `ValueError` eagerly, `InvalidArgumentError` in a
                `tf.function`; not checked under XLA or `jax.jit`).
            training: bool.

        Returns:
            `(stack, forward_top, backward_top)`: the representation stack
            `(batch, num_layers + 1, time, 2 * width)` and the top layer of
            each direction `(batch, time, width)`.
        """
        vectors = check_rank(self, vectors, ("batch", "time", "features"), "vectors")
        mask = check_mask_shape(self, vectors, mask, inputs_what="vectors")
        mask = check_right_padded(self, mask)
        token = self.token_projection(vectors)  # (batch, time, proj)
        token = token * ops.cast(mask, token.dtype)[:, :, None]
        forward, backward = token, token
        stack = [ops.concatenate([token, token], axis=-1)]
        for i in range(self.num_layers):
            f = self.forward_lstms[i](forward, mask=mask)  # (batch, time, width)
            b = self.backward_lstms[i](backward, mask=mask)
            if self.layer_norm:
                f, b = self.forward_norms[i](f), self.backward_norms[i](b)
            f = self.dropout(f, training=training)
            b = self.dropout(b, training=training)
            if i > 0:
                f, b = f + forward, b + backward
            keep = ops.cast(mask, f.dtype)[:, :, None]
            forward, backward = f * keep, b * keep
            stack.append(ops.concatenate([forward, backward], axis=-1))
        return ops.stack(stack, axis=1), forward, backward

    def call(self, inputs, training=False):
        ids = check_token_ids(self, inputs, "inputs")
        vectors = self.token_embedding(ids, training=training)  # (batch, time, emb)
        _, forward, backward = self.encode(vectors, ids > 0, training=training)
        return {"forward": forward, "backward": backward}

    # The embeddable-model contract of `tfeff.export.TokenIdsEmbedderModule`.

    @property
    def embedding_dim(self):
        """Size of each layer of `embedding_layers` (both directions concatenated)."""
        return 2 * self.width

    def embedding_layers(self, token_ids, padding_mask, training=False):
        """The representation stack of `encode` for `token_ids` (with `<s>` and `</s>`):
        `(batch, num_layers + 1, time, embedding_dim)`."""
        token_ids = check_token_ids(self, token_ids)
        vectors = self.token_embedding(token_ids, training=training)
        padding_mask = check_mask_shape(self, token_ids, padding_mask, "padding_mask",
                                        inputs_what="token_ids")
        stack, _, _ = self.encode(vectors, padding_mask, training=training)
        return stack

    def get_config(self):
        config = super().get_config()
        config.update({
            "num_layers": self.num_layers,
            "units": self.units,
            "projection_dim": self.projection_dim,
            "dropout_rate": self.dropout_rate,
            "cell_clip": self.forward_lstms[0].cell_clip,
            "proj_clip": self.forward_lstms[0].proj_clip,
            "layer_norm": self.layer_norm,
        })
        return config
