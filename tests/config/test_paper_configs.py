"""The paper-size configs load, validate and build their models.

Their corpora and pre-trained vectors are not here, so each family builds every
model a run trains (`Family.run_models`) at the config's sizes with a vocabulary
of the size the paper used (a sparse, zero-filled vector table where the model
reads fixed vectors: nothing is read from it but the rows of the batch) and
computes its outputs and loss on the family's `example_batch`.
"""

import gc
import glob
import os

import keras
import numpy as np
import pytest

from tests.conftest import REPO
from tfeff.config import load_config
from tfeff.data import fasttext_tables
from tfeff.training.families import get_family

PAPER_CONFIGS = sorted(
    os.path.basename(p)[:-len(".yaml")] for p in glob.glob(os.path.join(REPO, "configs", "*.yaml"))
    if not os.path.basename(p).startswith("demo_"))
# The vocabulary of word models: ~800K words seen 3+ times in the One Billion Word
# Benchmark (Li et al.; ELMo-A's last cutoff is 640K), for softmax outputs, whose
# parameters grow with it; 50K for continuous outputs, whose do not. Subword models
# use the config's WordPiece size.
WORD_VOCABULARY = 800_000
SMALL_WORD_VOCABULARY = 50_000


def test_every_family_has_a_paper_config():
    from tfeff.training.families import FAMILIES

    families = {load_config(os.path.join(REPO, "configs", f"{name}.yaml")).family
                for name in PAPER_CONFIGS}
    assert families == set(FAMILIES)


def _vocabulary_size(config):
    if getattr(config.data, "tokenization", None) == "word":
        return (SMALL_WORD_VOCABULARY if config.model.output_layer == "continuous"
                else WORD_VOCABULARY)
    return config.data.wordpiece_vocabulary_size


def _vectors(config, vocabulary_size, tmp_path):
    """A zero-filled `(vocabulary_size, fasttext.dim)` table on disk, random rows where
    the example batch reads (a memory map: an 800K x 300 host copy costs seconds)."""
    path = str(tmp_path / "vectors.npy")
    table = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32,
                                      shape=(vocabulary_size, config.fasttext.dim))
    rows = min(vocabulary_size, 5000)
    table[4:rows] = np.random.default_rng(1).normal(size=(rows - 4, config.fasttext.dim))
    del table
    assert fasttext_tables.load_vocabulary_vectors(path).shape[0] == vocabulary_size
    return path


# elmo_fixed and elmo_sampled build the same 4096-cell encoder and 800K-word input as
# elmo_a, and differ in their output layer alone (tested at small sizes in tests/layers):
# about 45 s of the default suite, so they run with `make test-slow`. So does elmo_alone
# (the same encoder, ALONE input at 800K words; its demo config runs through the binaries
# in the default suite): about 50 s beside the demo runs.
_SLOW_PAPER_CONFIGS = ("elmo_alone", "elmo_fixed", "elmo_sampled")


@pytest.mark.parametrize("name", [
    pytest.param(name, marks=pytest.mark.slow) if name in _SLOW_PAPER_CONFIGS else name
    for name in PAPER_CONFIGS])
def test_paper_config_loads_and_builds_its_models(name, tmp_path):
    """Every model of the run builds with `build()` alone and, untrained, has a finite,
    positive loss (cross-entropy near log(V) for softmaxes, a distance for continuous
    outputs) on the family's example batch; a model that embeds token ids
    (`embedding_layers`) gives every layer for every token."""
    config = load_config(os.path.join(REPO, "configs", f"{name}.yaml"))
    family = get_family(config)
    vocabulary_size = _vocabulary_size(config)
    vectors_path = (_vectors(config, vocabulary_size, tmp_path)
                    if family.uses_vectors(config) else None)
    keras.utils.set_random_seed(0)
    batch = family.example_batch(config, vocabulary_size)
    for model in family.run_models(config, vocabulary_size, vectors_path):
        model.build()
        outputs = model(batch, training=False)
        loss = float(model.compute_loss(x=batch, y_pred=outputs, training=False))
        assert np.isfinite(loss) and loss > 0, loss
        if hasattr(model, "embedding_layers"):
            ids = np.full((2, 5), 6, "int32")
            layers = model.embedding_layers(ids, ids > 0)
            assert tuple(layers.shape) == (2, model.embedding_num_layers, 5,
                                           model.embedding_dim)
        del model, outputs
    keras.backend.clear_session()
    gc.collect()
