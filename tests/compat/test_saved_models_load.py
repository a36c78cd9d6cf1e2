"""Models saved by an earlier tfeff still load and compute what they computed then.

`saved/` holds what `write_saved_models.py` wrote with tfeff 0.1.0: every public model
as a `.keras` file and three model directories (ELMo, BERT, Masked ELMo), with their
outputs on fixed ids. A change of a layer's name, a weight's path or a constructor
argument that breaks them fails here, naming the model.
"""

import os
import shutil

import keras
import numpy as np
import pytest

from tfeff.models import Bert
from tfeff.models import BertBackbone
from tfeff.models import ElmoBackbone
from tfeff.models import ElmoLM
from tfeff.models import TransformerLM
from tfeff.models import TransformerLMBackbone
from tfeff.models import legacy
from tfeff.models import load_model
from tfeff.testing.numerics import assert_close
from tfeff.training import restore_model

SAVED = os.path.join(os.path.dirname(os.path.abspath(__file__)), "saved")
KERAS_FILES = sorted(f[:-len(".keras")] for f in os.listdir(SAVED) if f.endswith(".keras"))
MODEL_DIRS = ["bert_dir", "elmo_dir", "masked_elmo_dir"]
IDS = np.array([[2, 5, 7, 9, 3, 0], [2, 11, 4, 3, 0, 0]], "int32")
POSITIONS = np.array([[1, 2], [1, 2]], "int32")
# The outputs of tiny models (widths of at most 16, at most 2 layers of each kind, 6
# positions) recomputed by the same code: float32 sums of at most 16 terms and a few
# activations per layer, through at most 10 layers: 300 roundings at the outputs' scale
# cover any kernel's order of summation.
ROUNDINGS = 300


def _inputs(name):
    if name.startswith("bert"):
        return {"token_ids": IDS, "segment_ids": np.zeros_like(IDS), "padding_mask": IDS > 0,
                "masked_positions": POSITIONS}
    if name == "masked_elmo_backbone":
        return {"token_ids": IDS, "padding_mask": IDS > 0}
    if name.startswith("masked_elmo"):
        return {"token_ids": IDS, "padding_mask": IDS > 0, "masked_positions": POSITIONS}
    return IDS


def _assert_same_outputs(name, outputs):
    with np.load(os.path.join(SAVED, "outputs.npz")) as saved:
        expected = {k[len(name) + 1:]: saved[k] for k in saved.files if k.startswith(name + "/")}
    got = {}
    for key, value in outputs.items():
        if isinstance(value, (list, tuple)):
            got.update({f"{key}/{i}": keras.ops.convert_to_numpy(v) for i, v in enumerate(value)})
        else:
            got[key] = keras.ops.convert_to_numpy(value)
    assert sorted(got) == sorted(expected), name
    for key, want in expected.items():
        assert_close(got[key], want, n=ROUNDINGS, scale=max(1.0, float(np.abs(want).max())))


@pytest.mark.parametrize("name", KERAS_FILES)
def test_a_saved_keras_file_loads_and_computes_what_it_did(name, monkeypatch):
    monkeypatch.chdir(SAVED)  # ELMo's fixed vectors are kept by a path beside the files
    model = load_model(f"{name}.keras")
    _assert_same_outputs(name, model(_inputs(name), training=False))


@pytest.mark.parametrize("name", MODEL_DIRS)
def test_a_model_directory_restores_and_computes_what_it_did(name, tmp_path):
    model_dir = str(tmp_path / name)
    shutil.copytree(os.path.join(SAVED, name), model_dir)
    model, optimizer, step, _ = restore_model(model_dir, with_optimizer=True)
    assert step == 2
    _assert_same_outputs(name, model(_inputs(name), training=False))
    # The optimizer's slots, keyed by the model variables' old paths too, came back: two
    # steps of Adam leave every first moment of a trained weight nonzero.
    assert int(optimizer.iterations) == 2
    moments = [v for v in optimizer.variables if v.path.endswith("_momentum")]
    assert moments and all(np.any(np.asarray(v) != 0) for v in moments)


def test_every_public_model_is_among_the_saved_files():
    import json
    import zipfile

    import tfeff.models

    saved = set()
    for name in KERAS_FILES:
        with zipfile.ZipFile(os.path.join(SAVED, f"{name}.keras")) as archive:
            saved.add(json.loads(archive.read("config.json"))["class_name"])
    # Public models added after the files were written: none of their files predates them.
    # The backbones' layers are those of the task models' encoders, which the files hold.
    added_since = {"BertBackbone", "ElmoBackbone", "TransformerLMBackbone"}
    models = {name for name in tfeff.models.__all__
              if isinstance(getattr(tfeff.models, name), type)}
    assert saved == models - added_since


