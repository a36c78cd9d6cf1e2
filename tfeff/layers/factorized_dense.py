"""FactorizedDense: a dense layer whose kernel is a product of two thin matrices (CoRe)."""

import keras
import numpy as np
from keras import ops


@keras.saving.register_keras_serializable(package="tfeff")
class FactorizedDense(keras.layers.Layer):
    """`activation(x A B + b)`: a `Dense` whose kernel is factorized through `rank`.

    CoRe's relaxed BERT (Yang et al.) replaces each feed-forward weight
    W (d x d_f) by `input_kernel` A (d x rank) times `output_kernel` B
    (rank x units), with no nonlinearity in between: O(n * rank * (d + units))
    instead of O(n * d * units). `merged()` returns the weights of the
    equivalent `keras.layers.Dense` (used by `tfeff.convert.merge_relaxed_bert`).

    Args:
        units: positive int, output size.
        rank: positive int, the inner dimension d_r (paper: 64).
        activation: activation applied after the bias (as in `Dense`).
        use_bias: whether to add a bias of size `units`.
        input_kernel_initializer: initializer of A.
        output_kernel_initializer: initializer of B.
        bias_initializer: initializer of b.
        **kwargs: base `Layer` arguments.

    Call arguments:
        inputs: `(..., input_dim)`.

    Returns:
        `(..., units)`.

    Raises:
        ValueError: `units` or `rank` is not a positive integer.

    Example:

    >>> layer = FactorizedDense(units=8, rank=2)
    >>> tuple(layer(keras.ops.ones((3, 5))).shape)
    (3, 8)
    >>> layer.merged()[0].shape
    (5, 8)

    Reference:
        Yang et al., "An Efficient Coarse-refined Training Framework for
        BERT", Section 4.2.
    """

    def __init__(
        self,
        units,
        rank,
        activation=None,
        use_bias=True,
        input_kernel_initializer="glorot_uniform",
        output_kernel_initializer="glorot_uniform",
        bias_initializer="zeros",
        **kwargs,
    ):
        super().__init__(**kwargs)
        for name, value in (("units", units), ("rank", rank)):
            if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value <= 0:
                raise ValueError(
                    f"Received an invalid value for `{name}`, expected a positive integer. "
                    f"Received: {name}={value!r}")
        self.units = int(units)
        self.rank = int(rank)
        self.activation = keras.activations.get(activation)
        self.use_bias = bool(use_bias)
        self.input_kernel_initializer = keras.initializers.get(input_kernel_initializer)
        self.output_kernel_initializer = keras.initializers.get(output_kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self.input_spec = keras.layers.InputSpec(min_ndim=2)
        self.supports_masking = True  # like keras.layers.Dense: masks pass through

    def build(self, input_shape):
        input_dim = input_shape[-1]
        if input_dim is None:
            raise ValueError(
                "The last dimension of the inputs to `FactorizedDense` must be known. "
                f"Received: input_shape={input_shape}")
        self.input_kernel = self.add_weight(
            name="input_kernel", shape=(input_dim, self.rank),
            initializer=self.input_kernel_initializer,
        )
        self.output_kernel = self.add_weight(
            name="output_kernel", shape=(self.rank, self.units),
            initializer=self.output_kernel_initializer,
        )
        self.bias = None
        if self.use_bias:
            self.bias = self.add_weight(
                name="bias", shape=(self.units,), initializer=self.bias_initializer
            )
        self.input_spec = keras.layers.InputSpec(min_ndim=2, axes={-1: input_dim})

    def call(self, inputs):
        low = ops.matmul(inputs, ops.cast(self.input_kernel, self.compute_dtype))  # (..., rank)
        outputs = ops.matmul(low, ops.cast(self.output_kernel, self.compute_dtype))
        if self.bias is not None:
            outputs = ops.add(outputs, ops.cast(self.bias, self.compute_dtype))
        if self.activation is not None:
            outputs = self.activation(outputs)
        return outputs

    def merged(self):
        """The equivalent `Dense` weights: NumPy `(kernel (input_dim, units), bias or None)`,
        A B computed in float64 and rounded once to the variables' dtype."""
        if not self.built:
            raise ValueError(
                f"FactorizedDense `{self.name}` is not built, so it has no weights to merge: "
                "call it on inputs or `build((None, input_dim))` first.")
        a = keras.ops.convert_to_numpy(self.input_kernel)
        b = np.asarray(keras.ops.convert_to_numpy(self.output_kernel), np.float64)
        kernel = (np.asarray(a, np.float64) @ b).astype(a.dtype)
        bias = None if self.bias is None else keras.ops.convert_to_numpy(self.bias).copy()
        return kernel, bias

    def compute_output_shape(self, input_shape):
        return tuple(input_shape[:-1]) + (self.units,)

    def get_config(self):
        config = super().get_config()
        serialize = keras.initializers.serialize
        config.update({
            "units": self.units,
            "rank": self.rank,
            "activation": keras.activations.serialize(self.activation),
            "use_bias": self.use_bias,
            "input_kernel_initializer": serialize(self.input_kernel_initializer),
            "output_kernel_initializer": serialize(self.output_kernel_initializer),
            "bias_initializer": serialize(self.bias_initializer),
        })
        return config
