"""AnchorMultiHeadAttention: CoRe's relaxed attention through m anchor queries.

Written in `keras.ops`: it runs on TensorFlow, JAX and PyTorch (anchor
selection is `ops.top_k` with k = min(m, n), static whenever the sequence
length is).
"""

import math

import keras
import numpy as np
from keras import ops

from tfeff.backend.checks import check_attention_inputs
from tfeff.backend.checks import check_attention_shapes
from tfeff.backend.hashing import hash_uniform
from tfeff.backend.nn import masked_softmax
from tfeff.layers.rotary import apply_rotary
from tfeff.layers.rotary import check_max_wavelength
from tfeff.layers.rotary import rotate_queries_and_keys

ANCHOR_SELECTIONS = ("random", "strided")
# Anchor scores: chosen candidates score >= 1, non-candidates (padding) -1.
_CHOSEN = 1.0


@keras.saving.register_keras_serializable(package="tfeff")
class AnchorMultiHeadAttention(keras.layers.MultiHeadAttention):
    """Multi-head attention through `num_anchors` anchor queries (CoRe, relaxed BERT).

    The weights are exactly those of `keras.layers.MultiHeadAttention` (this
    layer is a subclass: `query`, `key`, `value` and `attention_output`
    einsum kernels and biases, same shapes and names), so a relaxed model's
    attention converts to a standard one by copying.

    Per sequence and head h (Yang et al., Section 4.1, Eqs. 6-13):

    1. Q, K, V are the usual projections. m = `num_anchors` anchor queries
       are chosen among the sequence's non-padded query positions
       (`anchor_selection="random"`: uniformly without replacement, a fresh
       draw per sequence and head while training and a fixed seeded draw at
       inference, one per position and head, so that a sequence's output
       depends neither on the rest of its batch nor on its padding;
       `"strided"`: evenly spaced positions, the same for every
       head). When a sequence has at most m real positions, all of them are
       anchors; slots left over are masked.
    2. Queries and anchors are normalized to unit length: Q~, A~.
    3. S1 = softmax(sqrt(d_k) Q~ A~^T) is n x m (over valid anchors) and
       S2 = softmax(A~ K^T) is m x n (over non-padded keys).
    4. The output is sum_h S1_h U_h + b_O with U_h = S2_h V_h W_h^O computed
       first, so the cost per head is O(m n d + m d_k d) and no n x n matrix
       exists. The approximate attention matrix S1_h S2_h (rows sum to one)
       is built only for `return_attention_scores=True`.

    Dropout (the `dropout` argument) applies to S1 and S2 while training.
    Padded query positions receive an output (from the valid anchors) that
    downstream layers should mask; padded keys and padded candidates never
    influence real positions. A fully padded sequence gives the output bias
    at every position. `exact=True` (constructor or call) runs the standard
    scaled dot-product attention of `keras.layers.MultiHeadAttention` on the
    same weights: that is the converted model's attention.

    With `rotary_max_wavelength`, queries and keys are rotated by their
    positions (`tfeff.layers.rotary.apply_rotary`) right after their
    projections, before anchors are chosen among the queries, in both modes:
    the exact mode is then `RotaryMultiHeadAttention`'s attention.

    Only self- or cross-attention over one sequence axis with padding masks
    is supported: `attention_axes`, `use_gate` and `sliding_window` are
    rejected by the constructor, and `attention_mask` / `use_causal_mask`
    are rejected by `call` unless the attention is `exact`.

    Random anchors come from `hash_uniform`, a counter-based draw made of
    integer ops, so eager, `tf.function`, XLA (`jit_compile=True`, which Keras
    may turn on by itself on a GPU) and an exported SavedModel choose the same
    anchors (in training, for the same seed-generator state).

    Args:
        num_heads: number of attention heads.
        key_dim: size of each head for query and key.
        num_anchors: positive int m (paper: 32).
        anchor_selection: `"random"` or `"strided"`.
        exact: if True, standard attention by default.
        seed: seed of dropout and of the anchor draws; the inference draw
            uses it as a stateless seed (0 when None).
        rotary_max_wavelength: None (no positions), or the wavelength of the
            rotary position embedding applied to queries and keys.
        **kwargs: the other `keras.layers.MultiHeadAttention` arguments
            (`value_dim`, `dropout`, `use_bias`, `output_shape`,
            initializers, regularizers, constraints) and base `Layer` ones.

    Call arguments:
        query: `(batch, n, query_dim)`; `n` may be 0 (an empty output, as
            `MultiHeadAttention` gives). Inputs of another rank, masks that
            do not match their inputs' `(batch, n)` or `(batch, s)`, and a
            `value` or `key` of another batch raise a `ValueError`
            (`tfeff.backend.checks.check_attention_inputs`).
        value: `(batch, s, value_dim)`.
        key: optional `(batch, s, key_dim)`, defaults to `value`.
        query_mask: optional bool `(batch, n)`: real query positions (anchor
            candidates). Defaults to the Keras mask of `query`, else all.
        value_mask: optional bool `(batch, s)`: real key/value positions.
        key_mask: optional bool `(batch, s)`, combined with `value_mask`.
        attention_mask: only with `exact` attention.
        return_attention_scores: also return the `(batch, heads, n, s)`
            attention matrix (S1 S2 per head, or the exact one).
        training: bool.
        use_causal_mask: only with `exact` attention.
        exact: optional bool overriding the constructor's `exact`.
        anchor_indices: optional int `(batch, heads, m')` anchor positions
            to use instead of the selection (tests, analysis); all are valid.

    Returns:
        `(batch, n, output_dim)`, and the attention scores when asked.

    Raises:
        ValueError: `num_anchors` is not a positive integer, `anchor_selection`
            is unknown, `use_gate`, `sliding_window` or `attention_axes` is
            set, or `rotary_max_wavelength` is given with an odd `key_dim`
            (or is not a number > 1).

    Example:

    >>> layer = AnchorMultiHeadAttention(num_heads=2, key_dim=4, num_anchors=3)
    >>> x = keras.ops.ones((2, 7, 8))
    >>> tuple(layer(x, x).shape)
    (2, 7, 8)

    Reference:
        Yang et al., "An Efficient Coarse-refined Training Framework for
        BERT", Section 4.1.
    """

    def __init__(
        self,
        num_heads,
        key_dim,
        num_anchors=32,
        anchor_selection="random",
        exact=False,
        seed=None,
        rotary_max_wavelength=None,
        **kwargs,
    ):
        if not isinstance(num_anchors, (int, np.integer)) or isinstance(num_anchors, bool) \
                or num_anchors <= 0:
            raise ValueError(
                "Received an invalid value for `num_anchors`, expected a positive integer. "
                f"Received: num_anchors={num_anchors!r}"
            )
        if anchor_selection not in ANCHOR_SELECTIONS:
            raise ValueError(
                f"Received an invalid value for `anchor_selection`, expected one of "
                f"{ANCHOR_SELECTIONS}. Received: anchor_selection={anchor_selection!r}"
            )
        for name in ("use_gate", "sliding_window", "attention_axes"):
            if kwargs.get(name):
                raise ValueError(
                    f"`AnchorMultiHeadAttention` does not support `{name}`. "
                    f"Received: {name}={kwargs[name]!r}"
                )
        super().__init__(num_heads, key_dim, seed=seed, **kwargs)
        self.num_anchors = int(num_anchors)
        self.anchor_selection = anchor_selection
        self.exact = bool(exact)
        if rotary_max_wavelength is not None:
            rotary_max_wavelength = check_max_wavelength(
                rotary_max_wavelength, "rotary_max_wavelength")
            if key_dim % 2:
                raise ValueError(f"`key_dim` must be even for rotary positions. Received: "
                                 f"key_dim={key_dim}")
        self.rotary_max_wavelength = rotary_max_wavelength
        self._inference_seed = 0 if seed is None else int(seed)
        self.anchor_seed_generator = keras.random.SeedGenerator(seed, name="anchor_seed")

    def build(self, query_shape, value_shape, key_shape=None):
        check_attention_shapes(self, query_shape, value_shape, key_shape)
        super().build(query_shape, value_shape, key_shape)

    # (batch, heads, n) scores: chosen candidates >= 1, padding -1.
    def _anchor_scores(self, candidates, training):
        batch, n = ops.shape(candidates)[0], ops.shape(candidates)[1]
        valid = ops.cast(candidates, "float32")[:, None, :]  # (batch, 1, n)
        if self.anchor_selection == "random":
            shape = (batch, self.num_heads, n)
            if training:
                # Fresh per step, sequence and head: a key from the seed generator.
                key = self.anchor_seed_generator.next()
                index = ops.reshape(ops.arange(batch * self.num_heads * n), shape)
                noise = hash_uniform(index, key)
            else:
                # One draw per (position, head), laid out position-major so that a
                # sequence's anchors depend neither on its batch nor on its padding:
                # embeddings never depend on what else is in the batch.
                index = ops.reshape(ops.arange(n * self.num_heads), (n, self.num_heads))
                noise = ops.transpose(hash_uniform(index, (self._inference_seed, 0x5EED)))
                noise = noise[None]  # (1, heads, n)
            return valid * (_CHOSEN + noise) - (1.0 - valid)
        # Strided: valid ranks floor((j + 1/2) L / m), j < m; all when L <= m.
        rank = ops.cumsum(ops.cast(candidates, "int32"), axis=1) - 1  # (batch, n)
        length = ops.sum(ops.cast(candidates, "float32"), axis=1, keepdims=True)  # (batch, 1)
        j = ops.arange(self.num_anchors, dtype="float32")[None, :]
        targets = ops.floor((j + 0.5) * length / float(self.num_anchors))  # (batch, m)
        hit = ops.any(
            ops.equal(ops.cast(rank, "float32")[:, :, None], targets[:, None, :]), axis=-1
        )  # (batch, n)
        chosen = ops.logical_or(hit, length <= float(self.num_anchors))
        chosen = ops.logical_and(chosen, ops.cast(candidates, "bool"))
        position = ops.cast(ops.arange(n), "float32")[None, :] / ops.cast(n, "float32")
        score = ops.where(chosen, 2.0 * _CHOSEN - position, ops.where(candidates, 0.5, -1.0))
        return score[:, None, :]

    def select_anchors(self, query_mask, training=False):
        """Anchor positions and their validity for a batch.

        Args:
            query_mask: bool `(batch, n)`, the candidate positions.
            training: random selection draws afresh when True.

        Returns:
            `(indices, valid)`: int32 `(batch, heads or 1, min(m, n))` and
            bool of the same shape.
        """
        scores = self._anchor_scores(ops.cast(query_mask, "bool"), training)
        n = scores.shape[-1]
        k = (min(self.num_anchors, n) if n is not None
             else ops.minimum(self.num_anchors, ops.shape(scores)[-1]))
        top, indices = ops.top_k(scores, k, sorted=True)
        return ops.cast(indices, "int32"), top >= _CHOSEN

    def call(
        self,
        query,
        value,
        key=None,
        query_mask=None,
        value_mask=None,
        key_mask=None,
        attention_mask=None,
        return_attention_scores=False,
        training=None,
        use_causal_mask=False,
        exact=None,
        anchor_indices=None,
    ):
        exact = self.exact if exact is None else bool(exact)
        if query_mask is None:
            query_mask = getattr(query, "_keras_mask", None)
        query, value, key, query_mask, value_mask, key_mask = check_attention_inputs(
            self, query, value, key, query_mask, value_mask, key_mask)
        if not exact and (attention_mask is not None or use_causal_mask):
            raise ValueError(
                "Anchor attention supports padding masks only (`query_mask`, `value_mask`, "
                "`key_mask`); `attention_mask` and `use_causal_mask` need `exact=True`."
            )
        if exact or query.shape[1] == 0:
            # No query positions: no anchors to choose, the empty output of either mode.
            return super().call(
                query, value, key=key, value_mask=value_mask, key_mask=key_mask,
                attention_mask=attention_mask,
                return_attention_scores=return_attention_scores,
                training=training, use_causal_mask=use_causal_mask,
            )
        if key is None:
            key = value
        dtype = self.compute_dtype
        batch, n = ops.shape(query)[0], ops.shape(query)[1]
        s = ops.shape(key)[1]
        candidates = (ops.ones((batch, n), "bool") if query_mask is None
                      else ops.cast(query_mask, "bool"))
        key_valid = ops.ones((batch, s), "bool")
        for m in (value_mask, key_mask):
            if m is not None:
                key_valid = ops.logical_and(key_valid, ops.cast(m, "bool"))

        q = self.query_dense(query)  # (batch, n, heads, key_dim)
        k = self.key_dense(key)  # (batch, s, heads, key_dim)
        v = self.value_dense(value)  # (batch, s, heads, value_dim)
        if self.rotary_max_wavelength is not None:
            q = apply_rotary(q, self.rotary_max_wavelength)
            k = apply_rotary(k, self.rotary_max_wavelength)
        q = ops.transpose(ops.cast(q, "float32"), (0, 2, 1, 3))  # (batch, heads, n, key_dim)
        q = q / ops.maximum(ops.sqrt(ops.sum(q * q, axis=-1, keepdims=True)), 1e-12)

        if anchor_indices is None:
            indices, anchor_valid = self.select_anchors(candidates, training=training)
        else:
            indices = ops.cast(anchor_indices, "int32")
            anchor_valid = ops.ones(ops.shape(indices), "bool")
        indices = ops.broadcast_to(indices, (batch, self.num_heads, ops.shape(indices)[-1]))
        anchor_valid = ops.broadcast_to(anchor_valid, ops.shape(indices))
        # (batch, heads, m, key_dim): the anchors' rows of q
        anchors = ops.take_along_axis(q, indices[..., None], axis=2)

        # S1 = softmax(sqrt(d_k) Q~ A~^T): (batch, heads, n, m)
        s1 = ops.einsum("bhnk,bhmk->bhnm", q, anchors) * math.sqrt(float(self.key_dim))
        s1 = masked_softmax(s1, anchor_valid[:, :, None, :])
        # S2 = softmax(A~ K^T): (batch, heads, m, s)
        s2 = ops.einsum("bhmk,bshk->bhms", anchors, ops.cast(k, "float32"))
        s2 = masked_softmax(s2, key_valid[:, None, None, :])
        s1, s2 = ops.cast(s1, dtype), ops.cast(s2, dtype)
        # MultiHeadAttention's own dropout (it has no public property for it).
        s1_dropped = self._dropout_layer(s1, training=training)
        s2_dropped = self._dropout_layer(s2, training=training)

        kernel = ops.cast(self.output_dense.kernel, dtype)  # (heads, value_dim, out)
        u = ops.einsum("bhms,bshv->bhmv", s2_dropped, v)  # (batch, heads, m, value_dim)
        u = ops.einsum("bhmv,hvo->bhmo", u, kernel)  # U_h = S2_h V_h W_h^O
        output = ops.einsum("bhnm,bhmo->bno", s1_dropped, u)  # sum_h S1_h U_h
        if self.output_dense.bias is not None:
            output = output + ops.cast(self.output_dense.bias, dtype)
        if return_attention_scores:
            return output, ops.einsum("bhnm,bhms->bhns", s1, s2)
        return output

    def compute_output_spec(self, query, value, key=None, query_mask=None, value_mask=None,
                            key_mask=None, attention_mask=None, return_attention_scores=False,
                            training=None, use_causal_mask=False, exact=None,
                            anchor_indices=None):
        # Both modes give MultiHeadAttention's output shapes.
        check_attention_inputs(self, query, value, key, query_mask, value_mask, key_mask)
        return super().compute_output_spec(
            query, value, key=key, query_mask=query_mask, value_mask=value_mask,
            key_mask=key_mask, attention_mask=attention_mask,
            return_attention_scores=return_attention_scores, training=training,
            use_causal_mask=use_causal_mask)

    def _compute_attention(self, query, key, value, *args, **kwargs):
        # The exact mode (MultiHeadAttention.call) with the same rotation.
        if self.rotary_max_wavelength is not None:
            query, key = rotate_queries_and_keys(query, key, self.rotary_max_wavelength)
        return super()._compute_attention(query, key, value, *args, **kwargs)

    def get_config(self):
        config = super().get_config()
        for name in ("use_gate", "sliding_window", "attention_axes"):
            config.pop(name, None)
        config.update(
            {
                "num_anchors": self.num_anchors,
                "anchor_selection": self.anchor_selection,
                "exact": self.exact,
                "rotary_max_wavelength": self.rotary_max_wavelength,
            }
        )
        return config
