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

    A subclass of `keras.layers.MultiHeadAttention` with exactly its weights
    (a relaxed model's attention converts by copying). Per sequence and head
    (Yang et al., Section 4.1, Eqs. 6-13), m anchor queries are chosen among
    the non-padded queries, all of them when there are at most m: `"random"`,
    afresh in training and by a fixed seeded draw per position and head at
    inference (independent of the batch and of padding); `"strided"`, evenly
    spaced. The output is sum_h S1_h (S2_h V_h W_h^O) + b_O with
    S1 = softmax(sqrt(d_k) Q~ A~^T) (n x m) and S2 = softmax(A~ K^T) (m x n)
    over unit-length queries and anchors: no n x n matrix unless
    `return_attention_scores=True`. See docs/papers/core.md#the-layers.

    Dropout applies to S1 and S2. Padded queries get an output (to be masked
    downstream), padded keys are never attended, and a fully padded sequence
    gives the output bias. `exact=True` is the converted model's standard
    attention on the same weights. `rotary_max_wavelength` rotates projected
    queries and keys by their positions, in both modes. Random anchors are an
    integer hash (`hash_uniform`): the same eagerly, under XLA and exported.

    Args:
        num_heads: number of attention heads.
        key_dim: size of each head for query and key.
        num_anchors: positive int m (paper: 32).
        anchor_selection: `"random"` or `"strided"`.
        exact: if True, standard attention by default.
        seed: seed of dropout and of the anchor draws (the inference draw's
            stateless seed; 0 when None).
        rotary_max_wavelength: None (no positions), or the wavelength of the
            rotary position embedding applied to queries and keys.
        **kwargs: the other `keras.layers.MultiHeadAttention` arguments (not
            `attention_axes`, `use_gate` or `sliding_window`).

    Call arguments:
        query: `(batch, n, query_dim)`; `n` may be 0 (an empty output).
            Wrong ranks, batches or mask shapes raise `ValueError`.
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
                f"Received: num_anchors={num_anchors!r}")
        if anchor_selection not in ANCHOR_SELECTIONS:
            raise ValueError(
                f"Received an invalid value for `anchor_selection`, expected one of "
                f"{ANCHOR_SELECTIONS}. Received: anchor_selection={anchor_selection!r}")
        for name in ("use_gate", "sliding_window", "attention_axes"):
            if kwargs.get(name):
                raise ValueError(f"`AnchorMultiHeadAttention` does not support `{name}`. "
                                 f"Received: {name}={kwargs[name]!r}")
        super().__init__(num_heads, key_dim, seed=seed, **kwargs)
        self.num_anchors = int(num_anchors)
        self.anchor_selection = anchor_selection
        self.exact = bool(exact)
        if rotary_max_wavelength is not None:
            rotary_max_wavelength = check_max_wavelength(
                rotary_max_wavelength, "rotary_max_wavelength", key_dim)
        self.rotary_max_wavelength = rotary_max_wavelength
        self._inference_seed = 0 if seed is None else int(seed)
        self.anchor_seed_generator = keras.random.SeedGenerator(seed, name="anchor_seed")

    def build(self, query_shape, value_shape, key_shape=None):
        check_attention_shapes(self, query_shape, value_shape, key_shape)
        super().build(query_shape, value_shape, key_shape)

    def _anchor_scores(self, candidates, training):
        """`(batch, heads or 1, n)` scores: chosen candidates >= 1, padding -1."""
        batch, n = ops.shape(candidates)[0], ops.shape(candidates)[1]
        valid = ops.cast(candidates, "float32")[:, None, :]  # (batch, 1, n)
        if self.anchor_selection == "random":
            if training:  # fresh per step, sequence and head
                index = ops.reshape(ops.arange(batch * self.num_heads * n),
                                    (batch, self.num_heads, n))
                noise = hash_uniform(index, self.anchor_seed_generator.next())
            else:
                # One draw per (position, head), position-major: a sequence's anchors
                # depend neither on its batch nor on its padding.
                index = ops.reshape(ops.arange(n * self.num_heads), (n, self.num_heads))
                noise = ops.transpose(hash_uniform(index, (self._inference_seed, 0x5EED)))[None]
            return valid * (_CHOSEN + noise) - (1.0 - valid)
        # Strided: valid ranks floor((j + 1/2) L / m), j < m; all when L <= m.
        rank = ops.cumsum(ops.cast(candidates, "int32"), axis=1) - 1  # (batch, n)
        length = ops.sum(ops.cast(candidates, "float32"), axis=1, keepdims=True)  # (batch, 1)
        j = ops.arange(self.num_anchors, dtype="float32")[None, :]
        targets = ops.floor((j + 0.5) * length / float(self.num_anchors))  # (batch, m)
        hit = ops.any(ops.equal(ops.cast(rank, "float32")[:, :, None], targets[:, None, :]),
                      axis=-1)  # (batch, n)
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
            `(indices, valid)`: int32 and bool `(batch, heads or 1, min(m, n))`.
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
        query_mask = getattr(query, "_keras_mask", None) if query_mask is None else query_mask
        query, value, key, query_mask, value_mask, key_mask = check_attention_inputs(
            self, query, value, key, query_mask, value_mask, key_mask)
        if not exact and (attention_mask is not None or use_causal_mask):
            raise ValueError(
                "Anchor attention supports padding masks only (`query_mask`, `value_mask`, "
                "`key_mask`); `attention_mask` and `use_causal_mask` need `exact=True`.")
        if exact or query.shape[1] == 0:
            # No query positions: no anchors to choose, the empty output of either mode.
            return super().call(query, value, key=key, value_mask=value_mask, key_mask=key_mask,
                                attention_mask=attention_mask,
                                return_attention_scores=return_attention_scores,
                                training=training, use_causal_mask=use_causal_mask)
        if key is None:
            key = value
        batch, n = ops.shape(query)[0], ops.shape(query)[1]
        candidates = (ops.ones((batch, n), "bool") if query_mask is None
                      else ops.cast(query_mask, "bool"))
        key_valid = ops.ones((batch, ops.shape(key)[1]), "bool")
        for m in (value_mask, key_mask):
            if m is not None:
                key_valid = ops.logical_and(key_valid, ops.cast(m, "bool"))
        q, k, v = self._project(query, key, value)
        if anchor_indices is None:
            indices, anchor_valid = self.select_anchors(candidates, training=training)
        else:
            indices = ops.cast(anchor_indices, "int32")
            anchor_valid = ops.ones(ops.shape(indices), "bool")
        indices = ops.broadcast_to(indices, (batch, self.num_heads, ops.shape(indices)[-1]))
        anchor_valid = ops.broadcast_to(anchor_valid, ops.shape(indices))
        anchors = ops.take_along_axis(q, indices[..., None], axis=2)  # (batch, heads, m, key_dim)
        s1, s2 = self._scores(q, anchors, k, anchor_valid[:, :, None, :],
                              key_valid[:, None, None, :])
        output = self._anchor_output(s1, s2, v, training)
        if return_attention_scores:
            return output, ops.einsum("bhnm,bhms->bhns", s1, s2)
        return output

    def _project(self, query, key, value):
        """`(q~, k, v)`: q~ `(batch, heads, n, key_dim)` float32 of unit length, k and v
        `(batch, s, heads, dim)`, rotated when the layer has rotary positions."""
        q, k = self.query_dense(query), self.key_dense(key)
        if self.rotary_max_wavelength is not None:
            q = apply_rotary(q, self.rotary_max_wavelength)
            k = apply_rotary(k, self.rotary_max_wavelength)
        q = ops.transpose(ops.cast(q, "float32"), (0, 2, 1, 3))
        q = q / ops.maximum(ops.sqrt(ops.sum(q * q, axis=-1, keepdims=True)), 1e-12)
        return q, k, self.value_dense(value)

    def _scores(self, q, anchors, k, s1_valid, s2_valid):
        """S1 = softmax(sqrt(d_k) Q~ A~^T) `(batch, heads, n, m)` and S2 = softmax(A~ K^T)
        `(batch, heads, m, s)` over their valid entries, in the compute dtype."""
        s1 = ops.einsum("bhnk,bhmk->bhnm", q, anchors) * math.sqrt(float(self.key_dim))
        s2 = ops.einsum("bhmk,bshk->bhms", anchors, ops.cast(k, "float32"))
        return (ops.cast(masked_softmax(s1, s1_valid), self.compute_dtype),
                ops.cast(masked_softmax(s2, s2_valid), self.compute_dtype))

    def _anchor_output(self, s1, s2, v, training):
        """sum_h S1_h U_h + b_O with U_h = S2_h V_h W_h^O, after MultiHeadAttention's own
        dropout on S1 and S2: `(batch, n, output_dim)`."""
        s1 = self._dropout_layer(s1, training=training)
        s2 = self._dropout_layer(s2, training=training)
        kernel = ops.cast(self.output_dense.kernel, self.compute_dtype)  # (heads, v_dim, out)
        u = ops.einsum("bhms,bshv->bhmv", s2, v)
        output = ops.einsum("bhnm,bhmo->bno", s1, ops.einsum("bhmv,hvo->bhmo", u, kernel))
        if self.output_dense.bias is not None:
            output = output + ops.cast(self.output_dense.bias, self.compute_dtype)
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
        config.update({
            "num_anchors": self.num_anchors,
            "anchor_selection": self.anchor_selection,
            "exact": self.exact,
            "rotary_max_wavelength": self.rotary_max_wavelength,
        })
        return config
