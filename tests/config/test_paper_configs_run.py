"""Every paper config trains: the paper's recipe at demo size, through `tfeff.training.pretrain`.

Each config keeps its own settings (schedule, epochs, clipping, NSP, CoRe's switch, ...)
and is shrunk only in its sizes: the synthetic corpus instead of the paper's, fastText
trained on it instead of the Common Crawl vectors, tiny layers, a few steps. The
default suite runs ELMo-C (Li et al.'s recipe: epochs, the RNMT+ schedule, ELMo's
clipped cell, the averaged directions); the others run with `make test-slow`.
"""

import glob
import json
import math
import os

import keras
import numpy as np
import pytest

from tests.conftest import REPO
from tfeff.config import load_config
from tfeff.config.train import ONLY_WITH
from tfeff.training import pretrain

PAPER_CONFIGS = sorted(
    os.path.basename(p)[:-len(".yaml")] for p in glob.glob(os.path.join(REPO, "configs", "*.yaml"))
    if not os.path.basename(p).startswith("demo_"))
# Demo sizes, set where a config has the key (and, for a nested one, its section).
SHRINK = {
    "data.train_files": "''", "data.heldout_files": "''",
    "data.synthetic": "{num_train_sentences: 400, num_heldout_sentences: 40, "
                      "lexicon_size: 120, paragraph_sentences: 4}",
    "data.max_sequence_length": 16, "data.batch_size": 8, "data.shuffle_buffer": 100,
    "data.wordpiece_vocabulary_size": 300, "data.max_predictions_per_seq": 3,
    "fasttext.pretrained": "''", "fasttext.dim": 8, "fasttext.epoch": 1,
    "model.num_layers": 1, "model.units": 16, "model.projection_dim": 8,
    "model.hidden_dim": 16, "model.num_heads": 2, "model.intermediate_dim": 32,
    "model.embedding_dim": 8, "model.adaptive_cutoffs": "[20, 40]", "model.num_sampled": 20,
    "model.use_cudnn": "false", "model.relaxed.num_anchors": 2, "model.relaxed.ffn_rank": 4,
    "model.alone.intermediate_dim": 16, "core.coarse_steps": 4,
    "train.base_batch_size": 8, "train.epochs": 0.1, "train.steps": 8, "train.warmup_steps": 2,
    "train.decay_start_step": 3, "train.decay_end_step": 6, "train.decay_steps": 3,
    "train.checkpoint_every": 4, "train.log_every": 4, "train.validation_steps": 1,
    "eval.max_targets": 100, "eval.max_batches": 2,
}

OFF_AT_ZERO = ("train.epochs", "core.coarse_steps")


def _present(config, key):
    *sections, name = key.split(".")
    for part in sections:
        config = getattr(config, part, None)
        if config is None:
            return False
    # A key that applies to one choice only (the exponential decay's steps) is shrunk under
    # that choice; elsewhere it keeps its default, as the config requires.
    if key.startswith("train.") and name in ONLY_WITH:
        choice_key, allowed, _ = ONLY_WITH[name]
        return getattr(config, choice_key) in allowed
    # A key whose 0 turns a feature off (epochs, CoRe's switch) shrinks it where it is on.
    return hasattr(config, name) and (key not in OFF_AT_ZERO or getattr(config, name))


def shrunk(name):
    """`configs/<name>.yaml` at demo size: its `SHRINK` overrides."""
    path = os.path.join(REPO, "configs", f"{name}.yaml")
    paper = load_config(path)
    overrides = [f"{key}={value}" for key, value in SHRINK.items() if _present(paper, key)]
    return paper, load_config(path, overrides)


@pytest.mark.parametrize("name", [
    name if name == "elmo_c" else pytest.param(name, marks=pytest.mark.slow)
    for name in PAPER_CONFIGS])
def test_paper_config_trains_at_demo_size(name, tmp_path):
    paper, config = shrunk(name)
    # Only sizes changed: the recipe's other settings are the paper config's.
    for section in ("train", "model"):
        kept = {k: v for k, v in vars(getattr(paper, section)).items()
                if not any(key == f"{section}.{k}" or key.startswith(f"{section}.{k}.")
                           for key in SHRINK)}
        assert kept == {k: v for k, v in vars(getattr(config, section)).items() if k in kept}
    # The schedule's rate at every step of the run is a positive, finite number.
    from tfeff.training.optimizers import make_optimizer

    optimizer = make_optimizer(config.train, config.data.batch_size)
    optimizer.build([keras.Variable(np.zeros(1, np.float32))])
    rates = []
    for step in range(0, 3 * config.train.steps + 20):
        optimizer.iterations.assign(step)
        rates.append(float(optimizer.learning_rate))
    assert np.all(np.isfinite(rates)) and min(rates) > 0, rates
    model_dir = str(tmp_path / name)
    results = pretrain(config, model_dir, verbose=0)
    if paper.train.epochs:  # the budget in epochs of the corpus: steps from its windows
        if config.family != "masked_elmo":  # (its documents' windows: tests/training)
            with open(os.path.join(model_dir, "epoch_windows.json")) as f:
                windows = json.load(f)["windows"]
            assert config.train.steps == math.ceil(0.1 * windows / config.data.batch_size)
        assert load_config(os.path.join(model_dir, "config.yaml")).train.steps == \
            config.train.steps
    assert results["step"] == config.train.steps > 0
    history = results["history"]  # BERT: one history per phase
    phases = [history] if "loss" in history else list(history.values())
    losses = [v for phase in phases for v in phase.get("loss", [])]
    assert losses and np.all(np.isfinite(losses))
    assert results["eval"] and all(np.isfinite(v) for v in results["eval"].values()
                                   if isinstance(v, float))
