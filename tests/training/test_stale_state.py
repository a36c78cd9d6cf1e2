"""What a run keeps between runs is checked before it is trusted: the epoch count of
`train.epochs` (`epoch_windows.json`) and the checkpoint index after a fallback."""

import json
import logging
import os

import keras
import numpy as np
import pytest
import tensorflow as tf

from tests.conftest import REPO
from tfeff.config import load_config
from tfeff.data import Vocabulary
from tfeff.data import count_windows
from tfeff.training import checkpoints
from tfeff.training import errors
from tfeff.training.fault_tolerance import ResumableTraining
from tfeff.training.families.language_model import _saved_count
from tfeff.training.families.language_model import epoch_windows
from tfeff.training.model_directory import EPOCH_FILE
from tfeff.training.optimizers import make_optimizer

DEMO = os.path.join(REPO, "configs", "demo_elmo_c.yaml")
LINES = [f"the {w} sat on the mat near a {w} and a dog" for w in ("cat", "cow", "owl")] * 40


@pytest.fixture()
def counted(tmp_path, caplog):
    """A corpus, its vocabulary and config, and `count()`: `epoch_windows` on them,
    returning the windows and whether they were counted (not read from the file)."""
    corpus = tmp_path / "train.txt"
    corpus.write_text("\n".join(LINES) + "\n", encoding="utf-8")
    vocabulary = str(tmp_path / "vocabulary.txt")
    Vocabulary.build(LINES).save(vocabulary)
    model_dir = tmp_path / "run"
    model_dir.mkdir()
    config = load_config(DEMO, ["data.synthetic=null", f"data.train_files={corpus}",
                                "data.max_sequence_length=6", "train.epochs=1"])

    def count():
        caplog.clear()
        with caplog.at_level(logging.INFO):
            windows = epoch_windows(config, str(model_dir), str(corpus), vocabulary)
        return windows, "Counting the windows" in caplog.text

    return corpus, vocabulary, model_dir / EPOCH_FILE, count


def test_an_edited_epoch_count_is_counted_again(counted):
    """A kept count that cannot be true (not a positive integer between the kept tokens
    over the window length and the tokens) is tfeff's own derived file gone wrong: it is
    counted again and rewritten, never used (8 windows made 1 step; 1e30, 2.5e28). Every
    such count is refused by the check `epoch_windows` runs on the kept file; two of them
    go through `epoch_windows` itself (each count is a pass of a TensorFlow pipeline)."""
    corpus, vocabulary, path, count = counted
    true_windows = count_windows(str(corpus), vocabulary, 6)[0]
    assert count() == (true_windows, True) and true_windows > 8
    assert count() == (true_windows, False)  # kept: not counted again
    saved = json.loads(path.read_text())
    counted_for = {k: v for k, v in saved.items() if k not in ("windows", "tokens")}
    assert _saved_count(saved, counted_for, 6) == true_windows
    for windows in (8, -600, 1e30, 0, True, "96", None):
        assert _saved_count({**saved, "windows": windows}, counted_for, 6) is None, windows
    for windows in (8, "96"):
        path.write_text(json.dumps({**saved, "windows": windows}))
        assert count() == (true_windows, True), windows
        assert json.loads(path.read_text()) == saved
    assert count() == (true_windows, False)


def test_a_corpus_changed_at_the_same_size_is_counted_again(counted):
    """An edit that keeps the file's size (a space made a line break: more windows) is
    seen by the file's modification time or, where that was set back, by the digest of
    its ends."""
    corpus, vocabulary, _, count = counted
    before, _ = count()
    for keep_time in (False, True):  # each time, 30 more lines split in two
        stat = os.stat(corpus)
        text = corpus.read_text(encoding="utf-8")
        corpus.write_text(text.replace(" near ", "\nnear ", 30), encoding="utf-8")
        assert os.stat(corpus).st_size == stat.st_size
        if keep_time:
            os.utime(corpus, ns=(stat.st_atime_ns, stat.st_mtime_ns))
        after = count_windows(str(corpus), vocabulary, 6)[0]
        assert after > before
        assert count() == (after, True), keep_time
        before = after


