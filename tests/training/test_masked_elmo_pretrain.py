"""Masked ELMo pretraining end to end at tiny sizes: falling masked perplexity, exact resume."""

import json
import os
import subprocess
import sys

import keras
import numpy as np
import pytest

from tests.conftest import REPO
from tfeff.config import ConfigError
from tfeff.config import load_config
from tfeff.training import restore_model

DEMO = os.path.join(REPO, "configs", "demo_masked_elmo.yaml")
TINY = [
    "data.synthetic.num_train_sentences=1500", "data.synthetic.num_heldout_sentences=150",
    "data.synthetic.lexicon_size=200", "data.synthetic.paragraph_sentences=4",
    "data.wordpiece_vocabulary_size=300", "data.max_sequence_length=16", "data.batch_size=8",
    "data.max_predictions_per_seq=3", "model.units=24", "model.projection_dim=8",
    "model.dropout_rate=0.0", "model.use_cudnn=false", "train.checkpoint_every=30",
    "train.log_every=10", "train.warmup_steps=10", "train.decay_steps=30",
    "train.validation_steps=4", "eval.max_batches=6",
]


def _weights(model):
    return [keras.ops.convert_to_numpy(w) for w in model.weights]


# The runs train in one child process with `train.deterministic` (TensorFlow's op
# determinism is process-wide: it stays out of the other tests' processes). Without it
# a kernel may choose its summation order per call, so a resumed run matches the
# uninterrupted one only to rounding; with it, bit for bit.
_RUNS = """
import json, shutil, sys
from tfeff.config import load_config
from tfeff.training import pretrain
demo, base, overrides = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
def run(steps, model_dir):
    config = load_config(demo, overrides + ["train.deterministic=true", f"train.steps={steps}"])
    return pretrain(config, model_dir, verbose=0)
first = run(30, base + "/straight")
shutil.copytree(base + "/straight", base + "/in_steps")  # stopped at 30 (test_resume_is_exact)
second = run(90, base + "/straight")
for steps in (60, 90):  # the copy: 30 more, then 30 more
    run(steps, base + "/in_steps")
with open(base + "/results.json", "w") as f:
    json.dump([first, second], f, default=float)
"""


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    base = tmp_path_factory.mktemp("masked_elmo")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    r = subprocess.run([sys.executable, "-c", _RUNS, DEMO, str(base), json.dumps(TINY)],
                       cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    with open(base / "results.json") as f:
        first, second = json.load(f)
    return base, str(base / "straight"), first, second


def test_masked_perplexity_falls_with_training(runs):
    _, model_dir, first, second = runs
    assert first["step"] == 30 and second["step"] == 90
    assert second["eval"]["masked_tokens"] == first["eval"]["masked_tokens"] > 0
    assert second["eval"]["perplexity"] < 0.8 * first["eval"]["perplexity"]
    assert 0 < second["eval"]["accuracy"] < 1
    losses = second["history"]["loss"]
    assert losses[-1] < losses[0]
    # Keras validation at each checkpoint: the held-out masked loss falls.
    val = first["history"]["val_loss"] + second["history"]["val_loss"]
    assert len(val) == 3 and val[2] < val[0]
    # The model directory restores: weights, optimizer step and carried states.
    model, _, step, config = restore_model(model_dir)
    assert step == 90 and config.model.mask_accumulation == 4
    assert len(model.carried_states) == 8
    assert np.abs(keras.ops.convert_to_numpy(model.carried_states[0])).sum() > 0


@pytest.mark.numerics
def test_export_reproduces_the_trained_model(runs):
    from tests.export.embedder_reference import check_model_dir_export

    model, _, _, _ = restore_model(runs[1])
    check_model_dir_export(runs[1], str(runs[0] / "export"), "masked_elmo", model)


def test_resume_is_exact(runs):
    """30 steps, then 30 more, then 30 more equals 30 steps, then 60 in one go."""
    base, straight, _, _ = runs
    a, _, _, _ = restore_model(straight)
    b, _, _, _ = restore_model(str(base / "in_steps"))
    assert len(a.weights) == len(b.weights) > 0
    for x, y in zip(_weights(a), _weights(b)):  # deterministic kernels: the same bits
        np.testing.assert_array_equal(y, x)


def test_config_errors(tmp_path):
    with pytest.raises(ConfigError, match="mask_accumulation"):
        load_config(DEMO, ["model.mask_accumulation=7"])
    with pytest.raises(ConfigError, match="use_cudnn"):
        load_config(DEMO, ["model.use_cudnn=maybe"])
    with pytest.raises(ConfigError, match="adaptive_cutoffs"):
        load_config(DEMO, ["model.output_layer=adaptive"])
    with pytest.raises(ConfigError, match="decay_rate"):
        load_config(DEMO, ["train.decay_rate=1.5"])
    paper = load_config(os.path.join(REPO, "configs", "masked_elmo.yaml"))
    assert (paper.model.units, paper.model.projection_dim, paper.data.wordpiece_vocabulary_size,
            paper.model.mask_accumulation) == (4096, 384, 28745, 4)
