"""Rounding counts of the LSTM language models' losses and training steps, and the bounds
they give (tfeff/testing/numerics.py: a sum or dot product of K terms counts K, an elementwise
operation 1, a library function ~4, chains add up)."""

import numpy as np

from tfeff.testing.numerics import assert_close


def lstm_roundings(num_layers, steps, inputs, projection, units):
    """An LSTMP stack over `steps` steps: per step the gate sums (`inputs` features and
    `projection` recurrent ones, the bias, 2 additions), a gate (~4), c's 3 operations,
    tanh(c) (~4), their product and the projection over `units`, each step on top of the
    previous one's state; between layers a layer norm (3 P + 8) and the residual."""
    step = (inputs + projection + 3) + 4 + 3 + 4 + 1 + units
    return num_layers * (steps * step + 3 * projection + 9)


def head_roundings(dim, vocabulary_size, targets):
    """The loss from `dim` features: logits (a product over dim, the bias, the cast to
    float32) and a log-softmax over V ids (shift, exp, sum, log: V + 10; two levels when
    adaptive: V + 20), or a continuous loss against dim-vectors (norms and products: at
    most 3 dim + 20); then the mean over `targets`, and the sum of the directions."""
    return dim + 3 + max(vocabulary_size + 20, 3 * dim + 20) + targets + 3


def assert_same_update(after, other, before, n, err_msg=""):
    """Weights after training steps of two implementations from the same `before`: their
    updates differ by n float32 roundings of the updates' size (a step: forward and
    backward passes and the batch reduction of the gradient), and each side's new weight
    by at most one more at the weight's size: 2 u (n |update| + |weight|) in all."""
    after = np.asarray(after, np.float64)
    update = np.abs(after - np.asarray(before, np.float64)).max()
    assert_close(other, after, n=n, scale=update + np.abs(after).max() / n, err_msg=err_msg)


def assert_normalized(log_probs, err_msg=""):
    """exp(`log_probs`) sums to 1 over its last axis (V ids), to the float32 rounding of a
    log-softmax (two levels for an adaptive one: at most V + 20 roundings of terms of the
    log-probabilities' size), which become relative errors of the probabilities. The
    sum itself is float64."""
    lp = np.asarray(log_probs, np.float64)
    assert_close(np.exp(lp).sum(-1), np.ones(lp.shape[:-1]), n=lp.shape[-1] + 20,
                 scale=np.abs(lp).max(), err_msg=err_msg)
