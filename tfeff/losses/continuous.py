"""Continuous-output losses: distances between a target and a predicted embedding.

Keras conventions: every function takes `(y_true, y_pred)` (the target
embedding first), is registered for Keras serialization under the package
`tfeff` and returns one loss per position, so `model.compile(loss=vmf_nll)`
trains and reloads; the `keras.losses.Loss` classes add Keras' reduction,
masking and sample weights. All is `keras.ops` code, on every Keras backend:
`cosine_distance` (1 - cos), `l2_distance` (squared Euclidean distance) and
`vmf_nll` (von Mises-Fisher, Kumar & Tsvetkov, ICLR 2019; not symmetric), whose
normalizer `log_vmf_normalizer` is computed in-graph, in float64, without SciPy.
"""

import math

import keras
from keras import ops

# Orders at or above this use the Debye expansion directly; its truncation error
# after the u_4 term is below 1e-11 (relative) there.
_DEBYE_MIN_ORDER = 60.0
_MIN_KAPPA = 1e-30


def _prepare(y_true, y_pred, fn_name):
    """Float tensors with the same last dimension, `y_true` cast to `y_pred`'s dtype."""
    y_true, y_pred = _as_float(y_true), _as_float(y_pred)
    if len(y_pred.shape) and len(y_true.shape):
        p_dim, t_dim = y_pred.shape[-1], y_true.shape[-1]
        if p_dim is not None and t_dim is not None and p_dim != t_dim:
            raise ValueError(
                f"`{fn_name}` expects y_true and y_pred with the same last "
                f"dimension. Received: y_true.shape={y_true.shape}, "
                f"y_pred.shape={y_pred.shape}")
    return ops.cast(y_true, y_pred.dtype), y_pred


def _as_float(x):
    x = ops.convert_to_tensor(x)
    return x if keras.backend.is_float_dtype(x.dtype) else ops.cast(x, "float32")


def _l2_normalize(x, epsilon=1e-12):
    """`x / sqrt(max(sum(x^2), epsilon))` along the last axis (tf.math.l2_normalize's rule)."""
    square_sum = ops.sum(ops.square(x), axis=-1, keepdims=True)
    return x * ops.rsqrt(ops.maximum(square_sum, ops.cast(epsilon, x.dtype)))


@keras.saving.register_keras_serializable(package="tfeff")
def cosine_distance(y_true, y_pred, epsilon=1e-12):
    """1 - cosine similarity along the last axis.

    Args:
        y_true: float tensor `(..., dim)`, the target embeddings.
        y_pred: float tensor `(..., dim)`, the predictions.
        epsilon: added to squared norms, so a zero vector gives distance 1.

    Returns:
        Tensor `(...)` in [0, 2], in `y_pred`'s dtype.
    """
    y_true, y_pred = _prepare(y_true, y_pred, "cosine_distance")
    return 1.0 - ops.sum(_l2_normalize(y_pred, epsilon) * _l2_normalize(y_true, epsilon), axis=-1)


@keras.saving.register_keras_serializable(package="tfeff")
def l2_distance(y_true, y_pred):
    """Squared Euclidean distance ||y_pred - y_true||^2 along the last axis.

    Args:
        y_true: float tensor `(..., dim)`, the target embeddings.
        y_pred: float tensor `(..., dim)`, the predictions.

    Returns:
        Tensor `(...)`, in `y_pred`'s dtype.
    """
    y_true, y_pred = _prepare(y_true, y_pred, "l2_distance")
    return ops.sum(ops.square(y_pred - y_true), axis=-1)


def _log_bessel_iv_debye(order, x):
    """log I_order(x) by the uniform asymptotic expansion (A&S 9.7.7), float64."""
    nu = float(order)
    z = x / nu
    s = ops.sqrt(1.0 + z * z)
    t = 1.0 / s
    eta = s + ops.log(z / (1.0 + s))
    t2 = t * t
    u1 = t * (3.0 - 5.0 * t2) / 24.0
    u2 = t2 * (81.0 - 462.0 * t2 + 385.0 * t2 * t2) / 1152.0
    u3 = t * t2 * (30375.0 - 369603.0 * t2 + 765765.0 * t2**2 - 425425.0 * t2**3) / 414720.0
    u4 = (t2 * t2 * (4465125.0 - 94121676.0 * t2 + 349922430.0 * t2**2 - 446185740.0 * t2**3
                     + 185910725.0 * t2**4) / 39813120.0)
    series = 1.0 + u1 / nu + u2 / nu**2 + u3 / nu**3 + u4 / nu**4
    return nu * eta - 0.5 * math.log(2.0 * math.pi * order) - 0.5 * ops.log(s) + ops.log(series)


