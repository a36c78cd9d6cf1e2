"""What every model family provides (`Family`), and the resumable training they share.

`Family.pretrain` runs `start_run`, `train_phase`, then the held-out evaluation into
`eval.json`; a family whose run has phases (CoRe's BERT) overrides it and calls the same
pieces.
"""

import dataclasses
import functools
import json
import logging
import math
import time
from typing import Any, NamedTuple, Optional

import numpy as np
import tensorflow as tf

from tfeff import config as config_lib
from tfeff import data as data_lib
from tfeff.data import files
from tfeff.training import evaluation
from tfeff.training import fault_tolerance
from tfeff.training import model_directory
from tfeff.training import precision as precision_lib
from tfeff.training.model_directory import file_path
from tfeff.training.optimizers import make_optimizer


@dataclasses.dataclass
class DataArtifacts:
    """What `Family.prepare_data` made (or found) in a model directory.

    Args:
        train_files: the training corpus globs.
        heldout_files: the held-out corpus globs (may be empty).
        vocabulary_path: `vocabulary.txt` (words, or WordPiece tokens).
        vectors_path: `vocabulary_vectors.npy`, or None when the model reads no vectors.
        word_vectors_path: the fastText model the vectors came from, or None.
        documents: the training token-id documents held in memory (Masked ELMo), or None.
        heldout_documents: the held-out ones, likewise.
        epoch_windows: the training windows of one epoch (`train.epochs`), or None.
    """

    train_files: str
    heldout_files: str
    vocabulary_path: str
    vectors_path: Optional[str] = None
    word_vectors_path: Optional[str] = None
    documents: Optional[list] = None
    heldout_documents: Optional[list] = None
    epoch_windows: Optional[int] = None

    @functools.cached_property
    def vocabulary(self):
        return data_lib.Vocabulary.load(self.vocabulary_path)

    @property
    def vocabulary_size(self):
        return len(self.vocabulary)

    @functools.cached_property
    def train_file_list(self):
        """`train_files` resolved to the file list (what file sharding splits)."""
        return data_lib.resolve_files(self.train_files)


class RestoredModel(NamedTuple):
    """A model directory's model at its latest checkpoint (`Family.restore`).

    Attributes:
        model: the restored Keras model.
        optimizer: its restored optimizer, or None when restored without one.
        step: the checkpoint's step.
        config: the model directory's config (a family config dataclass).
    """

    model: Any
    optimizer: Any
    step: int
    config: Any


class Phase(NamedTuple):
    """What `train_phase` ends with."""

    model: Any
    step: int
    history: dict
    preempted: bool
    position: int


