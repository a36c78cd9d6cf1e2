"""TransformerLMBackbone: the transformer LM's token layer and causal stacks."""

import keras
from keras import ops

from tfeff import layers as tfeff_layers
from tfeff.backend.checks import check_mask_shape
from tfeff.backend.checks import check_right_padded
from tfeff.backend.checks import check_sequence_length
from tfeff.backend.checks import check_token_ids
from tfeff.config.bert import POSITION_EMBEDDINGS
from tfeff.layers.embedding_common import TableEmbedding
from tfeff.models.bert_layer import BertLayer
from tfeff.models.bert_layer import derived_seed
from tfeff.models.bert_layer import get_activation
from tfeff.models.language_model import DIRECTIONS
from tfeff.models.language_model import LanguageModelBackbone
from tfeff.models.language_model import check_choice
from tfeff.models.language_model import check_positive_int

ANCHOR_SELECTIONS = tfeff_layers.anchor_multi_head_attention.ANCHOR_SELECTIONS
ROTARY_MAX_WAVELENGTH = 10000


class _CausalLayer(BertLayer):
    """`BertLayer(causal=True)`, whose class name is in saved weight paths
    (`forward_layers/__causal_layer/...`)."""

    def __init__(self, *args, **kwargs):
        kwargs["causal"] = True
        super().__init__(*args, **kwargs)


def reverse_padded(x, lengths):
    """Reverses each row's first `lengths[i]` steps of `x` `(batch, time, ...)`, the
    padding staying in place. Its own inverse."""
    n = ops.shape(x)[1]
    position = ops.arange(n, dtype="int32")[None, :]  # (1, time)
    lengths = ops.cast(lengths, "int32")[:, None]  # (batch, 1)
    index = ops.where(position < lengths, lengths - 1 - position, position)  # (batch, time)
    for _ in range(len(x.shape) - 2):
        index = index[..., None]  # broadcast over the feature axes
    return ops.take_along_axis(x, index, axis=1)


