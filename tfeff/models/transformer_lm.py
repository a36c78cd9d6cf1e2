"""TransformerLM: causal transformer language models with ELMo's input and output layers,
in `keras.ops` (a stock `compile`/`fit` on TensorFlow, JAX and PyTorch)."""

import keras

from tfeff.models.language_model import LanguageModel
from tfeff.models.transformer_lm_backbone import TransformerLMBackbone


@keras.saving.register_keras_serializable(package="tfeff")
class TransformerLM(LanguageModel):
    """Causal transformer LM(s) with ELMo's pluggable input embedding and output layer.

    Li et al.'s Table 5 encoders ("TRANS BASE": ELMo's biLM with transformers, or
    a GPT-like forward stack, `TransformerLMBackbone`) with `ElmoLM`'s output and
    loss, on one static-shape loss path on every backend, also under XLA.

    Args:
        backbone: a `TransformerLMBackbone`.
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
        inputs: int ids `(batch, time)`, right-padded with 0 (`tfeff.data.lm_dataset`).
        training: bool.
        exact_attention: run anchor attention exactly (None: as built).

    Returns:
        As `ElmoLM`'s; `"backward"` only when bidirectional.

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