def _tiny(tmp_path, keep):
    """A real `ResumableTraining` of a one-layer model, checkpointing to `tmp_path`."""
    config = load_config(DEMO, ["train.warmup_steps=0"])
    model = keras.Sequential([keras.layers.Dense(2, name="dense")], name="tiny")
    model.build((None, 3))
    optimizer = make_optimizer(config.train, 4)
    optimizer.build(model.trainable_variables)
    model.compile(optimizer=optimizer, loss="mse", jit_compile=False)
    return ResumableTraining(model, optimizer, str(tmp_path / "checkpoints"), keep,
                             tf.distribute.get_strategy())


def _batches(position, file_shard):
    del position, file_shard
    x = np.arange(12, dtype=np.float32).reshape(4, 3) / 10
    return tf.data.Dataset.from_tensors((x, np.ones((4, 2), np.float32))).repeat()


def _listed(directory):
    state = tf.train.get_checkpoint_state(directory)
    return os.path.basename(state.model_checkpoint_path), [
        os.path.basename(p) for p in state.all_model_checkpoint_paths]


def test_fallback_sets_a_corrupt_checkpoint_aside_and_saves_its_step_again(tmp_path):
    """With a corrupt newest checkpoint, `--restore_fallback` restores the one before it;
    the corrupt one is renamed out of the index (kept, for a look), so the run saves the
    step again and rotating old checkpoints out counts only readable ones (it skipped
    that save, kept the corrupt file listed and rotated a good checkpoint out)."""
    first = _tiny(tmp_path, keep=3)
    first.fit(_batches, 6, global_batch_size=4, every=2, verbose=0)
    directory = first.directory
    assert _listed(directory) == ("ckpt-6", ["ckpt-2", "ckpt-4", "ckpt-6"])
    data = os.path.join(directory, "ckpt-6.data-00000-of-00001")
    with open(data, "r+b") as f:
        f.truncate(os.path.getsize(data) // 2)
    corrupt = open(data, "rb").read()

    with pytest.raises(errors.CheckpointError, match=r"ckpt-6 .* corrupted or truncated.*"
                       r"--restore_fallback.*renamed to corrupt-ckpt-6"):
        _tiny(tmp_path, keep=3).restore()
    assert _listed(directory)[1] == ["ckpt-2", "ckpt-4", "ckpt-6"]  # refused: untouched

    second = _tiny(tmp_path, keep=3)
    assert second.restore(fallback=True) == 4
    assert _listed(directory) == ("ckpt-4", ["ckpt-2", "ckpt-4"])
    second.fit(_batches, 8, global_batch_size=4, every=2, verbose=0)
    assert _listed(directory) == ("ckpt-8", ["ckpt-4", "ckpt-6", "ckpt-8"])
    for name in ("ckpt-4", "ckpt-6", "ckpt-8"):
        checkpoints.verify_checkpoint(os.path.join(directory, name))
    with open(os.path.join(directory, "corrupt-ckpt-6.data-00000-of-00001"), "rb") as f:
        assert f.read() == corrupt
    assert sorted(n for n in os.listdir(directory) if n.startswith("corrupt-")) == [
        "corrupt-ckpt-6.data-00000-of-00001", "corrupt-ckpt-6.index"]

    # Again, with two unreadable checkpoints: both set aside (the name taken gets a number),
    # the run goes on from the one before them.
    for name in ("ckpt-6", "ckpt-8"):
        os.remove(os.path.join(directory, f"{name}.index"))
        open(os.path.join(directory, f"{name}.index"), "wb").close()
    third = _tiny(tmp_path, keep=3)
    assert third.restore(fallback=True) == 4
    assert _listed(directory) == ("ckpt-4", ["ckpt-4"])
    assert sorted(n for n in os.listdir(directory) if n.startswith("corrupt-")) == [
        "corrupt-2-ckpt-6.data-00000-of-00001", "corrupt-2-ckpt-6.index",
        "corrupt-ckpt-6.data-00000-of-00001", "corrupt-ckpt-6.index",
        "corrupt-ckpt-8.data-00000-of-00001", "corrupt-ckpt-8.index"]
