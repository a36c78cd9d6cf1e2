import keras
import numpy as np
import pytest

from tests.layers.layer_checks import run_layer_test
from tfeff.layers import ContinuousOutput
from tfeff.testing.numerics import assert_close


def _terms(layer, x):
    """The magnitude of the projection's terms, |x| |W| + |b|."""
    kernel, bias = (np.abs(keras.ops.convert_to_numpy(w)).astype("float64")
                    for w in layer.projection.weights)
    return float(np.max(np.abs(x) @ kernel + bias))


@pytest.mark.numerics
@pytest.mark.parametrize("loss", ["cosine", "l2", "vmf"])
def test_layer_checks_and_projection_golden(loss, tmp_path):
    kwargs = dict(embedding_dim=3, loss=loss, name=f"out_{loss}")
    x = np.random.default_rng(0).normal(size=(2, 4, 5)).astype("float32")
    # The output is the projection: a sum of 5 and the bias (6 roundings); in float16
    # the casts of x, W and b and the roundings of x W and of the sum (5).
    # `fit` trains with the layer's own Keras loss (stock compile, no lambda).
    out, = run_layer_test(ContinuousOutput, kwargs, x, tmp_path, expected_num_weights=2,
                          fit_loss=ContinuousOutput(**kwargs).make_loss(), xla_n=6, mixed_n=5,
                          scale=lambda layer: _terms(layer, x))
    keras.utils.set_random_seed(0)
    layer = ContinuousOutput(**kwargs, dtype="float64")
    layer.build(x.shape)
    kernel, bias = (keras.ops.convert_to_numpy(w) for w in layer.projection.weights)
    projected = keras.ops.convert_to_numpy(layer(x.astype("float64")))
    assert_close(projected, x @ kernel + bias, n=6, dtype="float64", scale=_terms(layer, x))
    assert out.shape == projected.shape


@pytest.mark.numerics
def test_position_loss_golden_values():
    layer = ContinuousOutput(2, loss="cosine", use_projection=False)
    pred = np.array([[1.0, 0.0], [0.0, 3.0]], "float32")
    tgt = np.array([[0.0, 1.0], [0.0, 1.0]], "float32")
    # Always float32: two normalizations (a sum of 2 squares, rsqrt ~4, a product: 7
    # each), a dot of 2, 1 - cos: 17 roundings of values up to 1.
    assert_close(layer.position_loss(tgt, layer(pred)).numpy(), [1.0, 0.0], n=17, scale=1.0)
    l2 = ContinuousOutput(2, loss="l2", use_projection=False)
    np.testing.assert_allclose(l2.position_loss(tgt, pred).numpy(), [2.0, 4.0])


@pytest.mark.numerics
def test_make_loss_is_the_layers_loss_in_keras_order():
    rng = np.random.default_rng(0)
    pred = rng.normal(size=(3, 5)).astype("float32") * 4
    tgt = rng.normal(size=(3, 5)).astype("float32")
    layer = ContinuousOutput(5, loss="vmf", use_projection=False,
                             vmf_regularization1=0.02, vmf_regularization2=0.5)
    loss = layer.make_loss()
    assert loss.get_config()["regularization1"] == 0.02
    assert loss.get_config()["regularization2"] == 0.5
    per_position = layer.position_loss(tgt, pred).numpy()
    # The same losses per position, reduced by Keras (a sum and a division) and by NumPy:
    # 3 + 1 roundings of terms as large as the largest loss.
    assert_close(float(loss(tgt, pred)), per_position.mean(), n=4,
                 scale=float(np.abs(per_position).max()))
    np.testing.assert_allclose(layer.make_loss(reduction=None)(tgt, pred), per_position,
                               rtol=1e-6)
    # vMF is not symmetric: the swapped order gives another loss.
    assert abs(float(loss(pred, tgt)) - per_position.mean()) > 0.1


def test_invalid_arguments_are_named():
    with pytest.raises(ValueError, match="embedding_dim"):
        ContinuousOutput(0)
    with pytest.raises(ValueError, match="loss"):
        ContinuousOutput(3, loss="softmax")
    with pytest.raises(ValueError, match="use_projection=False"):
        ContinuousOutput(3, use_projection=False)(np.ones((1, 4), "float32"))


def test_stock_compile_loss_ignores_the_encoders_padding():
    """Keras masks reach `make_loss()`: padded positions add nothing to the mean."""
    tokens = keras.Input((4,), dtype="int32")
    output = ContinuousOutput(3, loss="l2", use_projection=False)
    embedded = keras.layers.Embedding(10, 3, mask_zero=True, embeddings_initializer="ones")
    model = keras.Model(tokens, output(embedded(tokens)))
    model.compile(loss=output.make_loss())
    y = np.zeros((1, 4, 3), "float32")
    y[0, 2:] = 10.0  # at the padding: 243 each if it counted
    loss = model.evaluate(np.array([[1, 2, 0, 0]]), y, verbose=0)
    np.testing.assert_allclose(loss, 3.0, rtol=1e-6)  # ||1 - 0||^2 at the two real tokens
