"""What every id -> vector layer shares with `keras.layers.Embedding` (not a public layer)."""

import keras


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
