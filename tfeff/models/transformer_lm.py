"""TransformerLM: causal transformer language models with ELMo's input and output layers.

The transformer encoders of Li et al.'s Table 5 (ELMo-C with larger
encoders): a bidirectional transformer LM (a forward and a backward causal
stack, ELMo's layout) or a single forward (GPT-like) stack. Written in
`keras.ops`: it trains under a stock `compile`/`fit` on TensorFlow, JAX and
PyTorch, on the batches of `tfeff.data.lm_dataset` (right-padded int32 ids
with `<s>` ... `</s>`), like `ElmoLM`.
"""

import keras

from tfeff.models.language_model import LanguageModel
from tfeff.models.transformer_lm_backbone import TransformerLMBackbone

# The backbone's settings the task keeps as attributes of the same name.
_CONFIG_KEYS = ("num_layers", "hidden_dim", "num_heads", "intermediate_dim",
                "max_sequence_length", "dropout_rate", "activation", "layer_norm_epsilon",
                "bidirectional", "position_embedding_type", "num_anchors", "anchor_selection",
                "initializer_range")
# The backbone's layers the task tracks under its own names (`BackboneTask`), in the
# order the single class made them.
_BACKBONE_LAYERS = ("token_projection", "embeddings_norm", "embeddings_dropout",
                    "forward_position_embedding", "forward_layers",
                    "backward_position_embedding", "backward_layers")


@keras.saving.register_keras_serializable(package="tfeff")
class TransformerLM(LanguageModel):
    """Causal transformer LM(s) with ELMo's pluggable input embedding and output layer.

    The encoders of Li et al.'s Table 5 (ELMo-C with larger encoders), built
    from the pieces `ElmoLM` uses. The task model, as keras-hub splits them:
    a `TransformerLMBackbone` (`backbone`: the token layer and the stacks),
    the output layer and the loss.

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
      summed over the directions: one static-shape loss path on every backend
      (`compact_targets` is False), also under XLA.

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
            (default: the table's dimension, else `hidden_dim`), as ElmoLM's.
        tie_output: use the trainable (or ALONE) input embedding as the
            `"full"` softmax's output matrix (with a projection to
            `token_embedding_dim` when it differs from `hidden_dim`).
        adaptive_cutoffs: cluster boundaries of `"adaptive"`.
        adaptive_div_value: projection divisor of `"adaptive"`.
        adaptive_tail_capacity: `tail_capacity` of `"adaptive"` (the share of
            rows a tail computes on JAX and under `torch.compile`; None: all).
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
        ValueError: `output_layer` is unknown, `embedding_table` is missing
            for a `"continuous"` or `"fixed"` output, `tie_output` is set
            without a trainable or ALONE input and a `"full"` output, or
            `"adaptive"` has no `adaptive_cutoffs`. The backbone checks the
            rest (see `TransformerLMBackbone`). A `vocabulary_size` that is no integer
            (fixed vectors passed first) raises `TypeError`.

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

    compact_targets = False

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
        adaptive_tail_capacity=None,
        num_sampled=8192,
        initializer_range=0.02,
        seed=None,
        alone=None,
        direction_loss="sum",
        **kwargs,
    ):
        super().__init__(
            vocabulary_size, output_layer=output_layer, output_loss=output_loss,
            vmf_regularization1=vmf_regularization1, vmf_regularization2=vmf_regularization2,
            input_embedding=input_embedding, embedding_table=embedding_table,
            tie_output=tie_output, adaptive_cutoffs=adaptive_cutoffs,
            adaptive_div_value=adaptive_div_value,
            adaptive_tail_capacity=adaptive_tail_capacity, num_sampled=num_sampled, seed=seed,
            direction_loss=direction_loss, **kwargs)
        backbone = TransformerLMBackbone(
            vocabulary_size, num_layers=num_layers, hidden_dim=hidden_dim, num_heads=num_heads,
            intermediate_dim=intermediate_dim, max_sequence_length=max_sequence_length,
            dropout_rate=dropout_rate, activation=activation,
            layer_norm_epsilon=layer_norm_epsilon, bidirectional=bidirectional,
            position_embedding=position_embedding, num_anchors=num_anchors,
            anchor_selection=anchor_selection, embedding_table=embedding_table,
            input_embedding=input_embedding, token_embedding_dim=token_embedding_dim,
            alone=self.backbone_alone(alone, input_embedding),
            initializer_range=initializer_range, seed=seed, dtype=self.dtype_policy,
            name=f"{self.name}_backbone")
        for name in _CONFIG_KEYS:
            setattr(self, name, getattr(backbone, name))
        self.attach_backbone(backbone, _BACKBONE_LAYERS, self.hidden_dim)

    def build(self, input_shape=None):
        self.build_backbone()
        self.build_output_head(self.hidden_dim)
        self.built = True

    def encode(self, *args, **kwargs):
        """The backbone's `encode`: each direction's top layer (and the stack)."""
        return self._backbone.encode(*args, **kwargs)

    def call(self, inputs, training=False, exact_attention=None):
        tops = self._backbone.encode(inputs, training=training, exact_attention=exact_attention)
        return {direction: self.head_inputs(top) for direction, top in tops.items()}
