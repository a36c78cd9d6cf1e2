"""What the id -> vector layers share (not public layers)."""

import keras
from keras import ops


class Untracked:
    """Holds tensors out of Keras/TF tracking: never a weight, in a checkpoint, in a
    SavedModel's variables or copied per replica."""

    def __init__(self, **tensors):
        self.__dict__.update(tensors)


class IdEmbeddingMixin:
    """`compute_mask` and `compute_output_shape` of an embedding (mix in before `Layer`),
    from its `output_dim` and `mask_zero` (id 0 is padding, as in `keras.layers.Embedding`)."""

    def compute_mask(self, inputs, mask=None):
        return keras.ops.not_equal(inputs, 0) if self.mask_zero else None

    def compute_output_shape(self, input_shape):
        return tuple(input_shape) + (self.output_dim,)


@keras.saving.register_keras_serializable(package="tfeff")
class TableEmbedding(keras.layers.Embedding):
    """`keras.layers.Embedding` that looks its rows up in the table's own dtype (float32
    under a mixed policy) and casts them to the compute dtype afterwards.

    Keras' mixed `Embedding`, called from a subclassed model's `call` with no autocast
    scope open (JAX's training step calls `call`, not `__call__`), reads its table in
    bfloat16: its gradient is then a bfloat16 scatter-add, in which a frequent id (or a
    segment id) loses most of its additions. Here the gather and its scatter-add are
    float32 on every backend and call path.
    """

    @property
    def compute_dtype(self):
        """The table's dtype, for the lookup and its gradient (Keras opens no autocast scope)."""
        return self.variable_dtype

    @property
    def rows_dtype(self):
        """The dtype of the rows this layer returns: its policy's compute dtype."""
        return keras.layers.Embedding.compute_dtype.fget(self)

    def call(self, inputs):
        return ops.cast(super().call(inputs), self.rows_dtype)

    def compute_output_spec(self, inputs):
        return keras.KerasTensor((*inputs.shape, self.output_dim), dtype=self.rows_dtype)
