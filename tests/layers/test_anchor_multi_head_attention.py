import math

import keras
import numpy as np
import pytest
import tensorflow as tf

from tests.layers.layer_checks import run_layer_test
from tests.layers.test_rotary import attention_terms
from tests.layers.test_rotary import mha_bound
from tests.layers.test_rotary import rotate_reference
from tests.layers.test_rotary import rotation_roundings
from tfeff.layers import AnchorMultiHeadAttention
from tfeff.testing.numerics import assert_close

HEADS, KEY_DIM, DIM = 3, 4, 10


def _inputs(batch=3, n=9, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(batch, n, DIM)).astype("float32")
    mask = np.ones((batch, n), bool)
    mask[1, 6:] = False
    mask[2, 2:] = False
    return x, mask


def _layer(num_anchors=4, **kwargs):
    layer = AnchorMultiHeadAttention(HEADS, KEY_DIM, num_anchors=num_anchors,
                                     bias_initializer="random_normal", **kwargs)
    layer.build((None, None, DIM), (None, None, DIM))
    return layer


def anchor_bound(layer, x, m, rotary=False, dtype="float32"):
    """`assert_close`'s n and scale for anchor attention with `m` anchors on `x`, as
    test_rotary.mha_bound (the scores are float32 whatever the compute dtype).

    q~ = q / |q| is a unit vector, off by q's roundings (dim + 1, the rotation's)
    relative to |q| and the normalization's (~8). S1 = sqrt(key_dim) q~ a~ has terms
    summing to at most sqrt(key_dim); S2 = a~ k to at most max_s |k_s| (Cauchy-Schwarz),
    off by q~'s, k's and the dot's roundings. Each softmax's error e moves the output
    by at most 2 e O. The value path: v, S2's normalization (n + 5), the sum over n,
    W_o's over value_dim, S1's normalization (m + 5), the sum over m, over heads, the
    bias. In float16 (sums, scores and softmaxes in float32): q, k and v stored in 16
    bits (5 each: the casts of x, W and b, the product, the sum); the probabilities,
    S2 V, W_o, U, S1 U and the bias (7).
    """
    q, k, out = attention_terms(layer, x, rotary)
    _, n, heads, key_dim = q.shape
    dim, s2 = x.shape[-1], float(np.linalg.norm(k, axis=-1).max())
    if dtype == "float16":
        qt = kk = 5
        dot, value = 0, 5 + 7
    else:
        kk = dim + 1 + (rotation_roundings(n) if rotary else 0)
        qt = kk + 8
        dot, value = key_dim + 1, dim + 1 + (n + 5) + n + key_dim + (m + 5) + m + heads + 1
    errors = 2 * math.sqrt(key_dim) * (2 * qt + dot) + 2 * s2 * (qt + kk + dot)
    return dict(n=math.ceil(errors + value), scale=out)


def _softmax(z, mask):
    z = np.where(mask, z, -np.inf)
    z = z - np.max(np.where(mask, z, -1e300), axis=-1, keepdims=True)
    e = np.where(mask, np.exp(z), 0.0)
    total = e.sum(-1, keepdims=True)
    return np.divide(e, total, out=np.zeros_like(e), where=total > 0)


