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

from tests.numerics import assert_close
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
    model = keras.saving.load_model(f"{name}.keras")
    _assert_same_outputs(name, model(_inputs(name), training=False))


@pytest.mark.parametrize("name", MODEL_DIRS)
def test_a_model_directory_restores_and_computes_what_it_did(name, tmp_path):
    model_dir = str(tmp_path / name)
    shutil.copytree(os.path.join(SAVED, name), model_dir)
    model, _, step, _ = restore_model(model_dir)
    assert step == 2
    _assert_same_outputs(name, model(_inputs(name), training=False))


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
    assert saved == set(tfeff.models.__all__) - added_since
