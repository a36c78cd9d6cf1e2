"""Continuous-output losses as plain functions (no reduction)."""

from tfeff.losses.continuous import DISTANCES
from tfeff.losses.continuous import cosine_distance
from tfeff.losses.continuous import l2_distance
from tfeff.losses.continuous import log_bessel_iv
from tfeff.losses.continuous import log_vmf_normalizer
from tfeff.losses.continuous import vmf_nll

__all__ = [
    "DISTANCES",
    "cosine_distance",
    "l2_distance",
    "log_bessel_iv",
    "log_vmf_normalizer",
    "vmf_nll",
]