def reference(layer, x, anchors, anchor_valid, key_mask, rotary=False):
    """Eqs. 7-13 of the CoRe paper in float64 NumPy, with the given anchors.

    `rotary`: queries and keys rotated by their positions first.
    """
    w = [np.asarray(v, np.float64) for v in layer.get_weights()]
    wq, bq, wk, bk, wv, bv, wo, bo = w
    x = x.astype(np.float64)
    q = np.einsum("bnd,dhk->bnhk", x, wq) + bq
    k = np.einsum("bnd,dhk->bnhk", x, wk) + bk
    if rotary:
        q, k = rotate_reference(q), rotate_reference(k)
    q, k = q.transpose(0, 2, 1, 3), k.transpose(0, 2, 1, 3)
    v = np.einsum("bnd,dhk->bhnk", x, wv) + bv[None, :, None, :]
    q = q / np.linalg.norm(q, axis=-1, keepdims=True)
    out = np.zeros(x.shape[:2] + (wo.shape[-1],))
    for b in range(x.shape[0]):
        for h in range(HEADS):
            a = q[b, h, anchors[b, h]]  # (m, k)
            s1 = _softmax(np.sqrt(KEY_DIM) * q[b, h] @ a.T, anchor_valid[b, h][None, :])
            s2 = _softmax(a @ k[b, h].T, key_mask[b][None, :])
            u = s2 @ v[b, h] @ wo[h]  # (m, out)
            out[b] += s1 @ u
    return out + bo


def test_weights_are_laid_out_like_keras_multi_head_attention():
    layer = _layer()
    mha = keras.layers.MultiHeadAttention(HEADS, KEY_DIM)
    mha.build((None, None, DIM), (None, None, DIM))
    strip = lambda w: (w.path.split("/", 1)[1], tuple(w.shape))  # noqa: E731
    assert [strip(w) for w in layer.weights] == [strip(w) for w in mha.weights]
    assert len(layer.weights) == 8


@pytest.mark.numerics
def test_golden_against_numpy_with_fixed_anchors():
    layer = _layer()
    x, mask = _inputs()
    anchors = np.array([[[0, 4, 8], [1, 2, 3], [8, 7, 6]],
                        [[0, 5, 2], [3, 1, 4], [2, 2, 0]],
                        [[0, 1, 0], [1, 0, 1], [0, 0, 0]]], np.int32)
    out = layer(x, x, query_mask=mask, value_mask=mask, anchor_indices=anchors)
    expected = reference(layer, x, anchors, np.ones(anchors.shape, bool), mask)
    assert_close(out, expected, **anchor_bound(layer, x, 3))


@pytest.mark.numerics
def test_rotary_golden_against_numpy_with_fixed_anchors():
    layer = _layer(rotary_max_wavelength=10000)
    x, mask = _inputs()
    anchors = np.array([[[0, 4, 8], [1, 2, 3], [8, 7, 6]],
                        [[0, 5, 2], [3, 1, 4], [2, 2, 0]],
                        [[0, 1, 0], [1, 0, 1], [0, 0, 0]]], np.int32)
    out = layer(x, x, query_mask=mask, value_mask=mask, anchor_indices=anchors)
    valid = np.ones(anchors.shape, bool)
    expected = reference(layer, x, anchors, valid, mask, rotary=True)
    assert_close(out, expected, **anchor_bound(layer, x, 3, rotary=True))
    unrotated = reference(layer, x, anchors, valid, mask)
    assert np.abs(unrotated - expected).max() > 1e-3


@pytest.mark.numerics
@pytest.mark.parametrize("selection", ["random", "strided"])
def test_selected_anchors_match_the_reference_and_stay_inside_the_sequence(selection):
    layer = _layer(num_anchors=4, anchor_selection=selection, seed=3)
    x, mask = _inputs()
    indices, valid = (np.asarray(t) for t in layer.select_anchors(mask))
    assert indices.shape[-1] == 4
    for b in range(len(mask)):
        for h in range(indices.shape[1]):
            chosen = indices[b, h][valid[b, h]]
            assert mask[b, chosen].all()  # never a padded position
            assert len(set(chosen.tolist())) == len(chosen) == min(4, mask[b].sum())
    out = layer(x, x, query_mask=mask, value_mask=mask)
    indices = np.broadcast_to(indices, (len(mask), HEADS, 4))
    valid = np.broadcast_to(valid, indices.shape)
    assert_close(out, reference(layer, x, indices, valid, mask), **anchor_bound(layer, x, 4))


