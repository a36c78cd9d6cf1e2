"""The model directory: its layout, its config and checkpoints, and the start of a run.

Every family's training (`pretraining`, `bert_pretraining`,
`masked_elmo_pretraining`), export and conversion import this module; it
imports none of them.

The model directory is transactional. Every artifact is written to a
temporary sibling and renamed; checkpoints go through
`tf.train.CheckpointManager`, whose `checkpoint` index file is only updated
after the new checkpoint is complete. A run killed at any point leaves a
directory that the next run resumes from (the latest checkpoint) and that
`tfeff-export` can read.

Layout of `model_dir`:

    config.yaml               the resolved config (read back by resume and export)
    corpus/{train,heldout}.txt  the generated corpus (synthetic data only)
    vocabulary.txt            word<TAB>count, id order (WordPiece tokens for
                              `data.tokenization: wordpiece`; no fastText then)
    fasttext.bin              trained word vectors (unless fasttext.pretrained)
    vocabulary_vectors.npy    fixed vectors of every vocabulary word
    vocabulary_vectors.mean.npy  the subtracted mean (fasttext.center)
    checkpoints/              tf.train.CheckpointManager checkpoints
    logs/                     TensorBoard scalars (train/*, validation/*)
    eval.json                 held-out top-k accuracy and the unigram baseline
"""

import logging
import os

import keras
import tensorflow as tf

from tfeff import config as config_lib
from tfeff import data as data_lib
from tfeff.training import checkpoints
from tfeff.training.callbacks import ScalarLogger
from tfeff.training.errors import TrainingError
from tfeff.training.errors import error_message
from tfeff.training.optimizers import make_optimizer
from tfeff.training.strategy import chief_first
from tfeff.training.strategy import make_strategy
from tfeff.training.strategy import worker_info

CONFIG_FILE = "config.yaml"
VOCABULARY_FILE = "vocabulary.txt"
FASTTEXT_FILE = "fasttext.bin"
VECTORS_FILE = "vocabulary_vectors.npy"
CHECKPOINT_DIR = "checkpoints"
EVAL_FILE = "eval.json"
# Sections that may change on resume; the others define the model and its data.
_RESUMABLE_SECTIONS = ("train", "eval")
# Keys that shape only the batches, not the prepared data: they may change until
# the first checkpoint (e.g. a smaller batch after running out of memory).
_BEFORE_FIRST_CHECKPOINT = ("data.batch_size", "data.max_sequence_length",
                            "data.shuffle_buffer")


def file_path(model_dir, name):
    return os.path.join(model_dir, name)


def corpus_files(data_cfg, model_dir):
    """`(train_files, heldout_files)`: the configured globs, or the generated corpus."""
    if data_cfg.synthetic is None:
        return data_cfg.train_files, data_cfg.heldout_files
    corpus_dir = file_path(model_dir, "corpus")
    train_files = file_path(corpus_dir, "train.txt")
    heldout_files = file_path(corpus_dir, "heldout.txt")
    if not (tf.io.gfile.exists(train_files) and tf.io.gfile.exists(heldout_files)):
        syn = data_cfg.synthetic
        logging.info("Generating the synthetic corpus in %s", corpus_dir)
        data_lib.write_synthetic_corpus(
            corpus_dir, syn.num_train_sentences, syn.num_heldout_sentences,
            seed=syn.seed, lexicon_size=syn.lexicon_size,
            paragraph_sentences=syn.paragraph_sentences,
        )
    return train_files, heldout_files


def _differences(a, b, prefix=""):
    out = []
    for key in sorted(set(a) | set(b)):
        full = f"{prefix}.{key}" if prefix else key
        va, vb = a.get(key), b.get(key)
        if isinstance(va, dict) and isinstance(vb, dict):
            out += _differences(va, vb, full)
        elif va != vb:
            out.append(f"{full}: {va!r} -> {vb!r}")
    return out


