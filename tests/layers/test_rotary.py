import math

import keras
import numpy as np
import pytest

from tests.layers.layer_checks import run_layer_test
from tfeff.layers import AnchorMultiHeadAttention
from tfeff.layers import RotaryMultiHeadAttention
from tfeff.layers.rotary import apply_rotary
from tfeff.testing.numerics import assert_close

HEADS, KEY_DIM, DIM = 3, 4, 10


def rotate_reference(x, max_wavelength=10000.0):
    """RoFormer's rotation in float64, one 2x2 rotation matrix per (position, pair).

    `x` is `(batch, n, heads, dim)`; pair i is features (i, i + dim/2) and
    turns by `position * max_wavelength ** (-2i / dim)`.
    """
    x = np.asarray(x, np.float64)
    out = np.empty_like(x)
    dim = x.shape[-1]
    half = dim // 2
    for t in range(x.shape[1]):
        for i in range(half):
            theta = t * max_wavelength ** (-2.0 * i / dim)
            rotation = np.array([[np.cos(theta), -np.sin(theta)],
                                 [np.sin(theta), np.cos(theta)]])
            pair = np.stack([x[:, t, :, i], x[:, t, :, i + half]], axis=-1)  # (b, h, 2)
            turned = pair @ rotation.T
            out[:, t, :, i], out[:, t, :, i + half] = turned[..., 0], turned[..., 1]
    return out


def rotation_roundings(positions, max_wavelength=10000.0):
    """float32 roundings of `apply_rotary`, at the scale of the pairs it turns.

    The angle t * max_wavelength ** e (pow ~4, an inexact exponent e's rounding times
    ln(max_wavelength), the product) is off by that many roundings of t <= positions - 1
    radians, and so is the turned pair (relative to its size); cos and sin (~2) and
    x1 cos - x2 sin (3) add 5.
    """
    angle = 4 + math.ceil(math.log(max_wavelength)) + 1
    return angle * max(1, positions - 1) + 5


def attention_terms(layer, x, rotary=False, max_wavelength=10000.0):
    """The sizes of an attention layer's values on `x` (queries = keys = values), in
    float64: q and k (batch, n, heads, key_dim), rotated or not, and the largest output's
    terms O = sum_h max_s |v_s W_o,h| + |b_o| (a softmax's weights sum to 1)."""
    wq, bq, wk, bk, wv, bv, wo, bo = (np.asarray(w, np.float64) for w in layer.get_weights())
    x = np.asarray(x, np.float64)
    q, k, v = (np.einsum("bnd,dhk->bnhk", x, w) + b for w, b in ((wq, bq), (wk, bk), (wv, bv)))
    if rotary:
        q, k = rotate_reference(q, max_wavelength), rotate_reference(k, max_wavelength)
    vo = np.abs(np.einsum("bshv,hvo->bsho", v, wo)).max(axis=1).sum(axis=1)  # (batch, out)
    return q, k, float(np.max(vo + np.abs(bo)))


def mha_bound(layer, x, rotary=False, max_wavelength=10000.0, dtype="float32"):
    """`assert_close`'s n and scale for scaled dot-product attention (MultiHeadAttention,
    rotated or not) on `x`, against float64 or another implementation.

    An error e of the scores moves the output by at most 2 e O (the softmax's weights
    change by p (e_s - sum p e)). The scores' error is that of q and k (dim + 1 each, the
    rotation's), of the scaling and of the dot of key_dim, at the scale S of the dot's
    terms |q| |k| / sqrt(key_dim). The value path: v (dim + 1), the softmax's
    normalization (exp ~4, a sum over n, a division), the sum over n, the output's over
    heads * value_dim, the bias. So n = 2 S (the scores' roundings) + (the value path's),
    at the scale O. In float16 (sums kept in float32) the values stored in 16 bits
    instead: q, k and v (the casts of x, W and b and the sum: 4 each; a rotation's cast),
    the scaled query and the scores (2); the probabilities, the context, W_o, the output
    and its bias (6).
    """
    q, k, out = attention_terms(layer, x, rotary, max_wavelength)
    _, n, heads, key_dim = q.shape
    scores = float(np.einsum("bnhk,bshk->bhns", np.abs(q), np.abs(k)).max()) / math.sqrt(key_dim)
    if dtype == "float16":
        score, value = 2 * (4 + bool(rotary)) + 2, 4 + 6
    else:
        rotation = rotation_roundings(n, max_wavelength) if rotary else 0
        value_dim = np.shape(layer.get_weights()[4])[-1]
        score = 2 * (x.shape[-1] + 1 + rotation) + 1 + key_dim
        value = x.shape[-1] + 1 + (4 + n + 1) + n + heads * value_dim + 1
    return dict(n=math.ceil(2 * scores * score + value), scale=out)


