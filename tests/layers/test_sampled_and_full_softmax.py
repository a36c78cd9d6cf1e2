import keras
import numpy as np
import pytest
import tensorflow as tf

from tests.layers.layer_checks import run_layer_test
from tfeff.layers import FixedEmbedding, FullSoftmax, SampledSoftmax

V, D = 50, 12


def _log_softmax(z):
    z = z - z.max(axis=-1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))


def _set_random(layer, seed=0):
    rng = np.random.default_rng(seed)
    layer.set_weights([rng.normal(0, 0.5, w.shape).astype("float32") for w in layer.weights])


def test_full_softmax_equals_reference():
    layer = FullSoftmax(V, ignore_index=0)
    layer.build((None, D))
    _set_random(layer)
    rng = np.random.default_rng(1)
    x = rng.normal(size=(3, 7, D)).astype("float32")
    t = rng.integers(0, V, size=(3, 7)).astype("int32")
    w, b = (np.asarray(v.numpy(), np.float64) for v in layer.weights)
    ref = _log_softmax(x.astype(np.float64) @ w.T + b)
    np.testing.assert_allclose(layer.log_prob(x).numpy(), ref, atol=1e-5)
    lp, loss = layer(x, t, return_loss=True)
    expected = np.where(t != 0, np.take_along_axis(ref, t[..., None], -1)[..., 0], 0)
    np.testing.assert_allclose(lp.numpy(), expected, atol=1e-5)
    np.testing.assert_allclose(loss.numpy(), -expected[t != 0].mean(), atol=1e-5)
    np.testing.assert_array_equal(layer.predict(x).numpy(), ref.argmax(-1))


def test_full_softmax_tied_to_an_embedding_shares_and_trains_it():
    embedding = keras.layers.Embedding(V, D)
    embedding.build((None,))
    layer = FullSoftmax(V, use_bias=False)
    layer.tie_to(embedding)
    x = np.random.default_rng(2).normal(size=(5, D)).astype("float32")
    layer(x, np.arange(5))
    assert layer.trainable_weights == []  # the matrix is the embedding's
    ref = _log_softmax(x.astype(np.float64) @ embedding.embeddings.numpy().T)
    np.testing.assert_allclose(layer.log_prob(x).numpy(), ref, atol=1e-5)
    with tf.GradientTape() as tape:
        _, loss = layer(x, np.arange(5), return_loss=True)
    (g,) = tape.gradient(loss, [embedding.embeddings])
    assert np.abs(tf.convert_to_tensor(g).numpy()).sum() > 0


def test_sampled_softmax_outside_training_is_exact():
    layer = SampledSoftmax(V, num_sampled=5, seed=0)
    full = FullSoftmax(V)
    x = np.random.default_rng(3).normal(size=(8, D)).astype("float32")
    t = np.arange(8, dtype="int32")
    layer(x, t)
    full(x, t)
    _set_random(layer)
    full.set_weights(layer.get_weights())
    np.testing.assert_allclose(layer(x, t).numpy(), full(x, t).numpy(), atol=1e-6)
    np.testing.assert_allclose(layer(x, t, return_loss=True)[1].numpy(),
                               full(x, t, return_loss=True)[1].numpy(), atol=1e-6)
    np.testing.assert_allclose(layer.log_prob(x).numpy(), full.log_prob(x).numpy(), atol=1e-6)
    np.testing.assert_array_equal(layer.predict(x).numpy(), full.predict(x).numpy())


def test_sampled_loss_converges_to_full_loss():
    vocab = 400
    rng = np.random.default_rng(4)
    x = rng.normal(size=(256, D)).astype("float32")
    t = np.minimum(rng.zipf(1.2, size=256), vocab) - 1
    errors = []
    for num_sampled in (8, 64, 399):
        layer = SampledSoftmax(vocab, num_sampled=num_sampled, seed=7)
        layer(x, t)
        _set_random(layer, seed=5)
        exact = float(layer(x, t, training=False, return_loss=True)[1])
        sampled = np.mean([float(layer(x, t, training=True, return_loss=True)[1]) for _ in range(20)])
        errors.append(abs(sampled - exact) / exact)
    assert errors[0] > errors[1] > errors[2], errors
    assert errors[2] < 0.01, errors


