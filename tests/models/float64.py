"""Float64 models for the comparisons of tests/models and tests/convert (tfeff/testing/numerics.py).

Imported by the backend subprocess scripts too: no TensorFlow here.
"""

import contextlib

import keras


@contextlib.contextmanager
def float64_models():
    """Models built inside the block (converters' included) compute in float64.

    On TensorFlow Keras then computes float64 throughout (on JAX and PyTorch only inside
    `tfeff.testing.numerics.keras_x64()` as well), but for a few float32 constants that two
    implementations share: the attention scale 1/sqrt(head size) (Keras casts the Python
    float through float32: exact only for head sizes that are powers of 4) and, on
    TensorFlow, GELU's 1/sqrt(2) or 0.044715 (`tf.nn.gelu`). Against an exact reference
    each costs under one float32 rounding of the values it scales.
    """
    saved = keras.config.dtype_policy()
    keras.config.set_dtype_policy("float64")
    try:
        yield
    finally:
        keras.config.set_dtype_policy(saved)


def tf_gelu_roundings(units):
    """The float32 roundings that TensorFlow's float64 GELU puts into a product over `units`
    of its outputs, against an exact GELU.

    `tf.nn.gelu` computes erfc(-x c) with c = 1/sqrt(2) rounded to float32 (0.044715 in
    the tanh form): GELU(x) moves by at most 0.29 u(float32), x^2 exp(-x^2/2) / sqrt(2 pi)
    at most, in the same direction for every unit; the product moves by 0.3 `units`
    roundings of its size at most.
    """
    return -(-3 * units // 10)  # 0.3 units, rounded up
