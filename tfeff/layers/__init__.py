"""Keras layers: the efficiency ideas of tfeff, one public class per file."""

from tfeff.layers.continuous_output import ContinuousOutput
from tfeff.layers.fasttext_embedding import FastTextEmbedding
from tfeff.layers.fixed_embedding import FixedEmbedding
from tfeff.layers.projected_lstm import ProjectedLSTM

__all__ = [
    "ContinuousOutput",
    "FastTextEmbedding",
    "FixedEmbedding",
    "ProjectedLSTM",
]
