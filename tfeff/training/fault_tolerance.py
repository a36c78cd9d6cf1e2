"""Resumable training: checkpoints with the input position, preemption, faults, multi-worker input.

`ResumableTraining` is the part of `tfeff-pretrain` that every model family
shares once its model and optimizer are built:

* **Checkpoints** (`tf.train.CheckpointManager` under `<model_dir>/checkpoints`)
  hold the model, the optimizer, the Keras random-seed states (dropout,
  anchors), the input position (batches read) and, where TensorFlow can save
  it, the `tf.data` iterator itself (shuffle buffers, file offsets). A new
  checkpoint is written to temporary files and only then named in the
  `checkpoint` index file, so a crash while writing leaves the previous one
  as the latest.
* **Restore** reads every tensor of the chosen checkpoint first, so a
  truncated or corrupted file is reported by name (`CheckpointError`);
  `restore_fallback=True` then uses the newest checkpoint that reads cleanly.
* **Exact resume.** A single-replica run saves the iterator state, so a
  resumed run continues with the very next batch. Multi-replica strategies
  cannot save `tf.data` iterators (their distributed iterators are not
  checkpointable); the input is then rebuilt from its seed and the saved
  position is skipped (re-reading that much input) or, for position-addressed
  pipelines (Masked ELMo), started there directly.
* **Preemption.** SIGTERM (and SIGINT) is noted; at the end of the current
  step the run saves a checkpoint and returns `preempted=True` (the binary
  exits with `PREEMPTED_EXIT_CODE`). Under multi-worker training the workers
  agree on the flag each step, so all of them stop at the same step.
* **Non-finite losses.** The optimizer skips any update with NaN/Inf
  gradients (`tfeff.training.optimizers.SkipNonFiniteUpdates`); with
  `train.on_nan: stop` training then stops with `NonFiniteLossError` naming
  the step (no checkpoint of that step is written), with `skip` it logs the
  step and goes on.
* **Resource errors** (out of memory, a corpus file gone mid-run, a full or
  unwritable disk) become a `TrainingError` that says what happened and which
  checkpoint the next run resumes from.
* **Multi-worker input.** Each worker reads its share: whole files when there
  are at least as many files as workers, otherwise its rows of every global
  batch (every worker reads all the data; the global batch is then exactly a
  single-process run's).
"""

import dataclasses
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

# What `tfeff-pretrain` exits with after a preemption checkpoint (as TF's
# PreemptionCheckpointHandler): non-zero, so a scheduler restarts the job.
PREEMPTED_EXIT_CODE = 42
_ITERATOR_KEY = "iterator"
_ITERATOR_STATE_PREFIX = f"{_ITERATOR_KEY}/.ATTRIBUTES/"


class TrainingError(RuntimeError):
    """A training fault reported to the user; the model directory stays resumable."""


class CheckpointError(TrainingError):
    """A checkpoint that cannot be read (truncated, corrupted, missing files)."""


class NonFiniteLossError(TrainingError):
    """The loss or its gradients were NaN/Inf at a step (`train.on_nan: stop`)."""


def _message(error):
    return getattr(error, "message", None) or str(error)


_DETAIL = re.compile(r"No such file|not found|NotFound|OOM|out of memory|No space|File too large",
                     re.IGNORECASE)


def _detail(error):
    """The line of a (graph execution) error that says what happened."""
    lines = [line.strip() for line in _message(error).splitlines() if line.strip()]
    for line in lines:
        if _DETAIL.search(line):
            return line
    return lines[-1] if lines else type(error).__name__


# ------------------------------------------------------------------ workers


@dataclasses.dataclass(frozen=True)
class WorkerInfo:
    """This process's place in the cluster."""

    num_workers: int = 1
    index: int = 0
    is_chief: bool = True
    replicas_per_worker: int = 1


