"""Rounding bounds of the softmax layers' float32 log-probabilities (tfeff/testing/numerics.py).

The layers compute their log-softmaxes in float32 whatever the compute dtype, so they
are compared in float32 against a float64 reference (or another float32 path) within
these bounds.
"""

import keras
import numpy as np

# The normalizer of a log-softmax over V classes, relative to 1 (its error is a log's):
# the subtraction of the max, exp (~4), a sum of V, log (~4), the subtraction.
NORMALIZER = 10


def _abs(v):
    return np.abs(keras.ops.convert_to_numpy(v).astype(np.float64))


def log_softmax_roundings(depth, classes):
    """A log-probability z_t - logsumexp(z) over `classes` of logits that are sums of
    `depth` roundings: a logit's roundings twice (its own, and the others' through the
    normalizer, whose softmax weights sum to 1), the normalizer's."""
    return 2 * depth + classes + NORMALIZER


def log_prob_bound(layer, x):
    """`assert_close`'s n and scale for `layer`'s float32 log-probabilities on rows `x`.

    The logits' roundings are of the size of their terms |x| |W| + |b|, which
    `z_t - logsumexp(z)` cancels: the scale is the largest such logit (at least 1, the
    normalizer's). AdaptiveSoftmax adds a head's and a tail's log-probabilities, each so
    (a tail's logits sum over input_dim, then over its projection).
    """
    x = np.abs(np.asarray(x, np.float64)).reshape(-1, np.shape(x)[-1])
    dim = x.shape[-1]
    if hasattr(layer, "head_kernel"):
        head = x @ _abs(layer.head_kernel)
        if layer.head_bias_weight is not None:
            head = head + _abs(layer.head_bias_weight)
        terms = [head]
        n = log_softmax_roundings(dim + 1, layer.head_size) + 1
        tails = 0
        for projection, kernel in zip(layer.tail_projections, layer.tail_kernels):
            terms.append(x @ _abs(projection) @ _abs(kernel))
            tails = max(tails, log_softmax_roundings(dim + projection.shape[1], kernel.shape[1]))
        n += tails
    else:
        table = layer.embeddings if getattr(layer, "output_embedding", None) is None \
            else layer.output_embedding.table
        terms = [x @ _abs(table).T + (0.0 if layer.bias is None else _abs(layer.bias))]
        n = log_softmax_roundings(dim + 1, layer.vocabulary_size)
    return dict(n=n, scale=max(1.0, max(float(t.max()) for t in terms)))


def normalization_roundings(vocabulary_size):
    """exp(log-probabilities) summed to 1: a log-softmax's normalizer (a head's and a
    tail's for AdaptiveSoftmax, at most V + 2 NORMALIZER), a rounding of their sum, and
    NumPy's float32 exp and sum over V: 2 V + 2 NORMALIZER + 2 roundings of 1 (the
    logits' errors move every class alike and drop out)."""
    return 2 * vocabulary_size + 2 * NORMALIZER + 2
