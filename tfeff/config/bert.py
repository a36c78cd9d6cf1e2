"""Configuration of the BERT family: BERT, and CoRe's two phases (relaxed, then standard)."""

import dataclasses
from typing import Optional

from tfeff.config.alone import AloneConfig
from tfeff.config.base import ConfigError
from tfeff.config.base import join
from tfeff.config.base import one_of
from tfeff.config.base import positive
from tfeff.config.base import positive_keys
from tfeff.config.elmo import SyntheticCorpusConfig
from tfeff.config.elmo import validate_data_section
from tfeff.config.train import TrainConfig

ACTIVATIONS = ("gelu", "gelu_approximate", "relu")
ANCHOR_SELECTIONS = ("random", "strided")
INPUT_EMBEDDINGS = ("trainable", "alone")
POSITION_EMBEDDINGS = ("learned", "rotary")


def validate_masked_lm_data(data, prefix):
    """Checks the WordPiece and masking keys shared by the masked-LM families' data sections."""
    if data.wordpiece_vocabulary_size < 10:
        raise ConfigError(f"`{join(prefix, 'wordpiece_vocabulary_size')}` must be >= 10")
    if not 0 < data.max_predictions_per_seq <= data.max_sequence_length:
        raise ConfigError(
            f"`{join(prefix, 'max_predictions_per_seq')}` must be in [1, max_sequence_length]")
    if not 0 < data.mask_rate < 1:
        raise ConfigError(f"`{join(prefix, 'mask_rate')}` must be in (0, 1)")
    for name in ("mask_token_rate", "random_token_rate"):
        if not 0 <= getattr(data, name) <= 1:
            raise ConfigError(f"`{join(prefix, name)}` must be in [0, 1]")
    if data.mask_token_rate + data.random_token_rate > 1:
        raise ConfigError(
            f"`{join(prefix, 'mask_token_rate')}` + `random_token_rate` must be <= 1")
    positive(data.max_words_in_memory, join(prefix, "max_words_in_memory"))


@dataclasses.dataclass
class BertDataConfig:
    """Corpus, learned WordPiece vocabulary, packing and masking (`tfeff.data.mlm_dataset`).

    Args:
        train_files: glob(s) of the training text files (comma-separated), a sentence a line.
        heldout_files: glob(s) of the held-out text files; empty: no held-out evaluation.
        synthetic: the generated demo corpus (with its own held-out file) instead of files.
        max_sequence_length: n, the sequence length with `[CLS]` and `[SEP]`, >= 8.
        batch_size: sequences per step, the global batch.
        shuffle_buffer: windows held for shuffling; 0 disables shuffling.
        on_invalid_utf8: a line that is not UTF-8: `error` (naming it), `skip` or `replace`.
        wordpiece_vocabulary_size: approximate WordPiece vocabulary size (with specials), >= 10.
        lower_case: lower-case and strip accents before WordPiece (uncased BERT).
        max_predictions_per_seq: the most masked positions per sequence, in [1, n].
        mask_rate: fraction of a sequence's non-special tokens masked, in (0, 1).
        mask_token_rate: fraction of the masked positions replaced by `[MASK]`.
        random_token_rate: fraction replaced by a random token (the rest kept); the two <= 1.
        max_words_in_memory: bound on the distinct words held while counting the corpus.
    """

    train_files: str = ""
    heldout_files: str = ""
    synthetic: Optional[SyntheticCorpusConfig] = None
    max_sequence_length: int = 128
    batch_size: int = 256
    shuffle_buffer: int = 10000
    on_invalid_utf8: str = "error"
    wordpiece_vocabulary_size: int = 30000
    lower_case: bool = False
    max_predictions_per_seq: int = 20
    mask_rate: float = 0.15
    mask_token_rate: float = 0.8
    random_token_rate: float = 0.1
    max_words_in_memory: int = 10_000_000

    def validate(self, prefix):
        validate_data_section(self, prefix, min_length=8)
        positive(self.shuffle_buffer, join(prefix, "shuffle_buffer"), allow_zero=True)
        validate_masked_lm_data(self, prefix)


@dataclasses.dataclass
class RelaxedConfig:
    """CoRe's relaxed model (`tfeff.models.BertBackbone(relaxed=...)`). 0 keeps that part standard.

    Args:
        num_anchors: anchor queries of the anchor attention (paper: 32); 0: standard attention.
        ffn_rank: rank of the factorized feed-forward kernels (paper: 64); 0: standard ones.
        anchor_selection: `random` or `strided`.
    """

    num_anchors: int = 32
    ffn_rank: int = 64
    anchor_selection: str = "random"

    def validate(self, prefix):
        positive_keys(self, prefix, "num_anchors", "ffn_rank", allow_zero=True)
        if not (self.num_anchors or self.ffn_rank):
            raise ConfigError(f"`{prefix}` needs num_anchors or ffn_rank > 0")
        one_of(self.anchor_selection, ANCHOR_SELECTIONS, join(prefix, "anchor_selection"))


