import numpy as np
import pytest
import tensorflow as tf
from scipy import special

from tfeff import losses
from tfeff.testing.numerics import assert_close


def _log_iv_reference(v, x):
    """float64 log I_v(x): SciPy where ive is representable, else the power series."""
    ive = special.ive(v, x)
    if ive > 1e-250 and np.isfinite(ive):
        return np.log(ive) + x
    k = np.arange(0, 400)
    terms = (2 * k + v) * np.log(x / 2) - special.gammaln(k + 1) - special.gammaln(k + v + 1)
    return special.logsumexp(terms)


def _ratio_reference(v, x):
    """I_{v+1}(x)/I_v(x) in float64."""
    return np.exp(_log_iv_reference(v + 1, x) - _log_iv_reference(v, x))


KAPPAS = np.logspace(-3, 4, 29)


@pytest.mark.numerics
@pytest.mark.parametrize("dim", [2, 3, 16, 64, 300])
def test_log_vmf_normalizer_value_and_gradient(dim):
    v = dim / 2 - 1
    kappa = tf.constant(KAPPAS, tf.float64)
    with tf.GradientTape() as tape:
        tape.watch(kappa)
        value = losses.log_vmf_normalizer(kappa, dim)
    grad = tape.gradient(value, kappa).numpy()
    ref = np.array([v * np.log(k) - dim / 2 * np.log(2 * np.pi) - _log_iv_reference(v, k)
                    for k in KAPPAS])
    ref_grad = -np.array([_ratio_reference(v, k) for k in KAPPAS])
    # float64 on both sides: what differs is the expansion's truncation (below 1e-11 of
    # I_v at orders >= 60, the recurrence's start) and roundings of logs up to 1e4 (1e-12);
    # the kernels change only the last bits (1e-16 of the values). Errors seen: 3e-11.
    np.testing.assert_allclose(value.numpy(), ref, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(grad, ref_grad, rtol=1e-7, atol=1e-12)


@pytest.mark.numerics
def test_vmf_nll_matches_numpy_with_regularizers():
    rng = np.random.default_rng(0)
    pred = rng.normal(size=(5, 300)) * rng.uniform(0.01, 30, size=(5, 1))
    target = rng.normal(size=(5, 300))
    # Keras order: (y_true, y_pred). vMF is not symmetric, so the old
    # (predictions, targets) order would fail this reference.
    nll = losses.vmf_nll(tf.constant(target, tf.float64), tf.constant(pred, tf.float64),
                         regularization1=0.02, regularization2=0.1).numpy()
    kappa = np.linalg.norm(pred, axis=1)
    log_i = np.array([_log_iv_reference(149, k) for k in kappa])
    log_c = 149 * np.log(kappa) - 150 * np.log(2 * np.pi) - log_i
    unit = target / np.linalg.norm(target, axis=1, keepdims=True)
    ref = -log_c - 0.1 * np.sum(pred * unit, axis=1) + 0.02 * kappa
    # float64: kappa (a sum of 300 squares, sqrt: 304 roundings, moving log C by at most
    # kappa times that), the normalizer (Debye at order 149: ~20 roundings of its logs,
    # truncation below 1e-13), the unit target and the dot (305 + 300), the rest (5); the
    # terms' size is the scale (log C cancels logs of up to 1500 down to -400).
    terms = (149 * np.abs(np.log(kappa)) + 150 * np.log(2 * np.pi) + np.abs(log_i)
             + 0.1 * np.sum(np.abs(pred * unit), axis=1) + 0.02 * kappa).max()
    assert_close(nll, ref, n=935, dtype="float64", scale=terms)
    loss = losses.VonMisesFisherLoss(regularization1=0.02, regularization2=0.1, dtype="float64")
    assert_close(float(loss(target, pred)), ref.mean(), n=940, dtype="float64", scale=terms)
    per_position = losses.VonMisesFisherLoss(0.02, 0.1, reduction=None, dtype="float64")
    assert_close(per_position(target, pred), ref, n=935, dtype="float64", scale=terms)
    swapped = losses.vmf_nll(tf.constant(pred, tf.float64), tf.constant(target, tf.float64),
                             regularization1=0.02, regularization2=0.1).numpy()
    assert np.abs(swapped - ref).max() > 1.0  # the order is observable


@pytest.mark.numerics
@pytest.mark.parametrize("regularization1,regularization2", [(0.0, 1.0), (0.02, 0.1)])
def test_vmf_gradient_at_a_zero_prediction_is_the_dot_term_alone(regularization1,
                                                                   regularization2):
    """At e_hat = 0 the norm sits at its floor, where kappa (so -log C and the
    regularization1 term) is flat: the gradient is the dot term's, -lambda_2 * t / ||t||."""
    target = np.array([[1.0, -2.0, 0.5, 0.0, 3.0, 1.0, -1.0, 2.0]])
    pred = tf.zeros((1, 8), tf.float64)
    with tf.GradientTape() as tape:
        tape.watch(pred)
        loss = losses.vmf_nll(tf.constant(target), pred, regularization1, regularization2)
    expected = -regularization2 * target / np.linalg.norm(target)
    # float64: the unit target (a sum of 8 squares, rsqrt, a product) times lambda_2.
    assert_close(tape.gradient(loss, pred), expected, n=14, dtype="float64")


@pytest.mark.numerics
def test_cosine_and_l2_golden_values():
    p = tf.constant([[1.0, 0.0], [1.0, 1.0], [3.0, 4.0]])
    t = tf.constant([[0.0, 2.0], [2.0, 2.0], [-3.0, -4.0]])
    # float32 cosine: each unit vector (a sum of 2 squares, rsqrt, a product: 7), their
    # product and its sum of 2, 1 - cos: 18 roundings of terms of size 1 (1 - 1 cancels to
    # 0); the mean of 3 more. The squared distances are exact, their mean rounds once.
    assert_close(losses.cosine_distance(t, p), [1.0, 0.0, 2.0], n=18, scale=1.0)
    np.testing.assert_array_equal(losses.l2_distance(t, p).numpy(), [5.0, 2.0, 100.0])
    assert_close(float(losses.CosineDistance()(t, p)), 1.0, n=21, scale=1.0)
    assert_close(float(losses.L2Distance()(t, p)), 107.0 / 3, n=1)
    weighted = losses.L2Distance(reduction="sum")(t, p, sample_weight=[1.0, 0.0, 0.5])
    assert float(weighted) == 55.0  # 5 + 0 + 50, exact


@pytest.mark.parametrize("loss", [
    losses.CosineDistance(name="cos", reduction="sum"),
    losses.L2Distance(),
    losses.VonMisesFisherLoss(regularization1=0.02, regularization2=0.5, reduction=None),
])
def test_loss_classes_serialize_with_their_arguments(loss):
    import keras

    config = keras.saving.serialize_keras_object(loss)
    assert config["registered_name"].startswith("tfeff>")
    clone = keras.saving.deserialize_keras_object(config)
    assert type(clone) is type(loss) and clone.get_config() == loss.get_config()
    rng = np.random.default_rng(1)
    t, p = rng.normal(size=(2, 3, 4)), rng.normal(size=(2, 3, 4))
    # The same function of the same arguments on the same kernels: the same bits.
    np.testing.assert_array_equal(clone(t, p), loss(t, p))


@pytest.mark.parametrize("fn", [losses.cosine_distance, losses.l2_distance, losses.vmf_nll])
def test_loss_functions_are_registered(fn):
    import keras

    name = keras.saving.get_registered_name(fn)
    assert name == f"tfeff>{fn.__name__}"
    assert keras.saving.get_registered_object(name) is fn


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="dim"):
        losses.log_vmf_normalizer(tf.ones(3), 1)
    with pytest.raises(ValueError, match="regularization2"):
        losses.vmf_nll(tf.ones((1, 4)), tf.ones((1, 4)), regularization2=0)
    with pytest.raises(ValueError, match="regularization1"):
        losses.VonMisesFisherLoss(regularization1=-1.0)
    with pytest.raises(ValueError, match="same last dimension"):
        losses.cosine_distance(tf.ones((1, 4)), tf.ones((1, 3)))
