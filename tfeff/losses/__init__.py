"""Continuous-output losses, Keras style: `(y_true, y_pred)`, registered, per position."""

from tfeff.losses.continuous import DISTANCES
from tfeff.losses.continuous import LOSSES
from tfeff.losses.continuous import CosineDistance
from tfeff.losses.continuous import L2Distance
from tfeff.losses.continuous import VonMisesFisherLoss
from tfeff.losses.continuous import cosine_distance
from tfeff.losses.continuous import l2_distance
from tfeff.losses.continuous import log_bessel_iv
from tfeff.losses.continuous import log_vmf_normalizer
from tfeff.losses.continuous import vmf_nll

__all__ = [
    "DISTANCES",
    "LOSSES",
    "CosineDistance",
    "L2Distance",
    "VonMisesFisherLoss",
    "cosine_distance",
    "l2_distance",
    "log_bessel_iv",
    "log_vmf_normalizer",
    "vmf_nll",
]
