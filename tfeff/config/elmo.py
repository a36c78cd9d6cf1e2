"""Configuration of the ELMo family (ELMo-C and, later, its output-layer baselines)."""

import dataclasses
from typing import List, Optional

from tfeff.config.alone import AloneConfig
from tfeff.config.base import ConfigError
from tfeff.config.base import fraction_or_none
from tfeff.config.base import join
from tfeff.config.base import one_of
from tfeff.config.base import positive
from tfeff.config.base import positive_keys
from tfeff.config.base import shown
from tfeff.config.train import TrainConfig
from tfeff.config.train import check_rnmt_batch

# The next-word language models' output layers (and `tfeff.models.LanguageModel`'s).
OUTPUT_LAYERS = ("continuous", "full", "adaptive", "sampled", "fixed")
# Those that score the vocabulary's fixed vectors (word models only), and the others.
TABLE_OUTPUTS = ("continuous", "fixed")
SUBWORD_OUTPUTS = tuple(o for o in OUTPUT_LAYERS if o not in TABLE_OUTPUTS)
SUBWORD_OUTPUTS_TEXT = ", ".join(SUBWORD_OUTPUTS[:-1]) + " or " + SUBWORD_OUTPUTS[-1]
TOKENIZATIONS = ("word", "wordpiece")
INPUT_EMBEDDINGS = ("fixed", "trainable", "alone")
# How a bidirectional language model's loss combines its directions' mean losses.
DIRECTION_LOSSES = ("sum", "mean")


def check_subword_ends(config, prefix):
    """Refuses a model that needs fixed vectors on WordPiece data (`data.tokenization`)."""
    if config.data.tokenization != "wordpiece":
        return
    tokenization = f"`{join(join(prefix, 'data'), 'tokenization')}: wordpiece`"
    model = join(prefix, "model")
    if config.model.input_embedding == "fixed":
        raise ConfigError(f"{tokenization} needs `{join(model, 'input_embedding')}: trainable` "
                          "or `alone` (there are no fixed vectors of subwords)")
    if config.model.output_layer in TABLE_OUTPUTS:
        raise ConfigError(f"{tokenization} needs `{join(model, 'output_layer')}` "
                          f"{SUBWORD_OUTPUTS_TEXT}, got {config.model.output_layer!r}")


def output_problem(output_layer, input_embedding, tie_output, adaptive_cutoffs,
                   has_fixed_vectors=True, key=str):
    """Why a language model's output settings cannot go together, or None.

    The configs and the models' constructors both ask it; `key` spells an argument's name.
    """
    if output_layer == "adaptive" and not adaptive_cutoffs:
        return (f"`{key('adaptive_cutoffs')}` must list the cluster boundaries (e.g. "
                "[20000, 100000]) when output_layer is adaptive")
    if tie_output and (input_embedding not in ("trainable", "alone") or output_layer != "full"):
        return (f"`{key('tie_output')}` needs input_embedding: trainable or alone, and "
                f"output_layer: full (received {input_embedding!r} and {output_layer!r})")
    if output_layer in TABLE_OUTPUTS and not has_fixed_vectors:
        return (f"output_layer {output_layer!r} scores fixed vectors: the backbone needs an "
                "`embedding_table`")
    return None


@dataclasses.dataclass
class SyntheticCorpusConfig:
    """The generated demo corpus (`tfeff.data.synthetic_corpus`).

    Args:
        num_train_sentences: sentences of the training file, > 0.
        num_heldout_sentences: sentences of the held-out file, > 0.
        seed: the language and its sentences are a function of this seed.
        lexicon_size: number of content words, 20 to 1,000,000.
        paragraph_sentences: mean sentences per paragraph (document); 0: no paragraph breaks.
    """

    num_train_sentences: int = 40000
    num_heldout_sentences: int = 2000
    seed: int = 0
    lexicon_size: int = 3000
    paragraph_sentences: int = 0

    def validate(self, prefix):
        positive_keys(self, prefix, "paragraph_sentences", "seed", allow_zero=True)
        positive_keys(self, prefix, "num_train_sentences", "num_heldout_sentences")
        if not 20 <= self.lexicon_size <= 1_000_000:
            raise ConfigError(f"`{join(prefix, 'lexicon_size')}` must be between 20 and "
                              "1,000,000 (the generator makes every word before the first "
                              f"sentence). Received: {self.lexicon_size:,}")


