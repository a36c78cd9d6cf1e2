"""The models' input contracts on ids (tfeff.backend.checks): rank, shapes, length.

Every model's `call` and its embedding contract (`embedding_layers`, what exports
call) take ids `(batch, time)`: another rank raises a `ValueError` naming the
model, the argument and the shape (once TensorFlow's, JAX's or PyTorch's own
index errors); a padding mask, segment ids or masked positions that do not
match the ids raise instead of broadcasting; ids longer than the learned
positions raise; time length 0 gives empty outputs.
"""

import re

import numpy as np
import pytest
import tensorflow as tf

from tfeff.models import Bert
from tfeff.models import BertBackbone
from tfeff.models import ElmoBackbone
from tfeff.models import ElmoLM
from tfeff.models import MaskedElmo
from tfeff.models import MaskedElmoBackbone
from tfeff.models import TransformerLM
from tfeff.models import TransformerLMBackbone

IDS = np.array([[2, 5, 6, 3, 0], [2, 7, 3, 0, 0]], "int32")


def _models():
    """Tiny models, each with how to call it on ids (and a padding mask)."""
    return {
        "ElmoLM": (ElmoLM(ElmoBackbone(20, num_layers=1, units=8, projection_dim=4,
                                       input_embedding="trainable"),
                          output_layer="full", name="elmo"),
                   "ElmoLM `elmo`", "inputs", lambda m, ids: m(ids)["forward"]),
        "TransformerLM": (TransformerLM(TransformerLMBackbone(
                              20, num_layers=1, hidden_dim=8, num_heads=2, intermediate_dim=16,
                              max_sequence_length=8, num_anchors=2, input_embedding="trainable",
                              name="tlm_backbone"), output_layer="full", name="tlm"),
                          "TransformerLMBackbone `tlm_backbone`", "token_ids",
                          lambda m, ids: m(ids)["forward"]),
        "Bert": (Bert(BertBackbone(40, num_layers=1, hidden_dim=8, num_heads=2,
                                   intermediate_dim=16, max_sequence_length=8,
                                   relaxed={"num_anchors": 2, "ffn_rank": 4},
                                   name="bert_backbone"), name="bert"),
                 "BertBackbone `bert_backbone`", "token_ids",
                 lambda m, ids: m(ids)["sequence_output"]),
        "MaskedElmo": (MaskedElmo(MaskedElmoBackbone(20, num_layers=1, units=8, projection_dim=4,
                                                     use_cudnn=False, name="melmo_backbone"),
                                  name="melmo"),
                       "MaskedElmoBackbone `melmo_backbone`", "token_ids",
                       lambda m, ids: m({"token_ids": ids,
                                         "padding_mask": ids > 0})["sequence_output"]),
    }


@pytest.fixture(scope="module")
def models():
    return _models()


@pytest.mark.parametrize("name", ["ElmoLM", "TransformerLM", "Bert", "MaskedElmo"])
def test_ids_of_another_rank_are_refused_naming_the_model(models, name):
    """Rank-1 and rank-3 ids once gave the backend's errors ("Index out of range using
    input dim 1", "Incompatible shapes: [1,1,3,4] vs. [1,1,1,3]", "tuple index out of
    range", or MultiHeadAttention's "expected ndim=3, found ndim=4")."""
    model, who, what, call = models[name]
    assert tuple(call(model, IDS).shape)[:2] == (2, 5)
    message = rf"{re.escape(who)} takes `{what}` of shape \(batch, time\), rank 2\."
    with pytest.raises(ValueError, match=message + r" One sequence needs a batch axis of size "
                                                   rf"1 \(`{what}\[None\]`\)\. Received: "
                                                   rf"{what}\.shape=\(5,\)"):
        call(model, IDS[0])
    with pytest.raises(ValueError, match=message + rf" Received: {what}\.shape=\(1, 2, 5\)"):
        call(model, IDS[None])
    with pytest.raises(ValueError, match=message):  # when a tf.function traces it
        tf.function(lambda ids: call(model, ids))(IDS[None])
    # The embedding contract of exports: `token_ids` (batch, time) and its padding mask.
    with pytest.raises(ValueError, match=r"takes `token_ids` of shape \(batch, time\)"):
        model.embedding_layers(IDS[0], IDS[0] > 0)
    with pytest.raises(ValueError, match=r"needs a `padding_mask` of shape \(batch, time\) "
                                         r"equal to the first two dimensions of `token_ids`"):
        model.embedding_layers(IDS, IDS[:, :1] > 0)


