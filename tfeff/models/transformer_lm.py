"""TransformerLM: causal transformer language models with ELMo's input and output layers.

The transformer encoders of Li et al.'s Table 5 (ELMo-C with larger
encoders): a bidirectional transformer LM (a forward and a backward causal
stack, ELMo's layout) or a single forward (GPT-like) stack. Written in
`keras.ops`: it trains under a stock `compile`/`fit` on TensorFlow, JAX and
PyTorch, on the batches of `tfeff.data.lm_dataset` (right-padded int32 ids
with `<s>` ... `</s>`), like `ElmoLM`.
"""

import numbers

import keras
from keras import ops

from tfeff import layers as tfeff_layers
from tfeff.backend.checks import check_right_padded
from tfeff.layers.embedding_common import TableEmbedding
from tfeff.models.bert_layer import derived_seed
from tfeff.models.bert_layer import get_activation
from tfeff.models.distributed import global_mean
from tfeff.models.distributed import layer_losses
from tfeff.models.elmo_lm import DIRECTION_LOSSES
from tfeff.models.elmo_lm import FIRST_PREDICTABLE_ID
from tfeff.models.elmo_lm import INPUT_EMBEDDINGS
from tfeff.models.elmo_lm import OUTPUT_LAYERS
from tfeff.models.elmo_lm import combine_directions

POSITION_EMBEDDINGS = ("learned", "rotary")
ANCHOR_SELECTIONS = tfeff_layers.anchor_multi_head_attention.ANCHOR_SELECTIONS
ROTARY_MAX_WAVELENGTH = 10000
DIRECTIONS = ("forward", "backward")
# Output layers that score the fixed table (they need `embedding_table`).
_TABLE_OUTPUTS = ("continuous", "fixed")
# Second word of the stateless seed of the inference anchor draw.


def direction_pairs(outputs, targets):
    """`(direction, outputs, targets)` of each direction `outputs` holds, aligned.

    Forward position t predicts token t+1, backward position t token t-1
    (`tfeff.models.elmo_lm.direction_pairs`, which needs both directions; a
    forward-only model has no `"backward"`). Tensors or NumPy arrays;
    `targets` may be ids or their vectors.
    """
    pairs = []
    if "forward" in outputs:
        pairs.append(("forward", outputs["forward"][:, :-1], targets[:, 1:]))
    if "backward" in outputs:
        pairs.append(("backward", outputs["backward"][:, 1:], targets[:, :-1]))
    return tuple(pairs)


def prediction_pairs(outputs, ids):
    """`(direction, outputs, target_ids, valid)` of each direction, aligned
    (`direction_pairs`), with the targets that count: `valid` is True where the
    target is predictable (not padding, not `<unk>`) and the position predicting
    it is a token. (In a padded row the backward output just after `</s>` is
    padding: `</s>` is where the backward LM starts reading, never its target,
    as `<s>` is never the forward LM's.) Tensors or NumPy arrays."""
    sources = dict((d, ids) for d in outputs)
    pairs = []
    for (direction, features, targets), (_, source, _) in zip(
            direction_pairs(outputs, ids), direction_pairs(sources, ids)):
        valid = (targets >= FIRST_PREDICTABLE_ID) & (source > 0)
        pairs.append((direction, features, targets, valid))
    return tuple(pairs)


def reverse_padded(x, lengths):
    """Reverses each row's first `lengths[i]` steps of `x` `(batch, time, ...)`; the
    padding after them stays where it is. Its own inverse."""
    n = ops.shape(x)[1]
    position = ops.arange(n, dtype="int32")[None, :]  # (1, time)
    lengths = ops.cast(lengths, "int32")[:, None]  # (batch, 1)
    index = ops.where(position < lengths, lengths - 1 - position, position)  # (batch, time)
    for _ in range(len(x.shape) - 2):
        index = index[..., None]  # broadcast over the feature axes
    return ops.take_along_axis(x, index, axis=1)


