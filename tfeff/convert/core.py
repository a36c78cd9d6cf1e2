"""Deprecated: `tfeff.convert.relaxed_to_standard`'s name in tfeff 0.1.0; importing it warns.

Kept for one release so that `from tfeff.convert.core import convert_model_dir` works.
"""

import warnings

from tfeff.convert.relaxed_to_standard import ConversionError  # noqa: F401
from tfeff.convert.relaxed_to_standard import convert_model_dir  # noqa: F401
from tfeff.convert.relaxed_to_standard import merge_relaxed_bert  # noqa: F401

warnings.warn("tfeff.convert.core is tfeff.convert.relaxed_to_standard now; the old name "
              "goes in the next release", DeprecationWarning, stacklevel=2)
