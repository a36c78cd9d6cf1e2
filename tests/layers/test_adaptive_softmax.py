import numpy as np
import pytest
import tensorflow as tf

from tests.layers.layer_checks import run_layer_test
from tests.layers.softmax_reference import log_prob_bound
from tests.layers.softmax_reference import normalization_roundings
from tfeff.layers import AdaptiveSoftmax
from tfeff.testing.numerics import assert_close

V, D = 60, 16
CUTOFFS = [8, 20, 45]


def _log_softmax(z):
    z = z - z.max(axis=-1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))


def reference_log_prob(layer, x):
    """The definition (PyTorch's AdaptiveLogSoftmaxWithLoss.log_prob) in float64 NumPy."""
    w = {v.name: np.asarray(v.numpy(), np.float64) for v in layer.weights}
    x = np.asarray(x, np.float64)
    head = x @ w["head_kernel"] + w.get("head_bias", 0.0)
    head_lp = _log_softmax(head)
    short = layer.cutoffs[0]
    out = [head_lp[:, :short]]
    for i in range(len(layer.cutoffs)):
        tail = x @ w[f"tail_{i}_projection"] @ w[f"tail_{i}_kernel"]
        out.append(head_lp[:, short + i: short + i + 1] + _log_softmax(tail))
    return np.concatenate(out, axis=1)


def _layer(**kwargs):
    layer = AdaptiveSoftmax(V, CUTOFFS, div_value=2.0, head_bias=True, **kwargs)
    layer.build((None, D))
    rng = np.random.default_rng(0)
    layer.set_weights([rng.normal(0, 0.5, w.shape).astype("float32") for w in layer.weights])
    return layer


@pytest.mark.numerics
def test_log_prob_equals_reference_and_normalizes():
    layer = _layer()
    x = np.random.default_rng(1).normal(size=(32, D)).astype("float32")
    lp = layer.log_prob(x).numpy()
    assert_close(lp, reference_log_prob(layer, x), **log_prob_bound(layer, x))  # float32
    assert_close(np.exp(lp).sum(axis=1), np.ones(32), n=normalization_roundings(V), scale=1.0)
    # Projection sizes follow input_dim // div_value**(i+1).
    assert [w.shape[1] for w in layer.tail_projections] == [8, 4, 2]


@pytest.mark.numerics
def test_target_log_probs_and_loss_equal_reference_with_ignored_targets():
    layer = _layer(ignore_index=-100)
    rng = np.random.default_rng(2)
    x = rng.normal(size=(4, 10, D)).astype("float32")
    t = rng.integers(0, V, size=(4, 10)).astype("int32")
    t[0, :3] = -100  # ignore_index
    mask = np.ones((4, 10), bool)
    mask[3, 5:] = False  # padding
    lp, loss = layer(x, t, mask=mask, return_loss=True)
    ref = reference_log_prob(layer, x.reshape(-1, D)).reshape(4, 10, V)
    keep = (t != -100) & mask
    expected = np.where(keep, np.take_along_axis(ref, np.maximum(t, 0)[..., None], -1)[..., 0], 0)
    bound = log_prob_bound(layer, x)
    assert_close(lp.numpy(), expected, **bound)
    # The mean over the kept targets: a sum of at most 40 and a division more.
    assert_close(loss.numpy(), -expected[keep].mean(), n=bound["n"] + 41, scale=bound["scale"])


def test_predict_equals_argmax_of_log_prob():
    layer = _layer()
    rng = np.random.default_rng(3)
    for scale in (0.1, 1.0, 5.0):  # from mostly-tail to mostly-head decisions
        x = (scale * rng.normal(size=(3, 50, D))).astype("float32")
        np.testing.assert_array_equal(
            layer.predict(x).numpy(), np.argmax(reference_log_prob(layer, x.reshape(-1, D)), -1).reshape(3, 50)
        )


