"""The family registry: one object per family, the same methods, one lookup everywhere."""

import glob
import os

import keras
import numpy as np
import pytest

from tests.conftest import REPO
from tfeff import config as config_lib
from tfeff.config import load_config
from tfeff.config import write_yaml
from tfeff.export import EMBEDDERS
from tfeff.training import FAMILIES
from tfeff.training import get_family
from tfeff.training import restore_model
from tfeff.training.families import Family

# What a family must implement itself; the rest has shared defaults.
REQUIRED = ("prepare_data", "build_model", "train_dataset", "example_batch", "evaluate")


def _demo_configs():
    """`{family name: [demo config paths]}` of the shipped `configs/demo_*.yaml`."""
    demos = {}
    for path in sorted(glob.glob(os.path.join(REPO, "configs", "demo_*.yaml"))):
        demos.setdefault(load_config(path).family, []).append(path)
    return demos


DEMOS = _demo_configs()


def test_the_registry_names_every_configured_family_and_nothing_else():
    assert set(FAMILIES) == set(config_lib.FAMILIES) == set(DEMOS)  # each with a demo
    for name, family in FAMILIES.items():
        assert family.name == name and isinstance(family, Family) and family.label
        for method in REQUIRED:
            assert getattr(type(family), method) is not getattr(Family, method), (name, method)
    with pytest.raises(ValueError, match=r"Unknown model family 'nope'; one of \("):
        get_family("nope")


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_a_family_keeps_the_contract_with_its_demo_config(name):
    """The demo config finds its family; `build_model` gives an unbuilt model whose
    `build()`, without arguments, creates every variable; the export module the
    family names can embed it."""
    config = load_config(DEMOS[name][0])
    family = get_family(config)
    assert family is FAMILIES[name] is get_family(name)
    size = family.probe_vocabulary_size(config)
    vectors = (np.zeros((size, config.fasttext.dim), "float32") if family.uses_vectors(config)
               else None)
    model = family.build_model(config, size, vectors)
    assert isinstance(model, keras.Model) and not model.built and not model.trainable_variables
    model.build()
    assert model.built and model.backbone.vocabulary_size == size and model.trainable_variables
    variables = len(model.variables)
    assert model.embedder_kind in EMBEDDERS
    if model.embedder_kind == "token_ids":
        ids = np.array([[2, 5, 6, 3], [2, 7, 3, 0]], "int32")
        layers = model.embedding_layers(ids, ids > 0)
        assert tuple(layers.shape) == (2, model.embedding_num_layers, 4, model.embedding_dim)
    # The example batch has the training batches' structure: outputs and a finite loss,
    # and no variable was left for a call to create.
    batch = family.example_batch(config, size, batch_size=3, length=7, seed=1)
    loss = model.compute_loss(x=batch, y_pred=model(batch, training=False), training=False)
    assert np.isfinite(float(loss)) and float(loss) > 0
    assert len(model.variables) == variables


def test_restore_names_a_missing_vocabulary_and_a_family_mismatch(tmp_path):
    config = load_config(os.path.join(REPO, "configs", "demo_bert.yaml"))
    model_dir = str(tmp_path)
    write_yaml(config, os.path.join(model_dir, "config.yaml"))
    with pytest.raises(FileNotFoundError, match=f"{model_dir} has no vocabulary.txt"):
        restore_model(model_dir)
    with pytest.raises(ValueError, match=f"{model_dir} holds a 'bert' model, not a Masked ELMo"):
        FAMILIES["masked_elmo"].restore(model_dir)
    # A word ELMo also needs its vectors table.
    elmo = load_config(os.path.join(REPO, "configs", "demo_elmo_c.yaml"))
    assert FAMILIES["elmo"].uses_vectors(elmo)
    with open(os.path.join(model_dir, "vocabulary.txt"), "w") as f:
        f.write("<pad>\t0\n<unk>\t0\n")
    with pytest.raises(FileNotFoundError, match="has no vocabulary_vectors.npy"):
        FAMILIES["elmo"].model_inputs(elmo, model_dir)
