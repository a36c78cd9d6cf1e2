"""MaskedElmoBackbone: the embedding and the fully bidirectional biLSTM of Masked ELMo."""

import keras

from tfeff import layers as tfeff_layers
from tfeff.layers.embedding_common import TableEmbedding
from tfeff.backend.checks import check_mask_shape
from tfeff.backend.checks import check_right_padded
from tfeff.backend.checks import check_token_ids
from tfeff.config.masked_elmo import INPUT_EMBEDDINGS
from tfeff.models.language_model import check_choice
from tfeff.models.task import Backbone


@keras.saving.register_keras_serializable(package="tfeff")
class MaskedElmoBackbone(Backbone):
    """Masked ELMo's backbone: WordPiece embeddings and a `MaskedBiLSTM`, no head, no loss.

    WordPiece ids are embedded to d = `2 * projection_dim`, then dropout and a
    `MaskedBiLSTM`, each layer of which after the first sees both directions of
    the layer below. `MaskedElmo` adds the head and the loss.

    Args:
        vocabulary_size: int >= 2 (WordPiece ids, `[MASK]` included).
        num_layers: layers of the `MaskedBiLSTM`.
        units: LSTM cell size of the `MaskedBiLSTM`.
        projection_dim: projection size of the `MaskedBiLSTM` (d / 2).
        dropout_rate: dropout on the embeddings and each LSTM output.
        input_embedding: `"trainable"` or `"alone"` (an `AloneEmbedding`).
        alone: `AloneEmbedding` arguments (`lookup="table"` suits `MaskedElmo`'s
            tied `"full"` output); the drawn `seed` is recorded in `backbone.alone`.
        use_cudnn: the `MaskedBiLSTM` switch (`"auto"`, True, False).
        **kwargs: base `Model` arguments.

    Call arguments:
        inputs: dict with int `token_ids` and `padding_mask` `(batch, time)`
            (right-padded: a True after a False raises, as in `MaskedBiLSTM`).
        training: bool.
        initial_state: optional list of `4 * num_layers` LSTM states.

    Returns:
        dict with `sequence_output` `(batch, time, d)`, `stack` `(batch, num_layers + 1,
        time, d)` (every layer) and `states` (the final LSTM states).

    Raises:
        ValueError: `vocabulary_size` is not an integer >= 2, `input_embedding`
            is unknown, or `alone` is given without `input_embedding="alone"`.

    Example:

    >>> backbone = MaskedElmoBackbone(30, num_layers=1, units=8, projection_dim=3,
    ...                               use_cudnn=False)
    >>> ids = np.array([[2, 7, 8, 3, 0]], "int32")
    >>> out = backbone({"token_ids": ids, "padding_mask": ids > 0})
    >>> tuple(out["sequence_output"].shape), tuple(out["stack"].shape)
    ((1, 5, 6), (1, 2, 5, 6))
    """

    def __init__(
        self,
        vocabulary_size,
        num_layers=2,
        units=4096,
        projection_dim=384,
        dropout_rate=0.1,
        input_embedding="trainable",
        alone=None,
        use_cudnn="auto",
        **kwargs,
    ):
        super().__init__(**kwargs)
        if not isinstance(vocabulary_size, int) or vocabulary_size < 2:
            raise ValueError(
                "Received an invalid value for `vocabulary_size`, expected an integer "
                f">= 2. Received: vocabulary_size={vocabulary_size}")
        check_choice("input_embedding", input_embedding, INPUT_EMBEDDINGS)
        if alone is not None and input_embedding != "alone":
            raise ValueError("`alone` is only used with input_embedding='alone'.")
        self.vocabulary_size = vocabulary_size
        self.num_layers = num_layers
        self.units = units
        self.projection_dim = projection_dim
        self.hidden_dim = 2 * projection_dim
        self.dropout_rate = float(dropout_rate)
        self.input_embedding = input_embedding
        self.use_cudnn = use_cudnn
        self.alone = dict(alone or {}) if input_embedding == "alone" else None
        if input_embedding == "alone":
            options = {"base_dim": self.hidden_dim, **self.alone}
            self.token_embedding = tfeff_layers.AloneEmbedding(
                vocabulary_size, self.hidden_dim, name="alone_token_embedding", **options)
            self.alone["seed"] = self.token_embedding.seed
        else:
            self.token_embedding = TableEmbedding(
                vocabulary_size, self.hidden_dim,
                embeddings_initializer=keras.initializers.RandomNormal(stddev=0.02),
                name="token_embedding")
        self.embedding_dropout = keras.layers.Dropout(self.dropout_rate,
                                                      name="embedding_dropout")
        self.encoder = tfeff_layers.MaskedBiLSTM(
            units, projection_dim, num_layers=num_layers, dropout_rate=dropout_rate,
            use_cudnn=use_cudnn, return_state=True, return_all_layers=True, name="encoder")

    def build_layers(self):
        seq = (None, None)
        self.token_embedding.build(seq)
        self.encoder.build(seq + (self.hidden_dim,))

    def encode(self, token_ids, padding_mask, initial_state=None, training=False):
        """`(stack, states)`: all layers `(batch, num_layers + 1, time, d)` and final states."""
        token_ids = check_token_ids(self, token_ids)
        mask = check_mask_shape(self, token_ids, padding_mask, "padding_mask",
                                inputs_what="token_ids")
        mask = check_right_padded(self, mask, "padding_mask")
        x = self.token_embedding(token_ids)  # (batch, time, d)
        x = self.embedding_dropout(x, training=training)
        stack, *states = self.encoder(x, mask=mask, initial_state=initial_state,
                                      training=training)
        return stack, states

    # `tfeff.export.TokenIdsEmbedderModule`'s contract (with `Backbone`'s sizes).
    embedding_tokenization = "bert"

    def embedding_layers(self, token_ids, padding_mask, training=False):
        """`encode`'s stack for `token_ids`, from zero states."""
        return self.encode(token_ids, padding_mask, training=training)[0]

    def call(self, inputs, training=False, initial_state=None):
        stack, states = self.encode(inputs["token_ids"], inputs["padding_mask"],
                                    initial_state, training)
        return {"sequence_output": stack[:, -1], "stack": stack, "states": states}

    def get_config(self):
        config = super().get_config()
        config.update({name: getattr(self, name) for name in (
            "vocabulary_size", "num_layers", "units", "projection_dim", "dropout_rate",
            "input_embedding", "alone", "use_cudnn")})
        return config
