import keras
import numpy as np
import pytest

from tests.layers.layer_checks import run_layer_test
from tfeff.layers import FactorizedDense


def test_standard_checks_and_parameter_count(tmp_path):
    x = np.random.default_rng(0).normal(size=(4, 5, 7)).astype("float32")
    run_layer_test(FactorizedDense, dict(units=12, rank=3, activation="gelu", name="ffn"), x,
                   tmp_path, expected_num_weights=3)
    layer = FactorizedDense(12, rank=3, activation="gelu")
    layer.build((None, 7))
    # d*r + r*units + units instead of d*units + units.
    assert layer.count_params() == 7 * 3 + 3 * 12 + 12


def test_golden_values_against_numpy():
    layer = FactorizedDense(4, rank=2, activation="relu")
    layer.build((None, 3))
    rng = np.random.default_rng(1)
    a, b, bias = rng.normal(size=(3, 2)), rng.normal(size=(2, 4)), rng.normal(size=4)
    layer.set_weights([a.astype("float32"), b.astype("float32"), bias.astype("float32")])
    x = rng.normal(size=(5, 3))
    expected = np.maximum(x @ a @ b + bias, 0.0)
    np.testing.assert_allclose(layer(x.astype("float32")), expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("use_bias", [True, False])
def test_merged_dense_equals_factorized(use_bias):
    layer = FactorizedDense(64, rank=8, activation="gelu", use_bias=use_bias,
                            bias_initializer="random_normal")
    x = np.random.default_rng(2).normal(size=(6, 10, 32)).astype("float32")
    factorized = keras.ops.convert_to_numpy(layer(x))
    kernel, bias = layer.merged()
    assert kernel.shape == (32, 64) and kernel.dtype == np.float32
    np.testing.assert_allclose(
        kernel, np.asarray(layer.input_kernel, np.float64) @ np.asarray(layer.output_kernel),
        rtol=1e-6, atol=1e-7,
    )
    dense = keras.layers.Dense(64, activation="gelu", use_bias=use_bias)
    dense.build((None, 32))
    dense.set_weights([kernel] + ([bias] if use_bias else []))
    np.testing.assert_allclose(dense(x), factorized, rtol=1e-5, atol=1e-5)


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
