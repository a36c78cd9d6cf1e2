"""Resumable training: checkpoints with the input position, preemption, faults, multi-worker input.

`ResumableTraining` is the part of `tfeff-pretrain` that every model family shares once
its model and optimizer are built (docs/guides/pretraining.md#fault-tolerance). Its
checkpoints hold the model, the optimizer, the Keras seed states, the input position
and, on one replica, the `tf.data` iterator. Distributed iterators cannot be saved: the
input is then rebuilt from its seed and the saved position skipped (or, for
position-addressed pipelines, started there). Each worker reads whole files when there
are at least as many files as workers, else its rows of every global batch.
"""

import contextlib
import errno
import logging
import os
import re
import signal
import threading

import keras
import tensorflow as tf

from tfeff.training import callbacks as callbacks_lib
from tfeff.training import checkpoints
from tfeff.training.checkpoints import checkpoint_step
from tfeff.training.checkpoints import select_checkpoint
from tfeff.training.errors import CheckpointError
from tfeff.training.errors import NonFiniteLossError
from tfeff.training.errors import TrainingError
from tfeff.training.errors import error_detail
from tfeff.training.errors import error_message
from tfeff.training.strategy import worker_info

# The exit status after a preemption checkpoint (as TF's PreemptionCheckpointHandler's):
# non-zero, so a scheduler restarts the job.
PREEMPTED_EXIT_CODE = 42
_ITERATOR_STATE_PREFIX = "iterator/.ATTRIBUTES/"


def rng_key(index, path):
    """The checkpoint key of a model's `index`-th seed-generator state at `path`, without
    Keras' per-process generator number (`seed_generator_14`), which depends on what the
    process built before (a CoRe run's relaxed model; its resume builds none)."""
    return f"{index:03d}." + re.sub(r"seed_generator_\d+", "seed_generator", path).replace("/", ".")


class _Preemption:
    """Notes SIGTERM/SIGINT while installed (the main thread's handlers are restored after)."""

    def __init__(self):
        self.requested = False
        self._previous = {}

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum, frame):
        del frame
        if self.requested and signum == signal.SIGINT:
            raise KeyboardInterrupt  # a second Ctrl-C stops at once
        logging.warning("Received %s: saving a checkpoint after this step, then stopping",
                        signal.Signals(signum).name)
        self.requested = True

    def __exit__(self, *exc):
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        return False


