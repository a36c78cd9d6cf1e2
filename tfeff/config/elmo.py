"""Configuration of the ELMo family (ELMo-C and, later, its output-layer baselines)."""

import dataclasses
from typing import List, Optional

from tfeff.config.base import ConfigError
from tfeff.config.base import join
from tfeff.config.base import one_of
from tfeff.config.base import positive


@dataclasses.dataclass
class SyntheticCorpusConfig:
    """The generated demo corpus (`tfeff.data.synthetic_corpus`)."""

    num_train_sentences: int = 40000
    num_heldout_sentences: int = 2000
    seed: int = 0
    lexicon_size: int = 3000

    def validate(self, prefix):
        positive(self.num_train_sentences, join(prefix, "num_train_sentences"))
        positive(self.num_heldout_sentences, join(prefix, "num_heldout_sentences"))
        if self.lexicon_size < 20:
            raise ConfigError(f"`{join(prefix, 'lexicon_size')}` must be >= 20")


@dataclasses.dataclass
class DataConfig:
    """Corpus and batching. Either `train_files` or `synthetic` must be set."""

    train_files: str = ""
    heldout_files: str = ""
    synthetic: Optional[SyntheticCorpusConfig] = None
    max_sequence_length: int = 20
    batch_size: int = 128
    shuffle_buffer: int = 10000
    min_count: int = 1
    max_words_in_memory: int = 10_000_000
    on_invalid_utf8: str = "error"

    def validate(self, prefix):
        if not self.train_files and self.synthetic is None:
            raise ConfigError(
                f"Set `{join(prefix, 'train_files')}` (a glob of text files) or "
                f"`{join(prefix, 'synthetic')}` (the generated demo corpus)."
            )
        if self.train_files and self.synthetic is not None:
            raise ConfigError(
                f"Set only one of `{join(prefix, 'train_files')}` and "
                f"`{join(prefix, 'synthetic')}`."
            )
        if self.max_sequence_length < 2:
            raise ConfigError(f"`{join(prefix, 'max_sequence_length')}` must be >= 2")
        positive(self.batch_size, join(prefix, "batch_size"))
        positive(self.shuffle_buffer, join(prefix, "shuffle_buffer"), allow_zero=True)
        positive(self.min_count, join(prefix, "min_count"))
        positive(self.max_words_in_memory, join(prefix, "max_words_in_memory"))
        one_of(self.on_invalid_utf8, ("error", "skip", "replace"), join(prefix, "on_invalid_utf8"))


@dataclasses.dataclass
class FastTextConfig:
    """Word vectors: train skipgram with subwords, or load `pretrained` (.bin/.vec).

    `center` subtracts the mean word vector from the fixed table (and, in
    exported models, from every computed vector).
    """

    pretrained: str = ""
    center: bool = True
    dim: int = 300
    minn: int = 3
    maxn: int = 6
    bucket: int = 2000000
    epoch: int = 5
    lr: float = 0.05
    min_count: int = 1
    threads: int = 1

    def validate(self, prefix):
        for name in ("dim", "epoch", "lr", "min_count", "threads"):
            positive(getattr(self, name), join(prefix, name))
        positive(self.minn, join(prefix, "minn"), allow_zero=True)
        positive(self.maxn, join(prefix, "maxn"), allow_zero=True)
        positive(self.bucket, join(prefix, "bucket"), allow_zero=True)
        if self.maxn and self.maxn < self.minn:
            raise ConfigError(f"`{join(prefix, 'maxn')}` must be >= minn or 0")


@dataclasses.dataclass
class ElmoModelConfig:
    """Sizes of the biLM (paper: 2 layers, 4096 cells, 512 projection)."""

    num_layers: int = 2
    units: int = 4096
    projection_dim: int = 512
    dropout_rate: float = 0.1
    output_layer: str = "continuous"
    output_loss: str = "cosine"
    vmf_regularization1: float = 0.0
    vmf_regularization2: float = 1.0

    def validate(self, prefix):
        for name in ("num_layers", "units", "projection_dim"):
            positive(getattr(self, name), join(prefix, name))
        if not 0 <= self.dropout_rate < 1:
            raise ConfigError(f"`{join(prefix, 'dropout_rate')}` must be in [0, 1)")
        one_of(self.output_layer, ("continuous",), join(prefix, "output_layer"))
        one_of(self.output_loss, ("cosine", "l2", "vmf"), join(prefix, "output_loss"))
        positive(self.vmf_regularization1, join(prefix, "vmf_regularization1"), allow_zero=True)
        if not 0 < self.vmf_regularization2 <= 1:
            raise ConfigError(f"`{join(prefix, 'vmf_regularization2')}` must be in (0, 1]")


@dataclasses.dataclass
class TrainConfig:
    """Optimization. The peak learning rate is `learning_rate * batch_size / base_batch_size`."""

    steps: int = 10000
    learning_rate: float = 1e-3
    base_batch_size: int = 128
    warmup_steps: int = 200
    decay: str = "cosine"
    final_learning_rate_fraction: float = 0.1
    clipnorm: float = 1.0
    checkpoint_every: int = 500
    keep_checkpoints: int = 3
    log_every: int = 50
    validation_steps: int = 20
    steps_per_execution: int = 1
    seed: int = 0

    def validate(self, prefix):
        for name in ("steps", "learning_rate", "base_batch_size", "checkpoint_every",
                     "keep_checkpoints", "log_every", "steps_per_execution"):
            positive(getattr(self, name), join(prefix, name))
        positive(self.warmup_steps, join(prefix, "warmup_steps"), allow_zero=True)
        positive(self.validation_steps, join(prefix, "validation_steps"), allow_zero=True)
        positive(self.clipnorm, join(prefix, "clipnorm"), allow_zero=True)
        one_of(self.decay, ("cosine", "linear", "constant"), join(prefix, "decay"))
        if not 0 <= self.final_learning_rate_fraction <= 1:
            raise ConfigError(f"`{join(prefix, 'final_learning_rate_fraction')}` must be in [0, 1]")


@dataclasses.dataclass
class EvalConfig:
    """Held-out top-k accuracy of the continuous output."""

    top_k: List[int] = dataclasses.field(default_factory=lambda: [1, 10])
    max_targets: int = 20000
    chunk_size: int = 8192

    def validate(self, prefix):
        if not self.top_k:
            raise ConfigError(f"`{join(prefix, 'top_k')}` must list at least one k")
        for i, k in enumerate(self.top_k):
            positive(k, f"{join(prefix, 'top_k')}[{i}]")
        positive(self.max_targets, join(prefix, "max_targets"))
        positive(self.chunk_size, join(prefix, "chunk_size"))


@dataclasses.dataclass
class ElmoConfig:
    """An ELMo-family experiment: `family: elmo` in YAML."""

    family: str = "elmo"
    data: DataConfig = dataclasses.field(default_factory=lambda: DataConfig(synthetic=SyntheticCorpusConfig()))
    fasttext: FastTextConfig = dataclasses.field(default_factory=FastTextConfig)
    model: ElmoModelConfig = dataclasses.field(default_factory=ElmoModelConfig)
    train: TrainConfig = dataclasses.field(default_factory=TrainConfig)
    eval: EvalConfig = dataclasses.field(default_factory=EvalConfig)

    def validate(self, prefix):
        one_of(self.family, ("elmo",), join(prefix, "family"))