class _CausalLayer(keras.layers.Layer):
    """A post-layer-norm transformer layer whose attention sees the past only.

        x = LayerNorm(x + Dropout(CausalAttention(x)))
        x = LayerNorm(x + Dropout(W2 act(W1 x + b1) + b2))

    `BertLayer`'s layout and sublayer names (`self_attention`,
    `intermediate_dense`, ...), with a causal mask: standard attention
    (`keras.layers.MultiHeadAttention`, or `RotaryMultiHeadAttention` with
    `rotary_max_wavelength`) or, with `num_anchors`, `tfeff.layers.CausalAnchorAttention`.
    """

    def __init__(self, hidden_dim, num_heads, intermediate_dim, max_sequence_length,
                 dropout_rate=0.1, activation="gelu", layer_norm_epsilon=1e-6, num_anchors=0,
                 anchor_selection="random", rotary_max_wavelength=None,
                 initializer_range=0.02, seed=None, **kwargs):
        super().__init__(**kwargs)
        self.hidden_dim = hidden_dim
        self.intermediate_dim = intermediate_dim
        self.num_anchors = num_anchors

        def init():
            return keras.initializers.TruncatedNormal(stddev=initializer_range)

        common = {"dtype": self.dtype_policy}
        attention_args = dict(num_heads=num_heads, key_dim=hidden_dim // num_heads,
                              dropout=dropout_rate, kernel_initializer=init(), seed=seed,
                              name="self_attention", **common)
        if num_anchors:
            self.self_attention = tfeff_layers.CausalAnchorAttention(
                max_sequence_length=max_sequence_length, num_anchors=num_anchors,
                anchor_selection=anchor_selection, rotary_max_wavelength=rotary_max_wavelength,
                **attention_args)
        elif rotary_max_wavelength is not None:
            self.self_attention = tfeff_layers.RotaryMultiHeadAttention(
                max_wavelength=rotary_max_wavelength, **attention_args)
        else:
            self.self_attention = keras.layers.MultiHeadAttention(**attention_args)
        self.attention_dropout = keras.layers.Dropout(
            dropout_rate, seed=derived_seed(seed, "attention_dropout"),
            name="attention_dropout", **common)
        self.attention_norm = keras.layers.LayerNormalization(
            epsilon=layer_norm_epsilon, name="attention_norm", **common)
        self.intermediate_dense = keras.layers.Dense(
            intermediate_dim, activation=get_activation(activation), kernel_initializer=init(),
            name="intermediate_dense", **common)
        self.output_dense = keras.layers.Dense(
            hidden_dim, kernel_initializer=init(), name="output_dense", **common)
        self.output_dropout = keras.layers.Dropout(
            dropout_rate, seed=derived_seed(seed, "output_dropout"), name="output_dropout",
            **common)
        self.output_norm = keras.layers.LayerNormalization(
            epsilon=layer_norm_epsilon, name="output_norm", **common)

    def build(self, input_shape=None):
        shape = (None, None, self.hidden_dim)
        self.self_attention.build(shape, shape)
        self.attention_norm.build(shape)
        self.intermediate_dense.build(shape)
        self.output_dense.build((None, None, self.intermediate_dim))
        self.output_norm.build(shape)

    def call(self, inputs, training=False, exact_attention=None):
        x = inputs  # (batch, n, hidden_dim)
        if self.num_anchors:
            attended = self.self_attention(x, x, training=training, exact=exact_attention)
        else:
            attended = self.self_attention(x, x, training=training, use_causal_mask=True)
        x = self.attention_norm(x + self.attention_dropout(attended, training=training))
        h = self.output_dense(self.intermediate_dense(x))  # (batch, n, hidden_dim)
        return self.output_norm(x + self.output_dropout(h, training=training))

    def compute_output_shape(self, input_shape):
        return input_shape


def _check_positive_int(name, value):
    if not isinstance(value, numbers.Integral) or isinstance(value, bool) or value <= 0:
        raise ValueError(f"Received an invalid value for `{name}`, expected a positive integer. "
                         f"Received: {name}={value!r}")


def _check_choice(name, value, choices):
    if value not in choices:
        raise ValueError(f"Received an invalid value for `{name}`, expected one of {choices}. "
                         f"Received: {name}={value!r}")