def resolve_config(config, model_dir):
    """Checks `config` against `<model_dir>/config.yaml` and writes it.

    Resuming may change `train` and `eval` (for example more steps) but not
    the data, word vectors, model or CoRe phases: those would make the
    checkpoint meaningless. Until the first checkpoint is written, the batch
    shape (`data.batch_size`, `data.max_sequence_length`,
    `data.shuffle_buffer`) may change too.
    """
    path = file_path(model_dir, CONFIG_FILE)
    if tf.io.gfile.exists(path):
        saved = config_lib.load_config(path)
        saved_dict, new_dict = config_lib.to_dict(saved), config_lib.to_dict(config)
        frozen = [k for k in sorted(set(saved_dict) | set(new_dict))
                  if k not in _RESUMABLE_SECTIONS]
        diffs = _differences(
            {k: saved_dict.get(k) for k in frozen}, {k: new_dict.get(k) for k in frozen},
        )
        # Any checkpoint counts, also a two-phase run's coarse/checkpoints.
        written = tf.io.gfile.glob(os.path.join(model_dir, CHECKPOINT_DIR, "ckpt-*.index")) + \
            tf.io.gfile.glob(os.path.join(model_dir, "*", CHECKPOINT_DIR, "ckpt-*.index"))
        if not written:
            diffs = [d for d in diffs if d.split(":")[0] not in _BEFORE_FIRST_CHECKPOINT]
        if diffs:
            raise config_lib.ConfigError(
                f"{model_dir} was created with a different config; these keys differ "
                "(only train.* and eval.* may change on resume): " + "; ".join(diffs)
            )
    config_lib.write_yaml(config, path)


def load_model_dir_config(model_dir):
    """The config written into `model_dir` (FileNotFoundError if there is none)."""
    path = file_path(model_dir, CONFIG_FILE)
    if not tf.io.gfile.exists(path):
        raise FileNotFoundError(f"{model_dir} is not a tfeff model directory (no {CONFIG_FILE})")
    return config_lib.load_config(path)


def restore_latest(model_dir, config, build, strategy=None, with_optimizer=False):
    """Builds `build()` (and its optimizer) under `strategy` and restores the latest checkpoint.

    Returns:
        `(model, optimizer_or_None, step)`.
    """
    # The same choice as training's restore: checksummed, names relative to model_dir.
    latest, _ = checkpoints.select_checkpoint(file_path(model_dir, CHECKPOINT_DIR))
    if latest is None:
        raise FileNotFoundError(f"{model_dir} has no checkpoint yet: run tfeff-pretrain first")
    strategy = strategy or tf.distribute.get_strategy()
    with strategy.scope():
        model = build()
        model.build()
        optimizer = None
        if with_optimizer:
            optimizer = make_optimizer(config.train, config.data.batch_size)
            optimizer.build(model.trainable_variables)
        checkpoints.restore(checkpoints.make_checkpoint(model, optimizer), latest)
    return model, optimizer, checkpoints.checkpoint_step(latest)


def check_writable(directory):
    """Creates `directory` and writes a probe file; TrainingError naming it otherwise."""
    try:
        tf.io.gfile.makedirs(directory)
        probe = os.path.join(directory, f".tfeff-write-test-{os.getpid()}")
        with tf.io.gfile.GFile(probe, "w") as f:
            f.write("ok")
        tf.io.gfile.remove(probe)
    except (OSError, tf.errors.OpError) as e:
        raise TrainingError(f"model_dir {directory} is not writable: {error_message(e)}") from e


def check_batch_size(batch_size, strategy):
    """The global batch must split evenly over the replicas (ConfigError naming both)."""
    replicas = strategy.num_replicas_in_sync
    if batch_size % replicas:
        raise config_lib.ConfigError(
            f"`data.batch_size`={batch_size} is the global batch and must divide evenly by "
            f"the number of replicas ({replicas}); use a multiple of {replicas}, e.g. "
            f"{max(replicas, batch_size - batch_size % replicas)}")


def start_run(config, model_dir, strategy, devices, prepare, check_inputs=None):
    """The shared start of every family's `pretrain`: strategy, checks, config, data.

    The strategy comes first (MultiWorkerMirroredStrategy must exist before
    TensorFlow runs an op). Then the inputs are checked before anything is
    written: the global batch against the replica count, and
    `check_inputs()` (a family's own checks, e.g. a pre-trained fastText
    file). The chief checks `config` against the directory and prepares the
    data (`prepare()`); the other workers wait for it and then read the
    chief's files.

    Returns:
        `(strategy, worker_info, prepare())`.
    """
    strategy = make_strategy(strategy, devices)
    check_batch_size(config.data.batch_size, strategy)
    if check_inputs is not None:
        check_inputs()
    info = worker_info(strategy)
    if config.train.deterministic:
        tf.config.experimental.enable_op_determinism()
    check_writable(model_dir)

    def chief_prepare():
        if info.is_chief:
            resolve_config(config, model_dir)
        return prepare()

    prepared = chief_first(strategy, chief_prepare)
    keras.utils.set_random_seed(config.train.seed)
    return strategy, info, prepared


def chief_loggers(info, model_dir, train_cfg, log_dir=None):
    """The TensorBoard logger, on the chief only (the other workers write no summaries)."""
    if not info.is_chief:
        return []
    return [ScalarLogger(log_dir or file_path(model_dir, "logs"), train_cfg.log_every)]