@pytest.mark.parametrize("name", ["ElmoLM", "TransformerLM", "Bert", "MaskedElmo"])
def test_ids_of_time_length_zero_give_empty_outputs(models, name):
    """Time length 0 once failed in Masked ELMo's LSTM (a gather), and in the anchor
    attention of CoRe's BERT and of the anchor TransformerLM ("Biases must be 1D")."""
    model, _, _, call = models[name]
    ids = np.zeros((2, 0), "int32")
    out = call(model, ids)
    assert tuple(out.shape)[:2] == (2, 0)
    assert tuple(model.embedding_layers(ids, ids > 0).shape) == (
        2, model.embedding_num_layers, 0, model.embedding_dim)


def test_per_position_inputs_must_match_the_ids(models):
    """Each of these once broadcast silently: a padding mask or segment ids of shape
    (batch, 1), masked positions of one row for every row."""
    bert, melmo, tlm = models["Bert"][0], models["MaskedElmo"][0], models["TransformerLM"][0]
    column = IDS[:, :1]
    for what, value in (("padding_mask", column > 0), ("segment_ids", column * 0)):
        with pytest.raises(ValueError, match=rf"BertBackbone `bert_backbone` needs (a )?`{what}`"
                                             r" of shape \(batch, time\) equal to the first two "
                                             r"dimensions of `token_ids`\. Received: "
                                             rf"{what}\.shape=\(2, 1\), token_ids\.shape=\(2, 5\)"):
            bert({"token_ids": IDS, what: value})
    with pytest.raises(ValueError, match=r"needs a `padding_mask` of shape \(batch, time\)"):
        melmo({"token_ids": IDS, "padding_mask": column > 0})
    with pytest.raises(ValueError, match=r"needs a `padding_mask` of shape \(batch, time\)"):
        tlm.backbone.encode(IDS, padding_mask=column > 0)
    positions = np.array([[1, 2]], "int32")  # one row for two sequences
    for model, inputs in ((bert, {"token_ids": IDS, "masked_positions": positions}),
                          (melmo, {"token_ids": IDS, "padding_mask": IDS > 0,
                                   "masked_positions": positions})):
        with pytest.raises(ValueError, match=rf"{type(model).__name__} `{model.name}` needs "
                                             r"`masked_positions` of shape \(batch, p\), one row "
                                             r"per sequence.* Received: masked_positions\.shape="
                                             r"\(1, 2\)"):
            model(inputs)
    # Sizes unknown while tracing: checked when the graph runs.
    graph = tf.function(lambda ids, mask: bert({"token_ids": ids, "padding_mask": mask}),
                        input_signature=[tf.TensorSpec((None, None), tf.int32),
                                         tf.TensorSpec((None, None), tf.bool)])
    with pytest.raises(tf.errors.InvalidArgumentError, match="needs a `padding_mask` of shape"):
        graph(IDS, column > 0)


def test_bert_refuses_more_ids_than_learned_positions(models):
    """Ids past `max_sequence_length` once failed in a gather on the TensorFlow CPU
    ("indices[8] = 8 is not in [0, 8)") and read the last position on JAX, silently."""
    bert = models["Bert"][0]
    message = (r"BertBackbone `bert_backbone` has 8 learned positions "
               r"\(`max_sequence_length`\); `token_ids` must have at most 8 positions\.")
    with pytest.raises(ValueError, match=message + r" Received: token_ids\.shape=\(1, 9\)"):
        bert(np.ones((1, 9), "int32"))
    graph = tf.function(lambda ids: bert(ids), input_signature=[
        tf.TensorSpec((None, None), tf.int32)])
    with pytest.raises(tf.errors.InvalidArgumentError, match=message):
        graph(np.ones((1, 9), "int32"))
    assert tuple(graph(np.ones((1, 8), "int32"))["sequence_output"].shape) == (1, 8, 8)
