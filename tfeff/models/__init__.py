"""Keras models built from tfeff layers.

`Bert` and `ElmoLM` are `keras.ops` code and run on every Keras backend;
`MaskedElmo` is still TensorFlow code and, on another backend, is imported on
first use (so `import tfeff.models` there imports no TensorFlow).
"""

import importlib

import keras

from tfeff.models.bert import Bert
from tfeff.models.elmo_lm import ElmoLM

TENSORFLOW_ONLY = {"MaskedElmo": "masked_elmo"}


def __getattr__(name):
    if name in TENSORFLOW_ONLY:
        return getattr(importlib.import_module(f"tfeff.models.{TENSORFLOW_ONLY[name]}"), name)
    raise AttributeError(f"module 'tfeff.models' has no attribute {name!r}")


if keras.backend.backend() == "tensorflow":
    from tfeff.models.masked_elmo import MaskedElmo  # noqa: E402

__all__ = ["Bert", "ElmoLM", "MaskedElmo"]
