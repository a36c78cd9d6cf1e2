"""Continuous-output losses: distances between a predicted and a target embedding.

These are plain functions over the last axis. They return one loss per position
(no reduction), so callers can mask padded positions before averaging.

* `cosine_distance`: 1 - cos(prediction, target).
* `l2_distance`: squared Euclidean distance ||prediction - target||^2.
* `vmf_nll`: negative log-likelihood of the target direction under a von
  Mises-Fisher distribution whose mean direction and concentration are given by
  the prediction (Kumar & Tsvetkov, "Von Mises-Fisher Loss for Training
  Sequence to Sequence Models with Continuous Outputs", ICLR 2019).

`log_vmf_normalizer(kappa, m)` is log C_m(kappa), computed in-graph without
SciPy. It is evaluated in float64 whatever the input dtype and is accurate for
every m >= 2 and kappa from 1e-6 to well beyond 1e4: for large orders it uses
the uniform (Debye) asymptotic expansion of the modified Bessel function, and
for small orders it walks down from a large order with the (stable) backward
recurrence of Bessel-function ratios. Gradients come from automatic
differentiation through these formulas and equal
d/dkappa log C_m(kappa) = -I_{m/2}(kappa) / I_{m/2-1}(kappa).
"""

import math

import tensorflow as tf

# Orders at or above this use the Debye expansion directly; its truncation error
# after the u_4 term is below 1e-11 (relative) there.
_DEBYE_MIN_ORDER = 60.0
_MIN_KAPPA = 1e-30


def _check_dims(predictions, targets, fn_name):
    if predictions.shape.rank is not None and targets.shape.rank is not None:
        p_dim, t_dim = predictions.shape[-1], targets.shape[-1]
        if p_dim is not None and t_dim is not None and p_dim != t_dim:
            raise ValueError(
                f"`{fn_name}` expects predictions and targets with the same last "
                f"dimension. Received: predictions.shape={predictions.shape}, "
                f"targets.shape={targets.shape}"
            )


def _as_float(x):
    x = tf.convert_to_tensor(x)
    if not x.dtype.is_floating:
        x = tf.cast(x, tf.float32)
    return x


def cosine_distance(predictions, targets, epsilon=1e-12):
    """1 - cosine similarity along the last axis.

    Args:
        predictions: float tensor `(..., dim)`.
        targets: float tensor `(..., dim)`.
        epsilon: added to squared norms, so a zero vector gives distance 1.

    Returns:
        Tensor `(...)` in [0, 2], in the predictions' dtype.
    """
    predictions, targets = _as_float(predictions), _as_float(targets)
    _check_dims(predictions, targets, "cosine_distance")
    targets = tf.cast(targets, predictions.dtype)
    p = tf.math.l2_normalize(predictions, axis=-1, epsilon=epsilon)
    t = tf.math.l2_normalize(targets, axis=-1, epsilon=epsilon)
    return 1.0 - tf.reduce_sum(p * t, axis=-1)


def l2_distance(predictions, targets):
    """Squared Euclidean distance ||predictions - targets||^2 along the last axis."""
    predictions, targets = _as_float(predictions), _as_float(targets)
    _check_dims(predictions, targets, "l2_distance")
    targets = tf.cast(targets, predictions.dtype)
    return tf.reduce_sum(tf.square(predictions - targets), axis=-1)


def _log_bessel_iv_debye(order, x):
    """log I_order(x) by the uniform asymptotic expansion (A&S 9.7.7), float64."""
    nu = tf.constant(order, tf.float64)
    z = x / nu
    s = tf.sqrt(1.0 + z * z)
    t = 1.0 / s
    eta = s + tf.math.log(z / (1.0 + s))
    t2 = t * t
    u1 = t * (3.0 - 5.0 * t2) / 24.0
    u2 = t2 * (81.0 - 462.0 * t2 + 385.0 * t2 * t2) / 1152.0
    u3 = (
        t * t2 * (30375.0 - 369603.0 * t2 + 765765.0 * t2**2 - 425425.0 * t2**3)
        / 414720.0
    )
    u4 = (
        t2 * t2
        * (
            4465125.0
            - 94121676.0 * t2
            + 349922430.0 * t2**2
            - 446185740.0 * t2**3
            + 185910725.0 * t2**4
        )
        / 39813120.0
    )
    series = 1.0 + u1 / nu + u2 / nu**2 + u3 / nu**3 + u4 / nu**4
    return (
        nu * eta
        - 0.5 * math.log(2.0 * math.pi * order)
        - 0.5 * tf.math.log(s)
        + tf.math.log(series)
    )


