"""Training callbacks (TensorFlow-only)."""

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
