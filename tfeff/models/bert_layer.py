"""BertLayer: one post-layer-norm transformer layer, standard or CoRe-relaxed, causal or not."""

import zlib

import keras

from tfeff.config.bert import ACTIVATIONS
from tfeff.layers import AnchorMultiHeadAttention
from tfeff.layers import CausalAnchorAttention
from tfeff.layers import FactorizedDense
from tfeff.layers import RotaryMultiHeadAttention
from tfeff.models.language_model import check_choice


def get_activation(name):
    """The activation function of `name` (`ACTIVATIONS`)."""
    check_choice("activation", name, ACTIVATIONS)
    relu = keras.activations.relu
    return {"gelu": gelu, "gelu_approximate": gelu_approximate, "relu": relu}[name]


def derived_seed(seed, name):
    """A seed for the sublayer `name` of a layer seeded with `seed` (None stays None):
    two dropouts of one seed would draw the same masks."""
    if seed is None:
        return None
    return (int(seed) * 1_000_003 + zlib.crc32(name.encode())) % (2 ** 31 - 1)


@keras.saving.register_keras_serializable(package="tfeff")
def gelu(x):
    """BERT's GELU, x * Phi(x) with the exact normal CDF (erf)."""
    return keras.activations.gelu(x, approximate=False)


@keras.saving.register_keras_serializable(package="tfeff")
def gelu_approximate(x):
    """The tanh approximation of GELU (keras-hub's BERT)."""
    return keras.activations.gelu(x, approximate=True)