@keras.saving.register_keras_serializable(package="tfeff")
class TransformerLM(keras.Model):
    """Causal transformer LM(s) with ELMo's pluggable input embedding and output layer.

    The encoders of Li et al.'s Table 5 (ELMo-C with larger encoders), built
    from the pieces `ElmoLM` uses:

    * Input: `input_embedding="fixed"` (each token's pre-trained vector,
      gathered in host memory, `FixedEmbedding`), `"trainable"` (an
      `Embedding` of `token_embedding_dim` features) or `"alone"`
      (`AloneEmbedding`); linearly projected to `hidden_dim` and layer
      normalized: the token layer, shared by both directions.
    * `bidirectional=True`: a forward and a backward stack of `num_layers`
      post-layer-norm transformer layers (`BertLayer`'s layout) whose
      attention is causal, ELMo's biLM with transformers ("TRANS BASE"). The
      forward stack reads the sentence left to right and its position t
      predicts token t+1; the backward stack reads each sentence reversed
      (positions count from `</s>`) and its position t predicts token t-1.
      `bidirectional=False`: the forward stack only (a GPT-like LM).
    * Positions: `"learned"` (one absolute position table per stack, added
      to the token layer) or `"rotary"` (queries and keys rotated in every
      attention layer; no position weights).
    * `num_anchors` > 0: CoRe's anchor attention in every layer, restricted
      to the past (one anchor per block of `ceil(max_sequence_length /
      num_anchors)` positions; see `tfeff.layers.CausalAnchorAttention`), with the
      weights of standard attention (`exact_attention=True` runs that).
    * Output, shared by the directions, as `ElmoLM`'s: `"continuous"`
      (ELMo-C), `"full"` (optionally tied to a trainable or ALONE input
      embedding), `"adaptive"`, `"sampled"` or `"fixed"`, through the
      output-head contract (`tfeff.layers.output_head`). The loss is the mean
      over predictable targets (not padding, not `<unk>`) of each direction,
      summed over the directions: one loss path on every backend.

    Causality is exact: the forward output at t depends on the ids at
    positions <= t only, the backward output at t on those >= t only (not on
    the other side's ids, number of tokens or padding).

    Args:
        vocabulary_size: number of ids (row 0 is padding); may be left out
            when `embedding_table` is given (then its rows).
        num_layers: transformer layers per stack.
        hidden_dim: model width (a multiple of `num_heads`).
        num_heads: attention heads.
        intermediate_dim: feed-forward width.
        max_sequence_length: longest sequence, boundaries included: the size of
            a learned position table, the span anchor blocks are laid out for,
            and what `max_embedding_tokens` allows.
        dropout_rate: dropout on the token layer, on attention probabilities
            and on the residual branches, in [0, 1).
        activation: the feed-forward activation (`"gelu"`, `"gelu_approximate"`
            or `"relu"`).
        layer_norm_epsilon: layer norm epsilon.
        bidirectional: a forward and a backward stack (True) or forward only.
        position_embedding: `"learned"` or `"rotary"`.
        num_anchors: 0 for standard attention, else anchors per
            `max_sequence_length` positions of the causal anchor attention.
        anchor_selection: `"random"` or `"strided"` (anchor attention).
        output_layer: one of `OUTPUT_LAYERS` (as `ElmoLM`).
        output_loss: `"cosine"`, `"l2"` or `"vmf"` (`"continuous"` only).
        embedding_table: path of the `.npy` vocabulary vectors, or an array
            `(vocabulary_size, dim)`; row 0 is padding. Required by the fixed
            input embedding and the `"continuous"` / `"fixed"` outputs.
        vmf_regularization1: lambda_1 of the `"vmf"` loss, >= 0 (penalty on the
            norm of the prediction).
        vmf_regularization2: lambda_2 of the `"vmf"` loss, in (0, 1] (scale of
            the dot product).
        input_embedding: `"fixed"`, `"trainable"` or `"alone"`.
        token_embedding_dim: size of a trainable or ALONE input embedding
            (default: the table's dimension, else `hidden_dim`); ElmoLM's
            `embedding_dim`.
        tie_output: use the trainable (or ALONE) input embedding as the
            `"full"` softmax's output matrix (with a projection to
            `token_embedding_dim` when it differs from `hidden_dim`).
        adaptive_cutoffs: cluster boundaries of `"adaptive"`.
        adaptive_div_value: projection divisor of `"adaptive"`.
        num_sampled: negatives per step of `"sampled"` and `"fixed"`.
        initializer_range: stddev of the truncated-normal kernel initializers.
        seed: seed of dropout, anchor draws and the sampler.
        alone: dict of `AloneEmbedding` arguments (all but `vocabulary_size`,
            `output_dim`, `mask_zero` and `lookup`) for `input_embedding="alone"`.
        direction_loss: `"sum"` or `"mean"` of the directions' losses (as
            `ElmoLM`'s; one direction: the same).
        **kwargs: base `Model` arguments.

    Call arguments:
        inputs: int ids `(batch, time)` (the batches of
            `tfeff.data.lm_dataset`), right-padded with 0.
        training: bool.
        exact_attention: run anchor attention exactly (standard causal
            attention on the same weights); None keeps the layers' setting.

    Returns:
        dict with `"forward"` (and, bidirectional, `"backward"`) tensors
        `(batch, time, dim)`: the output head's features (`head_inputs`): the
        predicted vectors of a continuous output, else the hidden states the
        softmax scores (`log_prob`). Position t of `"forward"` is for token
        t+1, of `"backward"` for token t-1 (`direction_pairs`).

    Raises:
        TypeError: `vocabulary_size` is not an integer (fixed vectors passed
            first instead of as `embedding_table=`).
        ValueError: a size is not a positive integer, `hidden_dim` is not a
            multiple of `num_heads` (or the head size is odd with rotary
            positions), `dropout_rate` is not in [0, 1), a choice
            (`activation`, `position_embedding`, `anchor_selection`,
            `output_layer`, `input_embedding`) is unknown, `embedding_table` is
            missing where required, `tie_output` is set without a trainable or
            ALONE input and a `"full"` output, `alone` is given without
            `input_embedding="alone"`, `vocabulary_size` is not an integer >= 2
            or differs from the table's rows, or `"adaptive"` has no
            `adaptive_cutoffs`.

    Example:

    >>> lm = TransformerLM(20, num_layers=1, hidden_dim=8, num_heads=2, intermediate_dim=16,
    ...                    max_sequence_length=8, input_embedding="trainable",
    ...                    output_layer="full")
    >>> ids = np.array([[2, 5, 6, 3, 0]], "int32")
    >>> sorted(lm(ids))
    ['backward', 'forward']
    >>> tuple(lm.embedding_layers(ids, ids > 0).shape)
    (1, 2, 5, 16)
    """

    def __init__(
        self,
        vocabulary_size=None,
        num_layers=6,
        hidden_dim=512,
        num_heads=8,
        intermediate_dim=2048,
        max_sequence_length=512,
        dropout_rate=0.1,
        activation="gelu",
        layer_norm_epsilon=1e-6,
        bidirectional=True,
        position_embedding="learned",
        num_anchors=0,
        anchor_selection="random",
        output_layer="continuous",
        output_loss="cosine",
        embedding_table=None,
        vmf_regularization1=0.0,
        vmf_regularization2=1.0,
        input_embedding="fixed",
        token_embedding_dim=None,
        tie_output=False,
        adaptive_cutoffs=None,
        adaptive_div_value=4.0,
        num_sampled=8192,
        initializer_range=0.02,
        seed=None,
        alone=None,
        direction_loss="sum",
        **kwargs,
    ):
        super().__init__(**kwargs)
        if vocabulary_size is not None and not isinstance(vocabulary_size, numbers.Integral):
            raise TypeError(
                "TransformerLM's first argument is `vocabulary_size` (as for ElmoLM and Bert); "
                "pass fixed vectors as `embedding_table=`. Received: vocabulary_size of type "
                f"{type(vocabulary_size).__name__}")
        for name, value in (("num_layers", num_layers), ("hidden_dim", hidden_dim),
                            ("num_heads", num_heads), ("intermediate_dim", intermediate_dim),
                            ("max_sequence_length", max_sequence_length)):
            _check_positive_int(name, value)
        if num_anchors:
            _check_positive_int("num_anchors", num_anchors)
        if hidden_dim % num_heads:
            raise ValueError(f"`hidden_dim` must be a multiple of `num_heads`. Received: "
                             f"hidden_dim={hidden_dim}, num_heads={num_heads}")
        if not 0 <= dropout_rate < 1:
            raise ValueError("Received an invalid value for `dropout_rate`, expected a value "
                             f"in [0, 1). Received: dropout_rate={dropout_rate}")
        get_activation(activation)
        _check_choice("position_embedding", position_embedding, POSITION_EMBEDDINGS)
        _check_choice("anchor_selection", anchor_selection, ANCHOR_SELECTIONS)
        _check_choice("output_layer", output_layer, OUTPUT_LAYERS)
        _check_choice("input_embedding", input_embedding, INPUT_EMBEDDINGS)
        if position_embedding == "rotary" and (hidden_dim // num_heads) % 2:
            raise ValueError("Rotary positions need an even head size `hidden_dim // num_heads`. "
                             f"Received: hidden_dim={hidden_dim}, num_heads={num_heads}")
        if embedding_table is None and (input_embedding == "fixed"
                                        or output_layer in _TABLE_OUTPUTS):
            raise ValueError(
                f"`embedding_table` is required by input_embedding={input_embedding!r} "
                f"/ output_layer={output_layer!r}.")
        if tie_output and (input_embedding not in ("trainable", "alone")
                           or output_layer != "full"):
            raise ValueError(
                "`tie_output=True` needs input_embedding='trainable' or 'alone', and "
                f"output_layer='full'. Received: input_embedding={input_embedding!r}, "
                f"output_layer={output_layer!r}")
        if alone is not None and input_embedding != "alone":
            raise ValueError("`alone` is only used with input_embedding='alone'.")
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
        self.output_layer_type = output_layer
        self.output_loss = output_loss
        self.vmf_regularization1 = float(vmf_regularization1)
        self.vmf_regularization2 = float(vmf_regularization2)
        self.input_embedding = input_embedding
        self.tie_output = bool(tie_output)
        self.adaptive_cutoffs = list(adaptive_cutoffs) if adaptive_cutoffs else None
        self.adaptive_div_value = float(adaptive_div_value)
        self.num_sampled = int(num_sampled)
        if direction_loss not in DIRECTION_LOSSES:
            raise ValueError(
                f"Received an invalid value for `direction_loss`, expected one of "
                f"{DIRECTION_LOSSES}. Received: direction_loss={direction_loss!r}"
            )
        self.direction_loss = direction_loss
        self.initializer_range = float(initializer_range)
        self.seed = seed
        self.alone = dict(alone or {}) if input_embedding == "alone" else None

        def init():
            return keras.initializers.TruncatedNormal(stddev=initializer_range)

        self.fixed_table = None
        if embedding_table is not None:
            self.fixed_table = tfeff_layers.FixedEmbedding(
                embedding_table, mask_zero=True, name="token_embedding")
            table_size = self.fixed_table.vocabulary_size
            if vocabulary_size is not None and int(vocabulary_size) != table_size:
                raise ValueError(f"`vocabulary_size`={vocabulary_size} differs from the table's "
                                 f"{table_size} rows.")
            vocabulary_size = table_size
        if vocabulary_size is None or int(vocabulary_size) < 2:
            raise ValueError(
                "Received an invalid value for `vocabulary_size`, expected an integer >= 2 (or "
                f"an `embedding_table`). Received: vocabulary_size={vocabulary_size}")
        self.vocabulary_size = int(vocabulary_size)
        self._build_input_embedding(token_embedding_dim)
        self.token_projection = keras.layers.Dense(
            self.hidden_dim, kernel_initializer=init(), name="token_projection")
        self.embeddings_norm = keras.layers.LayerNormalization(
            epsilon=self.layer_norm_epsilon, name="embeddings_norm")
        self.embeddings_dropout = keras.layers.Dropout(
            self.dropout_rate, seed=derived_seed(seed, "embeddings_dropout"),
            name="embeddings_dropout")
        # Per direction: `{direction}_position_embedding` (learned positions, else None)
        # and the list `{direction}_layers`, plain attributes (Keras' saving walks them).
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
                    self.max_sequence_length, dropout_rate=self.dropout_rate,
                    activation=activation, layer_norm_epsilon=self.layer_norm_epsilon,
                    num_anchors=self.num_anchors, anchor_selection=anchor_selection,
                    rotary_max_wavelength=(ROTARY_MAX_WAVELENGTH
                                           if position_embedding == "rotary" else None),
                    initializer_range=initializer_range,
                    seed=None if seed is None else seed + 1 + d * self.num_layers + i,
                    name=f"{direction}_layer_{i}")
                for i in range(self.num_layers)
            ])
        self._build_output_head()

    def _build_input_embedding(self, token_embedding_dim):
        """The token layer of `input_embedding` (ElmoLM's classes, names and defaults)."""
        if self.input_embedding == "fixed":
            self.token_embedding = self.fixed_table
            self.token_embedding_dim = self.fixed_table.output_dim
            return
        self.token_embedding_dim = int(token_embedding_dim or (
            self.fixed_table.output_dim if self.fixed_table else self.hidden_dim))
        if self.input_embedding == "alone":
            options = {"base_dim": self.token_embedding_dim, **self.alone}
            self.token_embedding = tfeff_layers.AloneEmbedding(
                self.vocabulary_size, self.token_embedding_dim, mask_zero=True,
                # Tied: the softmax computes the whole table each step; gather from it.
                lookup="table" if self.tie_output else "unique",
                name="alone_token_embedding", **options)
            # A drawn seed is part of the model: keep it for get_config.
            self.alone["seed"] = self.token_embedding.seed
        else:
            self.token_embedding = TableEmbedding(
                self.vocabulary_size, self.token_embedding_dim, mask_zero=True,
                embeddings_initializer=keras.initializers.RandomNormal(stddev=0.05),
                name="trainable_token_embedding")

    def _build_output_head(self):
        """The output layer of `output_layer` (ElmoLM's classes and names), and the
        projection in front of a softmax where one is needed (`pre_output`)."""
        self.pre_output = None
        output_layer = self.output_layer_type
        if output_layer == "continuous":
            self.output_head = tfeff_layers.ContinuousOutput(
                self.fixed_table.output_dim, loss=self.output_loss,
                vmf_regularization1=self.vmf_regularization1,
                vmf_regularization2=self.vmf_regularization2,
                target_embedding=self.fixed_table, name="continuous_output")
        elif output_layer == "full":
            if self.tie_output and self.token_embedding_dim != self.hidden_dim:
                self.pre_output = keras.layers.Dense(self.token_embedding_dim,
                                                     name="pre_output")
            self.output_head = tfeff_layers.FullSoftmax(self.vocabulary_size,
                                                        name="full_softmax")
            if self.tie_output:
                self.output_head.tie_to(self.token_embedding)
        elif output_layer == "adaptive":
            if not self.adaptive_cutoffs:
                raise ValueError("output_layer='adaptive' needs `adaptive_cutoffs`.")
            self.output_head = tfeff_layers.AdaptiveSoftmax(
                self.vocabulary_size, self.adaptive_cutoffs, div_value=self.adaptive_div_value,
                name="adaptive_softmax")
        elif output_layer == "sampled":
            self.output_head = tfeff_layers.SampledSoftmax(
                self.vocabulary_size, self.num_sampled, seed=self.seed, name="sampled_softmax")
        else:  # "fixed"
            self.pre_output = keras.layers.Dense(self.fixed_table.output_dim, name="pre_output")
            self.output_head = tfeff_layers.SampledSoftmax(
                self.vocabulary_size, self.num_sampled, use_bias=False, seed=self.seed,
                output_embedding=self.fixed_table, name="fixed_sampled_softmax")

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

    @property
    def is_continuous(self):
        return self.output_layer_type == "continuous"

    def build(self, input_shape=None):
        shape = (None, None)
        hidden_shape = shape + (self.hidden_dim,)
        if self.input_embedding != "fixed":
            self.token_embedding.build(shape)
        self.token_projection.build(shape + (self.token_embedding_dim,))
        self.embeddings_norm.build(hidden_shape)
        for direction in self.directions:
            if self.position_embedding(direction) is not None:
                self.position_embedding(direction).build((None,))
            for layer in self.stack_layers(direction):
                layer.build(hidden_shape)
        if self.pre_output is not None:
            self.pre_output.build(hidden_shape)
            hidden_shape = shape + (self.pre_output.units,)
        self.output_head.build(hidden_shape)
        self.built = True

    def _run_stack(self, direction, token, keep, training, exact_attention,
                   return_all_layers):
        """One stack on the (direction-ordered) token layer: its top `(batch, n, hidden)`,
        or every layer's output, each zero at padding."""
        x = token
        position_embedding = self.position_embedding(direction)
        if position_embedding is not None:
            n = ops.shape(token)[1]
            if isinstance(n, int) and n > self.max_sequence_length:
                raise ValueError(
                    f"TransformerLM `{self.name}` has {self.max_sequence_length} learned "
                    f"positions (`max_sequence_length`); received sequences of {n} tokens.")
            positions = position_embedding(ops.arange(n))[None]  # (1, n, d)
            x = x + ops.cast(positions, x.dtype)
        x = self.embeddings_dropout(x, training=training)
        outputs = []
        for layer in self.stack_layers(direction):
            x = layer(x, training=training, exact_attention=exact_attention) * keep
            outputs.append(x)
        return outputs if return_all_layers else outputs[-1]

    def encode(self, token_ids, padding_mask=None, training=False, exact_attention=None,
               return_all_layers=False):
        """Runs the stacks on token ids.

        Args:
            token_ids: int `(batch, time)`.
            padding_mask: bool `(batch, time)`, right-padded (default
                `token_ids != 0`): a True after a False raises
                (`tfeff.backend.checks.check_right_padded`).
            training: bool.
            exact_attention: anchor attention run exactly (None: as built).
            return_all_layers: also return the representation stack.

        Returns:
            dict of each direction's top layer `(batch, time, hidden_dim)`
            (zero at padding); with `return_all_layers`, `(tops, stack)` where
            `stack` is `(batch, num_layers + 1, time, embedding_dim)`: the
            token layer, then each layer's output, the directions
            concatenated per layer (the token layer duplicated).
        """
        ids = ops.cast(token_ids, "int32")
        mask = ids > 0 if padding_mask is None else padding_mask
        mask = check_right_padded(self, mask, "padding_mask")
        vectors = self.token_embedding(ids, training=training)  # (batch, time, emb)
        keep = ops.cast(mask, self.compute_dtype)[:, :, None]
        token = self.embeddings_norm(self.token_projection(vectors)) * keep  # (batch, time, d)
        lengths = ops.sum(ops.cast(mask, "int32"), axis=1)
        tops, layers = {}, {}
        for direction in self.directions:
            # The backward stack is the forward computation on each sentence reversed.
            flip = ((lambda x: x) if direction == "forward"
                    else (lambda x: reverse_padded(x, lengths)))
            out = self._run_stack(direction, flip(token), keep, training, exact_attention,
                                  return_all_layers)
            if return_all_layers:
                layers[direction] = [flip(x) for x in out]
                tops[direction] = layers[direction][-1]
            else:
                tops[direction] = flip(out)
        if not return_all_layers:
            return tops
        stack = [ops.concatenate([token] * len(self.directions), axis=-1)]
        for i in range(self.num_layers):
            stack.append(ops.concatenate([layers[d][i] for d in self.directions], axis=-1))
        return tops, ops.stack(stack, axis=1)

    def call(self, inputs, training=False, exact_attention=None):
        tops = self.encode(inputs, training=training, exact_attention=exact_attention)
        return {direction: self.head_inputs(top) for direction, top in tops.items()}

    def head_inputs(self, hidden):
        """What the output layer scores: predicted vectors (continuous) or hidden states."""
        if self.pre_output is not None:
            hidden = self.pre_output(hidden)
        return self.output_head.features(hidden)

    def log_prob(self, head_inputs):
        """Log-distribution over the vocabulary of softmax outputs `(..., vocabulary_size)`."""
        return self.output_head.log_prob(head_inputs)

    def prediction_pairs(self, outputs, ids):
        """`prediction_pairs` of this model's outputs: what its loss and evaluation score."""
        return prediction_pairs(outputs, ids)

    def direction_losses(self, ids, outputs, training=False):
        """Per direction, (sum of losses, number of targets) over this batch.

        The targets are `prediction_pairs`'s valid ones. Every output layer
        answers `per_position_loss` (`tfeff.layers.output_head`) with static
        shapes: the same computation on every backend.
        """
        ids = ops.cast(ids, "int32")
        out = {}
        for direction, features, targets, valid in prediction_pairs(outputs, ids):
            losses = self.output_head.per_position_loss(features, targets, mask=valid,
                                                        training=training)
            out[direction] = (ops.sum(ops.cast(losses, "float32")),
                              ops.sum(ops.cast(valid, "float32")))
        return out

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        """Sum (or mean, `direction_loss`) over directions of the mean loss per
        predictable target, each replica's share of the global batch's (as
        `ElmoLM.compute_loss`)."""
        del y, sample_weight
        losses = self.direction_losses(x, y_pred, training=training).values()
        return combine_directions(
            [global_mean(loss_sum, count) for loss_sum, count in losses],
            self.direction_loss) + layer_losses(self)

    # The embeddable-model contract of `tfeff.export.TokenIdsEmbedderModule`.

    @property
    def embedding_num_layers(self):
        """Layers of `embedding_layers`: the token layer and each transformer layer."""
        return self.num_layers + 1

    @property
    def embedding_dim(self):
        """Size of each layer of `embedding_layers` (both directions concatenated)."""
        return self.hidden_dim * len(self.directions)

    @property
    def max_embedding_tokens(self):
        """The most tokens embedded between `<s>` and `</s>` (`max_sequence_length`)."""
        return self.max_sequence_length - 2

    def embedding_layers(self, token_ids, padding_mask, training=False):
        """Every layer for `token_ids` (with `<s>` and `</s>`): `(batch, num_layers + 1,
        time, embedding_dim)`, the token layer first (duplicated when bidirectional)."""
        _, stack = self.encode(token_ids, padding_mask=padding_mask, training=training,
                               return_all_layers=True)
        return stack

    def get_config(self):
        config = super().get_config()
        config.update({
            name: getattr(self, name) for name in (
                "vocabulary_size", "num_layers", "hidden_dim", "num_heads", "intermediate_dim",
                "max_sequence_length", "dropout_rate", "activation", "layer_norm_epsilon",
                "bidirectional", "num_anchors", "anchor_selection", "output_loss",
                "vmf_regularization1", "vmf_regularization2", "input_embedding",
                "token_embedding_dim", "tie_output", "adaptive_cutoffs", "adaptive_div_value",
                "num_sampled", "initializer_range", "seed", "alone", "direction_loss",
            )
        })
        config.update({
            "position_embedding": self.position_embedding_type,
            "output_layer": self.output_layer_type,
            "embedding_table": (self.fixed_table.get_config()["table"] if self.fixed_table
                                else None),
        })
        return config


