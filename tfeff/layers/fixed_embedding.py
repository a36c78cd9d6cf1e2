"""FixedEmbedding: a frozen embedding table gathered in host memory.

On TensorFlow the table is one `/CPU:0` tensor gathered on the host; on JAX and
PyTorch (no per-op host placement in a compiled step) it is a constant on the
default device, so there it costs device memory (mind it when sizing a word-level ELMo).
"""

import keras
import numpy as np

from tfeff.backend.host_memory import host_constant
from tfeff.backend.host_memory import host_take
from tfeff.layers.embedding_common import IdEmbeddingMixin
from tfeff.layers.embedding_common import Untracked


@keras.saving.register_keras_serializable(package="tfeff")
class FixedEmbedding(IdEmbeddingMixin, keras.layers.Layer):
    """A fixed embedding table that lives in host memory and is not a weight.

    The pre-trained vectors of ELMo-C (fastText rows of every vocabulary word)
    are both the input layer and the output targets. Never trained, they stay
    out of the model's variables (see the module docstring): only the rows a
    batch needs are gathered, then copied to the device of the step.

    Args:
        table: path to a `.npy` file `(vocabulary_size, dim)` (memory-mapped,
            then held once in host memory), or a 2-D float array. Only a
            path can be serialized with `get_config`.
        mask_zero: if True, id 0 is padding and `compute_mask` returns `ids != 0`.
        **kwargs: base `Layer` arguments.

    Call arguments:
        inputs: integer ids of any shape.

    Returns:
        float32 tensor `inputs.shape + (dim,)`.

    Raises:
        ValueError: `table` is not a readable `.npy` path or a non-empty 2-D finite array.

    Example:

    >>> layer = FixedEmbedding(np.eye(3, dtype="float32"))
    >>> layer(np.array([[2, 0]])).numpy().tolist()
    [[[0.0, 0.0, 1.0], [1.0, 0.0, 0.0]]]
    """

    def __init__(self, table, mask_zero=False, **kwargs):
        super().__init__(trainable=False, **kwargs)
        self.table_path = None
        if isinstance(table, str):
            self.table_path = table
            try:
                array = np.load(table, mmap_mode="r")
            except (OSError, ValueError) as e:
                raise ValueError(
                    f"Could not read the embedding table `{table}` as a .npy file: {e}"
                ) from e
        else:
            array = np.asarray(table)
        if array.ndim != 2 or array.shape[0] == 0 or array.shape[1] == 0:
            raise ValueError(
                "Received an invalid `table`, expected a non-empty 2-D array "
                f"(vocabulary_size, dim). Received shape: {array.shape}")
        values = np.ascontiguousarray(array, dtype=np.float32)
        bad = np.flatnonzero(~np.isfinite(values).all(axis=1))
        if bad.size:
            source = f"`{table}`" if self.table_path else "`table`"
            raise ValueError(
                f"The embedding table {source} holds NaN or Inf in {bad.size} of its "
                f"{values.shape[0]} rows (ids {', '.join(str(i) for i in bad[:5])}"
                f"{', ...' if bad.size > 5 else ''}): a fixed table must be finite; make it "
                "again (for a model directory: delete vocabulary_vectors.npy and rerun "
                "tfeff-pretrain, which makes it from the word vectors).")
        self._table = Untracked(tensor=host_constant(values))
        self.vocabulary_size, self.output_dim = (int(d) for d in array.shape)
        self.mask_zero = bool(mask_zero)
        self.supports_masking = self.mask_zero

    @property
    def table(self):
        """The host tensor `(vocabulary_size, dim)`."""
        return self._table.tensor

    def call(self, inputs):
        return host_take(self._table.tensor, inputs)  # inputs.shape + (dim,)

    def get_config(self):
        if self.table_path is None:
            raise NotImplementedError(
                "A FixedEmbedding built from an in-memory array cannot be serialized: "
                "save the table with numpy.save and pass its path as `table`.")
        config = super().get_config()
        config.pop("trainable", None)
        config.update({"table": self.table_path, "mask_zero": self.mask_zero})
        return config
