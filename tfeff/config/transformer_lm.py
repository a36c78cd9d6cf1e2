"""Configuration of the transformer LM family (`family: transformer_lm`).

The transformer encoders of Li et al.'s Table 5 with ELMo's ends: the data,
fastText, train and eval sections are the ELMo family's own dataclasses;
the model section has the transformer's sizes plus ELMo's output-layer and
input-embedding keys (the same names, types, defaults and rules as
`ElmoModelConfig`'s, which validates them).
"""

import dataclasses

from tfeff.config.base import ConfigError
from tfeff.config.base import join
from tfeff.config.base import one_of
from tfeff.config.base import positive
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

# The keys of `ElmoModelConfig` that a transformer LM takes unchanged: its output layer
# and input embedding. (`num_layers` and `dropout_rate` have the same names and rules
# too, but the transformer's defaults.)
ELMO_MODEL_KEYS = (
    "output_layer", "output_loss", "vmf_regularization1", "vmf_regularization2",
    "input_embedding", "embedding_dim", "tie_output", "adaptive_cutoffs",
    "adaptive_div_value", "adaptive_tail_capacity", "num_sampled", "alone", "direction_loss",
)


def _fields_of(cls, names):
    """`make_dataclass` field specs of `cls`'s fields `names`: same types and defaults."""
    by_name = {f.name: f for f in dataclasses.fields(cls)}
    specs = []
    for name in names:
        f = by_name[name]
        if f.default_factory is not dataclasses.MISSING:
            spec = dataclasses.field(default_factory=f.default_factory)
        else:
            spec = dataclasses.field(default=f.default)
        specs.append((name, f.type, spec))
    return specs


# ELMo's ends as a base class: the keys are ElmoModelConfig's own fields, not copies.
ElmoEndsConfig = dataclasses.make_dataclass(
    "ElmoEndsConfig", _fields_of(ElmoModelConfig, ELMO_MODEL_KEYS),
    namespace={"__doc__": "`ElmoModelConfig`'s output-layer and input-embedding keys.",
               "__module__": __name__})


