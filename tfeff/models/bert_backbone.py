"""BertBackbone: BERT's embeddings and encoder, standard or CoRe-relaxed, with no head."""

import keras
from keras import ops

from tfeff import layers as tfeff_layers
from tfeff.layers.embedding_common import TableEmbedding
from tfeff.backend.checks import check_mask_shape
from tfeff.backend.checks import check_right_padded
from tfeff.backend.checks import check_sequence_length
from tfeff.backend.checks import check_token_ids
from tfeff.config.bert import INPUT_EMBEDDINGS
from tfeff.config.bert import POSITION_EMBEDDINGS
from tfeff.models.bert_layer import BertLayer
from tfeff.models.bert_layer import get_activation
from tfeff.models.language_model import check_choice
from tfeff.models.language_model import check_positive_int
from tfeff.models.task import Backbone

ROTARY_MAX_WAVELENGTH = 10000
RELAXED_KEYS = ("num_anchors", "ffn_rank", "anchor_selection")
# The constructor arguments that are attributes of the same name (and `get_config` keys).
CONFIG_KEYS = ("vocabulary_size", "num_layers", "hidden_dim", "num_heads", "intermediate_dim",
               "max_sequence_length", "num_segments", "dropout_rate", "activation",
               "layer_norm_epsilon", "relaxed", "input_embedding", "alone",
               "initializer_range", "seed")


def check_relaxed(relaxed):
    """Validates a `relaxed` dict; returns it with defaults, or None."""
    if relaxed is None:
        return None
    relaxed = dict(relaxed)
    unknown = sorted(set(relaxed) - set(RELAXED_KEYS))
    if unknown:
        raise ValueError(
            f"Unknown `relaxed` key {unknown[0]!r}; expected some of {RELAXED_KEYS}. "
            f"Received: relaxed={relaxed}")
    relaxed = {"num_anchors": 32, "ffn_rank": 64, "anchor_selection": "random", **relaxed}
    for key in ("num_anchors", "ffn_rank"):
        value = relaxed[key]
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ValueError(
                f"Received an invalid value for `relaxed.{key}`, expected a non-negative "
                f"integer (0: that part stays standard). Received: {key}={value!r}")
    if not (relaxed["num_anchors"] or relaxed["ffn_rank"]):
        raise ValueError("`relaxed` needs num_anchors or ffn_rank > 0 (or relaxed=None).")
    return relaxed