# The paths and order of `model.weights` in tfeff 0.1.0, before tasks took a backbone
# (printed by that version for these models): its checkpoints key the variables by these
# paths, and `get_weights()` lists follow this order.
WEIGHT_ORDER = {
    "elmo_lm": (lambda: ElmoLM(ElmoBackbone(20, num_layers=2, units=8, projection_dim=4,
                                            input_embedding="trainable", token_embedding_dim=6,
                                            name="elmo_lm_backbone"),
                               output_layer="full", tie_output=True, name="elmo_lm"),
                ['trainable_token_embedding/embeddings', 'token_projection/kernel',
                 'token_projection/bias', 'forward_lstm_0/kernel',
                 'forward_lstm_0/recurrent_kernel', 'forward_lstm_0/bias',
                 'forward_lstm_0/projection_kernel', 'forward_norm_0/gamma',
                 'forward_norm_0/beta', 'backward_lstm_0/kernel',
                 'backward_lstm_0/recurrent_kernel', 'backward_lstm_0/bias',
                 'backward_lstm_0/projection_kernel', 'backward_norm_0/gamma',
                 'backward_norm_0/beta', 'forward_lstm_1/kernel',
                 'forward_lstm_1/recurrent_kernel', 'forward_lstm_1/bias',
                 'forward_lstm_1/projection_kernel', 'forward_norm_1/gamma',
                 'forward_norm_1/beta', 'backward_lstm_1/kernel',
                 'backward_lstm_1/recurrent_kernel', 'backward_lstm_1/bias',
                 'backward_lstm_1/projection_kernel', 'backward_norm_1/gamma',
                 'backward_norm_1/beta', 'pre_output/kernel', 'pre_output/bias',
                 'full_softmax/bias']),
    "transformer_lm": (lambda: TransformerLM(
        TransformerLMBackbone(20, num_layers=1, hidden_dim=8, num_heads=2, intermediate_dim=16,
                              max_sequence_length=8, input_embedding="trainable",
                              name="transformer_lm_backbone"),
        output_layer="full", name="transformer_lm"),
                       ['trainable_token_embedding/embeddings', 'token_projection/kernel',
                 'token_projection/bias', 'embeddings_norm/gamma', 'embeddings_norm/beta',
                 'forward_position_embedding/embeddings',
                 'forward_layer_0/self_attention/query/kernel',
                 'forward_layer_0/self_attention/query/bias',
                 'forward_layer_0/self_attention/key/kernel',
                 'forward_layer_0/self_attention/key/bias',
                 'forward_layer_0/self_attention/value/kernel',
                 'forward_layer_0/self_attention/value/bias',
                 'forward_layer_0/self_attention/attention_output/kernel',
                 'forward_layer_0/self_attention/attention_output/bias',
                 'forward_layer_0/attention_norm/gamma', 'forward_layer_0/attention_norm/beta',
                 'forward_layer_0/intermediate_dense/kernel',
                 'forward_layer_0/intermediate_dense/bias',
                 'forward_layer_0/output_dense/kernel', 'forward_layer_0/output_dense/bias',
                 'forward_layer_0/output_norm/gamma', 'forward_layer_0/output_norm/beta',
                 'backward_position_embedding/embeddings',
                 'backward_layer_0/self_attention/query/kernel',
                 'backward_layer_0/self_attention/query/bias',
                 'backward_layer_0/self_attention/key/kernel',
                 'backward_layer_0/self_attention/key/bias',
                 'backward_layer_0/self_attention/value/kernel',
                 'backward_layer_0/self_attention/value/bias',
                 'backward_layer_0/self_attention/attention_output/kernel',
                 'backward_layer_0/self_attention/attention_output/bias',
                 'backward_layer_0/attention_norm/gamma',
                 'backward_layer_0/attention_norm/beta',
                 'backward_layer_0/intermediate_dense/kernel',
                 'backward_layer_0/intermediate_dense/bias',
                 'backward_layer_0/output_dense/kernel', 'backward_layer_0/output_dense/bias',
                 'backward_layer_0/output_norm/gamma', 'backward_layer_0/output_norm/beta',
                 'full_softmax/embeddings', 'full_softmax/bias']),
    "bert": (lambda: Bert(BertBackbone(20, num_layers=1, hidden_dim=8, num_heads=2,
                                       intermediate_dim=16, max_sequence_length=8,
                                       name="bert_backbone"), use_nsp=True, name="bert"),
             ['mlm_bias', 'token_embedding/embeddings', 'position_embedding/embeddings',
                 'segment_embedding/embeddings', 'embeddings_norm/gamma',
                 'embeddings_norm/beta', 'transformer_layer_0/self_attention/query/kernel',
                 'transformer_layer_0/self_attention/query/bias',
                 'transformer_layer_0/self_attention/key/kernel',
                 'transformer_layer_0/self_attention/key/bias',
                 'transformer_layer_0/self_attention/value/kernel',
                 'transformer_layer_0/self_attention/value/bias',
                 'transformer_layer_0/self_attention/attention_output/kernel',
                 'transformer_layer_0/self_attention/attention_output/bias',
                 'transformer_layer_0/attention_norm/gamma',
                 'transformer_layer_0/attention_norm/beta',
                 'transformer_layer_0/intermediate_dense/kernel',
                 'transformer_layer_0/intermediate_dense/bias',
                 'transformer_layer_0/output_dense/kernel',
                 'transformer_layer_0/output_dense/bias',
                 'transformer_layer_0/output_norm/gamma',
                 'transformer_layer_0/output_norm/beta', 'mlm_dense/kernel', 'mlm_dense/bias',
                 'mlm_norm/gamma', 'mlm_norm/beta', 'pooler/kernel', 'pooler/bias',
                 'nsp_dense/kernel', 'nsp_dense/bias']),
}


@pytest.mark.parametrize("name", sorted(WEIGHT_ORDER))
def test_the_weights_keep_their_order_and_their_old_paths_are_known(name):
    """Today's paths hold the backbone's name (`bert/bert_backbone/...`); the keys of a
    checkpoint written before are today's without it (`legacy.checkpoint_key`)."""
    make, paths = WEIGHT_ORDER[name]
    model = make()
    model.build()
    backbone_paths = [w.path for w in model.backbone.weights]
    assert backbone_paths and all(
        path.startswith(f"{name}/{model.backbone.name}/") for path in backbone_paths)
    keys = [w.path.replace("/", ".") for w in model.weights]
    assert [legacy.checkpoint_key(model, key) for key in keys] == [
        f"{name}.{p.replace('/', '.')}" for p in paths]