@dataclasses.dataclass
class TransformerLMModelConfig(ElmoEndsConfig):
    """Transformer sizes (defaults: Transformer-Base, Li et al.'s "TRANS BASE") and
    ELMo's ends.

    The transformer: `num_layers` per stack, `hidden_dim` (a multiple of
    `num_heads`), `intermediate_dim`, `dropout_rate`, `activation`,
    `layer_norm_epsilon`; `position_embedding` `learned` (a table of
    `max_sequence_length` positions per stack) or `rotary`;
    `bidirectional` (a forward and a backward causal stack, ELMo's biLM) or
    a forward stack only (GPT-like); `max_sequence_length` 0 means
    `data.max_sequence_length` (larger lets an export embed longer
    sentences). `num_anchors` > 0 replaces attention by CoRe's anchor
    attention restricted to the past (`anchor_selection` `random` or
    `strided`); 0 is standard attention.

    ELMo's ends, as in `ElmoModelConfig`: `output_layer` (`continuous`,
    `full`, `adaptive`, `sampled`, `fixed`) with `output_loss`,
    `vmf_regularization1/2`, `adaptive_cutoffs`, `adaptive_div_value`,
    `num_sampled`; `input_embedding` (`fixed`, `trainable`, `alone`) with
    `embedding_dim` (0: the fixed table's size, else `hidden_dim`), `alone`
    and `tie_output`.

    Args:
        output_layer: `continuous`, `full`, `adaptive`, `sampled` or `fixed`.
        output_loss: `cosine`, `l2` or `vmf` (`continuous` only).
        vmf_regularization1: lambda_1 of the `vmf` loss, >= 0.
        vmf_regularization2: lambda_2 of the `vmf` loss, in (0, 1].
        input_embedding: `fixed`, `trainable` or `alone`.
        embedding_dim: size of a trainable or ALONE input embedding; 0: the
            fixed table's size if there is one, else `hidden_dim`.
        tie_output: use the trainable or ALONE input embedding as the `full`
            softmax's output matrix.
        adaptive_cutoffs: increasing cluster boundaries of `adaptive`
            (required there).
        adaptive_div_value: projection divisor of `adaptive`.
        adaptive_tail_capacity: null, or the share in (0, 1] of the rows each
            cluster of `adaptive` computes on JAX and under `torch.compile`;
            null: every row.
        num_sampled: negatives per step of `sampled` and `fixed`.
        alone: the ALONE embedding (`input_embedding: alone`).
        direction_loss: `sum` or `mean` of the forward and backward losses
            (one stack: the same).
        num_layers: transformer layers per stack.
        hidden_dim: model width, a multiple of `num_heads`.
        num_heads: attention heads.
        intermediate_dim: feed-forward width.
        dropout_rate: dropout rate of the embeddings, attention and
            feed-forward outputs, in [0, 1).
        activation: feed-forward activation (`gelu`, `gelu_approximate` or
            `relu`).
        layer_norm_epsilon: epsilon of the layer norms, > 0.
        position_embedding: `learned` (a table of `max_sequence_length`
            positions per stack) or `rotary`.
        bidirectional: a forward and a backward causal stack (ELMo's biLM);
            false: a forward stack only (GPT-like).
        max_sequence_length: positions of a learned table; 0:
            `data.max_sequence_length` (larger lets an export embed longer
            sentences).
        num_anchors: > 0 replaces attention by CoRe's anchor attention
            restricted to the past; 0: standard attention.
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

    def elmo_model_config(self):
        """The `ElmoModelConfig` of the shared keys (what validates them)."""
        return ElmoModelConfig(
            num_layers=self.num_layers, dropout_rate=self.dropout_rate,
            **{name: getattr(self, name) for name in ELMO_MODEL_KEYS})

    def validate(self, prefix):
        for name in ("num_layers", "hidden_dim", "num_heads", "intermediate_dim"):
            positive(getattr(self, name), join(prefix, name))
        self.elmo_model_config().validate(prefix)
        if self.hidden_dim % self.num_heads:
            raise ConfigError(f"`{join(prefix, 'hidden_dim')}` must be a multiple of num_heads")
        one_of(self.activation, ACTIVATIONS, join(prefix, "activation"))
        positive(self.layer_norm_epsilon, join(prefix, "layer_norm_epsilon"))
        one_of(self.position_embedding, POSITION_EMBEDDINGS, join(prefix, "position_embedding"))
        if self.position_embedding == "rotary" and (self.hidden_dim // self.num_heads) % 2:
            raise ConfigError(
                f"`{join(prefix, 'position_embedding')}: rotary` needs an even head size "
                f"(hidden_dim / num_heads), got {self.hidden_dim // self.num_heads}")
        positive(self.max_sequence_length, join(prefix, "max_sequence_length"), allow_zero=True)
        positive(self.num_anchors, join(prefix, "num_anchors"), allow_zero=True)
        one_of(self.anchor_selection, ANCHOR_SELECTIONS, join(prefix, "anchor_selection"))


@dataclasses.dataclass
class TransformerLMConfig:
    """A transformer LM experiment: `family: transformer_lm` in YAML.

    The data, fastText, train and eval sections are the ELMo family's
    (`DataConfig`, `FastTextConfig`, `TrainConfig`, `EvalConfig`): the same
    corpus pipeline, vectors, optimizer and held-out top-k evaluation.

    Args:
        family: `transformer_lm`.
        data: corpus, tokenization and batching.
        fasttext: the fixed word vectors (trained or `pretrained`).
        model: transformer sizes and ELMo's ends.
        train: optimization, checkpoints and logging.
        eval: held-out evaluation.
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
        model_prefix, data_prefix = join(prefix, "model"), join(prefix, "data")
        check_subword_ends(self, prefix)
        length = self.model.max_sequence_length
        if length and length < self.data.max_sequence_length:
            raise ConfigError(
                f"`{join(model_prefix, 'max_sequence_length')}` ({length}) must be 0 (the "
                f"data's) or >= `{join(data_prefix, 'max_sequence_length')}` "
                f"({self.data.max_sequence_length}): the model must fit the training windows")
