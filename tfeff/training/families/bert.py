"""The BERT family (`family: bert`): masked-LM pretraining, and CoRe's two phases in one run.

With `core.coarse_steps` > 0, `BERT.pretrain` trains the relaxed model in
`<model_dir>/coarse/` until `core.coarse_steps` or a loss plateau (`PlateauStopper`;
`coarse/core_switch.json` says which), converts it (`merge_relaxed_bert`), saves the
standard model at that step in `<model_dir>/checkpoints/` (its step counter continuing)
and trains it to `train.steps`; a restart resumes in whichever phase the directory is in.
See docs/papers/core.md#recipe.
"""

import dataclasses
import json
import logging
import math
import os
import time

import keras
import numpy as np
import tensorflow as tf

from tfeff import config as config_lib
from tfeff import data as data_lib
from tfeff.data import files
from tfeff.data import vocabulary as vocabulary_lib
from tfeff.models import from_config
from tfeff.models.relaxed_merge import merge_relaxed_bert
from tfeff.training import checkpoints
from tfeff.training import evaluation
from tfeff.training import model_directory
from tfeff.training.callbacks import write_scalar
from tfeff.training.families.masked_lm import MASKED_LM_NEVER_TARGETS
from tfeff.training.families.masked_lm import MaskedLMFamily
from tfeff.training.families.masked_lm import MaskedLMTally
from tfeff.training.families.masked_lm import first_batches
from tfeff.training.families.masked_lm import masked_lm_artifacts
from tfeff.training.families.masked_lm import masked_lm_example_batch
from tfeff.training.families.base import train_phase
from tfeff.training.optimizers import make_optimizer
from tfeff.training.strategy import barrier
from tfeff.training.strategy import shard_files

COARSE_DIR = "coarse"
NEVER_TARGETS = MASKED_LM_NEVER_TARGETS
SWITCH_FILE = "core_switch.json"
_path = os.path.join


def standard_config(config):
    """The config of the standard model that `config`'s relaxed model converts to."""
    return dataclasses.replace(config, model=dataclasses.replace(config.model, relaxed=None),
                               core=config_lib.CoreConfig())


def coarse_config(config):
    """The config of a two-phase run's coarse phase: the relaxed model alone."""
    return dataclasses.replace(config, core=config_lib.CoreConfig())


def checkpoint_is_relaxed(config):
    """Whether `<model_dir>/checkpoints` of `config` hold a relaxed model."""
    return config.model.relaxed is not None and not config.core.enabled


def bert_dataset(config, files_glob, vocabulary_path, training, seed=None, batch_size=None):
    d = config.data
    return data_lib.mlm_dataset(
        files_glob, vocabulary_path, batch_size=batch_size or d.batch_size,
        max_sequence_length=d.max_sequence_length,
        max_predictions_per_seq=d.max_predictions_per_seq, mask_rate=d.mask_rate,
        mask_token_rate=d.mask_token_rate, random_token_rate=d.random_token_rate,
        lower_case=d.lower_case, use_nsp=config.model.use_nsp,
        shuffle_buffer=d.shuffle_buffer if training else 0, seed=seed, repeat=training,
        on_invalid_utf8=d.on_invalid_utf8, drop_remainder=training)


def save_converted(standard, config, model_dir, step, position=0, directory=None):
    """Writes `standard` at `step` (fresh optimizer, step counter kept) to `model_dir/checkpoints`
    (or `directory`), with the input `position` the refined phase reads on from."""
    optimizer = make_optimizer(config.train, config.data.batch_size)
    optimizer.build(standard.trainable_variables)
    optimizer.iterations.assign(step)
    checkpoint = checkpoints.make_checkpoint(standard, optimizer)
    with tf.init_scope():
        checkpoint.data_position = tf.Variable(position, dtype=tf.int64, trainable=False)
    manager = tf.train.CheckpointManager(
        checkpoint, directory or _path(model_dir, model_directory.CHECKPOINT_DIR),
        max_to_keep=config.train.keep_checkpoints)
    with checkpoints.signals_deferred():  # the files and the index, together
        return manager.save(checkpoint_number=step)


class PlateauStopper(keras.callbacks.Callback):
    """Stops training at `stopped_step` (else None) after `patience` windows of `window`
    steps whose mean loss improves on the best by less than `threshold` (relative)
    (CoRe, Section 5.5)."""

    def __init__(self, window, patience, threshold):
        super().__init__()
        self.window, self.patience, self.threshold = window, patience, threshold
        self.best = math.inf
        self.bad_windows = 0
        self.stopped_step = None
        self._losses = []
        self._epoch_sum = 0.0

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch_sum = 0.0

    def on_train_batch_end(self, batch, logs=None):
        # Keras reports the running mean of the epoch: recover this batch's loss.
        running = float(logs["loss"]) * (batch + 1)
        self._losses.append(running - self._epoch_sum)
        self._epoch_sum = running
        if len(self._losses) < self.window:
            return
        mean = float(np.mean(self._losses))
        self._losses = []
        if mean < self.best * (1.0 - self.threshold):
            self.best, self.bad_windows = mean, 0
        else:
            self.best = min(self.best, mean)
            self.bad_windows += 1
        if self.bad_windows >= self.patience:
            self.stopped_step = int(keras.ops.convert_to_numpy(self.model.optimizer.iterations))
            logging.info("Loss plateau at step %d (window mean %.4f)", self.stopped_step, mean)
            self.model.stop_training = True


