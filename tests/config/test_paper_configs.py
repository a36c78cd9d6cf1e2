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


# The default suite builds one paper config of each kind of model: ELMo-C (the paper's
# 4096-cell encoder and continuous output), Masked ELMo, BERT-base with CoRe (the relaxed
# and the standard model) and the GPT-size transformer LM. The others build the same
# encoders with another output layer or input (tested at small sizes in tests/layers, and
# through the binaries by their demo configs) or, for bert_base, the standard half of
# bert_base_core: about 2 minutes of the default suite, so they run with `make test-slow`.
_SLOW_PAPER_CONFIGS = ("bert_base", "elmo_a", "elmo_alone", "elmo_fixed", "elmo_sampled",
                       "elmo_sub")


# Untrained softmax models whose loss is far above log V (measured 2026-11-24), so their
# check is "above log V": ELMo-A's adaptive softmax (at uniform cluster logits a tail word
# costs log(head size) + log(its cluster's size), about 24 nats against 13.6); ELMo-SUB,
# ELMo-SAMPLED and ELMo-ALONE (24, 27 and 59 nats against 10.3, 13.6 and 10.3: the
# 4096-cell encoder's projected outputs meet the output matrix at a scale no softmax
# initializer corrects for).
_ABOVE_LOG_V = ("elmo_a", "elmo_alone", "elmo_sampled", "elmo_sub")


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
        if not getattr(model, "is_continuous", False):
            # An untrained softmax spreads its mass nearly evenly: cross-entropy ~ log V.
            log_v = np.log(vocabulary_size)
            if name in _ABOVE_LOG_V:
                assert loss > log_v, (loss, log_v)
            else:
                assert abs(loss - log_v) < 0.1 * log_v, (loss, log_v)
        if hasattr(model, "embedding_layers"):
            ids = np.full((2, 5), 6, "int32")
            layers = model.embedding_layers(ids, ids > 0)
            assert tuple(layers.shape) == (2, model.embedding_num_layers, 5,
                                           model.embedding_dim)
        del model, outputs
    keras.backend.clear_session()
    gc.collect()