class ProbedAdaptiveSoftmax(AdaptiveSoftmax):
    """Counts the tail evaluations that actually run (a probe in the graph)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.probe = tf.Variable(0, trainable=False, dtype=tf.int64)

    def _tail_log_probs(self, i, x):
        with tf.control_dependencies([self.probe.assign_add(1)]):
            return super()._tail_log_probs(i, x)


def test_head_only_targets_compute_no_tail_and_give_tails_no_gradient():
    layer = ProbedAdaptiveSoftmax(V, CUTOFFS, div_value=2.0)
    layer.build((None, D))
    x = tf.constant(np.random.default_rng(4).normal(size=(64, D)), tf.float32)

    @tf.function
    def grads(targets):
        with tf.GradientTape() as tape:
            _, loss = layer(x, targets, return_loss=True)
        return tape.gradient(loss, layer.trainable_weights)

    head_only = grads(tf.constant(np.arange(64) % CUTOFFS[0], tf.int32))
    assert int(layer.probe.numpy()) == 0
    by_name = dict(zip([w.name for w in layer.trainable_weights], head_only))
    assert np.abs(by_name["head_kernel"].numpy()).sum() > 0
    for i in range(3):
        for name in (f"tail_{i}_projection", f"tail_{i}_kernel"):
            g = by_name[name]
            assert g is None or not np.any(tf.convert_to_tensor(g).numpy()), name
    # Targets in tail 1 only: exactly that tail runs (once forward; its grad reuses it).
    grads(tf.constant(np.full(64, 25), tf.int32))
    assert int(layer.probe.numpy()) == 1


def test_tail_runs_only_on_its_rows():
    """A tail evaluation sees only the rows whose target is in that tail."""
    seen = []

    class Recording(AdaptiveSoftmax):
        def _tail_log_probs(self, i, x):
            seen.append((i, int(x.shape[0])))
            return super()._tail_log_probs(i, x)

    layer = Recording(V, CUTOFFS, div_value=2.0)
    x = np.random.default_rng(5).normal(size=(10, D)).astype("float32")
    layer(x, np.array([0, 1, 9, 9, 9, 30, 50, 59, 2, 3], "int32"))
    assert seen == [(0, 3), (1, 1), (2, 2)]


@pytest.mark.parametrize(
    "cutoffs", [[], [0, 5], [5, 5], [10, 5], [5, V], [5, 70], [2.5]]
)
def test_invalid_cutoffs_are_rejected(cutoffs):
    with pytest.raises(ValueError, match="cutoffs"):
        AdaptiveSoftmax(V, cutoffs)


def test_zero_projection_size_is_rejected():
    with pytest.raises(ValueError, match="div_value"):
        AdaptiveSoftmax(V, CUTOFFS, div_value=8.0).build((None, D))


def test_frequency_order_is_checked():
    from tfeff.layers.softmax_common import check_frequency_sorted

    check_frequency_sorted([0, 0, 9, 5, 5, 1], first_id=2)
    with pytest.raises(ValueError, match="id 4 has count 6 > 5"):
        check_frequency_sorted([0, 0, 9, 5, 6, 1], first_id=2)


@pytest.mark.numerics
def test_standard_layer_checks(tmp_path):
    rng = np.random.default_rng(6)
    # Zipfian targets: most in the head, some in each tail.
    t = np.minimum(rng.zipf(1.3, size=(64,)), V) - 1
    kwargs = dict(vocabulary_size=V, cutoffs=CUTOFFS, div_value=2.0, name="adaptive")
    h = rng.normal(size=(64, D)).astype("float32")
    # float32: a log-probability's bound (softmax_reference.log_prob_bound). float16 (the
    # log-softmaxes in float32): the head's logits (the casts of x and W, their rounding:
    # 3) and a tail's (x, the projection, its product, the kernel, the logits: 5), twice.
    bounds = dict(xla_n=lambda layer: log_prob_bound(layer, h)["n"], mixed_n=2 * (3 + 5),
                  scale=lambda layer: log_prob_bound(layer, h)["scale"])
    log_probs, = run_layer_test(AdaptiveSoftmax, kwargs, h, tmp_path, targets=t.astype("int32"),
                                expected_num_weights=7, **bounds)
    assert log_probs.shape == (64,) and np.all(log_probs <= 0)
    # Without targets: the full distribution, through the same `.keras` round trip.
    full, = run_layer_test(AdaptiveSoftmax, {**kwargs, "name": "adaptive_full"}, h, tmp_path,
                           fit=False, **bounds)
    assert_close(np.exp(full).sum(-1), np.ones(64), n=normalization_roundings(V), scale=1.0)