def _read_json(path):
    if not tf.io.gfile.exists(path):
        return None
    with tf.io.gfile.GFile(path) as f:
        return json.load(f)


def unigram_log_probs(config, train_files, vocabulary_path):
    """Add-one smoothed log-frequencies of the first `eval.unigram_max_tokens` tokens."""
    d = config.data
    counts, _ = data_lib.token_counts(
        train_files, vocabulary_path, lower_case=d.lower_case,
        on_invalid_utf8=d.on_invalid_utf8, max_tokens=config.eval.unigram_max_tokens)
    return evaluation.unigram_log_probs(counts, NEVER_TARGETS)


def evaluate_bert(model, config, heldout_files, vocabulary_path, exact_attention=None,
                  unigram=None):
    """Held-out masked-LM loss, perplexity and top-1 accuracy (seeded masks) over the
    first `eval.max_batches` held-out batches (0: all); with `unigram`
    (`unigram_log_probs`), the unigram baseline's on the same targets."""
    tf.random.set_seed(config.train.seed)
    ds = bert_dataset(config, heldout_files, vocabulary_path, False, seed=config.train.seed)
    tally = MaskedLMTally(unigram)
    for batch in first_batches(ds, config.eval.max_batches, tally):
        logits = model(batch, training=False, exact_attention=exact_attention)["mlm_logits"]
        weights, ids = batch["masked_weights"].numpy(), batch["masked_ids"].numpy()
        ce = keras.ops.convert_to_numpy(keras.losses.sparse_categorical_crossentropy(
            ids, logits, from_logits=True))
        tally.add((ce * weights).sum(), ids, weights,
                  np.argmax(keras.ops.convert_to_numpy(logits), -1))
    return tally.results(len(vocabulary_lib.Vocabulary.load(vocabulary_path)))


