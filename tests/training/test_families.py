"""The family registry: one object per family, the same methods, one lookup everywhere."""

import os

import pytest

from tests.conftest import REPO
from tfeff import config as config_lib
from tfeff.config import load_config
from tfeff.config import write_yaml
from tfeff.models import Bert
from tfeff.models import ElmoLM
from tfeff.models import MaskedElmo
from tfeff.training import FAMILIES
from tfeff.training import build_model
from tfeff.training import get_family
from tfeff.training import restore_model
from tfeff.training.families import Family

DEMOS = {"elmo": "demo_elmo_sub.yaml", "bert": "demo_bert.yaml",
         "masked_elmo": "demo_masked_elmo.yaml"}
MODELS = {"elmo": ElmoLM, "bert": Bert, "masked_elmo": MaskedElmo}
# What a family must implement itself; the rest has shared defaults.
REQUIRED = ("prepare_data", "build_model", "train_dataset", "evaluate")


def test_the_registry_names_every_configured_family_and_nothing_else():
    assert set(FAMILIES) == set(config_lib.FAMILIES) == set(DEMOS)
    for name, family in FAMILIES.items():
        assert family.name == name and isinstance(family, Family) and family.label
        for method in REQUIRED:
            assert getattr(type(family), method) is not getattr(Family, method), (name, method)
    with pytest.raises(ValueError, match=r"Unknown model family 'gpt'; one of \("):
        get_family("gpt")


@pytest.mark.parametrize("name", sorted(DEMOS))
def test_a_config_finds_its_family_and_builds_that_model(name):
    config = load_config(os.path.join(REPO, "configs", DEMOS[name]))
    assert get_family(config) is FAMILIES[name] is get_family(name)
    assert not get_family(config).uses_vectors(config)  # these demos read no fixed table
    size = config.data.wordpiece_vocabulary_size
    model = build_model(config, size)
    assert type(model) is MODELS[name]
    assert model.vocabulary_size == size


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
