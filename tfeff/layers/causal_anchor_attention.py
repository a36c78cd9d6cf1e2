"""CausalAnchorAttention: CoRe's anchor attention for causal language models.

Written in `keras.ops`: it runs on TensorFlow, JAX and PyTorch.
"""

import math

import keras
from keras import ops

from tfeff.backend.checks import check_attention_inputs
from tfeff.backend.hashing import hash_uniform
from tfeff.backend.nn import masked_softmax
from tfeff.layers.anchor_multi_head_attention import AnchorMultiHeadAttention
from tfeff.layers.rotary import apply_rotary

# The second word of the inference draw's seed (the layer's seed is the first).
_INFERENCE_SEED_WORD = 0xCA05A1


@keras.saving.register_keras_serializable(package="tfeff")
class CausalAnchorAttention(AnchorMultiHeadAttention):
    """CoRe's anchor attention restricted to the past: exact causality, O(m n d) per head.

    The causal self-attention of `tfeff.models.TransformerLM` with `num_anchors`.
    The weights are `AnchorMultiHeadAttention`'s, hence
    `keras.layers.MultiHeadAttention`'s (`exact=True` is standard causal
    attention on them). Positions are cut into blocks of
    `ceil(max_sequence_length / num_anchors)`; each block has one anchor
    query: its first position (`"strided"`), or a position drawn per block
    and head (`"random"`: afresh per sequence and step while training, a
    fixed seeded draw at inference). Query i attends to the anchors at
    positions a <= i (S1 = softmax over them of sqrt(d_k) q~_i . a~), and
    anchor a summarizes the keys j <= a (S2 = softmax(a~ . k_j)). Anchor
    positions depend on the position, head, seed and row only, never on the
    sequence's length or padding, so the output at i depends on the inputs at
    positions <= i alone: no mask is needed, and none is taken. A query with
    no anchor at or before it (with random anchors, the first block's
    positions before its anchor) gets the output bias.

    Args:
        num_heads: number of attention heads.
        key_dim: size of each head for query and key.
        max_sequence_length: the longest sequence; with `num_anchors` it sets
            the block size (longer sequences get more blocks, hence anchors).
        num_anchors: positive int m, the anchors of a `max_sequence_length`
            sequence.
        **kwargs: `AnchorMultiHeadAttention`'s other arguments
            (`anchor_selection`, `exact`, `seed`, `rotary_max_wavelength`,
            `dropout`, ...).

    Call arguments:
        query: `(batch, n, dim)`.
        value: optional, defaults to `query` (self-attention).
        key: optional, defaults to `value`.
        training: bool.
        exact: optional bool overriding the constructor's `exact`.

    Returns:
        `(batch, n, output_dim)`.

    Raises:
        ValueError: as `AnchorMultiHeadAttention` (`num_anchors` is not a
            positive integer, `anchor_selection` is unknown, ...).

    Example:

    >>> layer = CausalAnchorAttention(num_heads=2, key_dim=4, max_sequence_length=8,
    ...                               num_anchors=2)
    >>> x = keras.ops.ones((2, 8, 8))
    >>> tuple(layer(x).shape)
    (2, 8, 8)

    Reference:
        Yang et al., "An Efficient Coarse-refined Training Framework for
        BERT", Section 4.1 (anchor attention); the restriction to the past is
        tfeff's, for causal language models.
    """

    def __init__(self, num_heads, key_dim, max_sequence_length, num_anchors=32, **kwargs):
        super().__init__(num_heads, key_dim, num_anchors=num_anchors, **kwargs)
        self.max_sequence_length = int(max_sequence_length)
        self.block_size = max(1, math.ceil(self.max_sequence_length / self.num_anchors))

    def build(self, query_shape, value_shape=None, key_shape=None):
        # Self-attention by default: a call with the query alone builds with its shape.
        super().build(query_shape, query_shape if value_shape is None else value_shape,
                      key_shape)

    def anchor_positions(self, batch, n, training=False):
        """int32 `(batch or 1, heads, blocks)` anchor positions (some may be >= n)."""
        s = self.block_size
        blocks = (n + s - 1) // s
        starts = ops.arange(blocks, dtype="int32") * s  # (blocks,)
        if self.anchor_selection == "strided":
            return ops.broadcast_to(starts[None, None, :], (1, self.num_heads, blocks))
        if training:
            # One draw per (block, head, row): the layout does not depend on n.
            index = (ops.arange(blocks, dtype="int32")[:, None, None] * self.num_heads
                     + ops.arange(self.num_heads, dtype="int32")[None, :, None]) * batch \
                + ops.arange(batch, dtype="int32")[None, None, :]
            noise = ops.transpose(hash_uniform(index, self.anchor_seed_generator.next()),
                                  (2, 1, 0))  # (batch, heads, blocks)
        else:
            index = (ops.arange(blocks, dtype="int32")[:, None] * self.num_heads
                     + ops.arange(self.num_heads, dtype="int32")[None, :])
            noise = ops.transpose(hash_uniform(
                index, (self._inference_seed, _INFERENCE_SEED_WORD)))[None]  # (1, heads, blocks)
        offset = ops.minimum(ops.cast(ops.floor(noise * s), "int32"), s - 1)
        return starts[None, None, :] + offset

    def call(self, query, value=None, key=None, training=None, exact=None):
        query, value, key, _, _, _ = check_attention_inputs(self, query, value, key)
        if value is None:
            value = query
        if key is None:
            key = value
        exact = self.exact if exact is None else bool(exact)
        if exact or query.shape[1] == 0:
            # No positions: no anchors to place, the empty output of either mode.
            return super().call(query, value, key=key, training=training,
                                use_causal_mask=True, exact=True)
        dtype = self.compute_dtype
        batch, n = ops.shape(query)[0], ops.shape(query)[1]
        q = self.query_dense(query)  # (batch, n, heads, key_dim)
        k = self.key_dense(key)
        v = self.value_dense(value)
        if self.rotary_max_wavelength is not None:
            q = apply_rotary(q, self.rotary_max_wavelength)
            k = apply_rotary(k, self.rotary_max_wavelength)
        q = ops.transpose(ops.cast(q, "float32"), (0, 2, 1, 3))  # (batch, heads, n, key_dim)
        q = q / ops.maximum(ops.sqrt(ops.sum(q * q, axis=-1, keepdims=True)), 1e-12)

        positions = self.anchor_positions(batch, n, training=bool(training))  # (b|1, h, m)
        m = ops.shape(positions)[-1]
        gather = ops.broadcast_to(ops.minimum(positions, n - 1), (batch, self.num_heads, m))
        anchors = ops.take_along_axis(q, gather[..., None], axis=2)  # (batch, heads, m, key_dim)
        step = ops.arange(n, dtype="int32")
        # S1: query i sees the anchors a <= i.  (batch, heads, n, m)
        s1 = ops.einsum("bhnk,bhmk->bhnm", q, anchors) * math.sqrt(float(self.key_dim))
        s1 = masked_softmax(s1, positions[:, :, None, :] <= step[None, None, :, None])
        # S2: anchor a sees the keys j <= a.  (batch, heads, m, n)
        s2 = ops.einsum("bhmk,bshk->bhms", anchors, ops.cast(k, "float32"))
        s2 = masked_softmax(s2, step[None, None, None, :] <= positions[:, :, :, None])
        s1 = self._dropout_layer(ops.cast(s1, dtype), training=training)
        s2 = self._dropout_layer(ops.cast(s2, dtype), training=training)
        kernel = ops.cast(self.output_dense.kernel, dtype)  # (heads, value_dim, out)
        u = ops.einsum("bhms,bshv->bhmv", s2, v)
        u = ops.einsum("bhmv,hvo->bhmo", u, kernel)  # U_h = S2_h V_h W_h^O
        output = ops.einsum("bhnm,bhmo->bno", s1, u)  # sum_h S1_h U_h
        if self.output_dense.bias is not None:
            output = output + ops.cast(self.output_dense.bias, dtype)
        return output

    def compute_output_spec(self, query, value=None, key=None, training=None, exact=None):
        check_attention_inputs(self, query, value, key)
        return super().compute_output_spec(query, query if value is None else value)

    def get_config(self):
        config = super().get_config()
        config["max_sequence_length"] = self.max_sequence_length
        return config
