"""ScalarMix: ELMo's learned, softmax-normalized weighted sum of a model's layers."""

import keras
from keras import ops

from tfeff.backend.checks import check_float_inputs
from tfeff.backend.checks import check_mask_shape
from tfeff.backend.checks import check_rank


@keras.saving.register_keras_serializable(package="tfeff")
class ScalarMix(keras.layers.Layer):
    """ELMo's task-specific combination of the layers of a pretrained encoder.

        mix = gamma * sum_k softmax(w)_k * h_k

    with one trainable scalar w_k per layer and a trainable scale gamma
    (Peters et al. 2018, Eq. 1). With `layer_norm=True` each layer h_k is
    first normalized by the mean and variance of its values at the real
    (unmasked) tokens of the batch, as AllenNLP's `ScalarMix` does.

    Args:
        num_layers: number of layers mixed (L + 1 for an ELMo stack).
        layer_norm: normalize each layer over the masked tokens first.
        initial_weights: optional `num_layers` initial scalars w_k (default 0: the mean).
        initial_scale: initial gamma.
        epsilon: variance epsilon of the layer normalization.
        **kwargs: base `Layer` arguments.

    Call arguments:
        inputs: float `(batch, num_layers, time, dim)` (an embedder's
            `"layers"` output) or a list of `num_layers` `(batch, time, dim)`
            tensors (another dtype raises a `ValueError`).
        mask: optional bool `(batch, time)` (another shape raises a
            `ValueError` rather than broadcast); needed for `layer_norm` with
            padding, whose positions are left out of the statistics. With
            list inputs, the first of the layers' masks that is not None.

    Returns:
        `(batch, time, dim)`.

    Raises:
        ValueError: `num_layers` is not a positive integer or `initial_weights` not that long.

    Example:

    >>> mix = ScalarMix(3)
    >>> tuple(mix(keras.ops.ones((2, 3, 5, 4))).shape)
    (2, 5, 4)

    Reference:
        Peters et al., "Deep contextualized word representations", NAACL 2018.
    """

    def __init__(self, num_layers, layer_norm=False, initial_weights=None, initial_scale=1.0,
                 epsilon=1e-12, **kwargs):
        super().__init__(**kwargs)
        if not isinstance(num_layers, int) or num_layers <= 0:
            raise ValueError(
                "Received an invalid value for `num_layers`, expected a positive integer. "
                f"Received: num_layers={num_layers}")
        if initial_weights is not None and len(initial_weights) != num_layers:
            raise ValueError(
                f"`initial_weights` must have num_layers={num_layers} values. Received: "
                f"initial_weights={initial_weights}")
        self.num_layers = num_layers
        self.layer_norm = bool(layer_norm)
        self.initial_weights = (None if initial_weights is None
                                else [float(w) for w in initial_weights])
        self.initial_scale = float(initial_scale)
        self.epsilon = float(epsilon)
        self.supports_masking = True

    def build(self, input_shape):
        initial = self.initial_weights or [0.0] * self.num_layers
        self.layer_weights = self.add_weight(
            shape=(self.num_layers,), name="layer_weights",
            initializer=keras.initializers.Constant(initial))
        self.scale = self.add_weight(
            shape=(), name="scale", initializer=keras.initializers.Constant(self.initial_scale))

    def call(self, inputs, mask=None):
        if isinstance(inputs, (list, tuple)):
            inputs = [check_rank(self, x, ("batch", "time", "dim"), f"inputs[{i}]")
                      for i, x in enumerate(inputs)]
            inputs = ops.stack(inputs, axis=1)  # (batch, layers, time, dim)
        check_float_inputs(self, inputs)
        inputs = check_rank(
            self, inputs, ("batch", "num_layers", "time", "dim"),
            hint=" Pass the stack of the layers to mix (an embedder's `layers` output) or a "
                 "list of `num_layers` `(batch, time, dim)` tensors.")
        if inputs.shape[1] is not None and inputs.shape[1] != self.num_layers:
            raise ValueError(
                f"ScalarMix(num_layers={self.num_layers}) received {inputs.shape[1]} layers "
                f"(input shape {inputs.shape}).")
        if isinstance(mask, (list, tuple)):  # one per listed layer (Keras' masks)
            given = [check_mask_shape(self, inputs, m, f"mask[{i}]", axes=(0, 2))
                     for i, m in enumerate(mask) if m is not None]
            mask = given[0] if given else None
        elif mask is not None:
            mask = check_mask_shape(self, inputs, mask, axes=(0, 2))
        if self.layer_norm:
            inputs = self._normalize(inputs, mask)
        # The softmax of one weight is 1 (Keras warns about it).
        weights = (ops.ones((1,), inputs.dtype) if self.num_layers == 1
                   else ops.cast(ops.softmax(self.layer_weights), inputs.dtype))
        mixed = ops.einsum("k,bktd->btd", weights, inputs)
        return ops.cast(self.scale, inputs.dtype) * mixed

    def _normalize(self, inputs, mask):
        """Per layer: (h - mean) / sqrt(var + eps) over the real tokens' values."""
        keep = (ops.ones_like(inputs[:, :1, :, :1]) if mask is None
                else ops.cast(mask, inputs.dtype)[:, None, :, None])  # (batch, 1, time, 1)
        dim = ops.cast(ops.shape(inputs)[-1], inputs.dtype)
        count = ops.maximum(ops.sum(keep) * dim, 1.0)
        mean = ops.sum(inputs * keep, axis=(0, 2, 3), keepdims=True) / count
        var = ops.sum(ops.square((inputs - mean) * keep), axis=(0, 2, 3), keepdims=True) / count
        return (inputs - mean) / ops.sqrt(var + self.epsilon) * keep

    def compute_output_shape(self, input_shape):
        if isinstance(input_shape, (list, tuple)) and isinstance(input_shape[0], (list, tuple)):
            return tuple(input_shape[0])
        return (input_shape[0],) + tuple(input_shape[2:])

    def compute_mask(self, inputs, mask=None):
        return _first_mask(mask)

    def get_config(self):
        config = super().get_config()
        config.update({
            "num_layers": self.num_layers,
            "layer_norm": self.layer_norm,
            "initial_weights": self.initial_weights,
            "initial_scale": self.initial_scale,
            "epsilon": self.epsilon,
        })
        return config


def _first_mask(mask):
    """Of a list of masks (one per listed layer), the first that is not None."""
    if isinstance(mask, (list, tuple)):
        return next((m for m in mask if m is not None), None)
    return mask