def test_sampled_softmax_gradient_is_sparse_and_only_touches_sampled_rows():
    layer = SampledSoftmax(1000, num_sampled=10, seed=1, use_bias=False)
    x = tf.constant(np.random.default_rng(5).normal(size=(4, D)), tf.float32)
    t = tf.constant([1, 2, 3, 4])
    layer(x, t)
    with tf.GradientTape() as tape:
        _, loss = layer(x, t, training=True, return_loss=True)
    (g,) = tape.gradient(loss, layer.trainable_weights)
    assert isinstance(g, tf.IndexedSlices)
    assert len(np.unique(g.indices.numpy())) <= 4 + 10


def test_fixed_variant_uses_the_frozen_table(tmp_path):
    rng = np.random.default_rng(6)
    table = rng.normal(size=(V, D)).astype("float32")
    path = str(tmp_path / "table.npy")
    np.save(path, table)
    layer = SampledSoftmax(V, num_sampled=10, use_bias=False,
                           output_embedding=FixedEmbedding(path), seed=0)
    x = rng.normal(size=(6, D)).astype("float32")
    t = np.arange(6, dtype="int32")
    layer(x, t)
    assert layer.weights == []  # nothing to train: a ranking loss against fixed vectors
    np.testing.assert_allclose(layer.log_prob(x).numpy(), _log_softmax(x @ table.T), atol=1e-5)
    # The projection in front of it trains against the fixed targets.
    kwargs = dict(vocabulary_size=V, num_sampled=10, use_bias=False,
                  output_embedding=FixedEmbedding(path), seed=0, name="sampled_fixed")
    run_layer_test(SampledSoftmax, kwargs, rng.normal(size=(64, D)).astype("float32"),
                   tmp_path, targets=rng.integers(0, V, 64).astype("int32"),
                   expected_num_weights=0)
    with pytest.raises(ValueError, match="dimension"):
        SampledSoftmax(V, num_sampled=10, output_embedding=FixedEmbedding(path)).build((None, D + 1))


@pytest.mark.parametrize("num_sampled", [0, V, V + 1, 2.5])
def test_num_sampled_is_validated(num_sampled):
    with pytest.raises(ValueError, match="num_sampled"):
        SampledSoftmax(V, num_sampled=num_sampled)


def test_standard_layer_checks(tmp_path):
    rng = np.random.default_rng(8)
    t = (np.minimum(rng.zipf(1.3, size=64), V) - 1).astype("int32")
    h = rng.normal(size=(64, D))
    h = h.astype("float32")
    run_layer_test(FullSoftmax, dict(vocabulary_size=V, name="full"), h, tmp_path, targets=t,
                   expected_num_weights=2)
    run_layer_test(SampledSoftmax, dict(vocabulary_size=V, num_sampled=20, seed=3,
                                        name="sampled"), h, tmp_path, targets=t,
                   expected_num_weights=2)
    run_layer_test(FullSoftmax, dict(vocabulary_size=V, name="full_distribution"), h, tmp_path,
                   fit=False)


def test_the_portable_sampler_follows_tensorflows_log_uniform_distribution():
    """Off TensorFlow, negatives come from `log_uniform_sample` with expected counts
    num_sampled * P(c): the counts of TensorFlow's sampler drawing with replacement, and
    the frequencies of 400,000 draws."""
    from tfeff.layers.sampled_softmax import log_uniform_probability
    from tfeff.layers.sampled_softmax import log_uniform_sample

    v, s = 800_000, 64
    true = tf.constant([[0], [1], [7], [799_999], [123_456]], tf.int64)
    sampled, true_expected, sampled_expected = tf.random.log_uniform_candidate_sampler(
        true, num_true=1, num_sampled=s, unique=False, range_max=v, seed=3)
    np.testing.assert_allclose(s * log_uniform_probability(sampled, v).numpy(),
                               sampled_expected.numpy(), rtol=1e-5)
    np.testing.assert_allclose(s * log_uniform_probability(true[:, 0], v).numpy(),
                               true_expected.numpy()[:, 0], rtol=1e-5)
    draws = log_uniform_sample(400_000, 50, seed=keras.random.SeedGenerator(0)).numpy()
    assert draws.min() == 0 and draws.max() == 49
    frequencies = np.bincount(draws, minlength=50) / draws.size
    p = log_uniform_probability(np.arange(50), 50).numpy()
    np.testing.assert_allclose(p.sum(), 1.0, rtol=1e-5)
    # Binomial standard error of the largest class (p ~ 0.18) is 6e-4.
    np.testing.assert_allclose(frequencies, p, atol=3e-3)
    assert np.abs(frequencies - p).max() > 0  # real draws, not the probabilities
