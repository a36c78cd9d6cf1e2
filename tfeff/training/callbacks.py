"""Training callbacks (TensorFlow-only): scalars, progress, non-finite updates, stop and save."""

import logging
import shutil
import sys
import time

import keras
import tensorflow as tf
from tensorflow.core.framework import summary_pb2

from tfeff.training import checkpoints
from tfeff.training.errors import NonFiniteLossError

# What tf.summary.scalar writes with the tensorboard package, here with core TensorFlow.
_SCALAR_METADATA = summary_pb2.SummaryMetadata(
    plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name="scalars"))


def write_scalar(name, value, step):
    """Writes one TensorBoard scalar to the default summary writer."""
    tf.summary.write(name, tf.constant(float(value), tf.float32), step=step,
                     metadata=_SCALAR_METADATA)


def _step(callback):
    return int(keras.ops.convert_to_numpy(callback.model.optimizer.iterations))


class ScalarLogger(keras.callbacks.Callback):
    """Writes training metrics and the learning rate as TensorBoard scalars: every `every`
    steps (train/*) and the validation metrics at each epoch end (validation/*)."""

    def __init__(self, log_dir, every):
        super().__init__()
        self.every = every
        self._writer = tf.summary.create_file_writer(log_dir)

    def _write(self, prefix, logs, step):
        with self._writer.as_default():
            for name, value in (logs or {}).items():
                write_scalar(f"{prefix}/{name}", value, step)
        self._writer.flush()

    def on_train_batch_end(self, batch, logs=None):
        step = _step(self)
        if step % self.every == 0:
            lr = float(keras.ops.convert_to_numpy(self.model.optimizer.learning_rate))
            self._write("train", {**(logs or {}), "learning_rate": lr}, step)

    def on_epoch_end(self, epoch, logs=None):
        val = {k[4:]: v for k, v in (logs or {}).items() if k.startswith("val_")}
        if val:
            self._write("validation", val, _step(self))

    def on_train_end(self, logs=None):
        self._writer.close()


def resolve_verbose(verbose, stream=None):
    """`(keras_verbose, progress)` for a `verbose` argument of `pretrain`.

    `"auto"` replaces Keras' per-interval bar by `ProgressLogger`: `"live"` on a terminal
    `stream` (default stdout), else `"lines"` (a bar redrawn every step is megabytes of
    carriage returns in a log file). `0`, `1`, `2` are Keras' own (progress None).
    """
    if verbose != "auto":
        return verbose, None
    stream = sys.stdout if stream is None else stream
    return 0, ("live" if getattr(stream, "isatty", lambda: False)() else "lines")


def format_duration(seconds):
    """`"42s"`, `"7m05s"`, `"3h07m"`: whole seconds below an hour, minutes above."""
    seconds = max(0, int(round(seconds)))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


class ProgressLogger(keras.callbacks.Callback):
    """Progress against the whole run (`total_steps` optimizer steps), from any start.

    Every `every` steps `logger` gets a line (docs/guides/pretraining.md shows one); the
    time left is at the mean rate since this process' first line (without the first
    step's tracing). With `live=True` (a terminal) the line is redrawn in place on
    `stream`, at most ten times a second. Validation metrics get a line of their own.
    """

    def __init__(self, every, total_steps, logger=None, live=False, stream=None,
                 steps_per_epoch=None):
        super().__init__()
        if not isinstance(every, int) or every < 1:
            raise ValueError(
                f"Received an invalid value for `every`, expected a positive integer. "
                f"Received: every={every!r}")
        self.every, self.total_steps = every, total_steps
        self.logger = logger or logging.getLogger("tfeff.training")
        self.live, self.stream = live, stream
        self.steps_per_epoch = steps_per_epoch
        self._begin = self._first = self._last = None
        self._drawn = 0.0

    def on_train_begin(self, logs=None):
        now = time.perf_counter()
        self._begin, self._first = now, None
        self._last = (_step(self), now)

    def _line(self, step, now, rate, logs):
        lr = float(keras.ops.convert_to_numpy(self.model.optimizer.learning_rate))
        metrics = "".join(f"{k} {float(v):.4f}, " for k, v in (logs or {}).items())
        eta = ""
        if self._first is not None and step > self._first[0]:
            mean = (step - self._first[0]) / max(now - self._first[1], 1e-9)
            eta = f", ETA {format_duration((self.total_steps - step) / mean)}"
        percent = 100 * step // max(self.total_steps, 1)
        epoch = f", epoch {step / self.steps_per_epoch:.2f}" if self.steps_per_epoch else ""
        return (f"step {step}/{self.total_steps} ({percent}%){epoch}: {metrics}learning rate "
                f"{lr:.3g}, {rate:.2f} steps/s, elapsed {format_duration(now - self._begin)}"
                f"{eta}")

    def on_train_batch_end(self, batch, logs=None):
        step = _step(self)
        if step == self._last[0]:
            return
        now = time.perf_counter()
        due = ((now - self._drawn >= 0.1 or step >= self.total_steps) if self.live
               else step % self.every == 0)  # a terminal: at most ten redraws a second
        if not due:
            return
        rate = (step - self._last[0]) / max(now - self._last[1], 1e-9)
        if self._first is None:
            self._first = (step, now)
        self._last, self._drawn = (step, now), now
        line = self._line(step, now, rate, logs)
        if self.live:
            width = shutil.get_terminal_size((120, 24)).columns - 1  # a wrapped line
            self._write("\r" + line[:width] + "\x1b[K")
        else:
            self.logger.info("%s", line)

    def _write(self, text):
        stream = self.stream or sys.stdout
        stream.write(text)
        stream.flush()

    def on_epoch_end(self, epoch, logs=None):
        val = {k: v for k, v in (logs or {}).items() if k.startswith("val_")}
        if val:
            line = "validation at step %d: %s" % (
                _step(self), ", ".join(f"{k[4:]} {float(v):.4f}" for k, v in val.items()))
            if self.live:
                self._write("\n" + line + "\n")
            else:
                self.logger.info("%s", line)

    def on_train_end(self, logs=None):
        if self.live and self._drawn:
            self._write("\n")


class NonFiniteCallback(keras.callbacks.Callback):
    """Reports updates the optimizer skipped for NaN/Inf gradients; stops with `on_nan="stop"`."""

    def __init__(self, optimizer, on_nan, latest_checkpoint):
        super().__init__()
        self.optimizer, self.on_nan, self.latest_checkpoint = optimizer, on_nan, latest_checkpoint
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


class StopAndSave(keras.callbacks.Callback):
    """Saves every `every` steps and at `stop_step` (where it stops), or when `preemption`
    is `requested`; `training` is the run's `ResumableTraining`."""

    def __init__(self, training, every, stop_step, preemption):
        super().__init__()
        self.training, self.every, self.stop_step = training, every, stop_step
        self.preemption, self.preempted, self._flag = preemption, False, None

    def _preempt_requested(self):
        strategy = self.training.strategy
        if self.training.info.num_workers == 1:
            return self.preemption.requested
        if self._flag is None:  # every worker's flag, summed: all stop at the same step
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
        last = checkpoints.checkpoint_step(latest) if latest else 0
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
