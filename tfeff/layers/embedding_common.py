"""What every id -> vector layer shares with `keras.layers.Embedding` (not public layers)."""

import keras
from keras import ops


class IdEmbeddingMixin:
    """`compute_mask` and `compute_output_shape` of an embedding (mix in before `Layer`).

    The layer sets `output_dim` and `mask_zero`: with `mask_zero`, id 0 is
    padding and masked, as in `keras.layers.Embedding`.
    """

    def compute_mask(self, inputs, mask=None):
        if not self.mask_zero:
            return None
        return keras.ops.not_equal(inputs, 0)

    def compute_output_shape(self, input_shape):
        return tuple(input_shape) + (self.output_dim,)


@keras.saving.register_keras_serializable(package="tfeff")
class TableEmbedding(keras.layers.Embedding):
    """`keras.layers.Embedding` that looks its rows up in the table's own dtype (float32
    under a mixed policy) and casts them to the compute dtype afterwards.

    Under a mixed policy, a `keras.layers.Embedding` called directly from a subclassed
    model's `call` reads its table in the compute dtype when nothing has opened an
    autocast scope before it, which is the case in JAX's training step (the trainer's
    `stateless_call` calls the model's `call`, not `__call__`): Keras' layer opens a
    bfloat16 scope for a mixed layer whatever its `autocast` says. The table's
    gradient is then a bfloat16 scatter-add, in which a frequent id (or a segment id,
    thousands of positions per row) loses most of its additions. This layer computes in
    the variable dtype, so the gather and its gradient's scatter-add are float32 on
    every backend and in every call path, and returns rows of the policy's compute
    dtype, as `keras.layers.Embedding` would.
    """

    @property
    def compute_dtype(self):
        """The table's dtype: what the lookup (and its gradient) computes in. Keras'
        `__call__` then opens no autocast scope for this layer."""
        return self.variable_dtype

    @property
    def rows_dtype(self):
        """The dtype of the rows this layer returns: its policy's compute dtype."""
        return keras.layers.Embedding.compute_dtype.fget(self)

    def call(self, inputs):
        return ops.cast(super().call(inputs), self.rows_dtype)

    def compute_output_spec(self, inputs):
        return keras.KerasTensor((*inputs.shape, self.output_dim), dtype=self.rows_dtype)
