"""Keras layers: the efficiency ideas of tfeff, one public class per file.

Every layer but one is `keras.ops` code and runs on every Keras backend.
`FastTextEmbedding` is TensorFlow code by design (string ops: `TENSORFLOW_ONLY`):
on another backend it is imported on first use, so `import tfeff.layers`
there imports no TensorFlow; on TensorFlow every layer is imported (and
registered) at once.
"""

import importlib

import keras

from tfeff.layers.adaptive_softmax import AdaptiveSoftmax
from tfeff.layers.alone_embedding import AloneEmbedding
from tfeff.layers.anchor_multi_head_attention import AnchorMultiHeadAttention
from tfeff.layers.continuous_output import ContinuousOutput
from tfeff.layers.factorized_dense import FactorizedDense
from tfeff.layers.fixed_embedding import FixedEmbedding
from tfeff.layers.full_softmax import FullSoftmax
from tfeff.layers.masked_bi_lstm import MaskedBiLSTM
from tfeff.layers.projected_lstm import ProjectedLSTM
from tfeff.layers.rotary import RotaryMultiHeadAttention
from tfeff.layers.sampled_softmax import SampledSoftmax
from tfeff.layers.scalar_mix import ScalarMix

# Layer -> module of the layers written with TensorFlow ops (string ops):
# TensorFlow is needed to use them.
TENSORFLOW_ONLY = {"FastTextEmbedding": "fasttext_embedding"}


def __getattr__(name):
    if name in TENSORFLOW_ONLY:
        module = importlib.import_module(f"tfeff.layers.{TENSORFLOW_ONLY[name]}")
        return getattr(module, name)
    raise AttributeError(f"module 'tfeff.layers' has no attribute {name!r}")


if keras.backend.backend() == "tensorflow":
    from tfeff.layers.fasttext_embedding import FastTextEmbedding  # noqa: E402

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