class Family:
    """One model family: its data, batches, model, restore, evaluation and embedder.

    The contract, checked for every registered family by `tests/training/test_families.py`
    (each method: docs/contributing/families.md#3-the-family-module): `name` is the
    config's `family` (its dataclass in `tfeff.config.FAMILIES`, used by a
    `configs/demo_*.yaml`), `label` what logs call the model; `train_dataset` yields
    `fit`'s batches from input `position` on (`position_addressed`: the position alone
    resumes them, no tf.data iterator is checkpointed); `build_model` returns an unbuilt
    model whose `build()` creates every variable; on `example_batch` a model returns its
    outputs and `compute_loss(x=batch, y_pred=outputs)` its loss. Subclasses implement
    `prepare_data`, `build_model`, `train_dataset`, `example_batch` and `evaluate`.
    """

    name = None
    label = None
    position_addressed = False

    # -- data

    def check_inputs(self, config, model_dir):
        """Checks made before anything is written (e.g. a pre-trained vectors file)."""

    def prepare_data(self, config, model_dir):
        """Creates (or reuses) the corpus, vocabulary and vectors: a `DataArtifacts`."""
        raise NotImplementedError

    def uses_vectors(self, config):
        """Whether the model of `config` reads the fixed `vocabulary_vectors.npy`."""
        return False

    def train_dataset(self, config, artifacts, position=0, file_shard=None):
        """The repeated training batches from input `position` on."""
        raise NotImplementedError

    def validation_dataset(self, config, artifacts):
        """The held-out batches of Keras' validation during `fit`, or None."""
        return None

    # -- model

    def build_model(self, config, vocabulary_size, vectors_path=None):
        """The unbuilt Keras model of `config`, whose `build()` takes no arguments."""
        raise NotImplementedError

    def probe_vocabulary_size(self, config):
        """A vocabulary size that `build_model` accepts for `config` before the data exists."""
        return max(16, getattr(config.data, "wordpiece_vocabulary_size", 0))

    def run_models(self, config, vocabulary_size, vectors_path=None):
        """The unbuilt models a run of `config` trains, in order."""
        return [self.build_model(config, vocabulary_size, vectors_path)]

    def probe_models(self, config):
        """`run_models` before any data exists, for `check_compilation`."""
        size = self.probe_vocabulary_size(config)
        # One column: the probes are never built, their sizes do not matter.
        vectors = np.zeros((size, 1), "float32") if self.uses_vectors(config) else None
        return self.run_models(config, size, vectors)

    def example_batch(self, config, vocabulary_size, batch_size=2, length=9, seed=0):
        """NumPy random ids in `train_dataset`'s structure, right padded."""
        raise NotImplementedError

    def check_compilation(self, config):
        """ConfigError naming the layer XLA cannot compile under `train.jit_compile: true`."""
        if config.train.jit_compile is not True:
            return
        for model in self.probe_models(config):
            precision_lib.check_jit_compile(True, model, self.label)

    def model_inputs(self, config, model_dir):
        """`(vocabulary_size, vectors_path)` for `build_model`, from a prepared `model_dir`."""
        vocabulary_path = file_path(model_dir, model_directory.VOCABULARY_FILE)
        vectors_path = (file_path(model_dir, model_directory.VECTORS_FILE)
                        if self.uses_vectors(config) else None)
        for name, path in ((model_directory.VOCABULARY_FILE, vocabulary_path),
                           (model_directory.VECTORS_FILE, vectors_path)):
            if path is not None and not tf.io.gfile.exists(path):
                raise FileNotFoundError(f"{model_dir} has no {name}: run tfeff-pretrain first")
        return len(data_lib.Vocabulary.load(vocabulary_path)), vectors_path

    def restore(self, model_dir, config=None, strategy=None, with_optimizer=False):
        """Builds the model of `model_dir` and restores its latest checkpoint.

        Returns:
            `RestoredModel(model, optimizer_or_None, step, config)`.

        Raises:
            FileNotFoundError: no config, vocabulary, vectors or checkpoint.
            ValueError: the directory holds another family's model.
        """
        if config is None:
            config = model_directory.load_model_dir_config(model_dir)
        if config.family != self.name:
            raise ValueError(f"{model_dir} holds a {config.family!r} model, not a {self.label}")
        vocabulary_size, vectors_path = self.model_inputs(config, model_dir)
        model, optimizer, step = model_directory.restore_latest(
            model_dir, config, lambda: self.build_model(config, vocabulary_size, vectors_path),
            strategy, with_optimizer)
        return RestoredModel(model, optimizer, step, config)

    # -- evaluation and export

    def evaluate(self, model, config, artifacts):
        """Held-out results (a JSON-able dict), as written to `eval.json`."""
        raise NotImplementedError

    def eval_summary(self, results):
        """The lines `tfeff-pretrain` prints of `evaluate`'s results (each "held-out...")."""
        return [f"held-out results: {json.dumps(results, sort_keys=True)}"]

    def summary_lines(self, results):
        """Every line `tfeff-pretrain` prints after a run: the step, then `eval_summary`."""
        lines = [f"finished at step {results['step']}"]
        if results.get("eval"):
            lines += self.eval_summary(results["eval"])
        return lines

    def embedder_options(self, config, model_dir):
        """`(options of tfeff.export.embedder_module, {name: path} copied beside it)`."""
        vocabulary_path = file_path(model_dir, model_directory.VOCABULARY_FILE)
        return ({"family": self.name, "vocabulary": vocabulary_path},
                {model_directory.VOCABULARY_FILE: vocabulary_path})

    # -- the run

    def start(self, config, model_dir, strategy, devices):
        """`model_directory.start_run` with this family's checks and data."""

        def checks():
            self.check_compilation(config)
            self.check_inputs(config, model_dir)

        strategy, info, artifacts = model_directory.start_run(
            config, model_dir, strategy, devices, lambda: self.prepare_data(config, model_dir),
            checks)
        if config.train.epochs:
            steps_from_epochs(config, artifacts)
            if info.is_chief:  # the directory's config is the run's: its steps resolved
                config_lib.write_yaml(config, file_path(model_dir, model_directory.CONFIG_FILE))
        return strategy, info, artifacts

    def pretrain(self, config, model_dir, strategy="default", devices=None, verbose="auto",
                 restore_fallback=False, callbacks=()):
        """Prepares the data, trains (resuming), evaluates: see `tfeff.training.pretrain`."""
        strategy, info, artifacts = self.start(config, model_dir, strategy, devices)
        t0 = time.time()
        phase = train_phase(self, config, model_dir, artifacts, strategy,
                            validation=self.validation_dataset(config, artifacts),
                            callbacks=callbacks, verbose=verbose,
                            restore_fallback=restore_fallback)
        results = {"step": phase.step, "history": phase.history,
                   "train_seconds": time.time() - t0, "preempted": phase.preempted}
        self.finish(results, phase.model, config, model_dir, artifacts, info)
        return results

    def finish(self, results, model, config, model_dir, artifacts, info):
        """The chief's held-out evaluation into `results["eval"]` and `eval.json`."""
        if not (artifacts.heldout_files and info.is_chief and not results["preempted"]):
            return
        results["eval"] = self.evaluate(model, config, artifacts)
        evaluation.check_finite_results(results["eval"], "eval")
        results["eval"]["train_seconds"] = results["train_seconds"]
        files.write_text_atomic(file_path(model_dir, model_directory.EVAL_FILE),
                                json.dumps(results["eval"], indent=2) + "\n")
        for line in self.eval_summary(results["eval"]):  # tfeff-pretrain prints them
            logging.debug("%s", line)


