import keras
import numpy as np
import pytest

from tests.layers.layer_checks import run_layer_test
from tfeff.layers import ScalarMix
from tfeff.testing.numerics import assert_close


def _numpy_mix(layers, weights, scale, mask=None, layer_norm=False, eps=1e-12):
    """Peters et al. Eq. 1 in float64; AllenNLP's masked layer norm per layer."""
    layers = layers.astype("float64")
    if layer_norm:
        keep = np.ones(layers.shape[:1] + layers.shape[2:3], bool) if mask is None else mask
        normed = []
        for k in range(layers.shape[1]):
            values = layers[:, k][keep]  # (real tokens, dim)
            mean, var = values.mean(), values.var()
            normed.append((layers[:, k] - mean) / np.sqrt(var + eps) * keep[..., None])
        layers = np.stack(normed, axis=1)
    s = np.exp(weights) / np.exp(weights).sum()
    return scale * np.einsum("k,bktd->btd", s, layers)


@pytest.fixture
def stack():
    return np.random.default_rng(0).normal(loc=1.0, size=(3, 4, 5, 6)).astype("float32")


@pytest.mark.numerics
def test_layer_checks(stack, tmp_path):
    kwargs = dict(num_layers=4, initial_weights=[0.5, -1.0, 2.0, 0.0], initial_scale=1.5,
                  name="mix")
    # Roundings on the way to an output: softmax of the weights 9 (exp ~4, a sum of 4,
    # a division), the mix's products and sum of 4 (5), the scale (1): 15 in float32.
    # In float16 also the casts of the inputs, of the scale and of the weights (magnitude
    # <= 2, through the softmax twice: 4): 21, float32 accumulation or not. The terms
    # s_k |x_k| of the mix sum to at most 1.5 max|x|, more than the mixed outputs.
    scale = 1.5 * float(np.abs(stack).max())
    run_layer_test(ScalarMix, kwargs, stack, tmp_path, expected_num_weights=2, xla_n=15,
                   mixed_n=21, scale=scale)
    # Against the reference in float64: 15 float64 roundings, whatever the kernels.
    out = ScalarMix(**kwargs, dtype="float64")(stack.astype("float64"))
    assert_close(out, _numpy_mix(stack, np.array([0.5, -1.0, 2.0, 0.0]), 1.5), n=15,
                 dtype="float64", scale=scale)


@pytest.mark.numerics
def test_golden_values():
    layers = np.array([[[[1.0, 2.0]]], [[[3.0, -4.0]]]]).transpose(1, 0, 2, 3)  # (1, 2, 1, 2)
    mix = ScalarMix(2, initial_scale=2.0, dtype="float64")
    mix.build(layers.shape)
    mix.layer_weights.assign([0.0, np.log(3.0)])  # initial_weights pass through float32
    # softmax([0, log 3]) = [1/4, 3/4]; 2 * (1/4 [1, 2] + 3/4 [3, -4]) = [5, -5], to 15
    # float64 roundings (test_layer_checks) of terms up to 2 * 4.
    assert_close(mix(layers), [[[5.0, -5.0]]], n=15, dtype="float64", scale=8.0)
    # A list of layers is the same as the stack.
    assert_close(mix([layers[:, 0], layers[:, 1]]), [[[5.0, -5.0]]], n=15, dtype="float64",
                 scale=8.0)


@pytest.mark.numerics
def test_masked_layer_norm_ignores_padding(stack):
    mask = np.array([[1, 1, 1, 1, 1], [1, 1, 0, 0, 0], [1, 0, 0, 0, 0]], bool)
    weights = np.array([0.3, 0.1, -0.2, 0.4])
    mix = ScalarMix(4, layer_norm=True, initial_weights=list(weights), initial_scale=0.7,
                    dtype="float64")
    stack = stack.astype("float64")
    out = keras.ops.convert_to_numpy(mix(stack, mask=mask))
    # In float64. A layer's mean and variance sum its 3 * 5 * 6 = 90 masked values (90
    # roundings each, of values up to max|x|, relative to the standard deviation), the
    # rsqrt and the normalization ~6, the mix 15 (test_layer_checks): 201 roundings of
    # 0.7 max|x| / min(sd), the scale of the terms.
    sd = min(stack[:, k][mask].std() for k in range(4))
    weights, scale = (keras.ops.convert_to_numpy(w) for w in (mix.layer_weights, mix.scale))
    assert_close(out, _numpy_mix(stack, weights, scale, mask, True), n=201, dtype="float64",
                 scale=scale * np.abs(stack).max() / sd)
    noisy = np.where(mask[:, None, :, None], stack, 1e4)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(mix(noisy, mask=mask)), out,
                               rtol=1e-5, atol=1e-5)
    assert np.all(out[~mask] == 0)


def test_weights_train_and_errors(stack):
    mix = ScalarMix(4)
    inputs = keras.Input((4, 5, 6))
    model = keras.Model(inputs, mix(inputs))
    model.compile(optimizer=keras.optimizers.SGD(0.5), loss="mse")
    target = stack[:, 2]  # the third layer alone
    before = float(model.evaluate(stack, target, verbose=0))
    model.fit(stack, target, epochs=30, verbose=0)
    assert float(model.evaluate(stack, target, verbose=0)) < 0.2 * before
    assert np.argmax(keras.ops.convert_to_numpy(mix.layer_weights)) == 2
    with pytest.raises(ValueError, match="received 3 layers"):
        ScalarMix(4)(stack[:, :3])
    with pytest.raises(ValueError, match="initial_weights"):
        ScalarMix(2, initial_weights=[1.0])


def test_integer_layers_are_refused():
    """Cast to int32, the softmax weights would be 0: the mix of int layers was all zeros."""
    with pytest.raises(ValueError, match=r"ScalarMix `mix` takes float vectors.*int32"):
        ScalarMix(2, name="mix")(np.ones((1, 2, 3, 4), "int32"))
