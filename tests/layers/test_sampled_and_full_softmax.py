import keras
import numpy as np
import pytest
import tensorflow as tf

from tests.layers.layer_checks import run_layer_test
from tests.layers.softmax_reference import log_prob_bound
from tests.layers.softmax_reference import log_softmax_roundings
from tfeff.layers import FixedEmbedding, FullSoftmax, SampledSoftmax
from tfeff.testing.numerics import assert_close

V, D = 50, 12


def _log_softmax(z):
    z = z - z.max(axis=-1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))


def _set_random(layer, seed=0):
    rng = np.random.default_rng(seed)
    layer.set_weights([rng.normal(0, 0.5, w.shape).astype("float32") for w in layer.weights])


@pytest.mark.numerics
def test_full_softmax_equals_reference():
    layer = FullSoftmax(V, ignore_index=0)
    layer.build((None, D))
    _set_random(layer)
    rng = np.random.default_rng(1)
    x = rng.normal(size=(3, 7, D)).astype("float32")
    t = rng.integers(0, V, size=(3, 7)).astype("int32")
    w, b = (np.asarray(v.numpy(), np.float64) for v in layer.weights)
    ref = _log_softmax(x.astype(np.float64) @ w.T + b)
    bound = log_prob_bound(layer, x)  # float32 always
    assert_close(layer.log_prob(x).numpy(), ref, **bound)
    lp, loss = layer(x, t, return_loss=True)
    expected = np.where(t != 0, np.take_along_axis(ref, t[..., None], -1)[..., 0], 0)
    assert_close(lp.numpy(), expected, **bound)
    # The mean over the kept targets: a sum of at most 21 and a division more.
    assert_close(loss.numpy(), -expected[t != 0].mean(), n=bound["n"] + 22,
                 scale=bound["scale"])
    np.testing.assert_array_equal(layer.predict(x).numpy(), ref.argmax(-1))


@pytest.mark.numerics
def test_full_softmax_tied_to_an_embedding_shares_and_trains_it():
    embedding = keras.layers.Embedding(V, D)
    embedding.build((None,))
    layer = FullSoftmax(V, use_bias=False)
    layer.tie_to(embedding)
    x = np.random.default_rng(2).normal(size=(5, D)).astype("float32")
    layer(x, np.arange(5))
    assert layer.trainable_weights == []  # the matrix is the embedding's
    ref = _log_softmax(x.astype(np.float64) @ embedding.embeddings.numpy().T)
    assert_close(layer.log_prob(x).numpy(), ref, **log_prob_bound(layer, x))
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


@pytest.mark.numerics
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
    # Against NumPy's float32 log-softmax: two float32 implementations.
    assert_close(layer.log_prob(x).numpy(), _log_softmax(x @ table.T), **log_prob_bound(layer, x))
    # The projection in front of it trains against the fixed targets.
    kwargs = dict(vocabulary_size=V, num_sampled=10, use_bias=False,
                  output_embedding=FixedEmbedding(path), seed=0, name="sampled_fixed")
    h = rng.normal(size=(64, D)).astype("float32")
    run_layer_test(SampledSoftmax, kwargs, h, tmp_path,
                   targets=rng.integers(0, V, 64).astype("int32"), expected_num_weights=0,
                   **_checks_bounds(h, sampled=True))
    with pytest.raises(ValueError, match="dimension"):
        SampledSoftmax(V, num_sampled=10, output_embedding=FixedEmbedding(path)).build((None, D + 1))


def _checks_bounds(h, sampled=False):
    """run_layer_test's bounds: a log-probability's (softmax_reference.log_prob_bound). In
    training a sampled logit also subtracts log(expected count) (~5 roundings, |log| < 3
    here). float16 (the log-softmax in float32): the logits' casts of x and W and their
    rounding, twice."""
    extra, shift = (10, 3.0) if sampled else (0, 0.0)
    return dict(xla_n=lambda layer: log_prob_bound(layer, h)["n"] + extra, mixed_n=6 + extra,
                scale=lambda layer: log_prob_bound(layer, h)["scale"] + shift)


@pytest.mark.parametrize("num_sampled", [0, V, V + 1, 2.5])
def test_num_sampled_is_validated(num_sampled):
    with pytest.raises(ValueError, match="num_sampled"):
        SampledSoftmax(V, num_sampled=num_sampled)