@keras.saving.register_keras_serializable(package="tfeff")
class TransformerLMBackbone(LanguageModelBackbone):
    """The transformer LM's encoder, with no output layer and no loss.

    The token layer (the input embedding, projected to `hidden_dim` and layer
    normalized) feeds a forward and, when `bidirectional`, a backward stack of
    `num_layers` causal `BertLayer`s, the backward one reading each sentence
    reversed (positions count from `</s>`). `num_anchors` > 0 puts
    `CausalAnchorAttention` in every layer (an anchor per block of
    `ceil(max_sequence_length / num_anchors)` positions). Causality is exact:
    the forward output at t depends on the ids at positions <= t only, the
    backward output on those >= t only (not on the other side's ids, length or padding).

    Args:
        vocabulary_size: as `ElmoBackbone`'s.
        num_layers: transformer layers per stack.
        hidden_dim: model width (a multiple of `num_heads`).
        num_heads: attention heads.
        intermediate_dim: feed-forward width.
        max_sequence_length: longest sequence, boundaries included.
        dropout_rate: dropout on the token layer, attention and residuals, in [0, 1).
        activation: as `BertBackbone`'s.
        layer_norm_epsilon: layer norm epsilon.
        bidirectional: a forward and a backward stack (True) or forward only.
        position_embedding: `"learned"` (a table per stack) or `"rotary"`.
        num_anchors: 0 for standard attention, else anchors per `max_sequence_length`.
        anchor_selection: `"random"` or `"strided"` (anchor attention).
        embedding_table: as `ElmoBackbone`'s.
        input_embedding: as `ElmoBackbone`'s.
        token_embedding_dim: as `ElmoBackbone`'s (the width is `hidden_dim`).
        alone: as `ElmoBackbone`'s.
        initializer_range: stddev of the truncated-normal kernel initializers.
        seed: seed of dropout and anchor draws.
        **kwargs: base `Model` arguments.

    Call arguments:
        inputs: int ids `(batch, time)`, right-padded with 0.
        training: bool.
        exact_attention: run anchor attention exactly (None: as built).

    Returns:
        dict of each direction's top layer `(batch, time, hidden_dim)`, zero at padding.

    Raises:
        ValueError: a size is not a positive integer, `hidden_dim` is not a multiple
            of `num_heads` (or the head size is odd with rotary), an option is unknown,
            `dropout_rate` is not in [0, 1), or as `ElmoBackbone`'s.

    Example:

    >>> backbone = TransformerLMBackbone(20, num_layers=1, hidden_dim=8, num_heads=2,
    ...                                  intermediate_dim=16, max_sequence_length=8,
    ...                                  input_embedding="trainable")
    >>> ids = np.array([[2, 5, 6, 3, 0]], "int32")
    >>> tuple(backbone(ids)["backward"].shape)
    (1, 5, 8)
    >>> tuple(backbone.embedding_layers(ids, ids > 0).shape)
    (1, 2, 5, 16)
    """

    def __init__(self, vocabulary_size=None, num_layers=6, hidden_dim=512, num_heads=8,
                 intermediate_dim=2048, max_sequence_length=512, dropout_rate=0.1,
                 activation="gelu", layer_norm_epsilon=1e-6, bidirectional=True,
                 position_embedding="learned", num_anchors=0, anchor_selection="random",
                 embedding_table=None, input_embedding="fixed", token_embedding_dim=None,
                 alone=None, initializer_range=0.02, seed=None, **kwargs):
        for name, value in (("num_layers", num_layers), ("hidden_dim", hidden_dim),
                            ("num_heads", num_heads), ("intermediate_dim", intermediate_dim),
                            ("max_sequence_length", max_sequence_length)):
            check_positive_int(name, value)
        if num_anchors:
            check_positive_int("num_anchors", num_anchors)
        if hidden_dim % num_heads:
            raise ValueError(f"`hidden_dim` must be a multiple of `num_heads`. Received: "
                             f"hidden_dim={hidden_dim}, num_heads={num_heads}")
        if not 0 <= dropout_rate < 1:
            raise ValueError("Received an invalid value for `dropout_rate`, expected a value "
                             f"in [0, 1). Received: dropout_rate={dropout_rate}")
        get_activation(activation)
        check_choice("position_embedding", position_embedding, POSITION_EMBEDDINGS)
        check_choice("anchor_selection", anchor_selection, ANCHOR_SELECTIONS)
        if position_embedding == "rotary" and (hidden_dim // num_heads) % 2:
            raise ValueError("Rotary positions need an even head size `hidden_dim // num_heads`. "
                             f"Received: hidden_dim={hidden_dim}, num_heads={num_heads}")
        super().__init__(vocabulary_size, hidden_dim=hidden_dim,
                         embedding_table=embedding_table, input_embedding=input_embedding,
                         token_embedding_dim=token_embedding_dim, alone=alone, **kwargs)
        self.seed = seed
        self.num_layers = int(num_layers)
        self.hidden_dim = int(hidden_dim)
        self.num_heads = int(num_heads)
        self.intermediate_dim = int(intermediate_dim)
        self.max_sequence_length = int(max_sequence_length)
        self.dropout_rate = float(dropout_rate)
        self.activation = activation
        self.layer_norm_epsilon = float(layer_norm_epsilon)
        self.bidirectional = bool(bidirectional)
        self.position_embedding_type = position_embedding
        self.num_anchors = int(num_anchors or 0)
        self.anchor_selection = anchor_selection
        self.initializer_range = float(initializer_range)

        def init():
            return keras.initializers.TruncatedNormal(stddev=initializer_range)

        self.token_projection = keras.layers.Dense(
            self.hidden_dim, kernel_initializer=init(), name="token_projection")
        self.embeddings_norm = keras.layers.LayerNormalization(
            epsilon=self.layer_norm_epsilon, name="embeddings_norm")
        self.embeddings_dropout = keras.layers.Dropout(
            self.dropout_rate, seed=derived_seed(seed, "embeddings_dropout"),
            name="embeddings_dropout")
        # Plain attributes per direction (Keras' saving walks them).
        for d, direction in enumerate(self.directions):
            table = None
            if position_embedding == "learned":
                table = TableEmbedding(
                    self.max_sequence_length, self.hidden_dim, embeddings_initializer=init(),
                    name=f"{direction}_position_embedding")
            setattr(self, f"{direction}_position_embedding", table)
            setattr(self, f"{direction}_layers", [
                _CausalLayer(
                    self.hidden_dim, self.num_heads, self.intermediate_dim,
                    max_sequence_length=self.max_sequence_length,
                    dropout_rate=self.dropout_rate,
                    activation=activation, layer_norm_epsilon=self.layer_norm_epsilon,
                    num_anchors=self.num_anchors, anchor_selection=anchor_selection,
                    rotary_max_wavelength=(ROTARY_MAX_WAVELENGTH
                                           if position_embedding == "rotary" else None),
                    initializer_range=initializer_range,
                    seed=None if seed is None else seed + 1 + d * self.num_layers + i,
                    name=f"{direction}_layer_{i}")
                for i in range(self.num_layers)
            ])

    @property
    def directions(self):
        """The stacks' directions: `("forward", "backward")` or `("forward",)`."""
        return DIRECTIONS if self.bidirectional else DIRECTIONS[:1]

    def stack_layers(self, direction):
        """The transformer layers of the `direction` stack."""
        return getattr(self, f"{direction}_layers")

    def position_embedding(self, direction):
        """The learned position table of the `direction` stack, or None (rotary)."""
        return getattr(self, f"{direction}_position_embedding")

    def build_layers(self):
        hidden_shape = (None, None, self.hidden_dim)
        self.build_token_embedding()
        self.token_projection.build((None, None, self.token_embedding_dim))
        self.embeddings_norm.build(hidden_shape)
        for direction in self.directions:
            if self.position_embedding(direction) is not None:
                self.position_embedding(direction).build((None,))
            for layer in self.stack_layers(direction):
                layer.build(hidden_shape)

    def _run_stack(self, direction, token, keep, training, exact_attention):
        """Every layer's output (zero at padding) of one direction's stack on `token`."""
        x = token
        position_embedding = self.position_embedding(direction)
        if position_embedding is not None:
            n = ops.shape(token)[1]
            positions = position_embedding(ops.arange(n))[None]  # (1, n, d)
            x = x + ops.cast(positions, x.dtype)
        x = self.embeddings_dropout(x, training=training)
        outputs = []
        for layer in self.stack_layers(direction):
            x = layer(x, training=training, exact_attention=exact_attention) * keep
            outputs.append(x)
        return outputs

    def encode(self, token_ids, padding_mask=None, training=False, exact_attention=None,
               return_all_layers=False):
        """`call`'s output for int `token_ids` (`padding_mask` as `BertBackbone`'s); with
        `return_all_layers`, also the stack `(batch, num_layers + 1, time, embedding_dim)`
        of the token layer and each layer's output, directions concatenated per layer."""
        ids = check_token_ids(self, token_ids)
        if self.position_embedding("forward") is not None:
            ids = check_sequence_length(self, ids, self.max_sequence_length)
        mask = ids > 0 if padding_mask is None else check_mask_shape(
            self, ids, padding_mask, "padding_mask", inputs_what="token_ids")
        mask = check_right_padded(self, mask, "padding_mask")
        vectors = self.token_embedding(ids, training=training)  # (batch, time, emb)
        keep = ops.cast(mask, self.compute_dtype)[:, :, None]
        token = self.embeddings_norm(self.token_projection(vectors)) * keep  # (batch, time, d)
        lengths = ops.sum(ops.cast(mask, "int32"), axis=1)
        layers = {}
        for direction in self.directions:
            # The backward stack is the forward computation on each sentence reversed.
            flip = ((lambda x: x) if direction == "forward"
                    else (lambda x: reverse_padded(x, lengths)))
            out = self._run_stack(direction, flip(token), keep, training, exact_attention)
            layers[direction] = [flip(x) for x in (out if return_all_layers else out[-1:])]
        tops = {direction: outputs[-1] for direction, outputs in layers.items()}
        if not return_all_layers:
            return tops
        stack = [ops.concatenate([token] * len(self.directions), axis=-1)]
        for i in range(self.num_layers):
            stack.append(ops.concatenate([layers[d][i] for d in self.directions], axis=-1))
        return tops, ops.stack(stack, axis=1)

    def call(self, inputs, training=False, exact_attention=None):
        return self.encode(inputs, training=training, exact_attention=exact_attention)

    # `tfeff.export.TokenIdsEmbedderModule`'s contract.

    @property
    def embedding_dim(self):
        """Size of each layer of `embedding_layers` (both directions concatenated)."""
        return self.hidden_dim * len(self.directions)

    @property
    def max_embedding_tokens(self):
        """The most tokens embedded between `<s>` and `</s>` (`max_sequence_length`)."""
        return self.max_sequence_length - 2

    def embedding_layers(self, token_ids, padding_mask, training=False):
        """`encode`'s stack for `token_ids` (with `<s>` and `</s>`)."""
        _, stack = self.encode(token_ids, padding_mask=padding_mask, training=training,
                               return_all_layers=True)
        return stack

    def get_config(self):
        config = super().get_config()
        config.update({name: getattr(self, name) for name in (
            "num_layers", "hidden_dim", "num_heads", "intermediate_dim", "max_sequence_length",
            "dropout_rate", "activation", "layer_norm_epsilon", "bidirectional", "num_anchors",
            "anchor_selection", "initializer_range", "seed")})
        config["position_embedding"] = self.position_embedding_type
        return config
