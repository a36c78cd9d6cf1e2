"""Keras layers: the efficiency ideas of tfeff, one public class per file."""

from tfeff.layers.adaptive_softmax import AdaptiveSoftmax
from tfeff.layers.alone_embedding import AloneEmbedding
from tfeff.layers.anchor_multi_head_attention import AnchorMultiHeadAttention
from tfeff.layers.continuous_output import ContinuousOutput
from tfeff.layers.factorized_dense import FactorizedDense
from tfeff.layers.fasttext_embedding import FastTextEmbedding
from tfeff.layers.fixed_embedding import FixedEmbedding
from tfeff.layers.full_softmax import FullSoftmax
from tfeff.layers.masked_bi_lstm import MaskedBiLSTM
from tfeff.layers.projected_lstm import ProjectedLSTM
from tfeff.layers.rotary import RotaryMultiHeadAttention
from tfeff.layers.sampled_softmax import SampledSoftmax
from tfeff.layers.scalar_mix import ScalarMix

__all__ = [
    "AdaptiveSoftmax",
    "AloneEmbedding",
    "AnchorMultiHeadAttention",
    "ContinuousOutput",
    "FactorizedDense",
    "FastTextEmbedding",
    "FixedEmbedding",
    "FullSoftmax",
    "MaskedBiLSTM",
    "ProjectedLSTM",
    "RotaryMultiHeadAttention",
    "SampledSoftmax",
    "ScalarMix",
]
