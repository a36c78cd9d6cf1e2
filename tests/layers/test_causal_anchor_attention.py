import math

import keras
import numpy as np
import pytest

from tests.layers.layer_checks import run_layer_test
from tests.layers.test_anchor_multi_head_attention import attention_bounds
from tfeff.layers import CausalAnchorAttention

HEADS, KEY_DIM, DIM, N = 3, 4, 10, 9


def _x(batch=2, n=N, seed=0):
    return np.random.default_rng(seed).normal(size=(batch, n, DIM)).astype("float32")


def _layer(**kwargs):
    kwargs = {"max_sequence_length": N, "num_anchors": 3, "seed": 2,
              "bias_initializer": "random_normal", **kwargs}
    layer = CausalAnchorAttention(HEADS, KEY_DIM, **kwargs)
    layer.build((None, None, DIM), (None, None, DIM))
    return layer


@pytest.mark.numerics
@pytest.mark.parametrize("selection", ["random", "strided"])
@pytest.mark.parametrize("exact", [False, True])
def test_standard_layer_checks(selection, exact, tmp_path):
    """Config, `.keras`, fit, mixed precision, and eager = tf.function = XLA in both
    modes: 3 blocks of 3 positions in 9, each with its anchor (the bounds of anchor
    attention with 3 anchors, or of causal MultiHeadAttention)."""
    kwargs = dict(num_heads=HEADS, key_dim=KEY_DIM, max_sequence_length=N, num_anchors=3,
                  anchor_selection=selection, exact=exact, seed=2,
                  name=f"causal_anchors_{selection}_{exact}")
    x = _x()
    out, = run_layer_test(CausalAnchorAttention, kwargs, (x,), tmp_path,
                          expected_num_weights=8, **attention_bounds(x, exact, 3))
    assert out.shape == x.shape


@pytest.mark.parametrize("selection", ["random", "strided"])
def test_an_output_never_sees_a_later_input(selection):
    """Position t's output is bit-identical when any input after t changes, and when the
    sequence is cut after t (its length leaks nothing either)."""
    layer = _layer(anchor_selection=selection)
    x = _x(batch=1)
    base = np.asarray(layer(x))
    rng = np.random.default_rng(1)
    for t in range(N):
        changed = x.copy()
        changed[:, t + 1:] = rng.normal(size=changed[:, t + 1:].shape)
        np.testing.assert_array_equal(np.asarray(layer(changed))[:, t], base[:, t])
        np.testing.assert_array_equal(np.asarray(layer(x[:, :t + 1]))[:, t], base[:, t])


def test_exact_is_keras_causal_attention_on_the_same_weights():
    layer = _layer(exact=True)
    mha = keras.layers.MultiHeadAttention(HEADS, KEY_DIM)
    mha.build((None, None, DIM), (None, None, DIM))
    mha.set_weights(layer.get_weights())
    x = _x()
    np.testing.assert_array_equal(layer(x), mha(x, x, use_causal_mask=True))


def test_one_anchor_per_block_at_its_start_or_drawn_within_it():
    """Strided anchors start their blocks; drawn ones lie in theirs, fixed at inference."""
    strided = _layer(anchor_selection="strided")
    block = math.ceil(N / 3)
    np.testing.assert_array_equal(np.asarray(strided.anchor_positions(2, N))[0, 0],
                                  [0, block, 2 * block])
    drawn = np.asarray(_layer().anchor_positions(2, N))
    starts = np.arange(3) * block
    assert np.all((drawn >= starts) & (drawn < starts + block))
    np.testing.assert_array_equal(drawn, np.asarray(_layer().anchor_positions(2, N)))