class ResumableTraining:
    """Checkpointing, restore and `fit` for one model directory: create it under
    `strategy.scope()` after the model and optimizer, then call `restore()` and `fit`.

    Args:
        model: the built Keras model.
        optimizer: its built `SkipNonFiniteUpdates` optimizer (`make_optimizer`).
        directory: the checkpoint directory (`<model_dir>/checkpoints`).
        max_to_keep: checkpoints kept.
        strategy: the `tf.distribute` strategy they were built under.
    """

    def __init__(self, model, optimizer, directory, max_to_keep, strategy):
        self.model, self.optimizer, self.strategy = model, optimizer, strategy
        self.directory = directory
        self.info = worker_info(strategy)
        with tf.init_scope():
            self.position = tf.Variable(0, dtype=tf.int64, trainable=False, name="data_position")
            # The position the saved iterator's pipeline was built at (a restore rebuilds it).
            self.origin = tf.Variable(0, dtype=tf.int64, trainable=False, name="data_origin")
        weights = {id(v) for v in model.weights}
        rng = {rng_key(i, v.path): v for i, v in enumerate(
            v for v in model.variables if id(v) not in weights and "seed_generator" in v.path)}
        self.checkpoint = checkpoints.make_checkpoint(model, optimizer)
        self.checkpoint.rng = rng
        self.checkpoint.data_position = self.position
        self.checkpoint.data_origin = self.origin
        # Every worker saves (TensorFlow's rule); only the chief's copy is kept.
        save_dir = directory if self.info.is_chief else os.path.join(
            directory, f".worker-{self.info.index}")
        if self.info.is_chief:
            checkpoints.relative_checkpoint_state(directory)
        self._save_dir, self._max_to_keep, self._manager = save_dir, max_to_keep, None
        self.restored, self._restored_names, self._iterator = None, set(), None

    @property
    def manager(self):
        """The `tf.train.CheckpointManager`, made on first use: after `restore`, which may
        write the checkpoint index again (`select_checkpoint`)."""
        if self._manager is None:
            self._manager = tf.train.CheckpointManager(self.checkpoint, self._save_dir,
                                                       max_to_keep=self._max_to_keep)
        return self._manager

    def restore(self, fallback=False):
        """Restores the newest readable checkpoint (`select_checkpoint`); returns its step or 0."""
        prefix, names = select_checkpoint(self.directory, fallback,
                                          write_index=self.info.is_chief)
        if prefix is None:
            return 0
        # Model and optimizer must match exactly; the rest may be absent (CoRe: no seed states).
        checkpoints.restore(checkpoints.make_checkpoint(self.model, self.optimizer), prefix)
        tf.train.Checkpoint(rng=self.checkpoint.rng, data_position=self.position,
                            data_origin=self.origin).restore(prefix).expect_partial()
        self.restored, self._restored_names = prefix, names
        logging.info("Restored %s (input position %d)", prefix, int(self.position.numpy()))
        return self.step

    @property
    def step(self):
        return int(keras.ops.convert_to_numpy(self.optimizer.iterations))

    def latest_checkpoint(self):
        return tf.train.latest_checkpoint(self.directory) or self.restored

    def non_finite_weights(self):
        """The paths of the trainable weights that hold NaN or Inf (one fused check)."""
        weights = self.model.trainable_weights
        finite = [tf.reduce_all(tf.math.is_finite(v)) for v in weights]
        if not finite or bool(tf.reduce_all(tf.stack(finite))):
            return []
        return [v.path for v, ok in zip(weights, finite) if not bool(ok)]

    def save(self):
        """Saves at the current step (all workers); TrainingError if the disk refuses, and
        `NonFiniteLossError` for NaN/Inf weights (a finite update can still overflow, and
        with `on_nan: skip` every later step would be skipped)."""
        step = self.step
        bad = self.non_finite_weights()
        if bad:
            raise NonFiniteLossError(
                f"the weights are NaN/Inf after step {step} ({len(bad)} of "
                f"{len(self.model.trainable_weights)}, e.g. {bad[0]}): not saved; "
                f"{self.kept()}. The learning rate (train.learning_rate, train.warmup_steps) "
                "or the data may be to blame.")
        try:
            with checkpoints.signals_deferred():  # the files and the index, together
                path = self.manager.save(checkpoint_number=step)
        except (OSError, tf.errors.OpError) as e:
            raise TrainingError(
                f"could not write the checkpoint of step {step} to {self.directory}: "
                f"{error_detail(e)}. {self.kept().capitalize()}; free space (or fix the directory) "
                "and rerun the same command to resume.") from e
        if not self.info.is_chief:
            tf.io.gfile.rmtree(os.path.dirname(path))
        return path

    def kept(self):
        """What the directory holds now, for messages: its latest checkpoint, or none."""
        previous = self.latest_checkpoint()
        return (f"the previous checkpoint {previous} is intact" if previous
                else "no checkpoint was written")

    def save_if_new(self):
        latest = self.manager.latest_checkpoint
        if latest is None or checkpoint_step(latest) != self.step:
            self.save()

    def _input(self, build, num_files, global_batch_size):
        """The (distributed) dataset that `fit` reads, positioned at the checkpoint."""
        position, info = int(self.position.numpy()), self.info
        if info.num_workers == 1:
            if self.strategy.num_replicas_in_sync == 1 and self._save_iterator and any(
                    n.startswith(_ITERATOR_STATE_PREFIX) for n in self._restored_names):
                self._restore_iterator = True
                return build(int(self.origin.numpy()), None)
            if position and self._save_iterator:
                logging.info("Skipping %d batches to reach the checkpointed input position "
                             "(no saved tf.data iterator state to restore)", position)
            self.origin.assign(position)
            return build(position, None)
        by_files = num_files is not None and num_files >= info.num_workers
        logging.info("Worker %d of %d reads %s", info.index, info.num_workers,
                     "its share of the files" if by_files else "its rows of every batch")
        per_replica = global_batch_size // self.strategy.num_replicas_in_sync

        def mine(batch):
            rows = tf.shape(tf.nest.flatten(batch)[0])[0] // info.num_workers
            return tf.nest.map_structure(lambda t: t[rows * info.index:rows * (info.index + 1)],
                                         batch)

        def per_worker(context):
            del context  # WorkerInfo says the same, and also covers the file shard
            if by_files:
                ds = build(position, (info.num_workers, info.index))
            else:
                ds = build(position, None).map(mine)
            return ds.rebatch(per_replica) if info.replicas_per_worker > 1 else ds

        return self.strategy.distribute_datasets_from_function(per_worker)

    def _capture(self, train_function):
        def wrapped(iterator):
            if self._iterator is None:
                self._iterator = iterator
                if self._save_iterator and isinstance(iterator, tf.data.Iterator):
                    self.checkpoint.iterator = iterator
                    if self._restore_iterator:
                        try:
                            tf.train.Checkpoint(iterator=iterator).restore(
                                self.restored).expect_partial()
                        except tf.errors.OpError as e:
                            raise CheckpointError(
                                f"the input iterator saved in {self.restored} does not fit "
                                f"this input pipeline ({error_detail(e)}): the input code changed "
                                "since it was saved; resume with the tfeff version that wrote "
                                "it, or start a new model_dir.") from e
                        logging.info("Restored the input iterator of %s", self.restored)
            logs = train_function(iterator)
            self.position.assign_add(self.model.steps_per_execution or 1)
            return logs

        return wrapped

    def fit(self, build, stop_step, *, global_batch_size, num_files=None, every, on_nan="stop",
            callbacks=(), validation_data=None, validation_steps=None, verbose="auto",
            log_every=None, checkpoint_iterator=True, steps_per_epoch=None):
        """Trains to `stop_step` (saving every `every` steps); returns `(history, preempted)`.

        `build(position, file_shard)` returns the batches from input position `position` on:
        global ones with `file_shard` None, else this worker's files and share of the batch
        (`(num_workers, index)`; `num_files` may be None). `on_nan`: `"stop"` or `"skip"`;
        `verbose`: as `model.fit`, or `"auto"` (`callbacks.resolve_verbose`: a line every
        `log_every` steps, default `every`). `checkpoint_iterator=False` when the position
        alone resumes the pipeline (or TensorFlow cannot save its iterator).
        """
        start = self.step
        if start >= stop_step:
            return {}, False
        self._restore_iterator, self._iterator = False, None
        self._save_iterator = checkpoint_iterator
        x = self._input(build, num_files, global_batch_size)
        if self.info.num_workers > 1:
            if validation_data is not None:
                options = tf.data.Options()
                options.experimental_distribute.auto_shard_policy = (
                    tf.data.experimental.AutoShardPolicy.DATA)
                validation_data = validation_data.with_options(options)
            # Keras 3 reduces scalar logs with strategy.reduce(MEAN, v, axis=0), which fails
            # on scalars under MultiWorkerMirroredStrategy; these reduce over replicas.
            self.model.train_function = _cross_worker_function(
                self.model.train_step, self.strategy, self.model.steps_per_execution or 1)
            self.model.test_function = _cross_worker_function(
                self.model.test_step, self.strategy, 1)
            # Keras' pre-fit symbolic build reduces a peeked batch, which fails on dict
            # batches under this strategy; the model and optimizer are built already.
            self.model._maybe_symbolic_build = lambda iterator=None, data_batch=None: None
        else:
            self.model.make_train_function()
        self.model.train_function = self._capture(self.model.train_function)
        preemption = _Preemption()
        stop = callbacks_lib.StopAndSave(self, every, stop_step, preemption)
        nan = callbacks_lib.NonFiniteCallback(self.optimizer, on_nan, self.latest_checkpoint)
        all_callbacks = [nan, stop, *callbacks]
        verbose, progress = callbacks_lib.resolve_verbose(verbose)
        if progress and self.info.is_chief:
            all_callbacks.append(callbacks_lib.ProgressLogger(
                log_every or every, stop_step, live=progress == "live",
                steps_per_epoch=steps_per_epoch))
        with preemption, _resource_errors(self):
            # Keras counts batches, the stop is by updates: skipped updates (on_nan: skip, a
            # float16 loss scale overflow) need more batches; StopAndSave stops at stop_step.
            skips = on_nan == "skip" or isinstance(self.optimizer,
                                                   keras.optimizers.LossScaleOptimizer)
            epochs = -(-stop_step // every) * (2 if skips else 1)
            fit = self.model.fit(  # shuffle: the dataset is shuffled already
                x, epochs=epochs, initial_epoch=start // every, shuffle=False,
                steps_per_epoch=every, validation_data=validation_data,
                validation_steps=validation_steps if validation_data is not None else None,
                callbacks=all_callbacks, verbose=verbose if self.info.is_chief else 0)
        self.model.train_function = self.model.test_function = None  # Keras' own next time
        if not stop.preempted and not self.model.stop_training and self.step < stop_step:
            # Every batch ran without reaching the stop: skipped updates, or the input ended.
            skipped = int(self.optimizer.non_finite_steps.numpy())
            if skipped:
                raise NonFiniteLossError(
                    f"training reached only step {self.step} of {stop_step}: {skipped} "
                    "update(s) were skipped for NaN/Inf loss or gradients (train.on_nan: skip), "
                    f"too many to finish; {self.kept()}. Check the data and the learning rate.")
            raise TrainingError(
                f"training reached only step {self.step} of {stop_step}: the input ended; "
                f"{self.kept()}.")
        return fit.history, stop.preempted


def _cross_worker_function(step, strategy, steps_per_execution):
    """A Keras train/test function: `step` on every replica, logs averaged over replicas."""

    @tf.function
    def one_step(iterator):
        outputs = strategy.run(step, args=(next(iterator),))
        return tf.nest.map_structure(
            lambda v: strategy.reduce(tf.distribute.ReduceOp.MEAN, v, axis=None), outputs)

    def function(iterator):
        for _ in range(steps_per_execution):
            logs = one_step(iterator)
        return logs

    return function


@contextlib.contextmanager
def _resource_errors(training):
    """Turns resource faults during `fit` into `TrainingError`s that name the way back."""
    try:
        yield
    except (tf.errors.OpError, OSError) as error:
        latest = training.latest_checkpoint()
        resume = (f"the model directory resumes from {latest}" if latest
                  else "no checkpoint was written yet")
        message, detail = error_message(error), error_detail(error)
        if isinstance(error, tf.errors.ResourceExhaustedError):
            replicas = training.strategy.num_replicas_in_sync
            if latest:
                fix = ("the global batch is part of this run: resume it on devices with more "
                       f"memory or more of them (the batch is split over the replicas, now "
                       f"{replicas}), or start a new model_dir with a smaller data.batch_size")
            else:
                fix = ("rerun with a smaller data.batch_size or data.max_sequence_length "
                       f"(the global batch, split over {replicas} replica(s); both may change "
                       "until the first checkpoint)")
            raise TrainingError(f"out of memory at the configured batch size ({detail}); {fix}: "
                                f"{resume}.") from error
        if isinstance(error, tf.errors.NotFoundError):
            raise TrainingError(
                f"an input file disappeared during training ({detail}); "
                f"restore it and rerun the same command: {resume}.") from error
        if (isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EFBIG)) or any(
                s in message for s in ("No space left", "File too large")):
            raise TrainingError(f"the disk is full ({detail}); free space and "
                                f"rerun the same command: {resume}.") from error
        raise
