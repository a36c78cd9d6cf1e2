"""`train.epochs`: a run's budget in passes over its corpus, counted once per model directory."""

import json
import logging
import math
import os

import numpy as np

from tests.conftest import REPO
from tfeff.config import load_config
from tfeff.data import lm_dataset
from tfeff.training import pretrain
from tfeff.training.model_directory import EPOCH_FILE

SUB = os.path.join(REPO, "configs", "demo_elmo_sub.yaml")
TINY = [
    "data.synthetic.num_train_sentences=300", "data.synthetic.num_heldout_sentences=20",
    "data.synthetic.lexicon_size=100", "data.wordpiece_vocabulary_size=200",
    "data.max_sequence_length=12", "data.batch_size=16", "model.num_layers=1",
    "model.units=8", "model.projection_dim=8", "model.embedding_dim=8",
    "train.checkpoint_every=10", "train.log_every=5", "train.warmup_steps=2",
    "train.validation_steps=0", "eval.max_targets=50",
]


def test_epochs_set_the_steps_from_the_corpus_windows_and_are_logged(tmp_path, caplog):
    model_dir = str(tmp_path / "run")
    config = load_config(SUB, TINY + ["train.epochs=1.5"])
    with caplog.at_level(logging.INFO):
        results = pretrain(config, model_dir, verbose="auto")
    # One epoch is every window of the training text once, as the pipeline cuts it.
    with open(os.path.join(model_dir, EPOCH_FILE)) as f:
        counted = json.load(f)
    d = config.data
    epoch = np.concatenate([b.numpy() for b in lm_dataset(
        counted["train_files"], os.path.join(model_dir, "vocabulary.txt"), d.batch_size,
        d.max_sequence_length, wordpiece=True)])
    assert (counted["windows"], counted["tokens"]) == (len(epoch), int((epoch > 0).sum()))
    steps = math.ceil(1.5 * len(epoch) / d.batch_size)
    assert config.train.steps == results["step"] == steps
    assert f"training to step {steps}" in caplog.text
    # The progress lines (every 5 steps) say the epoch.
    k = steps - steps % 5
    assert (f"step {k}/{steps} ({100 * k // steps}%), epoch "
            f"{k * d.batch_size / len(epoch):.2f}: loss") in caplog.text

    # A longer budget resumes from the directory's count (not counted again).
    stamp = os.stat(os.path.join(model_dir, EPOCH_FILE)).st_mtime_ns
    caplog.clear()
    more = load_config(SUB, TINY + ["train.epochs=2"])
    with caplog.at_level(logging.INFO):
        again = pretrain(more, model_dir, verbose=0)
    assert again["step"] == math.ceil(2 * len(epoch) / d.batch_size)
    assert os.stat(os.path.join(model_dir, EPOCH_FILE)).st_mtime_ns == stamp
    assert "Counting the windows" not in caplog.text
    # The directory's config holds the steps the run resolved.
    assert load_config(os.path.join(model_dir, "config.yaml")).train.steps == again["step"]

    # An unreadable count is counted again; a budget below the checkpoint trains nothing
    # and says so.
    with open(os.path.join(model_dir, EPOCH_FILE), "w") as f:
        f.write("{not json")
    caplog.clear()
    with caplog.at_level(logging.INFO):
        third = pretrain(load_config(SUB, TINY + ["train.epochs=1"]), model_dir, verbose=0)
    assert "Counting the windows" in caplog.text
    assert third["step"] == again["step"]
    assert f"past step {math.ceil(len(epoch) / d.batch_size)}: nothing more is trained" in \
        caplog.text
    with open(os.path.join(model_dir, EPOCH_FILE)) as f:
        assert json.load(f)["windows"] == len(epoch)



def test_masked_elmo_epochs_count_the_windows_its_streams_read(tmp_path):
    """Masked ELMo's epoch is every window of its documents once, as one epoch's TBPTT
    streams read them (their filler rows aside): `train.epochs` x those windows / batch
    steps, resolved when the run starts and written to the directory's config."""
    from tfeff.data.masked_elmo_dataset import masked_elmo_batches
    from tfeff.training import FAMILIES

    demo = os.path.join(REPO, "configs", "demo_masked_elmo.yaml")
    config = load_config(demo, [
        "data.synthetic.num_train_sentences=300", "data.synthetic.num_heldout_sentences=20",
        "data.synthetic.lexicon_size=100", "data.synthetic.paragraph_sentences=4",
        "data.wordpiece_vocabulary_size=200", "data.max_sequence_length=16",
        "data.batch_size=8", "train.epochs=2.5"])
    model_dir = str(tmp_path / "run")
    _, _, artifacts = FAMILIES["masked_elmo"].start(config, model_dir, "default", None)
    d = config.data
    rows = sum(int((batch["padding_mask"].sum(axis=1) > 0).sum()) for batch in
               masked_elmo_batches(artifacts.documents, d.batch_size, d.max_sequence_length,
                                   d.max_predictions_per_seq, artifacts.vocabulary_size,
                                   repeat=False))
    assert artifacts.epoch_windows == rows > d.batch_size
    assert config.train.steps == math.ceil(2.5 * rows / d.batch_size)
    assert load_config(os.path.join(model_dir, "config.yaml")).train.steps == config.train.steps