def _log_bessel_iv_and_ratio(order, x):
    """(log I_order(x), I_{order+1}(x) / I_order(x)) in float64."""
    steps = max(0, int(math.ceil(_DEBYE_MIN_ORDER - order)))
    top = order + steps
    log_i = _log_bessel_iv_debye(top, x)
    # Ratio R_nu = I_{nu+1}/I_nu at the top order (a difference of two logs of
    # similar size: no cancellation), then the backward recurrence
    # R_{nu-1} = 1 / (2 nu / x + R_nu), stable for decreasing order.
    ratio = tf.exp(_log_bessel_iv_debye(top + 1.0, x) - log_i)
    for k in range(steps):
        nu = top - k
        ratio = 1.0 / (2.0 * nu / x + ratio)  # now R_{nu-1} = I_nu / I_{nu-1}
        log_i = log_i - tf.math.log(ratio)  # log I_{nu-1}
    return log_i, ratio


def log_bessel_iv(order, x):
    """log I_order(x) for a static order >= 0 and x > 0, computed in float64.

    Args:
        order: Python float, the Bessel order (>= 0).
        x: positive float tensor.

    Returns:
        float64 tensor shaped like `x`.
    """
    if order < 0:
        raise ValueError(
            f"Received an invalid value for `order`, expected >= 0. Received: order={order}"
        )
    return _log_bessel_iv_and_ratio(order, tf.cast(x, tf.float64))[0]


def log_vmf_normalizer(kappa, dim):
    """log C_m(kappa) of the von Mises-Fisher density on the unit sphere in R^m.

    C_m(kappa) = kappa^(m/2-1) / ((2 pi)^(m/2) I_{m/2-1}(kappa)).
    Its gradient is the closed form -I_{m/2}(kappa) / I_{m/2-1}(kappa),
    computed from the stable Bessel ratio (differentiating the formula
    instead would cancel two terms of size (m/2-1)/kappa at small kappa).

    Args:
        kappa: positive float tensor (concentrations).
        dim: Python int m >= 2, the embedding dimension.

    Returns:
        Tensor shaped like `kappa`, in kappa's float dtype (computed in float64).
    """
    if not isinstance(dim, int) or dim < 2:
        raise ValueError(
            f"Received an invalid value for `dim`, expected an integer >= 2. Received: dim={dim}"
        )
    kappa = _as_float(kappa)
    out_dtype = kappa.dtype
    order = dim / 2.0 - 1.0

    @tf.custom_gradient
    def _log_c(k64):
        k64 = tf.maximum(k64, _MIN_KAPPA)
        log_i, ratio = _log_bessel_iv_and_ratio(order, k64)
        value = order * tf.math.log(k64) - (dim / 2.0) * math.log(2.0 * math.pi) - log_i

        def grad(upstream):
            return upstream * -ratio

        return value, grad

    return tf.cast(_log_c(tf.cast(kappa, tf.float64)), out_dtype)


def vmf_nll(predictions, targets, regularization1=0.0, regularization2=1.0):
    """Negative log-likelihood of the target direction under vMF(mu, kappa).

    The prediction e_hat encodes both the mean direction mu = e_hat/||e_hat||
    and the concentration kappa = ||e_hat||; the target is normalized to unit
    length. With the two regularizers of Kumar & Tsvetkov (2019):

        NLL = -log C_m(||e_hat||) - regularization2 * e_hat . e(w)
              + regularization1 * ||e_hat||

    `regularization1 = 0, regularization2 = 1` is the plain NLL; the paper uses
    either regularization1 = 0.02 or regularization2 = 0.1.

    Args:
        predictions: float tensor `(..., m)`.
        targets: float tensor `(..., m)`; normalized inside.
        regularization1: lambda_1 >= 0, weight of the ||e_hat|| penalty.
        regularization2: lambda_2 in (0, 1], scale of the dot-product term.

    Returns:
        Tensor `(...)` in the predictions' dtype.
    """
    if regularization1 < 0:
        raise ValueError(
            "Received an invalid value for `regularization1`, expected >= 0. "
            f"Received: regularization1={regularization1}"
        )
    if not 0 < regularization2 <= 1:
        raise ValueError(
            "Received an invalid value for `regularization2`, expected a value in "
            f"(0, 1]. Received: regularization2={regularization2}"
        )
    predictions, targets = _as_float(predictions), _as_float(targets)
    _check_dims(predictions, targets, "vmf_nll")
    dim = predictions.shape[-1]
    if dim is None:
        raise ValueError("`vmf_nll` needs a static last dimension (the embedding size).")
    targets = tf.math.l2_normalize(tf.cast(targets, predictions.dtype), axis=-1)
    # A safe norm: the gradient of tf.norm at the zero vector is NaN.
    sq = tf.reduce_sum(tf.square(predictions), axis=-1)
    kappa = tf.sqrt(tf.maximum(sq, tf.cast(_MIN_KAPPA, sq.dtype)))
    nll = -log_vmf_normalizer(kappa, int(dim))
    nll -= regularization2 * tf.reduce_sum(predictions * targets, axis=-1)
    if regularization1:
        nll += regularization1 * kappa
    return nll


DISTANCES = {
    "cosine": cosine_distance,
    "l2": l2_distance,
    "vmf": vmf_nll,
}