def validate_data_section(data_config, prefix, min_length):
    """Checks the keys of every family's data section (one of `train_files` and `synthetic`)."""
    if not data_config.train_files and data_config.synthetic is None:
        raise ConfigError(f"Set `{join(prefix, 'train_files')}` (a glob of text files) or "
                          f"`{join(prefix, 'synthetic')}` (the generated demo corpus).")
    if data_config.train_files and data_config.synthetic is not None:
        raise ConfigError(f"Set only one of `{join(prefix, 'train_files')}` and "
                          f"`{join(prefix, 'synthetic')}`.")
    if data_config.max_sequence_length < min_length:
        raise ConfigError(f"`{join(prefix, 'max_sequence_length')}` must be >= {min_length}")
    positive(data_config.batch_size, join(prefix, "batch_size"))
    one_of(data_config.on_invalid_utf8, ("error", "skip", "replace"),
           join(prefix, "on_invalid_utf8"))


@dataclasses.dataclass
class DataConfig:
    """Corpus, tokenization and batching. Either `train_files` or `synthetic` must be set.

    Args:
        train_files: glob(s) of the training text files (comma-separated), a sentence a line.
        heldout_files: glob(s) of the held-out text files; empty: no held-out evaluation.
        synthetic: the generated demo corpus (with its own held-out file) instead of files.
        max_sequence_length: the longest window in tokens, boundaries included, >= 2; a longer
            sentence is cut into several windows.
        batch_size: windows per step, the global batch (split across replicas).
        shuffle_buffer: windows held for shuffling; 0 disables shuffling.
        min_count: words seen fewer times are left out of the vocabulary (`<unk>`).
        max_words_in_memory: bound on the distinct words held while counting (rarest pruned).
        on_invalid_utf8: a line that is not UTF-8: `error` (naming it), `skip` or `replace`.
        tokenization: `word`, or `wordpiece` (a vocabulary learned from the corpus).
        wordpiece_vocabulary_size: approximate WordPiece vocabulary size, >= 10.
    """

    train_files: str = ""
    heldout_files: str = ""
    synthetic: Optional[SyntheticCorpusConfig] = None
    max_sequence_length: int = 20
    batch_size: int = 128
    shuffle_buffer: int = 10000
    min_count: int = 1
    max_words_in_memory: int = 10_000_000
    on_invalid_utf8: str = "error"
    tokenization: str = "word"
    wordpiece_vocabulary_size: int = 8000

    def validate(self, prefix):
        validate_data_section(self, prefix, min_length=2)
        positive(self.shuffle_buffer, join(prefix, "shuffle_buffer"), allow_zero=True)
        positive_keys(self, prefix, "min_count", "max_words_in_memory")
        one_of(self.tokenization, TOKENIZATIONS, join(prefix, "tokenization"))
        if self.wordpiece_vocabulary_size < 10:
            raise ConfigError(f"`{join(prefix, 'wordpiece_vocabulary_size')}` must be >= 10")


