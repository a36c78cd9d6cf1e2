"""Rotary position embedding (RoFormer) and a `MultiHeadAttention` that applies it."""

import keras
from keras import ops

from tfeff.backend.checks import check_attention_inputs
from tfeff.backend.checks import check_attention_shapes

DEFAULT_MAX_WAVELENGTH = 10000


def check_max_wavelength(value, name="max_wavelength", key_dim=None):
    """Validates a rotary wavelength (a number > 1) and `key_dim` (even); returns a float."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 1:
        raise ValueError(f"Received an invalid value for `{name}`, expected a number > 1. "
                         f"Received: {name}={value!r}")
    if key_dim is not None and key_dim % 2:
        raise ValueError(
            f"`key_dim` must be even for rotary positions. Received: key_dim={key_dim}")
    return float(value)


def apply_rotary(x, max_wavelength=DEFAULT_MAX_WAVELENGTH):
    """Rotates `x` `(batch, n, heads, dim)` by its positions 0..n-1 along axis 1.

    RoFormer's rotary position embedding (Su et al. 2021) in the rotate-half
    layout of keras-hub's `RotaryEmbedding` and Hugging Face's Llama:
    features i and i + dim/2 form a pair rotated by the angle
    `position * max_wavelength ** (-2i / dim)`, so `q_i . k_j` depends on
    positions through `i - j` only. Computed and returned in float32.

    Args:
        x: `(batch, n, heads, dim)` projected queries or keys; `dim` even.
        max_wavelength: the longest wavelength (RoFormer: 10000).

    Returns:
        The rotated float32 tensor, same shape as `x`.
    """
    dim = x.shape[-1]
    if dim is None or dim % 2:
        raise ValueError("Rotary embedding needs an even, known last dimension (the head "
                         f"size). Received: shape={x.shape}")
    half = dim // 2
    n = ops.shape(x)[1]
    inverse_frequency = ops.power(
        float(max_wavelength), -ops.arange(0, dim, 2, dtype="float32") / float(dim))
    angles = ops.arange(n, dtype="float32")[:, None] * inverse_frequency[None, :]  # (n, half)
    cos, sin = ops.cos(angles)[None, :, None, :], ops.sin(angles)[None, :, None, :]
    x = ops.cast(x, "float32")
    x1, x2 = x[..., :half], x[..., half:]
    return ops.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)


def rotate_queries_and_keys(query, key, max_wavelength):
    """`apply_rotary` on projected queries and keys, each cast back to its dtype."""
    return (ops.cast(apply_rotary(query, max_wavelength), query.dtype),
            ops.cast(apply_rotary(key, max_wavelength), key.dtype))


@keras.saving.register_keras_serializable(package="tfeff")
class RotaryMultiHeadAttention(keras.layers.MultiHeadAttention):
    """`keras.layers.MultiHeadAttention` with rotary position embedding on queries and keys.

    Exactly the weights of `MultiHeadAttention`; the projected queries and
    keys are rotated by their positions (`apply_rotary`) before they are
    scored. `tfeff.models.BertBackbone(position_embedding="rotary")` uses it.

    Args:
        num_heads: number of attention heads.
        key_dim: size of each head for query and key; even (dimensions rotate in pairs).
        max_wavelength: the rotary embedding's longest wavelength, a number > 1.
        **kwargs: other `MultiHeadAttention` arguments (not `attention_axes`:
            the sequence is axis 1).

    Raises:
        ValueError: `attention_axes` is given, `key_dim` is odd, or
            `max_wavelength` is not a number > 1.

    Example:

    >>> layer = RotaryMultiHeadAttention(num_heads=2, key_dim=4)
    >>> x = keras.ops.ones((2, 7, 8))
    >>> tuple(layer(x, x).shape)
    (2, 7, 8)
    """

    def __init__(self, num_heads, key_dim, max_wavelength=DEFAULT_MAX_WAVELENGTH, **kwargs):
        if kwargs.get("attention_axes") is not None:
            raise ValueError("`RotaryMultiHeadAttention` attends over axis 1 only. Received: "
                             f"attention_axes={kwargs['attention_axes']!r}")
        if key_dim % 2:
            raise ValueError(
                f"`key_dim` must be even for rotary positions. Received: key_dim={key_dim}")
        super().__init__(num_heads, key_dim, **kwargs)
        self.max_wavelength = check_max_wavelength(max_wavelength)

    def build(self, query_shape, value_shape, key_shape=None):
        check_attention_shapes(self, query_shape, value_shape, key_shape)
        super().build(query_shape, value_shape, key_shape)

    def call(self, query, value, key=None, query_mask=None, value_mask=None, key_mask=None,
             attention_mask=None, return_attention_scores=False, training=None,
             use_causal_mask=False):
        # The query's Keras mask is the one MultiHeadAttention reads (not `query_mask`).
        _, value, key, _, value_mask, key_mask = check_attention_inputs(
            self, query, value, key, getattr(query, "_keras_mask", None), value_mask, key_mask)
        return super().call(query, value, key=key, query_mask=query_mask,
                            value_mask=value_mask, key_mask=key_mask,
                            attention_mask=attention_mask,
                            return_attention_scores=return_attention_scores,
                            training=training, use_causal_mask=use_causal_mask)

    def compute_output_spec(self, query, value, key=None, query_mask=None, value_mask=None,
                            key_mask=None, attention_mask=None, return_attention_scores=False,
                            training=None, use_causal_mask=False):
        check_attention_inputs(self, query, value, key, None, value_mask, key_mask)
        return super().compute_output_spec(
            query, value, key=key, query_mask=query_mask, value_mask=value_mask,
            key_mask=key_mask, attention_mask=attention_mask,
            return_attention_scores=return_attention_scores, training=training,
            use_causal_mask=use_causal_mask)

    def _compute_attention(self, query, key, value, *args, **kwargs):
        query, key = rotate_queries_and_keys(query, key, self.max_wavelength)
        return super()._compute_attention(query, key, value, *args, **kwargs)

    def get_config(self):
        config = super().get_config()
        config.pop("attention_axes", None)
        config["max_wavelength"] = self.max_wavelength
        return config