def _inputs(batch=2, n=7, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(batch, n, DIM)).astype("float32")
    mask = np.ones((batch, n), bool)
    mask[1, 5:] = False
    return x, mask


def _softmax(z, mask):
    z = np.where(mask, z, -np.inf)
    e = np.exp(z - z.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def attention_reference(layer, x, key_mask):
    """Scaled dot-product attention with rotated queries and keys, float64 NumPy."""
    wq, bq, wk, bk, wv, bv, wo, bo = [np.asarray(v, np.float64) for v in layer.get_weights()]
    x = x.astype(np.float64)
    q = rotate_reference(np.einsum("bnd,dhk->bnhk", x, wq) + bq)
    k = rotate_reference(np.einsum("bnd,dhk->bnhk", x, wk) + bk)
    v = np.einsum("bnd,dhk->bnhk", x, wv) + bv
    scores = np.einsum("bnhk,bshk->bhns", q, k) / np.sqrt(KEY_DIM)
    probs = _softmax(scores, key_mask[:, None, None, :])
    context = np.einsum("bhns,bshk->bnhk", probs, v)
    return np.einsum("bnhk,hko->bno", context, wo) + bo


@pytest.mark.numerics
def test_rotation_matches_a_float64_rotation_matrix_reference():
    x = np.random.default_rng(1).normal(size=(2, 9, 3, 8)).astype("float32")
    # Always float32 (callers cast back); a pair is at most sqrt(2) max|x|.
    scale = math.sqrt(2) * float(np.abs(x).max())
    assert_close(apply_rotary(x), rotate_reference(x), n=rotation_roundings(9), scale=scale)
    assert_close(apply_rotary(x, 50.0), rotate_reference(x, 50.0),
                 n=rotation_roundings(9, 50.0), scale=scale)
    # Position 0 is not turned; norms are kept everywhere: a wrong angle keeps them, cos
    # and sin (2) and the products (3) round, and NumPy's float32 norms (a sum of 8
    # squares, the sqrt: 10 each).
    out = keras.ops.convert_to_numpy(apply_rotary(x))
    np.testing.assert_array_equal(out[:, 0], x[:, 0])
    assert_close(np.linalg.norm(out, axis=-1), np.linalg.norm(x, axis=-1), n=25)


@pytest.mark.numerics
def test_rotation_matches_keras_hub_rotary_embedding():
    keras_hub = pytest.importorskip("keras_hub")
    x = np.random.default_rng(2).normal(size=(2, 11, 4, 16)).astype("float32")
    expected = keras_hub.layers.RotaryEmbedding(max_wavelength=10000)(x)
    # Two float32 rotations (keras-hub's angle takes a reciprocal more: 1).
    assert_close(apply_rotary(x), expected, n=rotation_roundings(11) + 1,
                 scale=math.sqrt(2) * float(np.abs(x).max()))


@pytest.mark.numerics
def test_rotated_scores_depend_on_the_offset_only():
    rng = np.random.default_rng(3)
    n = 8
    q = np.broadcast_to(rng.normal(size=(1, 1, 1, 6)), (1, n, 1, 6)).astype("float32")
    k = np.broadcast_to(rng.normal(size=(1, 1, 1, 6)), (1, n, 1, 6)).astype("float32")
    scores = np.einsum("ik,jk->ij", np.asarray(apply_rotary(q))[0, :, 0],
                       np.asarray(apply_rotary(k))[0, :, 0])
    # Each score: q's and k's rotations and a float32 dot of 6, of terms |q| |k| (pairs
    # at most sqrt(2) times their entries).
    bound = dict(n=2 * rotation_roundings(n) + 6, scale=2 * float(np.abs(q[0, 0, 0]) @ np.abs(
        k[0, 0, 0])))
    for offset in range(-n + 1, n):
        diagonal = np.diagonal(scores, offset)
        assert_close(diagonal, np.full_like(diagonal, diagonal[0]), **bound)
    assert abs(scores[0, 0] - scores[0, 3]) > 1e-3


@pytest.mark.numerics
def test_rotary_attention_golden_against_numpy():
    layer = RotaryMultiHeadAttention(HEADS, KEY_DIM, bias_initializer="random_normal")
    x, mask = _inputs()
    out = layer(x, x, value_mask=mask)
    # float32 always (the rotation is): the bound of mha_bound.
    assert_close(out, attention_reference(layer, x, mask), **mha_bound(layer, x, True))
    # Same weights without rotation give a different answer: the positions are used.
    plain = keras.layers.MultiHeadAttention(HEADS, KEY_DIM)
    plain.build((None, None, DIM), (None, None, DIM))
    plain.set_weights(layer.get_weights())
    assert np.abs(np.asarray(plain(x, x, value_mask=mask)) - np.asarray(out)).max() > 1e-3


def test_anchor_attention_exact_mode_is_rotary_attention():
    anchor = AnchorMultiHeadAttention(HEADS, KEY_DIM, num_anchors=3, rotary_max_wavelength=10000,
                                      bias_initializer="random_normal")
    anchor.build((None, None, DIM), (None, None, DIM))
    rotary = RotaryMultiHeadAttention(HEADS, KEY_DIM)
    rotary.build((None, None, DIM), (None, None, DIM))
    rotary.set_weights(anchor.get_weights())
    x, mask = _inputs()
    np.testing.assert_array_equal(anchor(x, x, value_mask=mask, exact=True),
                                  rotary(x, x, value_mask=mask))


@pytest.mark.numerics
def test_standard_layer_checks(tmp_path):
    x, _ = _inputs()
    kwargs = dict(num_heads=HEADS, key_dim=KEY_DIM, max_wavelength=500, name="rotary")
    bound = lambda dtype: lambda layer: mha_bound(layer, x, True, 500, dtype)  # noqa: E731
    run_layer_test(RotaryMultiHeadAttention, kwargs, (x, x), tmp_path, expected_num_weights=8,
                   xla_n=lambda layer: bound("float32")(layer)["n"],
                   mixed_n=lambda layer: bound("float16")(layer)["n"],
                   scale=lambda layer: bound("float32")(layer)["scale"])
    layer = RotaryMultiHeadAttention.from_config(
        RotaryMultiHeadAttention(**kwargs).get_config())
    assert layer.max_wavelength == 500.0


@pytest.mark.parametrize("kwargs, message", [
    ({"key_dim": 5}, "key_dim` must be even"),
    ({"max_wavelength": 1}, "max_wavelength"),
    ({"max_wavelength": "10000"}, "max_wavelength"),
    ({"attention_axes": (1,)}, "attention_axes"),
])
def test_invalid_arguments_are_named(kwargs, message):
    with pytest.raises(ValueError, match=message):
        RotaryMultiHeadAttention(**{"num_heads": 2, "key_dim": 4, **kwargs})
    if "attention_axes" not in kwargs:
        with pytest.raises(ValueError, match=message.replace("max_wavelength",
                                                             "rotary_max_wavelength")):
            AnchorMultiHeadAttention(
                2, kwargs.get("key_dim", 4), num_anchors=2,
                rotary_max_wavelength=kwargs.get("max_wavelength", 10000))