def test_strided_selection_golden():
    layer = _layer(num_anchors=3, anchor_selection="strided")
    mask = np.array([[1] * 6, [1, 1, 1, 1, 0, 0], [0, 1, 0, 1, 1, 1]], bool)
    indices, valid = layer.select_anchors(mask)
    # ranks floor((j + 1/2) L / m): L=6 -> 1, 3, 5; L=4 -> 0, 2, 3 (positions
    # of those ranks among the real ones).
    np.testing.assert_array_equal(np.asarray(indices)[:, 0],
                                  [[1, 3, 5], [0, 2, 3], [1, 4, 5]])
    assert np.asarray(valid).all()


def test_random_selection_is_seeded_at_inference_and_fresh_in_training():
    layer = _layer(num_anchors=3, seed=7)
    mask = np.ones((4, 40), bool)
    first, _ = layer.select_anchors(mask)
    np.testing.assert_array_equal(first, layer.select_anchors(mask)[0])
    np.testing.assert_array_equal(first, _layer(num_anchors=3, seed=7).select_anchors(mask)[0])
    # Per head at inference, and a sequence's anchors do not depend on its batch or
    # on its padding (an embedder's output must not depend on its batch neighbours).
    assert len({tuple(np.sort(r)) for r in np.asarray(first)[0]}) == HEADS
    ragged = np.zeros((3, 60), bool)
    ragged[0, :40], ragged[1, :25], ragged[2, :40] = True, True, True
    in_batch, valid = layer.select_anchors(ragged)
    alone, _ = layer.select_anchors(ragged[1:2, :25])
    np.testing.assert_array_equal(np.sort(in_batch[1], -1), np.sort(alone[0], -1))
    np.testing.assert_array_equal(np.sort(in_batch[0], -1), np.sort(first[0], -1))
    assert np.asarray(valid).all() and (np.asarray(in_batch)[1] < 25).all()
    a = layer.select_anchors(mask, training=True)[0]
    b = layer.select_anchors(mask, training=True)[0]
    assert not np.array_equal(a, b)


@pytest.mark.numerics
def test_all_positions_become_anchors_when_m_exceeds_n():
    """m >= n: every real position is an anchor, the closed form of the paper."""
    layer = _layer(num_anchors=50)
    x, mask = _inputs()
    out, scores = layer(x, x, query_mask=mask, value_mask=mask, return_attention_scores=True)
    n = x.shape[1]
    all_positions = np.broadcast_to(np.arange(n), (len(x), HEADS, n))
    valid = np.broadcast_to(mask[:, None, :], all_positions.shape)
    assert_close(out, reference(layer, x, all_positions, valid, mask),
                 **anchor_bound(layer, x, n))
    assert scores.shape == (len(x), HEADS, n, n)


@pytest.mark.numerics
def test_attention_rows_sum_to_one_and_padded_keys_get_no_weight():
    layer = _layer(num_anchors=4)
    x, mask = _inputs()
    _, scores = layer(x, x, query_mask=mask, value_mask=mask, return_attention_scores=True)
    scores = np.asarray(scores)
    # S1 S2's rows, summed: two softmaxes' normalizations (4 + 5, 9 + 5), the product's
    # sum over 4 anchors, NumPy's float32 sum over 9 keys: of weights at most 1.
    assert_close(scores.sum(-1), np.ones(scores.shape[:-1]), n=9 + 14 + 4 + 9, scale=1.0)
    assert np.all(scores[~np.broadcast_to(mask[:, None, None, :], scores.shape)] == 0)


def test_fully_padded_sequence_gives_the_bias_and_no_nan():
    layer = _layer(num_anchors=4)
    x, mask = _inputs()
    mask[0] = False
    out, scores = layer(x, x, query_mask=mask, value_mask=mask, return_attention_scores=True)
    assert np.isfinite(np.asarray(out)).all()
    np.testing.assert_allclose(np.asarray(out)[0],
                               np.broadcast_to(layer.get_weights()[-1], out.shape[1:]))
    assert np.all(np.asarray(scores)[0] == 0)