def transformer_lm_from_config(config, vocabulary_size, vectors_path=None):
    """The `TransformerLM` of a `TransformerLMConfig` (`vectors_path`: the fixed vectors of
    word models), as `tfeff.models.from_config.elmo_lm` builds ELMo's."""
    from tfeff.models.from_config import alone_kwargs

    m = config.model
    return TransformerLM(
        vocabulary_size,
        num_layers=m.num_layers,
        hidden_dim=m.hidden_dim,
        num_heads=m.num_heads,
        intermediate_dim=m.intermediate_dim,
        max_sequence_length=m.max_sequence_length or config.data.max_sequence_length,
        dropout_rate=m.dropout_rate,
        activation=m.activation,
        layer_norm_epsilon=m.layer_norm_epsilon,
        bidirectional=m.bidirectional,
        position_embedding=m.position_embedding,
        num_anchors=m.num_anchors,
        anchor_selection=m.anchor_selection,
        output_layer=m.output_layer,
        output_loss=m.output_loss,
        embedding_table=vectors_path,
        vmf_regularization1=m.vmf_regularization1,
        vmf_regularization2=m.vmf_regularization2,
        input_embedding=m.input_embedding,
        token_embedding_dim=m.embedding_dim or None,
        tie_output=m.tie_output,
        adaptive_cutoffs=m.adaptive_cutoffs or None,
        adaptive_div_value=m.adaptive_div_value,
        num_sampled=m.num_sampled,
        seed=config.train.seed,
        alone=alone_kwargs(m),
        direction_loss=m.direction_loss,
        name="transformer_lm",
    )
