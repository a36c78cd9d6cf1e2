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


@keras.saving.register_keras_serializable(package="tfeff")
class TransformerLM(LanguageModel):
    """Causal transformer LM(s) with ELMo's pluggable input embedding and output layer.

    The encoders of Li et al.'s Table 5 (ELMo-C with larger encoders), built
    from the pieces `ElmoLM` uses. The task model, as keras-hub splits them:
    it takes a `TransformerLMBackbone` (`backbone`: the token layer and the
    stacks) and adds the output layer and the loss.

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
        backbone: a `TransformerLMBackbone` (sizes, positions, anchors, the
            token layer).
        output_layer: as `ElmoLM`'s.
        output_loss: as `ElmoLM`'s.
        vmf_regularization1: as `ElmoLM`'s.
        vmf_regularization2: as `ElmoLM`'s.
        tie_output: as `ElmoLM`'s.
        adaptive_cutoffs: as `ElmoLM`'s.
        adaptive_div_value: as `ElmoLM`'s.
        adaptive_tail_capacity: as `ElmoLM`'s.
        num_sampled: as `ElmoLM`'s.
        seed: the sampler's seed (dropout and anchor draws take the backbone's).
        direction_loss: as `ElmoLM`'s.
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
        TypeError: `backbone` is no `TransformerLMBackbone`.
        ValueError: as `ElmoLM`'s.

    Example:

    >>> backbone = TransformerLMBackbone(20, num_layers=1, hidden_dim=8, num_heads=2,
    ...                                  intermediate_dim=16, max_sequence_length=8,
    ...                                  input_embedding="trainable")
    >>> lm = TransformerLM(backbone, output_layer="full")
    >>> ids = np.array([[2, 5, 6, 3, 0]], "int32")
    >>> sorted(lm(ids))
    ['backward', 'forward']
    >>> tuple(lm.embedding_layers(ids, ids > 0).shape)
    (1, 2, 5, 16)
    """

    compact_targets = False

    backbone_class = TransformerLMBackbone

    def call(self, inputs, training=False, exact_attention=None):
        tops = self.backbone.encode(inputs, training=training, exact_attention=exact_attention)
        return {direction: self.head_inputs(top) for direction, top in tops.items()}