def _log_bessel_iv_and_ratio(order, x):
    """(log I_order(x), I_{order+1}(x) / I_order(x)) in float64."""
    steps = max(0, int(math.ceil(_DEBYE_MIN_ORDER - order)))
    top = order + steps
    log_i = _log_bessel_iv_debye(top, x)
    # R_nu = I_{nu+1}/I_nu at the top order (two logs of similar size: no cancellation),
    # then the backward recurrence R_{nu-1} = 1 / (2 nu / x + R_nu), stable downwards.
    ratio = ops.exp(_log_bessel_iv_debye(top + 1.0, x) - log_i)
    for k in range(steps):
        nu = top - k
        ratio = 1.0 / (2.0 * nu / x + ratio)  # now R_{nu-1} = I_nu / I_{nu-1}
        log_i = log_i - ops.log(ratio)  # log I_{nu-1}
    return log_i, ratio


def log_bessel_iv(order, x):
    """log I_order(x) for a static order >= 0 and x > 0, computed in float64.

    Args:
        order: Python float, the Bessel order (>= 0).
        x: positive float tensor.

    Returns:
        float64 tensor shaped like `x`.

    Raises:
        ValueError: `order` is negative.
    """
    if order < 0:
        raise ValueError(
            f"Received an invalid value for `order`, expected >= 0. Received: order={order}")
    return _log_bessel_iv_and_ratio(order, ops.cast(x, "float64"))[0]


def log_vmf_normalizer(kappa, dim):
    """log C_m(kappa) of the von Mises-Fisher density on the unit sphere in R^m.

    C_m(kappa) = kappa^(m/2-1) / ((2 pi)^(m/2) I_{m/2-1}(kappa)), in float64
    whatever the input dtype (on JAX only with `jax_enable_x64`; in float32
    the gradient's relative error grows to about 1e-4 at m = 300), for m >= 2
    and kappa from 1e-6 to beyond 1e4: the uniform (Debye) expansion of the
    modified Bessel function for large orders, the stable backward recurrence
    of Bessel-function ratios below. The gradient is the closed form
    -I_{m/2}(kappa) / I_{m/2-1}(kappa), attached with a stop-gradient identity
    (differentiating the formula would cancel two terms of size (m/2-1)/kappa
    at small kappa).

    Args:
        kappa: positive float tensor (concentrations).
        dim: Python int m >= 2, the embedding dimension.

    Returns:
        Tensor shaped like `kappa`, in kappa's float dtype (computed in float64).

    Raises:
        ValueError: `dim` is not an integer >= 2.
    """
    if not isinstance(dim, int) or dim < 2:
        raise ValueError(
            f"Received an invalid value for `dim`, expected an integer >= 2. Received: dim={dim}")
    kappa = _as_float(kappa)
    order = dim / 2.0 - 1.0
    k64 = ops.cast(kappa, "float64")
    # Not `ops.maximum(k64, _MIN_KAPPA)`: on PyTorch that returns float32.
    k64 = ops.where(k64 < _MIN_KAPPA, _MIN_KAPPA, k64)
    constant = ops.stop_gradient(k64)
    log_i, ratio = _log_bessel_iv_and_ratio(order, constant)
    value = order * ops.log(constant) - (dim / 2.0) * math.log(2.0 * math.pi) - log_i
    # value + (-ratio) * (k - k): the value above, and the closed-form gradient
    # -ratio with respect to kappa (backend-neutral: no custom-gradient hook).
    log_c = ops.stop_gradient(value) + ops.stop_gradient(-ratio) * (k64 - constant)
    return ops.cast(log_c, kappa.dtype)


def check_vmf_regularization(regularization1, regularization2, prefix=""):
    """Raises ValueError unless `regularization1 >= 0` and `0 < regularization2 <= 1`."""
    if regularization1 < 0:
        raise ValueError(
            f"Received an invalid value for `{prefix}regularization1`, expected >= 0. "
            f"Received: {prefix}regularization1={regularization1}")
    if not 0 < regularization2 <= 1:
        raise ValueError(
            f"Received an invalid value for `{prefix}regularization2`, expected a value in "
            f"(0, 1]. Received: {prefix}regularization2={regularization2}")


