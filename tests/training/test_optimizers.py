"""`make_optimizer`'s optimizers: non-finite updates are skipped, replica gradients are summed
before clipping (so N replicas update as one device)."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from tfeff.training import make_strategy
from tfeff.training.optimizers import Adam, AdamW

DEVICES = ["/cpu:0", "/cpu:1"]


def _optimizer(kind):
    if kind == "adamw":
        return AdamW(0.1, weight_decay=0.1, global_clipnorm=1.0)
    return Adam(0.1, global_clipnorm=1.0)


def _train(strategy, kind, gradients):
    """Applies one gradient per step; replica r gets `g * (r + 1) / sum(1..R)`, so the
    replicas' sum is `g` whatever their number (each replica is clipped alone by Keras)."""
    with strategy.scope():
        var = keras.Variable(np.array([1.0, -2.0, 3.0], np.float32))
        opt = _optimizer(kind)
        opt.build([var])
    replicas = strategy.num_replicas_in_sync
    share = tf.constant([(r + 1) / (replicas * (replicas + 1) / 2) for r in range(replicas)])

    @tf.function
    def step(g):
        def fn():
            r = tf.distribute.get_replica_context().replica_id_in_sync_group
            opt.apply([g * share[r]], [var])
        strategy.run(fn)

    history = []
    for g in gradients:
        step(tf.constant(g, tf.float32))
        history.append((keras.ops.convert_to_numpy(var).copy(),
                        int(opt.iterations.numpy()), int(opt.non_finite_steps.numpy()),
                        int(opt.last_non_finite_step.numpy())))
    return history


@pytest.mark.parametrize("kind", ["adam", "adamw"])
def test_non_finite_update_is_skipped_and_replicas_equal_one_device(kind):
    grads = [[3.0, -4.0, 12.0], [1.0, np.nan, 0.0], [0.5, 0.5, np.inf], [2.0, 1.0, -1.0]]
    one = _train(make_strategy("default"), kind, grads)
    two = _train(make_strategy("mirrored", DEVICES), kind, grads)
    # Steps 2 and 3 are skipped: weights unchanged, step counter not advanced.
    np.testing.assert_array_equal(one[1][0], one[0][0])
    np.testing.assert_array_equal(one[2][0], one[0][0])
    assert [h[1:] for h in one] == [(1, 0, 0), (1, 1, 2), (1, 2, 2), (2, 2, 2)]
    assert not np.array_equal(one[3][0], one[0][0])
    # Float64 reference of the applied updates (clipping the global gradient).
    ref = _reference(kind, [grads[0], grads[3]])
    np.testing.assert_allclose(one[3][0], ref, rtol=1e-5)
    for (w1, *c1), (w2, *c2) in zip(one, two):
        np.testing.assert_allclose(w2, w1, rtol=1e-6, atol=1e-7)
        assert c1 == c2


def _reference(kind, grads, lr=0.1, b1=0.9, b2=0.999, eps=1e-7, wd=0.1):
    w = np.array([1.0, -2.0, 3.0])
    m = v = np.zeros(3)
    for t, g in enumerate(grads, 1):
        g = np.asarray(g, np.float64)
        g = g * min(1.0, 1.0 / np.linalg.norm(g))
        if kind == "adamw":
            w = w - w * wd * lr
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        alpha = lr * np.sqrt(1 - b2 ** t) / (1 - b1 ** t)
        w = w - alpha * m / (np.sqrt(v) + eps)
    return w
