"""Keras models built from tfeff layers, in `keras.ops` on every Keras backend; what feeds
and serves them (`tf.data`, binaries, SavedModel export, `FastTextEmbedding`) stays TensorFlow.
"""

from tfeff.models.bert import Bert
from tfeff.models.bert_backbone import BertBackbone
from tfeff.models.elmo_backbone import ElmoBackbone
from tfeff.models.elmo_lm import ElmoLM
from tfeff.models.legacy import load_model
from tfeff.models.masked_elmo import MaskedElmo
from tfeff.models.masked_elmo_backbone import MaskedElmoBackbone
from tfeff.models.transformer_lm import TransformerLM
from tfeff.models.transformer_lm_backbone import TransformerLMBackbone

__all__ = ["Bert", "BertBackbone", "ElmoBackbone", "ElmoLM", "MaskedElmo", "MaskedElmoBackbone",
           "TransformerLM", "TransformerLMBackbone", "load_model"]