@keras.saving.register_keras_serializable(package="tfeff")
def vmf_nll(y_true, y_pred, regularization1=0.0, regularization2=1.0):
    """Negative log-likelihood of the target direction under vMF(mu, kappa).

    The prediction e_hat = `y_pred` encodes both the mean direction mu = e_hat/||e_hat||
    and the concentration kappa = ||e_hat||; the target is normalized to unit
    length. With the two regularizers of Kumar & Tsvetkov (2019):

        NLL = -log C_m(||e_hat||) - regularization2 * e_hat . e(w)
              + regularization1 * ||e_hat||

    `regularization1 = 0, regularization2 = 1` is the plain NLL; the paper uses
    either regularization1 = 0.02 or regularization2 = 0.1.

    Args:
        y_true: float tensor `(..., m)`, the target embeddings; normalized inside.
        y_pred: float tensor `(..., m)`, the predictions e_hat.
        regularization1: lambda_1 >= 0, weight of the ||e_hat|| penalty.
        regularization2: lambda_2 in (0, 1], scale of the dot-product term.

    Returns:
        Tensor `(...)` in `y_pred`'s dtype.

    Raises:
        ValueError: the last dimension of `y_pred` is not static, the two
            last dimensions differ, or a regularizer is out of its range.
    """
    check_vmf_regularization(regularization1, regularization2)
    y_true, y_pred = _prepare(y_true, y_pred, "vmf_nll")
    dim = y_pred.shape[-1]
    if dim is None:
        raise ValueError("`vmf_nll` needs a static last dimension (the embedding size).")
    y_true = _l2_normalize(y_true)
    # A safe norm: the gradient of the norm at the zero vector is NaN.
    sq = ops.sum(ops.square(y_pred), axis=-1)
    kappa = ops.sqrt(ops.maximum(sq, ops.cast(_MIN_KAPPA, sq.dtype)))
    nll = -log_vmf_normalizer(kappa, int(dim))
    nll -= regularization2 * ops.sum(y_pred * y_true, axis=-1)
    if regularization1:
        nll += regularization1 * kappa
    return nll


class _DistanceLoss(keras.losses.Loss):
    """A `keras.losses.Loss` over one of the distance functions above."""

    fn = None
    default_name = None

    def __init__(self, reduction="sum_over_batch_size", name=None, dtype=None):
        super().__init__(name=name or self.default_name, reduction=reduction, dtype=dtype)

    def call(self, y_true, y_pred):
        return self.fn(y_true, y_pred)


@keras.saving.register_keras_serializable(package="tfeff")
class CosineDistance(_DistanceLoss):
    """`cosine_distance` as a Keras loss: 1 - cos(y_true, y_pred), reduced.

    Args:
        reduction: a Keras reduction (`None` for one loss per position).
        name: the loss's name (`"cosine_distance"` by default).
        dtype: the dtype of the computation (float32 by default, also mixed precision).

    Example:

    >>> loss = CosineDistance()
    >>> float(loss([[0.0, 2.0], [1.0, 1.0]], [[1.0, 0.0], [2.0, 2.0]]))
    0.5
    """

    fn = staticmethod(cosine_distance)
    default_name = "cosine_distance"


@keras.saving.register_keras_serializable(package="tfeff")
class L2Distance(_DistanceLoss):
    """`l2_distance` as a Keras loss: ||y_pred - y_true||^2, reduced.

    Args:
        reduction: a Keras reduction (`None` for one loss per position).
        name: the loss's name (`"l2_distance"` by default).
        dtype: the dtype of the computation (float32 by default).
    """

    fn = staticmethod(l2_distance)
    default_name = "l2_distance"


@keras.saving.register_keras_serializable(package="tfeff")
class VonMisesFisherLoss(keras.losses.Loss):
    """`vmf_nll` as a Keras loss, with its two regularizers in `get_config`.

    Args:
        regularization1: lambda_1 >= 0, weight of the ||y_pred|| penalty.
        regularization2: lambda_2 in (0, 1], scale of the dot-product term.
        reduction: a Keras reduction (`None` for one loss per position).
        name: the loss's name.
        dtype: the dtype of the computation (float32 by default).

    Example:

    >>> loss = VonMisesFisherLoss(regularization1=0.02)
    >>> loss.get_config()["regularization1"]
    0.02
    """

    def __init__(self, regularization1=0.0, regularization2=1.0,
                 reduction="sum_over_batch_size", name="von_mises_fisher", dtype=None):
        check_vmf_regularization(regularization1, regularization2)
        super().__init__(name=name, reduction=reduction, dtype=dtype)
        self.regularization1 = float(regularization1)
        self.regularization2 = float(regularization2)

    def call(self, y_true, y_pred):
        return vmf_nll(y_true, y_pred, regularization1=self.regularization1,
                       regularization2=self.regularization2)

    def get_config(self):
        config = super().get_config()
        config.update({"regularization1": self.regularization1,
                       "regularization2": self.regularization2})
        return config


DISTANCES = {"cosine": cosine_distance, "l2": l2_distance, "vmf": vmf_nll}
"""The distance functions by the name `ContinuousOutput(loss=...)` takes."""

LOSSES = {"cosine": CosineDistance, "l2": L2Distance, "vmf": VonMisesFisherLoss}
"""The `keras.losses.Loss` classes by the same names."""