@keras.saving.register_keras_serializable(package="tfeff")
class BertLayer(keras.layers.Layer):
    """Self-attention and a feed-forward network, each with residual, dropout, post layer norm.

        x = LayerNorm(x + Dropout(Attention(x)))
        x = LayerNorm(x + Dropout(W2 act(W1 x + b1) + b2))

    With `num_anchors` the attention is `AnchorMultiHeadAttention`, with
    `ffn_rank` W1 and W2 are `FactorizedDense` (CoRe's relaxed layer), under
    the same sublayer names (`tfeff.convert.merge_relaxed_bert` relies on it).
    With `causal=True` each position attends to itself and the past only
    (`TransformerLM`'s layers; with `num_anchors`, `CausalAnchorAttention`).

    Args:
        hidden_dim: model width d (a multiple of `num_heads`).
        num_heads: attention heads.
        intermediate_dim: feed-forward width d_f.
        dropout_rate: dropout on attention probabilities and residual branches.
        activation: one of `ACTIVATIONS` (`"gelu"` is BERT's erf GELU).
        layer_norm_epsilon: layer norm epsilon.
        num_anchors: 0 for standard attention, else m anchor queries.
        ffn_rank: 0 for dense feed-forward kernels, else their rank d_r.
        anchor_selection: `"random"` or `"strided"` (anchor attention).
        initializer_range: stddev of the truncated-normal kernel initializer.
        rotary_max_wavelength: None, or the wavelength of rotary positions.
        seed: seed of the anchor draws and dropouts (`derived_seed`).
        causal: attend to the past only.
        max_sequence_length: the longest sequence (with `causal` and `num_anchors`).
        **kwargs: base `Layer` arguments.

    Call arguments:
        inputs: `(batch, n, hidden_dim)`.
        padding_mask: bool `(batch, n)`, right-padded (unread by a causal layer).
        training: bool.
        exact_attention: run anchor attention exactly (None: as built).

    Returns:
        `(batch, n, hidden_dim)`.
    """

    def __init__(
        self,
        hidden_dim,
        num_heads,
        intermediate_dim,
        dropout_rate=0.1,
        activation="gelu",
        layer_norm_epsilon=1e-12,
        num_anchors=0,
        ffn_rank=0,
        anchor_selection="random",
        initializer_range=0.02,
        rotary_max_wavelength=None,
        seed=None,
        causal=False,
        max_sequence_length=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        if hidden_dim % num_heads:
            raise ValueError(
                f"`hidden_dim` must be a multiple of `num_heads`. Received: "
                f"hidden_dim={hidden_dim}, num_heads={num_heads}")
        self.hidden_dim = hidden_dim
        self.num_heads = num_heads
        self.intermediate_dim = intermediate_dim
        self.dropout_rate = dropout_rate
        self.activation = activation
        self.layer_norm_epsilon = layer_norm_epsilon
        self.num_anchors = num_anchors
        self.ffn_rank = ffn_rank
        self.anchor_selection = anchor_selection
        self.initializer_range = initializer_range
        self.rotary_max_wavelength = rotary_max_wavelength
        self.seed = seed
        self.causal = bool(causal)
        self.max_sequence_length = max_sequence_length
        if self.causal and ffn_rank:
            raise ValueError("A causal `BertLayer` has a dense feed-forward network "
                             f"(`ffn_rank`=0). Received: ffn_rank={ffn_rank}")
        act = get_activation(activation)

        def init():
            return keras.initializers.TruncatedNormal(stddev=initializer_range)

        common = {"dtype": self.dtype_policy}
        attention_args = dict(
            num_heads=num_heads, key_dim=hidden_dim // num_heads, dropout=dropout_rate,
            kernel_initializer=init(), seed=seed, name="self_attention", **common)
        if num_anchors and causal:
            self.self_attention = CausalAnchorAttention(
                max_sequence_length=max_sequence_length, num_anchors=num_anchors,
                anchor_selection=anchor_selection, rotary_max_wavelength=rotary_max_wavelength,
                **attention_args)
        elif num_anchors:
            self.self_attention = AnchorMultiHeadAttention(
                num_anchors=num_anchors, anchor_selection=anchor_selection,
                rotary_max_wavelength=rotary_max_wavelength, **attention_args)
        elif rotary_max_wavelength is not None:
            self.self_attention = RotaryMultiHeadAttention(
                max_wavelength=rotary_max_wavelength, **attention_args)
        else:
            self.self_attention = keras.layers.MultiHeadAttention(**attention_args)
        self.attention_dropout = keras.layers.Dropout(
            dropout_rate, seed=derived_seed(seed, "attention_dropout"), name="attention_dropout",
            **common)
        self.attention_norm = keras.layers.LayerNormalization(
            epsilon=layer_norm_epsilon, name="attention_norm", **common)
        if ffn_rank:
            self.intermediate_dense = FactorizedDense(
                intermediate_dim, ffn_rank, activation=act, input_kernel_initializer=init(),
                output_kernel_initializer=init(), name="intermediate_dense", **common)
            self.output_dense = FactorizedDense(
                hidden_dim, ffn_rank, input_kernel_initializer=init(),
                output_kernel_initializer=init(), name="output_dense", **common)
        else:
            self.intermediate_dense = keras.layers.Dense(
                intermediate_dim, activation=act, kernel_initializer=init(),
                name="intermediate_dense", **common)
            self.output_dense = keras.layers.Dense(
                hidden_dim, kernel_initializer=init(), name="output_dense", **common)
        self.output_dropout = keras.layers.Dropout(
            dropout_rate, seed=derived_seed(seed, "output_dropout"), name="output_dropout",
            **common)
        self.output_norm = keras.layers.LayerNormalization(
            epsilon=layer_norm_epsilon, name="output_norm", **common)

    @property
    def relaxed(self):
        return bool(self.num_anchors or self.ffn_rank)

    def build(self, input_shape):
        shape = (None, None, self.hidden_dim)
        self.self_attention.build(shape, shape)
        self.attention_norm.build(shape)
        self.intermediate_dense.build(shape)
        self.output_dense.build((None, None, self.intermediate_dim))
        self.output_norm.build(shape)

    def call(self, inputs, padding_mask=None, training=False, exact_attention=None):
        x = inputs  # (batch, n, d)
        if self.causal and self.num_anchors:
            attended = self.self_attention(x, x, training=training, exact=exact_attention)
        elif self.causal:
            attended = self.self_attention(x, x, training=training, use_causal_mask=True)
        elif self.num_anchors:
            attended = self.self_attention(
                x, x, query_mask=padding_mask, value_mask=padding_mask, training=training,
                exact=exact_attention)
        else:
            attended = self.self_attention(x, x, value_mask=padding_mask, training=training)
        x = self.attention_norm(x + self.attention_dropout(attended, training=training))
        h = self.output_dense(self.intermediate_dense(x))  # (batch, n, d)
        return self.output_norm(x + self.output_dropout(h, training=training))

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        config = super().get_config()
        config.update({name: getattr(self, name) for name in (
            "hidden_dim", "num_heads", "intermediate_dim", "dropout_rate", "activation",
            "layer_norm_epsilon", "num_anchors", "ffn_rank", "anchor_selection",
            "initializer_range", "rotary_max_wavelength", "seed", "causal",
            "max_sequence_length")})
        return config
