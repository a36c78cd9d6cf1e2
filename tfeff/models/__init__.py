"""Keras models built from tfeff layers."""

from tfeff.models.bert import Bert
from tfeff.models.elmo_lm import ElmoLM

__all__ = ["Bert", "ElmoLM"]
