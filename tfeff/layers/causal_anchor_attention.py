"""CausalAnchorAttention: CoRe's anchor attention for causal language models (`keras.ops`)."""

import math

import keras
from keras import ops

from tfeff.backend.checks import check_attention_inputs
from tfeff.backend.hashing import hash_uniform
from tfeff.layers.anchor_multi_head_attention import AnchorMultiHeadAttention

# The second word of the inference draw's seed (the layer's seed is the first).
_INFERENCE_SEED_WORD = 0xCA05A1


@keras.saving.register_keras_serializable(package="tfeff")
class CausalAnchorAttention(AnchorMultiHeadAttention):
    """CoRe's anchor attention restricted to the past: exact causality, O(m n d) per head.

    The causal self-attention of `tfeff.models.TransformerLM` with
    `num_anchors`, on `AnchorMultiHeadAttention`'s weights (`exact=True` is
    standard causal attention). Positions are cut into blocks of
    `ceil(max_sequence_length / num_anchors)`, each with one anchor query: its
    first position (`"strided"`) or one drawn per block and head (`"random"`).
    Query i attends to the anchors at positions a <= i, and anchor a
    summarizes the keys j <= a. Anchor positions depend on the position, head,
    seed and row only, never on the sequence's length or padding, so the
    output at i depends on the inputs at positions <= i alone: no mask is
    needed, and none is taken. A query with no anchor at or before it gets
    the output bias.

    Args:
        num_heads: number of attention heads.
        key_dim: size of each head for query and key.
        max_sequence_length: the longest sequence; with `num_anchors` it sets
            the block size (longer sequences get more blocks, hence anchors).
        num_anchors: positive int m, the anchors of a `max_sequence_length`
            sequence.
        **kwargs: `AnchorMultiHeadAttention`'s other arguments.

    Call arguments:
        query: `(batch, n, dim)`.
        value: optional, defaults to `query` (self-attention).
        key: optional, defaults to `value`.
        training: bool.
        exact: optional bool overriding the constructor's `exact`.

    Returns:
        `(batch, n, output_dim)`.

    Raises:
        ValueError: as `AnchorMultiHeadAttention`.

    Example:

    >>> layer = CausalAnchorAttention(num_heads=2, key_dim=4, max_sequence_length=8,
    ...                               num_anchors=2)
    >>> x = keras.ops.ones((2, 8, 8))
    >>> tuple(layer(x).shape)
    (2, 8, 8)

    Reference:
        Yang et al., "An Efficient Coarse-refined Training Framework for
        BERT", Section 4.1; the restriction to the past is tfeff's.
    """

    def __init__(self, num_heads, key_dim, max_sequence_length, num_anchors=32, **kwargs):
        super().__init__(num_heads, key_dim, num_anchors=num_anchors, **kwargs)
        self.max_sequence_length = int(max_sequence_length)
        self.block_size = max(1, math.ceil(self.max_sequence_length / self.num_anchors))

    def build(self, query_shape, value_shape=None, key_shape=None):
        # Self-attention by default: a call with the query alone builds with its shape.
        super().build(query_shape, query_shape if value_shape is None else value_shape, key_shape)

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
        value = query if value is None else value
        key = value if key is None else key
        exact = self.exact if exact is None else bool(exact)
        if exact or query.shape[1] == 0:
            # No positions: no anchors to place, the empty output of either mode.
            return super().call(query, value, key=key, training=training,
                                use_causal_mask=True, exact=True)
        batch, n = ops.shape(query)[0], ops.shape(query)[1]
        q, k, v = self._project(query, key, value)
        positions = self.anchor_positions(batch, n, training=bool(training))  # (b|1, h, m)
        m = ops.shape(positions)[-1]
        gather = ops.broadcast_to(ops.minimum(positions, n - 1), (batch, self.num_heads, m))
        anchors = ops.take_along_axis(q, gather[..., None], axis=2)  # (batch, heads, m, key_dim)
        step = ops.arange(n, dtype="int32")
        # Query i sees the anchors a <= i; anchor a sees the keys j <= a.
        s1, s2 = self._scores(q, anchors, k, positions[:, :, None, :] <= step[None, None, :, None],
                              step[None, None, None, :] <= positions[:, :, :, None])
        return self._anchor_output(s1, s2, v, training)

    def compute_output_spec(self, query, value=None, key=None, training=None, exact=None):
        check_attention_inputs(self, query, value, key)
        return super().compute_output_spec(query, query if value is None else value)

    def get_config(self):
        config = super().get_config()
        config["max_sequence_length"] = self.max_sequence_length
        return config
