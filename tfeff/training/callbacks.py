"""Training callbacks (TensorFlow-only)."""

import logging
import sys
import time

import keras
import tensorflow as tf
from tensorflow.core.framework import summary_pb2

# What tf.summary.scalar writes when the tensorboard package is installed; here
# written with core TensorFlow so that logging needs no extra dependency.
_SCALAR_METADATA = summary_pb2.SummaryMetadata(
    plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name="scalars")
)


def write_scalar(name, value, step):
    """Writes one TensorBoard scalar to the default summary writer."""
    tf.summary.write(name, tf.constant(float(value), tf.float32), step=step,
                     metadata=_SCALAR_METADATA)


class ScalarLogger(keras.callbacks.Callback):
    """Writes training metrics and the learning rate as TensorBoard scalars.

    Every `every` steps (train/*) and at each epoch end (validation metrics,
    val_*). Event files are readable by TensorBoard (`pip install tensorboard`
    to view them); writing them needs only TensorFlow.
    """

    def __init__(self, log_dir, every):
        super().__init__()
        self.every = every
        self._writer = tf.summary.create_file_writer(log_dir)

    def _step(self):
        return int(keras.ops.convert_to_numpy(self.model.optimizer.iterations))

    def _write(self, prefix, logs, step):
        with self._writer.as_default():
            for name, value in (logs or {}).items():
                write_scalar(f"{prefix}/{name}", value, step)
        self._writer.flush()

    def on_train_batch_end(self, batch, logs=None):
        step = self._step()
        if step % self.every == 0:
            lr = self.model.optimizer.learning_rate
            logs = dict(logs or {})
            logs["learning_rate"] = float(keras.ops.convert_to_numpy(lr))
            self._write("train", logs, step)

    def on_epoch_end(self, epoch, logs=None):
        val = {k[4:]: v for k, v in (logs or {}).items() if k.startswith("val_")}
        if val:
            self._write("validation", val, self._step())

    def on_train_end(self, logs=None):
        self._writer.close()


def resolve_verbose(verbose, stream=None):
    """`(keras_verbose, log_lines)` for a `verbose` argument of `pretrain`.

    `"auto"` keeps Keras' live progress bar when `stream` (default stdout) is
    a terminal, and otherwise turns it off in favour of `ProgressLogger`'s one
    line per `train.log_every` steps: a bar redrawn every step is megabytes of
    carriage returns in a scheduler's log file. `0`, `1` and `2` are Keras'
    own and never add lines.
    """
    if verbose != "auto":
        return verbose, False
    stream = sys.stdout if stream is None else stream
    is_terminal = getattr(stream, "isatty", lambda: False)()
    return (1, False) if is_terminal else (0, True)


class ProgressLogger(keras.callbacks.Callback):
    """Logs one line every `every` optimizer steps: step, loss, learning rate, steps/s.

    For runs whose output is a file (nohup, batch schedulers), in place of
    Keras' progress bar. Validation metrics get a line of their own at the end
    of each checkpoint interval. Lines go to the `logging` module (stderr under
    the binaries), e.g.:

        step 200/1500: loss 0.7412, learning rate 0.00294, 11.6 steps/s
    """

    def __init__(self, every, total_steps, logger=None):
        super().__init__()
        if not isinstance(every, int) or every < 1:
            raise ValueError(
                f"Received an invalid value for `every`, expected a positive integer. "
                f"Received: every={every!r}")
        self.every, self.total_steps = every, total_steps
        self.logger = logger or logging.getLogger("tfeff.training")
        self._last = None

    def _step(self):
        return int(keras.ops.convert_to_numpy(self.model.optimizer.iterations))

    def on_train_begin(self, logs=None):
        self._last = (self._step(), time.perf_counter())

    def on_train_batch_end(self, batch, logs=None):
        step = self._step()
        if step % self.every or step == self._last[0]:
            return
        now = time.perf_counter()
        rate = (step - self._last[0]) / max(now - self._last[1], 1e-9)
        self._last = (step, now)
        lr = float(keras.ops.convert_to_numpy(self.model.optimizer.learning_rate))
        metrics = ", ".join(f"{k} {float(v):.4f}" for k, v in (logs or {}).items())
        self.logger.info("step %d/%d: %s%slearning rate %.3g, %.2f steps/s", step,
                         self.total_steps, metrics, ", " if metrics else "", lr, rate)

    def on_epoch_end(self, epoch, logs=None):
        val = {k: v for k, v in (logs or {}).items() if k.startswith("val_")}
        if val:
            self.logger.info("validation at step %d: %s", self._step(),
                             ", ".join(f"{k[4:]} {float(v):.4f}" for k, v in val.items()))
