import keras
import numpy as np
import pytest

from tests.layers.layer_checks import run_layer_test
from tfeff.layers import FactorizedDense
from tfeff.testing.numerics import assert_close

# The exact (erf) gelu 0.5 z (1 + erf(z / sqrt 2)): erf ~4 roundings and 4 operations.
GELU = 8


def _terms(layer, x):
    """The magnitude of the sums' terms, |x| |A| |B| + |bias| (gelu's slope is below 1.13)."""
    a, b, *bias = (np.abs(keras.ops.convert_to_numpy(w)).astype("float64") for w in layer.weights)
    return 1.13 * float(np.max(np.abs(x) @ a @ b + (bias[0] if bias else 0.0)))


@pytest.mark.numerics
def test_standard_checks_and_parameter_count(tmp_path):
    x = np.random.default_rng(0).normal(size=(4, 5, 7)).astype("float32")
    # float32: sums of 7 and 3, the bias, gelu: 7 + 3 + 1 + GELU. float16: the casts of
    # x, A, B and bias, the rounding of x A, of x A B and of the sum (float32 accumulation),
    # gelu: 4 + 3 + GELU.
    run_layer_test(FactorizedDense, dict(units=12, rank=3, activation="gelu", name="ffn"), x,
                   tmp_path, expected_num_weights=3, xla_n=11 + GELU, mixed_n=7 + GELU,
                   scale=lambda layer: _terms(layer, x))
    layer = FactorizedDense(12, rank=3, activation="gelu")
    layer.build((None, 7))
    # d*r + r*units + units instead of d*units + units.
    assert layer.count_params() == 7 * 3 + 3 * 12 + 12


@pytest.mark.numerics
def test_golden_values_against_numpy():
    layer = FactorizedDense(4, rank=2, activation="relu", dtype="float64")
    layer.build((None, 3))
    rng = np.random.default_rng(1)
    a, b, bias = rng.normal(size=(3, 2)), rng.normal(size=(2, 4)), rng.normal(size=4)
    layer.set_weights([a, b, bias])
    x = rng.normal(size=(5, 3))
    expected = np.maximum(x @ a @ b + bias, 0.0)
    # float64: sums of 3 and 2 and the bias (relu is exact): 6 roundings of the terms.
    assert_close(layer(x), expected, n=6, dtype="float64", scale=_terms(layer, x))


@pytest.mark.numerics
@pytest.mark.parametrize("use_bias", [True, False])
def test_merged_dense_equals_factorized(use_bias):
    layer = FactorizedDense(64, rank=8, activation="gelu", use_bias=use_bias,
                            bias_initializer="random_normal")
    x = np.random.default_rng(2).normal(size=(6, 10, 32)).astype("float32")
    factorized = keras.ops.convert_to_numpy(layer(x))
    kernel, bias = layer.merged()
    assert kernel.shape == (32, 64) and kernel.dtype == np.float32
    # A B in float64 (8 roundings of 1e-16), rounded once to float32.
    assert_close(kernel, np.asarray(layer.input_kernel, np.float64)
                 @ np.asarray(layer.output_kernel), n=1)
    dense = keras.layers.Dense(64, activation="gelu", use_bias=use_bias)
    dense.build((None, 32))
    dense.set_weights([kernel] + ([bias] if use_bias else []))
    # Dense: the merged kernel (1), a sum of 32, the bias, gelu; factorized: sums of 32 and
    # 8, the bias, gelu: at most 41 + GELU roundings of the terms |x| |A| |B|.
    assert_close(dense(x), factorized, n=41 + GELU, scale=_terms(layer, x))


def test_mixed_precision():
    layer = FactorizedDense(8, rank=2, dtype="mixed_float16")
    out = layer(np.ones((2, 4), "float32"))
    assert out.dtype == "float16" and layer.input_kernel.dtype == "float32"


@pytest.mark.parametrize("kwargs,name", [
    ({"units": 0, "rank": 2}, "units"),
    ({"units": 4, "rank": -1}, "rank"),
    ({"units": 4, "rank": 2.5}, "rank"),
])
def test_invalid_arguments_are_named(kwargs, name):
    with pytest.raises(ValueError, match=f"`{name}`"):
        FactorizedDense(**kwargs)


def test_masks_pass_through_like_dense():
    tokens = keras.Input((5,), dtype="int32")
    hidden = keras.layers.Embedding(10, 4, mask_zero=True)(tokens)
    model = keras.Model(tokens, FactorizedDense(3, rank=2)(hidden))
    out = model(np.array([[1, 2, 0, 0, 0]]))
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(out._keras_mask),
                                  [[True, True, False, False, False]])


def test_merged_before_build_says_what_to_do():
    with pytest.raises(ValueError, match=r"not built.*build\(\(None, input_dim\)\)"):
        FactorizedDense(3, rank=2, name="ffn").merged()
