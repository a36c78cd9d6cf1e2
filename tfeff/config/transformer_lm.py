"""Configuration of the transformer LM family (`family: transformer_lm`).

The transformer encoders of Li et al.'s Table 5 with ELMo's ends: the ELMo family's data,
fastText, train and eval sections, and a model section with the transformer's sizes plus
`ElmoModelConfig`'s output-layer and input-embedding keys (which it validates).
"""

import dataclasses

from tfeff.config.base import ConfigError
from tfeff.config.base import join
from tfeff.config.base import one_of
from tfeff.config.base import positive
from tfeff.config.base import positive_keys
from tfeff.config.bert import ACTIVATIONS
from tfeff.config.bert import ANCHOR_SELECTIONS
from tfeff.config.bert import POSITION_EMBEDDINGS
from tfeff.config.elmo import DataConfig
from tfeff.config.elmo import ElmoModelConfig
from tfeff.config.elmo import check_subword_ends
from tfeff.config.elmo import EvalConfig
from tfeff.config.elmo import FastTextConfig
from tfeff.config.elmo import SyntheticCorpusConfig
from tfeff.config.train import TrainConfig
from tfeff.config.train import check_rnmt_batch

# `ElmoModelConfig`'s keys taken unchanged (`num_layers`, `dropout_rate`: other defaults).
ELMO_MODEL_KEYS = (
    "output_layer", "output_loss", "vmf_regularization1", "vmf_regularization2",
    "input_embedding", "embedding_dim", "tie_output", "adaptive_cutoffs",
    "adaptive_div_value", "adaptive_tail_capacity", "num_sampled", "alone", "direction_loss")


def _fields_of(cls, names):
    """`make_dataclass` field specs of `cls`'s fields `names`: same types and defaults."""
    fields = {f.name: f for f in dataclasses.fields(cls)}
    return [(f.name, f.type, dataclasses.field(default_factory=f.default_factory)
             if f.default_factory is not dataclasses.MISSING
             else dataclasses.field(default=f.default)) for f in map(fields.get, names)]


ElmoEndsConfig = dataclasses.make_dataclass(
    "ElmoEndsConfig", _fields_of(ElmoModelConfig, ELMO_MODEL_KEYS),
    namespace={"__doc__": "`ElmoModelConfig`'s output-layer and input-embedding keys.",
               "__module__": __name__})