@dataclasses.dataclass
class BertModelConfig:
    """BERT sizes (defaults: BERT-Base) and CoRe's `relaxed` layers.

    Args:
        num_layers: transformer layers.
        hidden_dim: model width, a multiple of `num_heads`.
        num_heads: attention heads.
        intermediate_dim: feed-forward width.
        dropout_rate: dropout rate, in [0, 1).
        activation: `gelu`, `gelu_approximate` or `relu`.
        layer_norm_epsilon: layer norm epsilon, > 0.
        use_nsp: add the next-sentence-prediction task.
        relaxed: CoRe's relaxed layers (`RelaxedConfig`) of the model trained first, converted
            to a standard BERT at `core.coarse_steps` (or by the plateau rule); null: standard.
        input_embedding: `trainable` or `alone`.
        position_embedding: `learned` (BERT's table, the layout of converted checkpoints) or
            `rotary` (learns far faster at small sizes; the BERT converters refuse it).
        alone: the ALONE embedding (`input_embedding: alone`).
    """

    num_layers: int = 12
    hidden_dim: int = 768
    num_heads: int = 12
    intermediate_dim: int = 3072
    dropout_rate: float = 0.1
    activation: str = "gelu"
    layer_norm_epsilon: float = 1e-12
    use_nsp: bool = False
    relaxed: Optional[RelaxedConfig] = None
    input_embedding: str = "trainable"
    position_embedding: str = "learned"
    alone: AloneConfig = dataclasses.field(default_factory=AloneConfig)

    def validate(self, prefix):
        positive_keys(self, prefix, "num_layers", "hidden_dim", "num_heads", "intermediate_dim")
        if self.hidden_dim % self.num_heads:
            raise ConfigError(f"`{join(prefix, 'hidden_dim')}` must be a multiple of num_heads")
        if not 0 <= self.dropout_rate < 1:
            raise ConfigError(f"`{join(prefix, 'dropout_rate')}` must be in [0, 1)")
        one_of(self.activation, ACTIVATIONS, join(prefix, "activation"))
        positive(self.layer_norm_epsilon, join(prefix, "layer_norm_epsilon"))
        one_of(self.input_embedding, INPUT_EMBEDDINGS, join(prefix, "input_embedding"))
        one_of(self.position_embedding, POSITION_EMBEDDINGS, join(prefix, "position_embedding"))


@dataclasses.dataclass
class CoreConfig:
    """CoRe's two phases: relaxed (coarse) for `coarse_steps`, then standard (refined).

    Args:
        coarse_steps: the step the relaxed phase ends at, below `train.steps`; 0: no switch.
        plateau_patience: windows in a row improving on the best earlier window's mean loss by
            less than `plateau_threshold` that end the relaxed phase (paper Section 5.5); 0: off.
        plateau_window: steps per window of the plateau rule.
        plateau_threshold: the relative improvement a window must make.
    """

    coarse_steps: int = 0
    plateau_patience: int = 0
    plateau_window: int = 100
    plateau_threshold: float = 0.01

    def validate(self, prefix):
        positive_keys(self, prefix, "coarse_steps", "plateau_patience", allow_zero=True)
        positive(self.plateau_window, join(prefix, "plateau_window"))
        positive(self.plateau_threshold, join(prefix, "plateau_threshold"), allow_zero=True)

    @property
    def enabled(self):
        return self.coarse_steps > 0


@dataclasses.dataclass
class BertEvalConfig:
    """Held-out masked-LM loss, perplexity and accuracy, and the unigram perplexity.

    Args:
        max_batches: held-out batches evaluated after training; 0: all of them.
        unigram_max_tokens: training tokens counted (add-one smoothed) for the unigram baseline.
    """

    max_batches: int = 0
    unigram_max_tokens: int = 10_000_000

    def validate(self, prefix):
        positive(self.max_batches, join(prefix, "max_batches"), allow_zero=True)
        positive(self.unigram_max_tokens, join(prefix, "unigram_max_tokens"))


@dataclasses.dataclass
class BertConfig:
    """A BERT-family experiment: `family: bert` in YAML.

    Args:
        family: `bert`.
        data: the `data` section (`BertDataConfig`; default: the synthetic corpus).
        model: the `model` section (`BertModelConfig`).
        core: the `core` section (`CoreConfig`): CoRe's two phases.
        train: the `train` section (`tfeff.config.TrainConfig`).
        eval: the `eval` section (`BertEvalConfig`).
    """

    family: str = "bert"
    data: BertDataConfig = dataclasses.field(
        default_factory=lambda: BertDataConfig(synthetic=SyntheticCorpusConfig()))
    model: BertModelConfig = dataclasses.field(default_factory=BertModelConfig)
    core: CoreConfig = dataclasses.field(default_factory=CoreConfig)
    train: TrainConfig = dataclasses.field(default_factory=TrainConfig)
    eval: BertEvalConfig = dataclasses.field(default_factory=BertEvalConfig)

    def validate(self, prefix):
        one_of(self.family, ("bert",), join(prefix, "family"))
        if self.train.epochs:
            raise ConfigError(
                f"`{join(prefix, 'train.epochs')}` is counted by the elmo, transformer_lm and "
                "masked_elmo families; this family trains `train.steps`")
        if self.core.enabled:
            if self.model.relaxed is None:
                raise ConfigError(
                    "`core.coarse_steps` > 0 needs `model.relaxed` (the coarse model's settings)")
            if self.core.coarse_steps >= self.train.steps:
                raise ConfigError(
                    f"`core.coarse_steps` ({self.core.coarse_steps}) must be smaller than "
                    f"`train.steps` ({self.train.steps}): the refined phase needs steps")
        elif self.core.plateau_patience:
            raise ConfigError("`core.plateau_patience` needs `core.coarse_steps` > 0")

    @property
    def two_phase(self):
        return self.core.enabled