def steps_from_epochs(config, artifacts):
    """Sets `config.train.steps` (in place) from `train.epochs` and `artifacts.epoch_windows`."""
    per_epoch = artifacts.epoch_windows / config.data.batch_size
    steps = max(1, math.ceil(config.train.epochs * per_epoch))
    if steps != config.train.steps:
        config.train.steps = steps
        logging.info("train.epochs=%g: %s windows per epoch, %.1f steps of %d: training to "
                     "step %d", config.train.epochs, f"{artifacts.epoch_windows:,}", per_epoch,
                     config.data.batch_size, steps)
    config.train.validate_steps("train")  # the keys that depend on the steps


def train_phase(family, config, model_dir, artifacts, strategy, *, stop_step=None,
                build_options=None, validation=None, log_dir=None, callbacks=(),
                verbose="auto", restore_fallback=False, label=None):
    """Builds, restores and trains `family`'s model of `config` in `model_dir`.

    Under `strategy` and `train.precision`, through `ResumableTraining`, to `stop_step`
    (default `train.steps`); a final checkpoint is written unless the run was preempted.

    Args:
        build_options: more keyword arguments of `family.build_model`.
        validation: Keras validation data (`train.validation_steps` batches).
        log_dir: TensorBoard directory (default `<model_dir>/logs`).
        label: the model's name in the log (default `family.label`).

    Returns:
        `Phase(model, step, history, preempted, position)`.
    """
    train_cfg = config.train
    if train_cfg.epochs and artifacts.epoch_windows:  # (`Family.start` has, unless bypassed)
        steps_from_epochs(config, artifacts)
    stop_step = train_cfg.steps if stop_step is None else stop_step
    label = label or family.label
    with strategy.scope():
        with model_directory.building_model(label), \
                precision_lib.dtype_policy(train_cfg.precision):
            model = family.build_model(config, artifacts.vocabulary_size,
                                       artifacts.vectors_path, **(build_options or {}))
            model.build()
            optimizer = make_optimizer(train_cfg, config.data.batch_size)
            optimizer.build(model.trainable_variables)
        jit_compile = precision_lib.resolve_jit_compile(
            train_cfg.jit_compile, model, label, deterministic=train_cfg.deterministic)
        model.compile(optimizer=optimizer, jit_compile=jit_compile,
                      steps_per_execution=train_cfg.steps_per_execution)
        training = fault_tolerance.ResumableTraining(
            model, optimizer, file_path(model_dir, model_directory.CHECKPOINT_DIR),
            train_cfg.keep_checkpoints, strategy)
        start = training.restore(restore_fallback)
    logging.info("%s: %s trainable parameters (%s); step %d, training to step %d",
                 label, f"{model.count_params():,}", train_cfg.precision, start, stop_step)
    if start > stop_step:
        logging.warning("%s: the checkpoint is at step %d, past step %d: nothing more is "
                        "trained", label, start, stop_step)

    def build(position, file_shard):
        return family.train_dataset(config, artifacts, position, file_shard)

    history, preempted = training.fit(
        build, stop_step, global_batch_size=config.data.batch_size,
        num_files=None if family.position_addressed else len(artifacts.train_file_list),
        every=train_cfg.checkpoint_every, log_every=train_cfg.log_every,
        on_nan=train_cfg.on_nan,
        callbacks=[*model_directory.chief_loggers(training.info, model_dir, train_cfg, log_dir),
                   *callbacks],
        validation_data=validation,
        validation_steps=train_cfg.validation_steps if validation is not None else None,
        verbose=verbose, checkpoint_iterator=not family.position_addressed,
        steps_per_epoch=(artifacts.epoch_windows / config.data.batch_size
                         if config.train.epochs and artifacts.epoch_windows else None))
    if not preempted:
        training.save_if_new()
    return Phase(model, training.step, history, preempted, int(training.position.numpy()))


# Where a line flagging results below baseline points (for ELMo-C: its known cause).
SUMMARY_HELP = "docs/guides/pretraining.md#reading-the-summary"
CONTINUOUS_HELP = "docs/papers/elmo-c.md#real-text"


def below_baseline_line(names, continuous=False):
    """The line flagging results below their baseline, or none (two for `continuous`)."""
    if not names:
        return []
    flagged = f"held-out results below the unigram baseline ({', '.join(names)})"
    if continuous:
        return [f"{flagged}: the cosine loss predicts the mean direction of the likely next "
                "words' fastText vectors, which on real text points at frequent words unless "
                "the vectors separate the others well (Li et al.'s came from Common Crawl, "
                "not from the model's corpus)",
                "held-out ranking of next words: use published fastText vectors as fasttext.pretrained "
                f"(fasttext.dim set to theirs); see {CONTINUOUS_HELP}"]
    return [f"{flagged}: the model predicts worse than word frequencies alone; see "
            f"{SUMMARY_HELP}"]