def worker_info(strategy):
    """`WorkerInfo` of `strategy` (one worker unless it is multi-worker)."""
    extended = strategy.extended
    in_multi_worker = getattr(extended, "_in_multi_worker_mode", lambda: False)()
    replicas = strategy.num_replicas_in_sync
    if not in_multi_worker:
        return WorkerInfo(replicas_per_worker=replicas)
    resolver = strategy.cluster_resolver
    spec = resolver.cluster_spec().as_dict()
    task_type, task_id = resolver.task_type, resolver.task_id
    ordered = [(t, i) for t in ("chief", "worker") for i in range(len(spec.get(t, [])))]
    num_workers = len(ordered)
    index = ordered.index((task_type, task_id))
    return WorkerInfo(num_workers=num_workers, index=index, is_chief=index == 0,
                      replicas_per_worker=replicas // num_workers)


def barrier(strategy):
    """Returns once every worker has called it (a no-op on one worker)."""
    if worker_info(strategy).num_workers == 1:
        return

    @tf.function
    def all_reduce():
        return strategy.run(lambda: tf.constant(1.0))

    strategy.reduce(tf.distribute.ReduceOp.SUM, all_reduce(), axis=None)


def chief_first(strategy, fn):
    """Runs `fn` on the chief, then (after a barrier) on the other workers.

    Data preparation writes shared files (corpus, vocabulary, fastText); the
    other workers must read the chief's, not race it with their own.
    """
    if worker_info(strategy).is_chief:
        result = fn()
        barrier(strategy)
        return result
    barrier(strategy)
    return fn()


def shard_files(files, batch_size, file_shard):
    """`(files, batch_size)` of one worker: every `num`-th file from `index`, its rows.

    `file_shard` is `None` (all files, the global batch) or `(num_workers, index)`,
    as `ResumableTraining.fit` passes it to a pipeline's `build`.
    """
    if not file_shard:
        return files, batch_size
    num, index = file_shard
    return files[index::num], batch_size // num


def _slice_rows(batch, start, size):
    return tf.nest.map_structure(lambda t: t[start:start + size], batch)


# ------------------------------------------------------------------ checkpoints


def check_writable(directory):
    """Creates `directory` and writes a probe file; TrainingError naming it otherwise."""
    try:
        tf.io.gfile.makedirs(directory)
        probe = os.path.join(directory, f".tfeff-write-test-{os.getpid()}")
        with tf.io.gfile.GFile(probe, "w") as f:
            f.write("ok")
        tf.io.gfile.remove(probe)
    except (OSError, tf.errors.OpError) as e:
        raise TrainingError(f"model_dir {directory} is not writable: {_message(e)}") from e


def verify_checkpoint(prefix):
    """Reads every tensor of checkpoint `prefix` (checksums included).

    Raises:
        CheckpointError: naming the checkpoint's files, when one is missing,
            truncated or fails its checksum.
    """
    try:
        reader = tf.train.load_checkpoint(prefix)
        dtypes = reader.get_variable_to_dtype_map()
        for name, dtype in dtypes.items():
            # RestoreV2 reads variant tensors (iterator states) too, unlike the reader.
            tf.raw_ops.RestoreV2(prefix=prefix, tensor_names=[name], shape_and_slices=[""],
                                 dtypes=[dtype])
    except (tf.errors.OpError, ValueError) as e:
        raise CheckpointError(
            f"checkpoint {prefix} ({prefix}.index, {prefix}.data-*) is corrupted or "
            f"truncated: {_message(e)}") from e
    return set(dtypes)


def checkpoint_step(prefix):
    return int(prefix.rsplit("-", 1)[-1])


def select_checkpoint(directory, fallback=False):
    """The newest readable checkpoint of `directory` and its tensor names, or `(None, set())`.

    Raises:
        CheckpointError: the newest checkpoint (or, with `fallback`, every
            one) is unreadable; the message names it and the way out.
    """
    try:
        state = tf.train.get_checkpoint_state(directory)
    except (tf.errors.OpError, ValueError) as e:
        raise CheckpointError(
            f"{os.path.join(directory, 'checkpoint')} (the checkpoint index) cannot be "
            f"parsed: {_message(e)}") from e
    if state is None:
        return None, set()
    # The names only: a copied or moved model directory still lists its old paths.
    candidates = [os.path.join(directory, os.path.basename(p)) for p in
                  (list(state.all_model_checkpoint_paths) or [state.model_checkpoint_path])]
    candidates = sorted(set(candidates), key=checkpoint_step, reverse=True)
    errors = []
    for prefix in candidates:
        try:
            names = verify_checkpoint(prefix)
        except CheckpointError as e:
            if not fallback:
                older = f" ({candidates[1]})" if len(candidates) > 1 else ""
                raise CheckpointError(
                    f"{e}. Rerun with --restore_fallback to restore the previous "
                    f"checkpoint{older} instead.") from e
            logging.warning("Skipping unreadable checkpoint: %s", e)
            errors.append(str(e))
            continue
        if errors:
            logging.warning("Falling back to %s", prefix)
        return prefix, names
    raise CheckpointError(f"no readable checkpoint in {directory}: " + "; ".join(errors))


def _relative_checkpoint_state(directory):
    """Rewrites the `checkpoint` index with names relative to `directory`.

    `tf.train.CheckpointManager` records absolute paths; in a copied or moved
    model directory they point at the old place, where the manager would then
    delete old checkpoints. Relative names keep the directory self-contained.
    """
    try:
        state = tf.train.get_checkpoint_state(directory)
    except (tf.errors.OpError, ValueError):
        return  # select_checkpoint reports it
    if state is None or not os.path.isabs(state.model_checkpoint_path):
        return
    tf.compat.v1.train.update_checkpoint_state(
        directory, os.path.basename(state.model_checkpoint_path),
        [os.path.basename(p) for p in state.all_model_checkpoint_paths])


# ------------------------------------------------------------------ callbacks


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


class NonFiniteCallback(keras.callbacks.Callback):
    """Reports updates the optimizer skipped for NaN/Inf gradients; stops with `on_nan="stop"`."""

    def __init__(self, optimizer, on_nan, latest_checkpoint):
        super().__init__()
        self.optimizer = optimizer
        self.on_nan = on_nan
        self.latest_checkpoint = latest_checkpoint
        self._seen = int(optimizer.non_finite_steps.numpy())

    def on_train_batch_end(self, batch, logs=None):
        count = int(self.optimizer.non_finite_steps.numpy())
        if count == self._seen:
            return
        new, self._seen = count - self._seen, count
        step = int(self.optimizer.last_non_finite_step.numpy())
        if self.on_nan == "stop":
            latest = self.latest_checkpoint()
            last = f"the last checkpoint is {latest}" if latest else "there is no checkpoint yet"
            raise NonFiniteLossError(
                f"the loss or its gradients are NaN/Inf at step {step}: the update was not "
                f"applied and training stopped without a checkpoint of that step; {last}. "
                "Rerun with --on_nan=skip (train.on_nan: skip) to skip such batches.")
        logging.warning("Skipped %d update(s) with NaN/Inf loss or gradients (last at step %d; "
                        "%d so far)", new, step, count)


# ------------------------------------------------------------------ training


class ResumableTraining:
    """Checkpointing, restore and `fit` for one model directory (see the module docstring).

    Build the model and optimizer under `strategy.scope()`, then create this
    object (also in the scope), call `restore()`, and `fit(...)`.

    Args:
        model, optimizer: built Keras model and optimizer (the optimizer a
            `SkipNonFiniteUpdates`, as `make_optimizer` returns).
        directory: the checkpoint directory (`<model_dir>/checkpoints`).
        max_to_keep: checkpoints kept.
        strategy: the `tf.distribute` strategy they were built under.
    """

    def __init__(self, model, optimizer, directory, max_to_keep, strategy):
        self.model, self.optimizer, self.strategy = model, optimizer, strategy
        self.directory = directory
        self.info = worker_info(strategy)
        with tf.init_scope():
            self.position = tf.Variable(0, dtype=tf.int64, trainable=False,
                                        name="data_position")
            # The position the saved iterator's pipeline was built at (its skip is
            # part of the iterator's structure, which a restore must rebuild).
            self.origin = tf.Variable(0, dtype=tf.int64, trainable=False, name="data_origin")
        weights = {id(v) for v in model.weights}
        rng = {f"{i:03d}.{v.path.replace('/', '.')}": v
               for i, v in enumerate(v for v in model.variables if id(v) not in weights
                                     and "seed_generator" in v.path)}
        self.checkpoint = checkpoints.make_checkpoint(model, optimizer)
        self.checkpoint.rng = rng
        self.checkpoint.data_position = self.position
        self.checkpoint.data_origin = self.origin
        # Every worker saves (TensorFlow's rule); only the chief's copy is kept.
        save_dir = directory if self.info.is_chief else os.path.join(
            directory, f".worker-{self.info.index}")
        if self.info.is_chief:
            _relative_checkpoint_state(directory)
        self.manager = tf.train.CheckpointManager(self.checkpoint, save_dir,
                                                  max_to_keep=max_to_keep)
        self.restored = None
        self._restored_names = set()
        self._iterator = None

    # -- restore / save

    def restore(self, fallback=False):
        """Restores the newest readable checkpoint (`select_checkpoint`); returns its step or 0."""
        prefix, names = select_checkpoint(self.directory, fallback)
        if prefix is None:
            return 0
        # Model and optimizer must match exactly; the seed states and the input
        # position are restored where the checkpoint has them (a CoRe conversion
        # writes no seed states).
        checkpoints.restore(checkpoints.make_checkpoint(self.model, self.optimizer), prefix)
        tf.train.Checkpoint(rng=self.checkpoint.rng, data_position=self.position,
                            data_origin=self.origin).restore(prefix).expect_partial()
        self.restored, self._restored_names = prefix, names
        logging.info("Restored %s (input position %d)", prefix, int(self.position.numpy()))
        return int(keras.ops.convert_to_numpy(self.optimizer.iterations))

    @property
    def step(self):
        return int(keras.ops.convert_to_numpy(self.optimizer.iterations))

    def latest_checkpoint(self):
        return tf.train.latest_checkpoint(self.directory) or self.restored

    def save(self):
        """Saves at the current step (all workers); TrainingError if the disk refuses."""
        step = self.step
        try:
            path = self.manager.save(checkpoint_number=step)
        except (OSError, tf.errors.OpError) as e:
            previous = self.latest_checkpoint()
            kept = (f"The previous checkpoint {previous} is intact" if previous
                    else "No checkpoint was written")
            raise TrainingError(
                f"could not write the checkpoint of step {step} to {self.directory}: "
                f"{_detail(e)}. {kept}; free space (or fix the directory) and rerun the same "
                "command to resume.") from e
        if not self.info.is_chief:
            tf.io.gfile.rmtree(os.path.dirname(path))
        return path

    def save_if_new(self):
        latest = self.manager.latest_checkpoint
        if latest is None or checkpoint_step(latest) != self.step:
            self.save()

    # -- input

    def _input(self, build, num_files, global_batch_size):
        """The dataset (or distributed dataset) that `fit` reads, positioned at the checkpoint."""
        position = int(self.position.numpy())
        info = self.info
        if info.num_workers == 1:
            if self.strategy.num_replicas_in_sync == 1 and self._save_iterator:
                if any(n.startswith(_ITERATOR_STATE_PREFIX) for n in self._restored_names):
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

        def per_worker(context):
            del context  # WorkerInfo says the same, and also covers the file shard
            if by_files:
                ds = build(position, (info.num_workers, info.index))
            else:
                def mine(batch):
                    rows = tf.shape(tf.nest.flatten(batch)[0])[0] // info.num_workers
                    return _slice_rows(batch, rows * info.index, rows)

                ds = build(position, None).map(mine)
            if info.replicas_per_worker > 1:
                ds = ds.rebatch(per_replica)
            return ds

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
                                f"this input pipeline ({_detail(e)}): the input code changed "
                                "since it was saved; resume with the tfeff version that wrote "
                                "it, or start a new model_dir.") from e
                        logging.info("Restored the input iterator of %s", self.restored)
            logs = train_function(iterator)
            self.position.assign_add(self.model.steps_per_execution or 1)
            return logs

        return wrapped

    def fit(self, build, stop_step, *, global_batch_size, num_files=None, every, on_nan="stop",
            callbacks=(), validation_data=None, validation_steps=None, verbose="auto",
            log_every=None):
        """Trains to `stop_step` (saving every `every` steps); returns `(history, preempted)`.

        Args:
            build: `build(position, file_shard)` -> dataset of the batches from
                input position `position` on: global batches with `file_shard`
                None, else (num_workers, index) and this worker's files with
                its share of the batch. `build.checkpointable = False` marks a
                pipeline whose iterator TensorFlow cannot save (then the
                position is what resumes it).
            global_batch_size: rows of a global batch.
            num_files: input files (file-level sharding needs >= workers); None
                when the pipeline cannot be sharded by file.
            every: checkpoint interval in steps (also Keras' epoch length).
            on_nan: `"stop"` or `"skip"` (see `NonFiniteCallback`).
            callbacks: more Keras callbacks.
            validation_data, validation_steps: as `model.fit`.
            verbose: as `model.fit`, except that `"auto"` logs one line per
                `log_every` steps (default `every`) instead of a progress bar
                when stdout is not a terminal (`callbacks.resolve_verbose`).
            log_every: steps between those lines.
        """
        start = self.step
        if start >= stop_step:
            return {}, False
        self._restore_iterator, self._iterator = False, None
        self._save_iterator = getattr(build, "checkpointable", True)
        x = self._input(build, num_files, global_batch_size)
        if validation_data is not None and self.info.num_workers > 1:
            options = tf.data.Options()
            options.experimental_distribute.auto_shard_policy = (
                tf.data.experimental.AutoShardPolicy.DATA)
            validation_data = validation_data.with_options(options)
        if self.info.num_workers > 1:
            # Keras 3 reduces scalar logs with strategy.reduce(MEAN, v, axis=0) under
            # MultiWorkerMirroredStrategy, which fails on scalars; these reduce over replicas.
            steps = self.model.steps_per_execution or 1
            self.model.train_function = _cross_worker_function(
                self.model.train_step, self.strategy, steps)
            self.model.test_function = _cross_worker_function(
                self.model.test_step, self.strategy, 1)
            # Keras' pre-fit symbolic build peeks at a batch and reduces it with
            # strategy.reduce, which fails on dict batches under this strategy; the
            # model and optimizer are built already, so there is nothing to build.
            self.model._maybe_symbolic_build = lambda iterator=None, data_batch=None: None
        else:
            self.model.make_train_function()
        self.model.train_function = self._capture(self.model.train_function)
        preemption = _Preemption()
        stop = _StopAndSave(self, every, stop_step, preemption)
        all_callbacks = [NonFiniteCallback(self.optimizer, on_nan, self.latest_checkpoint),
                         stop, *callbacks]
        verbose, log_lines = callbacks_lib.resolve_verbose(verbose)
        if log_lines and self.info.is_chief:
            all_callbacks.append(callbacks_lib.ProgressLogger(log_every or every, stop_step))
        with preemption, _resource_errors(self):
            # Keras counts batches, the stop is by updates: skipped updates (on_nan:
            # skip) need more batches, and _StopAndSave ends the run at stop_step.
            epochs = -(-stop_step // every) * (2 if on_nan == "skip" else 1)
            fit = self.model.fit(
                x, epochs=epochs, initial_epoch=start // every,
                steps_per_epoch=every, validation_data=validation_data,
                validation_steps=validation_steps if validation_data is not None else None,
                callbacks=all_callbacks, verbose=verbose if self.info.is_chief else 0,
            )
        self.model.train_function = self.model.test_function = None  # Keras' own next time
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


class _StopAndSave(keras.callbacks.Callback):
    """Saves every `every` steps and at `stop_step` (where it stops), or when preempted."""

    def __init__(self, training, every, stop_step, preemption):
        super().__init__()
        self.training, self.every, self.stop_step = training, every, stop_step
        self.preemption = preemption
        self.preempted = False
        self._flag = None

    def _preempt_requested(self):
        strategy = self.training.strategy
        if self.training.info.num_workers == 1:
            return self.preemption.requested
        if self._flag is None:
            @tf.function
            def any_worker(flag):
                return strategy.run(lambda: tf.identity(flag))

            self._flag = any_worker
        value = strategy.reduce(tf.distribute.ReduceOp.SUM,
                                self._flag(tf.constant(float(self.preemption.requested))),
                                axis=None)
        return float(value) > 0

    def on_train_batch_end(self, batch, logs=None):
        step = self.training.step
        latest = self.training.manager.latest_checkpoint
        last = checkpoint_step(latest) if latest else 0
        if self._preempt_requested():
            self.training.save()
            logging.warning("Preempted: saved the checkpoint of step %d; rerun the same "
                            "command to resume", step)
            self.preempted = True
            self.model.stop_training = True
            return
        if step >= self.stop_step or step // self.every > last // self.every:
            self.training.save()
        if step >= self.stop_step:
            self.model.stop_training = True


class _resource_errors:
    """Turns resource faults during `fit` into `TrainingError`s that name the way back."""

    def __init__(self, training):
        self.training = training

    def __enter__(self):
        return self

    def __exit__(self, kind, error, tb):
        if error is None or isinstance(error, TrainingError):
            return False
        latest = self.training.latest_checkpoint()
        resume = (f"the model directory resumes from {latest}" if latest
                  else "no checkpoint was written yet")
        if not isinstance(error, (tf.errors.OpError, OSError)):
            return False
        message, detail = _message(error), _detail(error)
        if isinstance(error, tf.errors.ResourceExhaustedError):
            replicas = self.training.strategy.num_replicas_in_sync
            if latest:
                fix = ("the global batch is part of this run: resume it on devices with more "
                       f"memory or more of them (the batch is split over the replicas, now "
                       f"{replicas}), or start a new model_dir with a smaller data.batch_size")
            else:
                fix = ("rerun with a smaller data.batch_size or data.max_sequence_length "
                       f"(the global batch, split over {replicas} replica(s); both may change "
                       "until the first checkpoint)")
            raise TrainingError(
                f"out of memory at the configured batch size ({detail}); {fix}: {resume}."
            ) from error
        if isinstance(error, tf.errors.NotFoundError):
            raise TrainingError(
                f"an input file disappeared during training ({detail}); "
                f"restore it and rerun the same command: {resume}.") from error
        no_space = (isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EFBIG)) \
            or any(s in message for s in ("No space left", "File too large"))
        if no_space:
            raise TrainingError(f"the disk is full ({detail}); free space and "
                                f"rerun the same command: {resume}.") from error
        return False
