"""The paper-size configs load, validate and build their model.

Their corpora and pre-trained vectors are not here, so each model is built at
the config's sizes with a vocabulary of the size the paper used (a sparse,
zero-filled vector table for the fixed-input ELMos: nothing is read from it
but the rows of the batch) and run on one tiny synthetic batch, loss included.
"""

import gc
import glob
import os

import keras
import numpy as np
import pytest
import tensorflow as tf

from tests.conftest import REPO
from tfeff.config import load_config

PAPER_CONFIGS = sorted(
    os.path.basename(p)[:-len(".yaml")] for p in glob.glob(os.path.join(REPO, "configs", "*.yaml"))
    if not os.path.basename(p).startswith("demo_"))
# The vocabulary each model is built with: ~800K words seen 3+ times in the One
# Billion Word Benchmark (Li et al.; ELMo-A's last cutoff is 640K) for the softmax
# ELMos, whose output parameters grow with it; 50K for ELMo-C, whose do not; else
# the config's WordPiece size.
WORD_VOCABULARY = 800_000
SMALL_WORD_VOCABULARY = 50_000
BATCH, TIME = 2, 9


def test_every_paper_config_is_covered():
    assert PAPER_CONFIGS == ["bert_base", "bert_base_core", "elmo_a", "elmo_alone", "elmo_c",
                             "elmo_fixed", "elmo_sampled", "elmo_sub", "masked_elmo"]


def _ids(vocabulary_size, seed=0):
    rng = np.random.default_rng(seed)
    ids = rng.integers(4, min(vocabulary_size, 5000), size=(BATCH, TIME)).astype(np.int32)
    ids[:, 0], ids[:, -1] = 2, 3
    ids[1, -3:] = 0  # padding
    return ids


def _elmo_loss(config, tmp_path):
    from tfeff.data import fasttext_tables
    from tfeff.training import build_model

    vectors_path, vocabulary_size = None, config.data.wordpiece_vocabulary_size
    if config.data.tokenization == "word":
        # A continuous output's cost does not depend on the vocabulary: its table
        # only needs the batch's rows (and a 960 MB host copy costs seconds).
        vocabulary_size = (WORD_VOCABULARY if config.model.output_layer != "continuous"
                           else SMALL_WORD_VOCABULARY)
        vectors_path = str(tmp_path / "vectors.npy")
        table = np.lib.format.open_memmap(vectors_path, mode="w+", dtype=np.float32,
                                          shape=(vocabulary_size, config.fasttext.dim))
        table[4:5000] = np.random.default_rng(1).normal(size=(4996, config.fasttext.dim))
        del table
        assert fasttext_tables.load_vocabulary_vectors(vectors_path).shape[0] == vocabulary_size
    model = build_model(config, vocabulary_size, vectors_path)
    model.build()
    ids = _ids(vocabulary_size)
    outputs = model(ids, training=False)
    dim = config.model.projection_dim
    assert outputs["forward"].shape[:2] == (BATCH, TIME)
    assert model.num_layers == config.model.num_layers
    stack, _, _ = model.encode(model.token_embedding(ids), ids > 0)
    assert stack.shape == (BATCH, config.model.num_layers + 1, TIME, 2 * dim)
    return model, float(model.compute_loss(x=ids, y_pred=outputs, training=False))


def _bert_loss(config, relaxed):
    from tfeff.training.families import BERT

    vocabulary_size = config.data.wordpiece_vocabulary_size
    model = BERT.build_model(config, vocabulary_size, relaxed=relaxed)
    model.build()
    ids = _ids(vocabulary_size)
    batch = {"token_ids": ids, "padding_mask": ids > 0,
             "segment_ids": np.zeros_like(ids),
             "masked_positions": np.array([[1, 2], [3, 4]], np.int32),
             "masked_ids": ids[:, 1:3], "masked_weights": np.ones((BATCH, 2), np.float32)}
    outputs = model(batch, training=False)
    assert outputs["sequence_output"].shape == (BATCH, TIME, config.model.hidden_dim)
    assert model.is_relaxed == relaxed
    return model, float(model.compute_loss(x=batch, y_pred=outputs, training=False))


def _masked_elmo_loss(config):
    from tfeff.training import build_model

    vocabulary_size = config.data.wordpiece_vocabulary_size
    model = build_model(config, vocabulary_size)
    model.build()
    ids = _ids(vocabulary_size)
    stack, _ = model.encode(ids, ids > 0)
    d = 2 * config.model.projection_dim
    assert stack.shape == (BATCH, config.model.num_layers + 1, TIME, d)
    top = stack[:, -1]
    hidden = tf.gather(top, tf.constant([[1, 2], [3, 4]]), batch_dims=1)
    losses = model.masked_losses(hidden, ids[:, 1:3], np.ones((BATCH, 2), np.float32))
    return model, float(tf.reduce_mean(losses))


# elmo_fixed and elmo_sampled build the same 4096-cell encoder and 800K-word input as
# elmo_a, and differ in their output layer alone (tested at small sizes in tests/layers):
# about 45 s of the default suite, so they run with `make test-slow`. So does elmo_alone
# (the same encoder, ALONE input at 800K words; its demo config runs through the binaries
# in the default suite): about 50 s beside the demo runs.
_SLOW_PAPER_CONFIGS = ("elmo_alone", "elmo_fixed", "elmo_sampled")


@pytest.mark.parametrize("name", [
    pytest.param(name, marks=pytest.mark.slow) if name in _SLOW_PAPER_CONFIGS else name
    for name in PAPER_CONFIGS])
def test_paper_config_loads_and_builds_its_model(name, tmp_path):
    config = load_config(os.path.join(REPO, "configs", f"{name}.yaml"))
    keras.utils.set_random_seed(0)
    if config.family == "elmo":
        model, loss = _elmo_loss(config, tmp_path)
        expected_units = config.model.units
        assert model.forward_lstms[0].units == expected_units
    elif config.family == "bert":
        # A two-phase config builds both of its models: the relaxed one first.
        if config.model.relaxed is not None:
            relaxed, relaxed_loss = _bert_loss(config, relaxed=True)
            assert np.isfinite(relaxed_loss) and relaxed_loss > 0
            del relaxed
        model, loss = _bert_loss(config, relaxed=False)
        assert model.count_params() > 100_000_000  # BERT-Base: about 110M
    else:
        model, loss = _masked_elmo_loss(config)
    # An untrained model's loss is finite and positive (cross-entropy near
    # log(V) for softmaxes, a distance for continuous outputs).
    assert np.isfinite(loss) and loss > 0, loss
    del model
    keras.backend.clear_session()
    gc.collect()
