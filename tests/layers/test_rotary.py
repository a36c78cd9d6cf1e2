import keras
import numpy as np
import pytest

from tests.layers.layer_checks import run_layer_test
from tfeff.layers import AnchorMultiHeadAttention
from tfeff.layers import RotaryMultiHeadAttention
from tfeff.layers.rotary import apply_rotary

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


def test_rotation_matches_a_float64_rotation_matrix_reference():
    x = np.random.default_rng(1).normal(size=(2, 9, 3, 8)).astype("float32")
    np.testing.assert_allclose(apply_rotary(x), rotate_reference(x), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(apply_rotary(x, 50.0), rotate_reference(x, 50.0),
                               rtol=1e-5, atol=1e-5)
    # Position 0 is not turned; norms are kept everywhere.
    out = keras.ops.convert_to_numpy(apply_rotary(x))
    np.testing.assert_array_equal(out[:, 0], x[:, 0])
    np.testing.assert_allclose(np.linalg.norm(out, axis=-1), np.linalg.norm(x, axis=-1),
                               rtol=1e-5)


def test_rotation_matches_keras_hub_rotary_embedding():
    keras_hub = pytest.importorskip("keras_hub")
    x = np.random.default_rng(2).normal(size=(2, 11, 4, 16)).astype("float32")
    expected = keras_hub.layers.RotaryEmbedding(max_wavelength=10000)(x)
    np.testing.assert_allclose(apply_rotary(x), expected, rtol=1e-5, atol=1e-6)


def test_rotated_scores_depend_on_the_offset_only():
    rng = np.random.default_rng(3)
    n = 8
    q = np.broadcast_to(rng.normal(size=(1, 1, 1, 6)), (1, n, 1, 6)).astype("float32")
    k = np.broadcast_to(rng.normal(size=(1, 1, 1, 6)), (1, n, 1, 6)).astype("float32")
    scores = np.einsum("ik,jk->ij", np.asarray(apply_rotary(q))[0, :, 0],
                       np.asarray(apply_rotary(k))[0, :, 0])
    for offset in range(-n + 1, n):
        diagonal = np.diagonal(scores, offset)
        np.testing.assert_allclose(diagonal, diagonal[0], rtol=1e-4, atol=1e-5)
    assert np.ptp(np.diagonal(scores, 0)) < 1e-4 and abs(scores[0, 0] - scores[0, 3]) > 1e-3


def test_rotary_attention_golden_against_numpy():
    layer = RotaryMultiHeadAttention(HEADS, KEY_DIM, bias_initializer="random_normal")
    x, mask = _inputs()
    out = layer(x, x, value_mask=mask)
    np.testing.assert_allclose(out, attention_reference(layer, x, mask), rtol=1e-5, atol=1e-5)
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


def test_standard_layer_checks(tmp_path):
    x, _ = _inputs()
    kwargs = dict(num_heads=HEADS, key_dim=KEY_DIM, max_wavelength=500, name="rotary")
    run_layer_test(RotaryMultiHeadAttention, kwargs, (x, x), tmp_path, expected_num_weights=8,
                   mixed_atol=2e-2, mixed_rtol=2e-2)
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