@dataclasses.dataclass
class FastTextConfig:
    """Word vectors: train skipgram with subwords, or load `pretrained` (.bin/.vec).

    Args:
        pretrained: a fastText `.bin` model or `.vec` file; empty: train one on the corpus.
        center: subtract the mean word vector from the fixed table (and exports' vectors).
        dim: vector size (fastText's `-dim`); a `pretrained` file must have it.
        minn: shortest character n-gram (`-minn`), 0 for none.
        maxn: longest character n-gram (`-maxn`), >= `minn` or 0.
        bucket: number of n-gram hash buckets (`-bucket`).
        epoch: training epochs (`-epoch`).
        lr: learning rate (`-lr`).
        min_count: minimal number of occurrences of a word (`-minCount`).
        threads: training threads (`-thread`); 1 is deterministic.
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
        positive_keys(self, prefix, "dim", "epoch", "lr", "min_count", "threads")
        positive_keys(self, prefix, "minn", "maxn", "bucket", allow_zero=True)
        if self.maxn and self.maxn < self.minn:
            raise ConfigError(f"`{join(prefix, 'maxn')}` must be >= minn or 0")


@dataclasses.dataclass
class ElmoModelConfig:
    """Sizes of the biLM (paper: 2 layers, 4096 cells, 512 projection) and its ends.

    Args:
        num_layers: LSTM layers per direction.
        units: LSTM cell size.
        projection_dim: LSTM (and token) projection size; 0: none (Li et al.'s Table 5 LSTMs).
        dropout_rate: dropout after each LSTM layer, in [0, 1).
        layer_norm: layer norm after each LSTM layer (Li et al.'s addition; ELMo has none).
        output_layer: `continuous` (ELMo-C), `full`, `adaptive` (ELMo-A), `sampled`
            (log-uniform negatives) or `fixed` (sampled softmax on the frozen fastText table).
        output_loss: `cosine`, `l2` or `vmf` (`continuous` only).
        vmf_regularization1: lambda_1 of the `vmf` loss, >= 0.
        vmf_regularization2: lambda_2 of the `vmf` loss, in (0, 1].
        input_embedding: `fixed` (fastText vectors), `trainable` or `alone` (ALONE's codebooks).
        embedding_dim: size of a trainable or ALONE input embedding; 0: `projection_dim`.
        tie_output: use the trainable or ALONE input embedding as the `full` softmax's matrix.
        adaptive_cutoffs: increasing cluster boundaries of `adaptive` (required there).
        adaptive_div_value: projection divisor of `adaptive`.
        adaptive_tail_capacity: null (all), or the share in (0, 1] of rows each `adaptive` cluster
            computes on JAX and `torch.compile` (above the largest share of targets it takes).
        num_sampled: negatives per step of `sampled` and `fixed`.
        alone: the ALONE embedding (`input_embedding: alone`).
        cell_clip: clip each LSTM's cell state to [-cell_clip, cell_clip] (ELMo: 3); 0: none.
        proj_clip: clip each LSTM's projected state to [-proj_clip, proj_clip] (ELMo: 3); 0: none.
        direction_loss: `sum` or `mean` (ELMo's bilm-tf) of the two directions' losses; with
            `train.clipnorm`, the mean meets the bound at twice the gradient norm of the sum.
    """

    num_layers: int = 2
    units: int = 4096
    projection_dim: int = 512
    dropout_rate: float = 0.1
    layer_norm: bool = True
    output_layer: str = "continuous"
    output_loss: str = "cosine"
    vmf_regularization1: float = 0.0
    vmf_regularization2: float = 1.0
    input_embedding: str = "fixed"
    embedding_dim: int = 0
    tie_output: bool = False
    adaptive_cutoffs: List[int] = dataclasses.field(default_factory=list)
    adaptive_div_value: float = 4.0
    adaptive_tail_capacity: Optional[float] = None
    num_sampled: int = 8192
    alone: AloneConfig = dataclasses.field(default_factory=AloneConfig)
    cell_clip: float = 0.0
    proj_clip: float = 0.0
    direction_loss: str = "sum"

    def validate(self, prefix):
        positive_keys(self, prefix, "num_layers", "units")
        positive(self.projection_dim, join(prefix, "projection_dim"), allow_zero=True)
        if not self.projection_dim and self.proj_clip:
            raise ConfigError(
                f"`{join(prefix, 'proj_clip')}` bounds the LSTMs' projected state: it needs "
                f"`{join(prefix, 'projection_dim')}` > 0 (0: no projection)")
        if not 0 <= self.dropout_rate < 1:
            raise ConfigError(f"`{join(prefix, 'dropout_rate')}` must be in [0, 1)")
        one_of(self.output_layer, OUTPUT_LAYERS, join(prefix, "output_layer"))
        one_of(self.input_embedding, INPUT_EMBEDDINGS, join(prefix, "input_embedding"))
        positive(self.embedding_dim, join(prefix, "embedding_dim"), allow_zero=True)
        positive(self.num_sampled, join(prefix, "num_sampled"))
        positive_keys(self, prefix, "cell_clip", "proj_clip", allow_zero=True)
        one_of(self.direction_loss, DIRECTION_LOSSES, join(prefix, "direction_loss"))
        positive(self.adaptive_div_value, join(prefix, "adaptive_div_value"))
        fraction_or_none(self.adaptive_tail_capacity, join(prefix, "adaptive_tail_capacity"))
        cutoffs = list(self.adaptive_cutoffs)
        problem = output_problem(self.output_layer, self.input_embedding, self.tie_output,
                                 cutoffs, key=lambda name: join(prefix, name))
        if problem:
            raise ConfigError(problem)
        if cutoffs and (cutoffs != sorted(set(cutoffs)) or cutoffs[0] <= 0):
            raise ConfigError(f"`{join(prefix, 'adaptive_cutoffs')}` must be increasing "
                              f"positive integers, got {shown(cutoffs)}")
        one_of(self.output_loss, ("cosine", "l2", "vmf"), join(prefix, "output_loss"))
        positive(self.vmf_regularization1, join(prefix, "vmf_regularization1"), allow_zero=True)
        if not 0 < self.vmf_regularization2 <= 1:
            raise ConfigError(f"`{join(prefix, 'vmf_regularization2')}` must be in (0, 1]")


@dataclasses.dataclass
class EvalConfig:
    """Held-out top-k accuracy (cosine ranks for continuous outputs, log-prob ranks otherwise).

    Args:
        top_k: the k values reported (at least one).
        max_targets: held-out targets scored at most.
        chunk_size: rows of the vector table scored at once (continuous outputs).
    """

    top_k: List[int] = dataclasses.field(default_factory=lambda: [1, 10])
    max_targets: int = 20000
    chunk_size: int = 8192

    def validate(self, prefix):
        if not self.top_k:
            raise ConfigError(f"`{join(prefix, 'top_k')}` must list at least one k")
        for i, k in enumerate(self.top_k):
            positive(k, f"{join(prefix, 'top_k')}[{i}]")
        positive_keys(self, prefix, "max_targets", "chunk_size")


@dataclasses.dataclass
class ElmoConfig:
    """An ELMo-family experiment: `family: elmo` in YAML.

    Args:
        family: `elmo`.
        data: the `data` section (`DataConfig`; default: the synthetic corpus).
        fasttext: the `fasttext` section (`FastTextConfig`).
        model: the `model` section (`ElmoModelConfig`).
        train: the `train` section (`TrainConfig`).
        eval: the `eval` section (`EvalConfig`).
    """

    family: str = "elmo"
    data: DataConfig = dataclasses.field(
        default_factory=lambda: DataConfig(synthetic=SyntheticCorpusConfig()))
    fasttext: FastTextConfig = dataclasses.field(default_factory=FastTextConfig)
    model: ElmoModelConfig = dataclasses.field(default_factory=ElmoModelConfig)
    train: TrainConfig = dataclasses.field(default_factory=TrainConfig)
    eval: EvalConfig = dataclasses.field(default_factory=EvalConfig)

    def validate(self, prefix):
        one_of(self.family, ("elmo",), join(prefix, "family"))
        check_rnmt_batch(self.train, self.data, prefix)
        check_subword_ends(self, prefix)
