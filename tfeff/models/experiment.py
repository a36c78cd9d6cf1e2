"""Deprecated: `tfeff.models.from_config` under its tfeff 0.1.0 name, for one release."""

import warnings

from tfeff.models.from_config import alone_kwargs  # noqa: F401
from tfeff.models.from_config import bert  # noqa: F401
from tfeff.models.from_config import bilstm_model_kwargs  # noqa: F401
from tfeff.models.from_config import elmo_lm  # noqa: F401
from tfeff.models.from_config import masked_elmo  # noqa: F401

warnings.warn("tfeff.models.experiment is tfeff.models.from_config now; the old name "
              "goes in the next release", DeprecationWarning, stacklevel=2)
