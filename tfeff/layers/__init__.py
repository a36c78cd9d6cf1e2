"""Keras layers: the efficiency ideas of tfeff, one public class per file.

Every layer but `FastTextEmbedding` (TensorFlow string ops: `TENSORFLOW_ONLY`) is
`keras.ops` code for every backend. Off TensorFlow that one is imported on first use
(so `import tfeff.layers` imports no TensorFlow) and left out of `import *`; without
TensorFlow installed, asking for it raises an ImportError that says so.
"""

import importlib

import keras

from tfeff.layers.adaptive_softmax import AdaptiveSoftmax
from tfeff.layers.alone_embedding import AloneEmbedding
from tfeff.layers.anchor_multi_head_attention import AnchorMultiHeadAttention
from tfeff.layers.causal_anchor_attention import CausalAnchorAttention
from tfeff.layers.continuous_output import ContinuousOutput
from tfeff.layers.factorized_dense import FactorizedDense
from tfeff.layers.fixed_embedding import FixedEmbedding
from tfeff.layers.full_softmax import FullSoftmax
from tfeff.layers.masked_bi_lstm import MaskedBiLSTM
from tfeff.layers.projected_lstm import ProjectedLSTM
from tfeff.layers.rotary import RotaryMultiHeadAttention
from tfeff.layers.sampled_softmax import SampledSoftmax
from tfeff.layers.scalar_mix import ScalarMix

# Layer -> module, of the layers that need TensorFlow (string ops).
TENSORFLOW_ONLY = {"FastTextEmbedding": "fasttext_embedding"}


def __getattr__(name):
    if name in TENSORFLOW_ONLY:
        try:
            module = importlib.import_module(f"tfeff.layers.{TENSORFLOW_ONLY[name]}")
        except ImportError as e:
            if (e.name or "").split(".")[0] != "tensorflow":
                raise
            raise ImportError(
                f"`tfeff.layers.{name}` is TensorFlow-only (it uses TensorFlow string ops) "
                f"and needs TensorFlow, which cannot be imported here: {e}. The Keras "
                f"backend is {keras.backend.backend()!r}; install TensorFlow to use "
                f"`{name}` (the other layers run without it)."
            ) from e
        return getattr(module, name)
    raise AttributeError(f"module 'tfeff.layers' has no attribute {name!r}")


__all__ = [
    "AdaptiveSoftmax",
    "AloneEmbedding",
    "AnchorMultiHeadAttention",
    "CausalAnchorAttention",
    "ContinuousOutput",
    "FactorizedDense",
    "FixedEmbedding",
    "FullSoftmax",
    "MaskedBiLSTM",
    "ProjectedLSTM",
    "RotaryMultiHeadAttention",
    "SampledSoftmax",
    "ScalarMix",
]
# Imported (and `import *`-ed) at once only where TensorFlow is the backend.
if keras.backend.backend() == "tensorflow":
    from tfeff.layers.fasttext_embedding import FastTextEmbedding  # noqa: E402

    __all__ = sorted(__all__ + list(TENSORFLOW_ONLY))
