"""Configuration of Masked ELMo (`family: masked_elmo`)."""

import dataclasses
from typing import List, Optional

from tfeff.config.alone import AloneConfig
from tfeff.config.base import ConfigError
from tfeff.config.base import fraction_or_none
from tfeff.config.base import join
from tfeff.config.base import one_of
from tfeff.config.base import positive
from tfeff.config.base import positive_keys
from tfeff.config.bert import validate_masked_lm_data
from tfeff.config.elmo import FastTextConfig
from tfeff.config.elmo import SyntheticCorpusConfig
from tfeff.config.elmo import validate_data_section
from tfeff.config.train import TrainConfig

OUTPUT_LAYERS = ("full", "adaptive", "continuous")
INPUT_EMBEDDINGS = ("trainable", "alone")
USE_CUDNN = ("auto", True, False)


@dataclasses.dataclass
class MaskedElmoDataConfig:
    """Paragraph corpus, WordPiece, TBPTT streams, masking (`tfeff.data.masked_elmo_dataset`).

    Args:
        train_files: glob(s) of the training text files (comma-separated), a sentence a line,
            documents (paragraphs) separated by blank lines.
        heldout_files: glob(s) of the held-out text files; empty: no held-out evaluation.
        synthetic: the generated demo corpus (with its own held-out file) instead of files.
        max_sequence_length: the window length in tokens, >= 4.
        batch_size: streams (rows) per step, the global batch.
        on_invalid_utf8: a line that is not UTF-8: `error` (naming it), `skip` or `replace`.
        wordpiece_vocabulary_size: approximate WordPiece vocabulary size, >= 10 (paper: 28,745).
        lower_case: lower-case and strip accents before WordPiece.
        max_predictions_per_seq: the most masked positions per sequence, in [1, the length].
        mask_rate: fraction of a sequence's non-special tokens masked, in (0, 1).
        mask_token_rate: fraction of the masked positions replaced by `[MASK]`.
        random_token_rate: fraction replaced by a random token (the rest kept); the two <= 1.
        max_words_in_memory: bound on the distinct words held while counting the corpus.
        reverse_half_streams: walk the odd streams' windows backwards (bidirectional TBPTT).
    """

    train_files: str = ""
    heldout_files: str = ""
    synthetic: Optional[SyntheticCorpusConfig] = None
    max_sequence_length: int = 128
    batch_size: int = 128
    on_invalid_utf8: str = "error"
    wordpiece_vocabulary_size: int = 28745
    lower_case: bool = False
    max_predictions_per_seq: int = 20
    mask_rate: float = 0.15
    mask_token_rate: float = 0.8
    random_token_rate: float = 0.1
    reverse_half_streams: bool = True
    max_words_in_memory: int = 10_000_000

    def validate(self, prefix):
        validate_data_section(self, prefix, min_length=4)
        validate_masked_lm_data(self, prefix)