@dataclasses.dataclass
class TransformerLMModelConfig(ElmoEndsConfig):
    """Transformer sizes (defaults: Li et al.'s "TRANS BASE") and `ElmoModelConfig`'s ends.

    Args:
        output_layer: `continuous`, `full`, `adaptive`, `sampled` or `fixed`.
        output_loss: `cosine`, `l2` or `vmf` (`continuous` only).
        vmf_regularization1: lambda_1 of the `vmf` loss, >= 0.
        vmf_regularization2: lambda_2 of the `vmf` loss, in (0, 1].
        input_embedding: `fixed`, `trainable` or `alone`.
        embedding_dim: a trainable or ALONE embedding's size; 0: the fixed table's or `hidden_dim`.
        tie_output: use the trainable or ALONE input embedding as the `full` softmax's matrix.
        adaptive_cutoffs: increasing cluster boundaries of `adaptive` (required there).
        adaptive_div_value: projection divisor of `adaptive`.
        adaptive_tail_capacity: null, or the share in (0, 1] of rows an `adaptive` cluster scores.
        num_sampled: negatives per step of `sampled` and `fixed`.
        alone: the ALONE embedding (`input_embedding: alone`).
        direction_loss: `sum` or `mean` of the two directions' losses (one stack: the same).
        num_layers: transformer layers per stack.
        hidden_dim: model width, a multiple of `num_heads`.
        num_heads: attention heads.
        intermediate_dim: feed-forward width.
        dropout_rate: dropout of the embeddings, attention and feed-forward outputs, in [0, 1).
        activation: feed-forward activation (`gelu`, `gelu_approximate` or `relu`).
        layer_norm_epsilon: epsilon of the layer norms, > 0.
        position_embedding: `learned` (`max_sequence_length` positions per stack) or `rotary`.
        bidirectional: a forward and a backward causal stack (ELMo's biLM); false: GPT-like.
        max_sequence_length: positions of a learned table; 0: `data.max_sequence_length`
            (larger lets an export embed longer sentences).
        num_anchors: > 0: CoRe's anchor attention, restricted to the past; 0: standard attention.
        anchor_selection: `random` or `strided` anchors.
    """

    num_layers: int = 6
    hidden_dim: int = 512
    num_heads: int = 8
    intermediate_dim: int = 2048
    dropout_rate: float = 0.1
    activation: str = "gelu"
    layer_norm_epsilon: float = 1e-6
    position_embedding: str = "learned"
    bidirectional: bool = True
    max_sequence_length: int = 0
    num_anchors: int = 0
    anchor_selection: str = "random"

    def validate(self, prefix):
        positive_keys(self, prefix, "num_layers", "hidden_dim", "num_heads", "intermediate_dim")
        ElmoModelConfig(  # validates the shared keys
            num_layers=self.num_layers, dropout_rate=self.dropout_rate,
            **{name: getattr(self, name) for name in ELMO_MODEL_KEYS}).validate(prefix)
        if self.hidden_dim % self.num_heads:
            raise ConfigError(f"`{join(prefix, 'hidden_dim')}` must be a multiple of num_heads")
        one_of(self.activation, ACTIVATIONS, join(prefix, "activation"))
        positive(self.layer_norm_epsilon, join(prefix, "layer_norm_epsilon"))
        one_of(self.position_embedding, POSITION_EMBEDDINGS, join(prefix, "position_embedding"))
        if self.position_embedding == "rotary" and (self.hidden_dim // self.num_heads) % 2:
            raise ConfigError(
                f"`{join(prefix, 'position_embedding')}: rotary` needs an even head size "
                f"(hidden_dim / num_heads), got {self.hidden_dim // self.num_heads}")
        positive_keys(self, prefix, "max_sequence_length", "num_anchors", allow_zero=True)
        one_of(self.anchor_selection, ANCHOR_SELECTIONS, join(prefix, "anchor_selection"))


@dataclasses.dataclass
class TransformerLMConfig:
    """A transformer LM experiment: `family: transformer_lm` in YAML.

    Args:
        family: `transformer_lm`.
        data: the `data` section (`DataConfig`, the ELMo family's).
        fasttext: the `fasttext` section (`FastTextConfig`): the fixed word vectors.
        model: the `model` section (`TransformerLMModelConfig`).
        train: the `train` section (`TrainConfig`).
        eval: the `eval` section (`EvalConfig`: held-out top-k accuracy).
    """

    family: str = "transformer_lm"
    data: DataConfig = dataclasses.field(
        default_factory=lambda: DataConfig(synthetic=SyntheticCorpusConfig()))
    fasttext: FastTextConfig = dataclasses.field(default_factory=FastTextConfig)
    model: TransformerLMModelConfig = dataclasses.field(default_factory=TransformerLMModelConfig)
    train: TrainConfig = dataclasses.field(default_factory=TrainConfig)
    eval: EvalConfig = dataclasses.field(default_factory=EvalConfig)

    def validate(self, prefix):
        one_of(self.family, ("transformer_lm",), join(prefix, "family"))
        check_rnmt_batch(self.train, self.data, prefix)
        check_subword_ends(self, prefix)
        length = self.model.max_sequence_length
        if length and length < self.data.max_sequence_length:
            raise ConfigError(
                f"`{join(prefix, 'model.max_sequence_length')}` ({length}) must be 0 (the "
                f"data's) or >= `{join(prefix, 'data.max_sequence_length')}` "
                f"({self.data.max_sequence_length}): the model must fit the training windows")