class BertFamily(MaskedLMFamily):
    name = "bert"
    label = "BERT"

    def prepare_data(self, config, model_dir):
        """Corpus and WordPiece vocabulary (learned if missing, then checked)."""
        return masked_lm_artifacts(config, model_dir)

    def build_model(self, config, vocabulary_size, vectors_path=None, relaxed=None):
        """The `Bert` of `config` (relaxed per `checkpoint_is_relaxed` unless given)."""
        del vectors_path  # BERT reads no fixed vectors
        relaxed = checkpoint_is_relaxed(config) if relaxed is None else relaxed
        return from_config.bert(config, vocabulary_size, relaxed)

    def run_models(self, config, vocabulary_size, vectors_path=None):
        """A CoRe run trains the relaxed model, then the standard one."""
        if config.two_phase:
            return [self.build_model(config, vocabulary_size, relaxed=True),
                    self.build_model(config, vocabulary_size, relaxed=False)]
        return [self.build_model(config, vocabulary_size)]

    def example_batch(self, config, vocabulary_size, batch_size=2, length=9, seed=0):
        """Masked WordPieces in one segment; with `model.use_nsp`, random `nsp_labels`."""
        batch = masked_lm_example_batch(vocabulary_size, batch_size, length, seed, bert=True)
        if config.model.use_nsp:
            labels = np.random.default_rng(seed).integers(0, 2, size=(batch_size,))
            batch["nsp_labels"] = labels.astype(np.int32)
        return batch

    def train_dataset(self, config, artifacts, position=0, file_shard=None):
        files_, batch_size = shard_files(artifacts.train_file_list, config.data.batch_size,
                                         file_shard)
        return bert_dataset(config, files_, artifacts.vocabulary_path, True,
                            seed=config.train.seed, batch_size=batch_size).skip(position)

    def validation_dataset(self, config, artifacts):
        """The first `train.validation_steps` held-out batches, the same every time."""
        if not artifacts.heldout_files or not config.train.validation_steps:
            return None
        return bert_dataset(config, artifacts.heldout_files, artifacts.vocabulary_path, False,
                            seed=config.train.seed).repeat().take(config.train.validation_steps)

    def evaluate(self, model, config, artifacts):
        """`evaluate_bert` with the unigram baseline of the training tokens."""
        return evaluate_bert(
            model, config, artifacts.heldout_files, artifacts.vocabulary_path,
            unigram=unigram_log_probs(config, artifacts.train_files, artifacts.vocabulary_path))

    def summary_lines(self, results):
        """A two-phase run also reports where CoRe switched and why."""
        lines = super().summary_lines(results)
        if results.get("switch"):
            lines.append(f"CoRe switch at step {results['switch']['switch_step']} "
                         f"({results['switch']['reason']})")
        return lines

    def pretrain(self, config, model_dir, strategy="default", devices=None, verbose="auto",
                 restore_fallback=False, callbacks=()):
        """Masked-LM pretraining; CoRe's two phases with `core.coarse_steps`.

        Arguments and faults as `tfeff.training.pretrain`.

        Returns:
            dict with `step`, `history` (per phase), `preempted`, `switch` (two-phase
            runs: step and reason) and `eval` (held-out masked-LM results).
        """
        strategy, info, artifacts = self.start(config, model_dir, strategy, devices)
        log_dir = _path(model_dir, "logs")
        phase_args = dict(log_dir=log_dir, verbose=verbose, restore_fallback=restore_fallback)
        results = {"history": {}, "preempted": False}
        t0 = time.time()
        refined_dir = _path(model_dir, model_directory.CHECKPOINT_DIR)
        if config.two_phase and not checkpoints.has_checkpoints(refined_dir):
            coarse_dir = _path(model_dir, COARSE_DIR)
            coarse_cfg = coarse_config(config)
            switch_path = _path(coarse_dir, SWITCH_FILE)
            if info.is_chief:
                tf.io.gfile.makedirs(coarse_dir)
                config_lib.write_yaml(coarse_cfg,
                                      _path(coarse_dir, model_directory.CONFIG_FILE))
                coarse_vocab = _path(coarse_dir, model_directory.VOCABULARY_FILE)
                if not tf.io.gfile.exists(coarse_vocab):  # a new temporary, renamed
                    with tf.io.gfile.GFile(artifacts.vocabulary_path) as f:
                        files.write_text_atomic(coarse_vocab, f.read())
            switch = _read_json(switch_path)
            if switch is None:
                core = config.core
                stopper = (PlateauStopper(core.plateau_window, core.plateau_patience,
                                          core.plateau_threshold)
                           if core.plateau_patience else None)
                coarse = train_phase(
                    self, coarse_cfg, coarse_dir, artifacts, strategy,
                    stop_step=core.coarse_steps, build_options={"relaxed": True},
                    validation=self.validation_dataset(config, artifacts),
                    label="Relaxed BERT",
                    callbacks=[*([stopper] if stopper else []), *callbacks], **phase_args)
                results["history"]["coarse"] = coarse.history
                if coarse.preempted:
                    return {**results, "step": coarse.step, "preempted": True}
                reason = ("plateau" if stopper and stopper.stopped_step is not None
                          else "coarse_steps")
                switch = {"switch_step": coarse.step, "reason": reason,
                          "position": coarse.position}
                if info.is_chief:
                    files.write_text_atomic(switch_path, json.dumps(switch) + "\n")
                relaxed_model = coarse.model
            else:
                relaxed_model, _, step, _ = self.restore(coarse_dir, coarse_cfg, strategy)
                if step != switch["switch_step"]:
                    raise ValueError(
                        f"{coarse_dir}: the latest checkpoint is at step {step} but "
                        f"{SWITCH_FILE} says the coarse phase ended at {switch['switch_step']}")
            with strategy.scope():
                # Every worker builds and saves (collective variables); the chief's copy is kept.
                standard = merge_relaxed_bert(relaxed_model)
                scratch = None if info.is_chief else _path(
                    model_dir, model_directory.CHECKPOINT_DIR, f".worker-{info.index}")
                save_converted(standard, config, model_dir, switch["switch_step"],
                               switch.get("position", 0), directory=scratch)
                if scratch:
                    tf.io.gfile.rmtree(scratch)
            barrier(strategy)
            if info.is_chief:
                writer = tf.summary.create_file_writer(log_dir)
                with writer.as_default():
                    write_scalar("core/switch_step", switch["switch_step"],
                                 switch["switch_step"])
                writer.close()
            logging.info("CoRe: switched from the relaxed to the standard model at step %d (%s)",
                         switch["switch_step"], switch["reason"])
            del relaxed_model, standard
        if config.two_phase:
            results["switch"] = _read_json(_path(model_dir, COARSE_DIR, SWITCH_FILE))

        relaxed = checkpoint_is_relaxed(config)
        final = train_phase(self, config, model_dir, artifacts, strategy,
                            build_options={"relaxed": relaxed},
                            validation=self.validation_dataset(config, artifacts),
                            label="Relaxed BERT" if relaxed else "Standard BERT",
                            callbacks=callbacks, **phase_args)
        results["history"]["refined" if config.two_phase else "train"] = final.history
        results.update(step=final.step, preempted=final.preempted,
                       train_seconds=time.time() - t0)
        self.finish(results, final.model, config, model_dir, artifacts, info)
        return results


BERT = BertFamily()