@pytest.mark.parametrize("selection", ["random", "strided"])
def test_padding_never_leaks(selection):
    layer = _layer(num_anchors=3, anchor_selection=selection, seed=1)
    x, mask = _inputs()
    changed = np.where(mask[:, :, None], x, 100.0 * np.random.default_rng(5).normal(size=x.shape))
    a = np.asarray(layer(x, x, query_mask=mask, value_mask=mask))
    b = np.asarray(layer(changed.astype("float32"), changed.astype("float32"),
                         query_mask=mask, value_mask=mask))
    np.testing.assert_allclose(a[mask], b[mask], rtol=1e-5, atol=1e-6)


def test_exact_equals_keras_multi_head_attention():
    layer = _layer()
    mha = keras.layers.MultiHeadAttention(HEADS, KEY_DIM)
    mha.build((None, None, DIM), (None, None, DIM))
    mha.set_weights(layer.get_weights())
    x, mask = _inputs()
    expected, expected_scores = mha(x, x, value_mask=mask, return_attention_scores=True)
    out, scores = layer(x, x, value_mask=mask, exact=True, return_attention_scores=True)
    np.testing.assert_array_equal(out, expected)
    np.testing.assert_array_equal(scores, expected_scores)
    exact_layer = AnchorMultiHeadAttention.from_config({**layer.get_config(), "exact": True})
    exact_layer.build((None, None, DIM), (None, None, DIM))
    exact_layer.set_weights(layer.get_weights())
    # Without scores Keras may take its fused attention path: compare like with like.
    np.testing.assert_array_equal(exact_layer(x, x, value_mask=mask),
                                  mha(x, x, value_mask=mask))


def test_no_n_by_n_tensor_unless_scores_are_asked_for():
    layer = _layer(num_anchors=4)
    n = 37

    @tf.function(input_signature=[tf.TensorSpec((2, n, DIM)), tf.TensorSpec((2, n), tf.bool)])
    def run(x, mask):
        return layer(x, x, query_mask=mask, value_mask=mask, training=True)

    graph = run.get_concrete_function().graph
    shapes = [o.shape for op in graph.get_operations() for o in op.outputs]
    assert not [s for s in shapes if s.rank and s.rank >= 2 and list(s[-2:]) == [n, n]]


def attention_bounds(x, exact, m):
    """run_layer_test's xla_n, mixed_n and scale: those of MultiHeadAttention's exact mode
    (test_rotary.mha_bound) or of anchor attention with `m` anchors."""
    def bound(dtype):
        if exact:
            return lambda layer: mha_bound(layer, x, dtype=dtype)
        return lambda layer: anchor_bound(layer, x, m, dtype=dtype)
    return dict(xla_n=lambda layer: bound("float32")(layer)["n"],
                mixed_n=lambda layer: bound("float16")(layer)["n"],
                scale=lambda layer: bound("float32")(layer)["scale"])


@pytest.mark.numerics
@pytest.mark.parametrize("selection", ["random", "strided"])
@pytest.mark.parametrize("exact", [False, True])
def test_standard_layer_checks(selection, exact, tmp_path):
    """Config, `.keras`, fit, mixed precision, and eager = tf.function = XLA in both
    modes with fewer anchors (4) than tokens (9): the random draws name Philox, which
    TensorFlow's default algorithm does not under XLA."""
    kwargs = dict(num_heads=HEADS, key_dim=KEY_DIM, num_anchors=4, anchor_selection=selection,
                  exact=exact, seed=2, name=f"anchors_{selection}_{exact}")
    x, _ = _inputs()
    out, = run_layer_test(AnchorMultiHeadAttention, kwargs, (x, x), tmp_path,
                          expected_num_weights=8, **attention_bounds(x, exact, 4))
    assert out.shape == x.shape


