"""Weight conversion: CoRe's relaxed-to-standard merge; Hugging Face and keras-hub BERT."""

from tfeff.convert.relaxed_to_standard import ConversionError
from tfeff.convert.relaxed_to_standard import convert_model_dir
from tfeff.convert.relaxed_to_standard import merge_relaxed_bert
from tfeff.convert.hf_bert import read_hf_bert
from tfeff.convert.hf_bert import write_hf_bert
from tfeff.convert.hf_bert import write_hf_model_dir
from tfeff.convert.keras_hub_bert import from_keras_hub
from tfeff.convert.keras_hub_bert import to_keras_hub
from tfeff.convert.keras_hub_preset import write_keras_hub_preset

__all__ = [
    "ConversionError",
    "convert_model_dir",
    "from_keras_hub",
    "merge_relaxed_bert",
    "read_hf_bert",
    "to_keras_hub",
    "write_hf_bert",
    "write_hf_model_dir",
    "write_keras_hub_preset",
]