@pytest.mark.numerics
def test_standard_layer_checks(tmp_path):
    rng = np.random.default_rng(8)
    t = (np.minimum(rng.zipf(1.3, size=64), V) - 1).astype("int32")
    h = rng.normal(size=(64, D))
    h = h.astype("float32")
    run_layer_test(FullSoftmax, dict(vocabulary_size=V, name="full"), h, tmp_path, targets=t,
                   expected_num_weights=2, **_checks_bounds(h))
    run_layer_test(SampledSoftmax, dict(vocabulary_size=V, num_sampled=20, seed=3,
                                        name="sampled"), h, tmp_path, targets=t,
                   expected_num_weights=2, **_checks_bounds(h, sampled=True))
    run_layer_test(FullSoftmax, dict(vocabulary_size=V, name="full_distribution"), h, tmp_path,
                   fit=False, **_checks_bounds(h))


@pytest.mark.numerics
def test_the_portable_sampler_follows_tensorflows_log_uniform_distribution():
    """Off TensorFlow, negatives come from `log_uniform_sample` with expected counts
    num_sampled * P(c): the counts of TensorFlow's sampler drawing with replacement, and
    the frequencies of 400,000 draws."""
    from tfeff.backend.sampling import log_uniform_probability
    from tfeff.backend.sampling import log_uniform_sample

    v, s = 800_000, 64
    true = tf.constant([[0], [1], [7], [799_999], [123_456]], tf.int64)
    sampled, true_expected, sampled_expected = tf.random.log_uniform_candidate_sampler(
        true, num_true=1, num_sampled=s, unique=False, range_max=v, seed=3)
    # Relative, per class: float32 1 / (c + 1), log1p (~4), the float32 log(v + 1) and
    # the division (2) against TensorFlow's float64 formula rounded to float32 (1).
    for ids, expected in ((sampled, sampled_expected), (true[:, 0], true_expected[:, 0])):
        ratio = s * log_uniform_probability(ids, v).numpy() / expected.numpy().astype(np.float64)
        assert_close(ratio, np.ones(ratio.shape), n=8, scale=1.0)
    draws = log_uniform_sample(400_000, 50, seed=keras.random.SeedGenerator(0)).numpy()
    assert draws.min() == 0 and draws.max() == 49
    frequencies = np.bincount(draws, minlength=50) / draws.size
    p = log_uniform_probability(np.arange(50), 50).numpy()
    assert_close(p.sum(), 1.0, n=8 + 50, scale=1.0)  # 8 per class, a float32 sum of 50
    # Binomial standard error of the largest class (p ~ 0.18) is 6e-4.
    np.testing.assert_allclose(frequencies, p, atol=3e-3)
    assert np.abs(frequencies - p).max() > 0  # real draws, not the probabilities


def _sampled_reference(x, t, keep, w, b, candidates, q_true, q_sampled):
    """Float64 loss and gradients (w.r.t. `w`, `b`, `x`) of the sampled softmax with the
    given candidates: logit - log(expected count), hits masked, softmax over [true, cands]."""
    x, w, b = (np.asarray(a, np.float64) for a in (x, w, b))
    n = keep.sum()
    loss, gw, gb, gx = 0.0, np.zeros_like(w), np.zeros_like(b), np.zeros_like(x)
    for i in range(len(t)):
        if not keep[i]:
            continue
        rows = np.concatenate([[t[i]], candidates])
        z = x[i] @ w[rows].T + b[rows] - np.log(np.concatenate([[q_true[i]], q_sampled]))
        live = np.concatenate([[True], candidates != t[i]])  # accidental hits are dropped
        z = np.where(live, z, -np.inf)
        p = np.exp(z - z.max())
        p /= p.sum()
        loss -= np.log(p[0]) / n
        dz = (p - np.eye(len(rows))[0]) / n
        for row, d in zip(rows, dz):
            gw[row] += d * x[i]
            gb[row] += d
            gx[i] += d * w[row]
    return loss, gw, gb, gx


def _sampled_bound(layer, x, candidates, q, tokens):
    """n and scale of the sampled loss over [true, candidates] against float64: logits of
    input_dim + 1 (the bias) + 5 (log of the expected count) roundings of terms up to
    Z = |x| |w| + |b| + |log q|, the log-softmax over them, the mean over `tokens`."""
    z = log_prob_bound(layer, x)["scale"] + float(np.abs(np.log(q)).max())
    return dict(n=log_softmax_roundings(D + 6, len(candidates) + 1) + tokens + 1, scale=z)


