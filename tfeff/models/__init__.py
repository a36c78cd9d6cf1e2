"""Keras models built from tfeff layers."""

from tfeff.models.elmo_lm import ElmoLM

__all__ = ["ElmoLM"]