@pytest.mark.numerics
def test_dropout_runs_the_checks_in_inference_under_xla(tmp_path):
    """Keras' own Dropout draws other masks under XLA (TensorFlow backend), so with
    dropout the XLA check runs in inference mode; the anchors stay seeded."""
    kwargs = dict(num_heads=HEADS, key_dim=KEY_DIM, num_anchors=4, dropout=0.1, seed=2,
                  name="anchors_dropout")
    x, _ = _inputs()
    run_layer_test(AnchorMultiHeadAttention, kwargs, (x, x), tmp_path, xla_training=False,
                   **attention_bounds(x, False, 4))


@pytest.mark.numerics
def test_xla_predict_equals_eager_call_with_random_anchors():
    """The reported bug: `model.predict` under XLA chose other anchors than `model(x)`."""
    layer = _layer(num_anchors=3, seed=5)
    inp = keras.Input((None, DIM))
    model = keras.Model(inp, layer(inp, inp))
    x = np.random.default_rng(9).normal(size=(4, 30, DIM)).astype("float32")
    model.compile(jit_compile=True)
    # Two float32 implementations (XLA's and eager), the same anchors.
    assert_close(model.predict(x, verbose=0), model(x), **anchor_bound(layer, x, 3))
    # The symbolic call of exact mode works too (it reached MultiHeadAttention's
    # compute_output_spec with `exact`).
    exact = keras.Model(inp, _layer(num_anchors=3)(inp, inp, exact=True))
    assert tuple(exact.output.shape) == (None, None, DIM)


def test_dropout_only_in_training():
    layer = _layer(dropout=0.5, anchor_selection="strided")
    x, mask = _inputs()
    a = layer(x, x, query_mask=mask, value_mask=mask)
    np.testing.assert_array_equal(a, layer(x, x, query_mask=mask, value_mask=mask))
    assert not np.allclose(a, layer(x, x, query_mask=mask, value_mask=mask, training=True))


def test_invalid_arguments_are_named():
    with pytest.raises(ValueError, match="num_anchors=0"):
        AnchorMultiHeadAttention(2, 4, num_anchors=0)
    with pytest.raises(ValueError, match="anchor_selection='first'"):
        AnchorMultiHeadAttention(2, 4, anchor_selection="first")
    with pytest.raises(ValueError, match="use_gate"):
        AnchorMultiHeadAttention(2, 4, use_gate=True)
    layer = _layer()
    x, _ = _inputs()
    with pytest.raises(ValueError, match="exact=True"):
        layer(x, x, use_causal_mask=True)


def _mix32_reference(x):
    m = np.uint64(0xFFFFFFFF)
    x = np.asarray(x, np.uint64)
    x ^= x >> np.uint64(16)
    x = (x * np.uint64(0x7FEB352D)) & m
    x ^= x >> np.uint64(15)
    x = (x * np.uint64(0x846CA68B)) & m
    return x ^ (x >> np.uint64(16))


def test_hash_uniform_equals_a_numpy_reference_eagerly_and_under_xla():
    from tfeff.backend.hashing import hash_uniform

    index = np.arange(2000, dtype=np.int32).reshape(40, 50)
    seed = (7, 2**33 + 3)  # reduced modulo 2**32
    key = _mix32_reference(_mix32_reference(7) ^ np.uint64(3))
    x = _mix32_reference(index.astype(np.uint64) ^ key)
    x = _mix32_reference((x + key) & np.uint64(0xFFFFFFFF))
    expected = (x >> np.uint64(8)).astype(np.float64) / 2**24
    eager = np.asarray(hash_uniform(index, seed))
    np.testing.assert_array_equal(eager, expected.astype(np.float32))
    xla = tf.function(lambda i: hash_uniform(i, seed), jit_compile=True)(index)
    np.testing.assert_array_equal(np.asarray(xla), eager)
    assert 0.45 < eager.mean() < 0.55 and len(np.unique(eager)) > 1990
