"""Keras models built from tfeff layers: `keras.ops` code, on every Keras backend.

`MaskedElmo` with `input_embedding="alone"` needs `AloneEmbedding`, which is
still TensorFlow code (`tfeff.layers.TENSORFLOW_ONLY`).
"""

from tfeff.models.bert import Bert
from tfeff.models.elmo_lm import ElmoLM
from tfeff.models.masked_elmo import MaskedElmo

__all__ = ["Bert", "ElmoLM", "MaskedElmo"]
