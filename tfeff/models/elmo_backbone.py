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

    The token vectors (`input_embedding`), projected to the width, feed forward
    and backward stacks of `num_layers` `ProjectedLSTM`s, each followed by layer
    normalization (Li et al.'s addition to ELMo) and dropout, and from the second
    layer on a residual. The representation stack for feature extraction is
    `[concat(x, x), concat(f_1, b_1), ..., concat(f_L, b_L)]`, each `2 * width`
    wide (the width: `projection_dim`, or `units` without a projection).

    Args:
        vocabulary_size: number of ids (row 0 is padding; default: the table's rows).
        num_layers: LSTM layers per direction.
        units: LSTM cell size.
        projection_dim: LSTM projection (and token-projection) size; None:
            LSTMs without a projection, the width is `units`.
        dropout_rate: dropout after each LSTM layer, in [0, 1).
        embedding_table: `.npy` path or array `(vocabulary_size, dim)` of the
            vocabulary vectors (row 0 is padding); required by `"fixed"`.
        input_embedding: `"fixed"` (the table's vectors, gathered in host memory:
            `FixedEmbedding`), `"trainable"` or `"alone"` (`AloneEmbedding`).
        token_embedding_dim: a trainable or ALONE input's size (default: table's, else width).
        alone: `AloneEmbedding` arguments (see `LanguageModelBackbone`).
        cell_clip: None or the bound of each LSTM's cell state (ELMo: 3).
        proj_clip: None or the bound of each LSTM's projected state (ELMo: 3).
        layer_norm: whether each LSTM layer's output is layer-normalized (ELMo: no).
        **kwargs: base `Model` arguments.

    Call arguments:
        inputs: int ids `(batch, time)`, right-padded with 0.
        training: bool.

    Returns:
        dict of each direction's top layer `(batch, time, width)`, zero at padding.

    Raises:
        ValueError: `dropout_rate` is not in [0, 1), a size is not a positive
            integer (`projection_dim` may be None), or (`LanguageModelBackbone`)
            a bad `vocabulary_size` (`TypeError` if no integer), table or input.

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
        check_positive_int("num_layers", num_layers)
        check_positive_int("units", units)
        if projection_dim is not None:
            check_positive_int("projection_dim", projection_dim)
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
        """The representation stack `(batch, num_layers + 1, time, 2 * width)` and each
        direction's top layer `(batch, time, width)` of float token `vectors`
        `(batch, time, dim)`, under a right-padded `mask` (as `BertBackbone`'s)."""
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
            f, b = self.dropout(f, training=training), self.dropout(b, training=training)
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

    # `tfeff.export.TokenIdsEmbedderModule`'s contract.

    @property
    def embedding_dim(self):
        """Size of each layer of `embedding_layers` (both directions concatenated)."""
        return 2 * self.width

    def embedding_layers(self, token_ids, padding_mask, training=False):
        """`encode`'s representation stack for `token_ids` (with `<s>` and `</s>`)."""
        token_ids = check_token_ids(self, token_ids)
        vectors = self.token_embedding(token_ids, training=training)
        padding_mask = check_mask_shape(self, token_ids, padding_mask, "padding_mask",
                                        inputs_what="token_ids")
        stack, _, _ = self.encode(vectors, padding_mask, training=training)
        return stack

    def get_config(self):
        config = super().get_config()
        lstm = self.forward_lstms[0]
        config.update({name: getattr(self, name) for name in (
            "num_layers", "units", "projection_dim", "dropout_rate", "layer_norm")})
        config.update(cell_clip=lstm.cell_clip, proj_clip=lstm.proj_clip)
        return config