@pytest.mark.numerics
def test_sampled_loss_and_gradient_equal_the_formula_for_fixed_candidates():
    """Fixed negatives (a repeat, and accidental hits of two targets), ignored targets:
    the loss and its gradients equal a float64 computation, and only the rows of the
    targets and candidates get a gradient."""
    vocab = 40
    rng = np.random.default_rng(9)
    layer = SampledSoftmax(vocab, num_sampled=6, ignore_index=-1, seed=0)
    layer.build((None, D))
    _set_random(layer, seed=10)
    x = rng.normal(size=(2, 3, D)).astype("float32")
    t = np.array([[3, 7, 11], [-1, 7, 30]], np.int32)
    candidates = np.array([11, 0, 25, 25, 3, 38], np.int32)
    q_true = rng.uniform(0.05, 2.0, size=t.shape).astype("float32")
    q_sampled = rng.uniform(0.05, 2.0, size=candidates.shape).astype("float32")
    xv = tf.Variable(x)
    with tf.GradientTape() as tape:
        log_probs, loss = layer.sampled_loss(xv, t, (candidates, q_true, q_sampled))
    gw, gb, gx = tape.gradient(loss, [layer.embeddings, layer.bias, xv])
    w, b = (np.asarray(v.numpy(), np.float64) for v in (layer.embeddings, layer.bias))
    keep = (t != -1).reshape(-1)
    ref = _sampled_reference(x.reshape(-1, D), t.reshape(-1), keep, w, b, candidates,
                             q_true.reshape(-1), q_sampled)
    bound = _sampled_bound(layer, x, candidates, np.concatenate([q_true.ravel(), q_sampled]),
                           keep.sum())
    assert_close(float(loss), ref[0], **bound)
    assert log_probs.shape == t.shape and float(log_probs[1, 0]) == 0.0  # ignored
    assert_close(-float(np.sum(log_probs)) / keep.sum(), ref[0], **bound)
    assert isinstance(gw, tf.IndexedSlices)  # sparse: a gather of the named rows
    touched = {int(i) for i in gw.indices.numpy()}
    assert touched == ({3, 7, 11, 30} | set(candidates.tolist()) | {0})  # ignored -> row 0
    # dz = (p - onehot) / N: p off by the log-probability's roundings (relative, at Z),
    # and |dz| sums to at most 2 over a row; a gradient sums dz times |x| or |w| over the
    # 5 tokens or the 7 columns, with the product and the division.
    grad = dict(n=bound["n"] + 9, scale=2 * bound["scale"] * max(np.abs(x).max(), np.abs(w).max()))
    assert_close(tf.convert_to_tensor(gw).numpy(), ref[1], **grad)
    assert_close(tf.convert_to_tensor(gb).numpy(), ref[2], **grad)
    assert_close(gx.numpy().reshape(-1, D), ref[3], **grad)


@pytest.mark.numerics
def test_a_training_call_is_the_formula_with_the_candidates_it_drew():
    """Reset to the same seed, the layer's own draw is read back: the training loss equals
    `sampled_loss` with those candidates and the float64 formula with TensorFlow's
    expected counts."""
    vocab = 200
    rng = np.random.default_rng(11)
    layer = SampledSoftmax(vocab, num_sampled=12, seed=4)
    x = rng.normal(size=(8, D)).astype("float32")
    t = np.minimum(rng.zipf(1.3, size=8), vocab).astype(np.int32) - 1
    layer(x, t)
    _set_random(layer, seed=12)
    tf.random.set_seed(5)
    candidates, q_true, q_sampled = (a.numpy() for a in layer._sample(tf.constant(t)))
    tf.random.set_seed(5)
    _, loss = layer(x, t, training=True, return_loss=True)
    assert len(set(candidates.tolist())) == 12  # TensorFlow draws distinct classes
    assert float(loss) == float(layer.sampled_loss(x, t, (candidates, q_true, q_sampled))[1])
    w, b = (np.asarray(v.numpy(), np.float64) for v in (layer.embeddings, layer.bias))
    ref = _sampled_reference(x, t, np.ones(8, bool), w, b, candidates, q_true, q_sampled)
    assert_close(float(loss), ref[0], **_sampled_bound(
        layer, x, candidates, np.concatenate([q_true, q_sampled]), 8))