@keras.saving.register_keras_serializable(package="tfeff")
class BertBackbone(Backbone):
    """BERT's encoder (Devlin et al. 2019), standard or CoRe-relaxed: what `Bert` trains.

    Token, position and segment embeddings are summed, layer-normalized and
    passed through `num_layers` post-layer-norm `BertLayer`s; `Bert(backbone)`
    adds the heads and the loss (keras-hub's split).

    `relaxed={"num_anchors": m, "ffn_rank": d_r}` turns on CoRe's coarse
    model (Yang et al.): `AnchorMultiHeadAttention` with m anchors and
    `FactorizedDense` feed-forward kernels of rank d_r (0 keeps that part
    standard), with the same weight names, so that
    `tfeff.convert.merge_relaxed_bert` turns it into a standard model.
    `position_embedding="rotary"` (RoFormer) is at small sizes what lets
    attention find local context (docs/papers/core.md); BERT's layout (and the
    keras-hub and Hugging Face converters) needs `"learned"`.

    Args:
        vocabulary_size: number of token ids.
        num_layers: transformer layers.
        hidden_dim: model width.
        num_heads: attention heads (dividing `hidden_dim`).
        intermediate_dim: feed-forward width.
        max_sequence_length: number of position embeddings.
        num_segments: number of segment (token type) ids.
        dropout_rate: dropout after embeddings, on attention and residual branches.
        activation: `"gelu"` (erf: BERT, HF), `"gelu_approximate"` (tanh: keras-hub), `"relu"`.
        layer_norm_epsilon: layer norm epsilon.
        relaxed: None, or a dict of `num_anchors` (32), `ffn_rank` (64), `anchor_selection`.
        input_embedding: `"trainable"` or `"alone"` (an `AloneEmbedding`).
        alone: `AloneEmbedding` arguments (not `vocabulary_size`, `output_dim`, `lookup`).
        initializer_range: stddev of the truncated-normal initializers.
        position_embedding: `"learned"` (BERT's position table) or `"rotary"`.
        seed: seed of dropout and anchor draws.
        **kwargs: base `Model` arguments.

    Call arguments:
        inputs: dict with int `token_ids` `(batch, n)`, optional `segment_ids` (default 0)
            and right-padded `padding_mask` (default `token_ids != 0`): a True after a
            False raises (`tfeff.backend.checks.check_right_padded`: `ValueError` eagerly,
            `InvalidArgumentError` in a `tf.function`; unchecked under XLA).
        training: bool.
        exact_attention: run anchor attention exactly (the converter's check).

    Returns:
        `(batch, n, hidden_dim)`.

    Raises:
        ValueError: a size is not a positive integer, `input_embedding`,
            `position_embedding` or `activation` is unknown, `relaxed` is
            invalid, or `alone` is given without `input_embedding="alone"`.

    Example:

    >>> backbone = BertBackbone(30, num_layers=1, hidden_dim=8, num_heads=2,
    ...                         intermediate_dim=16, max_sequence_length=8)
    >>> ids = np.array([[2, 7, 8, 3, 0, 0]], "int32")  # CLS, two words, SEP, padding
    >>> tuple(backbone({"token_ids": ids}).shape)
    (1, 6, 8)
    >>> tuple(backbone.embedding_layers(ids, ids > 0).shape)
    (1, 2, 6, 8)
    """

    def __init__(
        self,
        vocabulary_size,
        num_layers=12,
        hidden_dim=768,
        num_heads=12,
        intermediate_dim=3072,
        max_sequence_length=512,
        num_segments=2,
        dropout_rate=0.1,
        activation="gelu",
        layer_norm_epsilon=1e-12,
        relaxed=None,
        input_embedding="trainable",
        alone=None,
        initializer_range=0.02,
        position_embedding="learned",
        seed=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        for name, value in (("vocabulary_size", vocabulary_size), ("num_layers", num_layers),
                            ("hidden_dim", hidden_dim), ("num_heads", num_heads),
                            ("intermediate_dim", intermediate_dim),
                            ("max_sequence_length", max_sequence_length),
                            ("num_segments", num_segments)):
            check_positive_int(name, value, int)
        check_choice("input_embedding", input_embedding, INPUT_EMBEDDINGS)
        check_choice("position_embedding", position_embedding, POSITION_EMBEDDINGS)
        get_activation(activation)
        self.vocabulary_size = vocabulary_size
        self.num_layers = num_layers
        self.hidden_dim = hidden_dim
        self.num_heads = num_heads
        self.intermediate_dim = intermediate_dim
        self.max_sequence_length = max_sequence_length
        self.num_segments = num_segments
        self.dropout_rate = dropout_rate
        self.activation = activation
        self.layer_norm_epsilon = layer_norm_epsilon
        self.relaxed = check_relaxed(relaxed)
        self.input_embedding = input_embedding
        self.initializer_range = initializer_range
        self.position_embedding_type = position_embedding
        self.seed = seed
        if alone is not None and input_embedding != "alone":
            raise ValueError("`alone` is only used with input_embedding='alone'.")

        init = self.initializer
        common = {"dtype": self.dtype_policy}
        if input_embedding == "alone":
            self.alone = dict(alone or {})
            self.token_embedding = tfeff_layers.AloneEmbedding(
                vocabulary_size, hidden_dim, lookup="table", name="token_embedding",
                **{"base_dim": hidden_dim, **self.alone}, **common)
            self.alone["seed"] = self.token_embedding.seed
        else:
            self.alone = None
            self.token_embedding = TableEmbedding(
                vocabulary_size, hidden_dim, embeddings_initializer=init(),
                name="token_embedding", **common)
        self.position_embedding = None
        if position_embedding == "learned":
            self.position_embedding = TableEmbedding(
                max_sequence_length, hidden_dim, embeddings_initializer=init(),
                name="position_embedding", **common)
        self.segment_embedding = TableEmbedding(
            num_segments, hidden_dim, embeddings_initializer=init(),
            name="segment_embedding", **common)
        self.embeddings_norm = keras.layers.LayerNormalization(
            epsilon=layer_norm_epsilon, name="embeddings_norm", **common)
        self.embeddings_dropout = keras.layers.Dropout(
            dropout_rate, seed=seed, name="embeddings_dropout", **common)
        relaxed = self.relaxed or {}
        self.transformer_layers = [
            BertLayer(
                hidden_dim, num_heads, intermediate_dim, dropout_rate=dropout_rate,
                activation=activation, layer_norm_epsilon=layer_norm_epsilon,
                num_anchors=relaxed.get("num_anchors", 0), ffn_rank=relaxed.get("ffn_rank", 0),
                anchor_selection=relaxed.get("anchor_selection", "random"),
                initializer_range=initializer_range,
                rotary_max_wavelength=(ROTARY_MAX_WAVELENGTH if position_embedding == "rotary"
                                       else None),
                seed=None if seed is None else seed + 1 + i,
                name=f"transformer_layer_{i}", **common)
            for i in range(num_layers)
        ]

    @property
    def is_relaxed(self):
        return self.relaxed is not None

    def initializer(self):
        """A new truncated-normal initializer of stddev `initializer_range` (the heads' too)."""
        return keras.initializers.TruncatedNormal(stddev=self.initializer_range)

    def build_layers(self):
        shape = (None, None, self.hidden_dim)
        self.token_embedding.build((None, None))
        if self.position_embedding is not None:
            self.position_embedding.build((None,))
        self.segment_embedding.build((None, None))
        self.embeddings_norm.build(shape)
        for layer in self.transformer_layers:
            layer.build(shape)

    def embed(self, token_ids, segment_ids=None, training=False):
        """Summed, normalized token, position (unless rotary) and segment embeddings."""
        token_ids = check_token_ids(self, token_ids)
        x = self.token_embedding(token_ids, training=training)
        if self.position_embedding is not None:
            token_ids = check_sequence_length(self, token_ids, self.max_sequence_length)
            n = ops.shape(token_ids)[1]
            positions = self.position_embedding(ops.arange(n))[None]  # (1, n, d)
            x = x + ops.cast(positions, x.dtype)
        segment_ids = ops.zeros_like(token_ids) if segment_ids is None else check_mask_shape(
            self, token_ids, segment_ids, "segment_ids", inputs_what="token_ids")
        x = x + self.segment_embedding(segment_ids)
        return self.embeddings_dropout(self.embeddings_norm(x), training=training)

    def encode(self, token_ids, segment_ids=None, padding_mask=None, training=False,
               exact_attention=None, return_all_layers=False):
        """The sequence output `(batch, n, hidden_dim)`; with `return_all_layers`, every
        layer's, the embedding output first: `(batch, num_layers + 1, n, hidden_dim)`."""
        token_ids = check_token_ids(self, token_ids)
        padding_mask = ops.not_equal(token_ids, 0) if padding_mask is None else check_mask_shape(
            self, token_ids, padding_mask, "padding_mask", inputs_what="token_ids")
        padding_mask = check_right_padded(self, padding_mask, "padding_mask")
        x = self.embed(token_ids, segment_ids, training=training)
        layers = [x]
        for layer in self.transformer_layers:
            x = layer(x, padding_mask=padding_mask, training=training,
                      exact_attention=exact_attention)
            layers.append(x)
        return ops.stack(layers, axis=1) if return_all_layers else x

    # `tfeff.export.TokenIdsEmbedderModule`'s contract (with `Backbone`'s sizes).
    embedding_tokenization = "bert"

    @property
    def max_embedding_tokens(self):
        """The most tokens embedded between [CLS] and [SEP]."""
        return self.max_sequence_length - 2

    def embedding_layers(self, token_ids, padding_mask, training=False):
        """`encode`'s every layer for `token_ids` (with [CLS] and [SEP])."""
        return self.encode(token_ids, padding_mask=padding_mask, training=training,
                           return_all_layers=True)

    def call(self, inputs, training=False, exact_attention=None):
        if not isinstance(inputs, dict):
            inputs = {"token_ids": inputs}
        return self.encode(inputs["token_ids"], inputs.get("segment_ids"),
                           inputs.get("padding_mask"), training=training,
                           exact_attention=exact_attention)

    def get_config(self):
        config = super().get_config()
        config.update({name: getattr(self, name) for name in CONFIG_KEYS})
        config["position_embedding"] = self.position_embedding_type
        return config