@dataclasses.dataclass
class MaskedElmoModelConfig:
    """Sizes (paper: 2 layers, 4096 cells, 384 per direction) and training tricks.

    Args:
        num_layers: layers of the `MaskedBiLSTM`.
        units: LSTM cell size.
        projection_dim: projection size per direction.
        dropout_rate: dropout on the embeddings and each LSTM output, in [0, 1).
        output_layer: `full` (the softmax tied to the input embedding), `adaptive` or
            `continuous`; `softmax`, its earlier name, is read as `full`.
        output_loss: `cosine`, `l2` or `vmf` (`continuous` only).
        adaptive_cutoffs: increasing `adaptive` cluster boundaries (required), < vocabulary size.
        adaptive_div_value: projection divisor of `adaptive`.
        adaptive_tail_capacity: null, or the share in (0, 1] of rows an `adaptive` cluster scores.
        input_embedding: `trainable` or `alone`.
        alone: the ALONE embedding (`input_embedding: alone`).
        use_cudnn: the `MaskedBiLSTM` switch: `auto`, `true` or `false`.
        mask_accumulation: mask sets per batch, gradients averaged (paper: 4); x mask_rate <= 1.
        tbptt: carry LSTM states between batches (bidirectional with `data.reverse_half_streams`).
    """

    num_layers: int = 2
    units: int = 4096
    projection_dim: int = 384
    dropout_rate: float = 0.1
    output_layer: str = "full"
    output_loss: str = "cosine"
    adaptive_cutoffs: List[int] = dataclasses.field(default_factory=list)
    adaptive_div_value: float = 4.0
    adaptive_tail_capacity: Optional[float] = None
    input_embedding: str = "trainable"
    alone: AloneConfig = dataclasses.field(default_factory=AloneConfig)
    use_cudnn: object = "auto"
    mask_accumulation: int = 4
    tbptt: bool = True

    def validate(self, prefix):
        positive_keys(self, prefix, "num_layers", "units", "projection_dim", "mask_accumulation")
        if not 0 <= self.dropout_rate < 1:
            raise ConfigError(f"`{join(prefix, 'dropout_rate')}` must be in [0, 1)")
        if self.output_layer == "softmax":  # its earlier name, still in saved configs
            self.output_layer = "full"
        one_of(self.output_layer, OUTPUT_LAYERS, join(prefix, "output_layer"))
        one_of(self.output_loss, ("cosine", "l2", "vmf"), join(prefix, "output_loss"))
        one_of(self.input_embedding, INPUT_EMBEDDINGS, join(prefix, "input_embedding"))
        if self.use_cudnn not in USE_CUDNN or not isinstance(self.use_cudnn, (str, bool)):
            raise ConfigError(f"`{join(prefix, 'use_cudnn')}` must be auto, true or false")
        fraction_or_none(self.adaptive_tail_capacity, join(prefix, "adaptive_tail_capacity"))
        if self.output_layer == "adaptive":
            cutoffs = self.adaptive_cutoffs
            if not cutoffs or list(cutoffs) != sorted(set(cutoffs)) or cutoffs[0] <= 0:
                raise ConfigError(f"`{join(prefix, 'adaptive_cutoffs')}` must be increasing "
                                  "positive ids for output_layer: adaptive")


@dataclasses.dataclass
class MaskedElmoEvalConfig:
    """Held-out masked perplexity over `max_batches` batches, one seeded mask set per batch.

    Args:
        max_batches: held-out batches evaluated (streams in document order, LSTM states
            carried within a document with `model.tbptt`).
    """

    max_batches: int = 50

    def validate(self, prefix):
        positive(self.max_batches, join(prefix, "max_batches"))


@dataclasses.dataclass
class MaskedElmoConfig:
    """A Masked ELMo experiment: `family: masked_elmo` in YAML.

    Args:
        family: `masked_elmo`.
        data: the `data` section (`MaskedElmoDataConfig`; default: the synthetic corpus).
        model: the `model` section (`MaskedElmoModelConfig`).
        fasttext: the `fasttext` section (`tfeff.config.FastTextConfig`), for
            `model.output_layer: continuous` only: fastText trained on the WordPiece corpus.
        train: the `train` section (`tfeff.config.TrainConfig`).
        eval: the `eval` section (`MaskedElmoEvalConfig`).
    """

    family: str = "masked_elmo"
    data: MaskedElmoDataConfig = dataclasses.field(
        default_factory=lambda: MaskedElmoDataConfig(
            synthetic=SyntheticCorpusConfig(paragraph_sentences=8)))
    model: MaskedElmoModelConfig = dataclasses.field(default_factory=MaskedElmoModelConfig)
    fasttext: FastTextConfig = dataclasses.field(default_factory=FastTextConfig)
    train: TrainConfig = dataclasses.field(default_factory=TrainConfig)
    eval: MaskedElmoEvalConfig = dataclasses.field(default_factory=MaskedElmoEvalConfig)

    def validate(self, prefix):
        one_of(self.family, ("masked_elmo",), join(prefix, "family"))
        if self.model.mask_accumulation * self.data.mask_rate > 1:
            raise ConfigError(f"`{join(prefix, 'model.mask_accumulation')}` x `data.mask_rate` "
                              "must be <= 1: the mask sets of a batch are disjoint")
        if self.model.output_layer == "adaptive" and \
                self.model.adaptive_cutoffs[-1] >= self.data.wordpiece_vocabulary_size:
            raise ConfigError(f"`{join(prefix, 'model.adaptive_cutoffs')}` must be below "
                              "data.wordpiece_vocabulary_size")
