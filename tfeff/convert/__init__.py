"""Weight conversion between tfeff models and other formats."""

from tfeff.convert.core import ConversionError
from tfeff.convert.core import convert_model_dir
from tfeff.convert.core import merge_relaxed_bert

__all__ = ["ConversionError", "convert_model_dir", "merge_relaxed_bert"]
