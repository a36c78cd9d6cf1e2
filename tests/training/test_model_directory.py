"""The model directory's own rules, in-process: which directories tfeff writes into, its
lock as an API call inside another takes it, the fingerprints of the prepared files,
signals held back while a checkpoint is written. (Through the binaries:
tests/training/test_fault_tolerance.py.)"""

import json
import os
import signal

import numpy as np
import pytest
import yaml

from tests.conftest import REPO
from tfeff.config import load_config
from tfeff.config import to_dict
from tfeff.data import files
from tfeff.training import checkpoints
from tfeff.training import model_directory

DEMO = os.path.join(REPO, "configs", "demo_elmo_c.yaml")


def _written_config(path, drop=None, comment=False):
    """config.yaml as tfeff writes it (every key), less `drop` (`section.key`, as an older
    tfeff without that key), with a comment line if asked."""
    config = to_dict(load_config(DEMO))
    if drop:
        section, key = drop.split(".")
        del config[section][key]
    text = yaml.safe_dump(config, sort_keys=False)
    path.write_text(("# my notes\n" if comment else "") + text)


@pytest.mark.parametrize("case, mine", [
    ("as written", False),
    ("older, without a key added since", False),
    ("with a comment", True),
    ("the user's own, partial", True),
    ("a foreign file beside tfeff's", True),
])
def test_a_directory_is_tfeffs_when_marked_or_as_tfeff_wrote_it_before_the_mark(case, mine,
                                                                                  tmp_path):
    model_dir = tmp_path / "m"
    (model_dir / "checkpoints").mkdir(parents=True)
    config = model_dir / "config.yaml"
    if case == "as written":
        _written_config(config)
    elif case.startswith("older"):
        _written_config(config, drop="train.jit_compile")
    elif case == "with a comment":
        _written_config(config, comment=True)
    elif case.startswith("the user's own"):
        config.write_text("family: elmo\nmodel:\n  units: 32\n")
    else:
        _written_config(config)
        (model_dir / "notes.txt").write_text("mine")
    before = sorted(os.listdir(model_dir))
    if mine:
        with pytest.raises(FileExistsError, match=f"{model_dir} holds "):
            model_directory.claim(str(model_dir))
        assert sorted(os.listdir(model_dir)) == before  # no mark, no lock file
        return
    model_directory.claim(str(model_dir))
    try:
        assert os.path.exists(model_dir / ".tfeff-model-dir")  # adopted: marked
    finally:
        model_directory.release(str(model_dir))


def test_the_lock_is_held_until_the_last_of_nested_claims_is_given_back(tmp_path):
    """pretrain() calls prepare_data-like steps that claim again: the inner release must not
    free a directory the outer call still writes."""
    model_dir = str(tmp_path / "m")
    lock = os.path.join(model_dir, ".tfeff-lock")

    def free():
        try:
            files.lock(lock, "probe").close()
            return True
        except FileExistsError:
            return False

    model_directory.claim(model_dir)
    model_directory.claim(model_dir)
    model_directory.release(model_dir)
    assert not free()
    model_directory.release(model_dir)
    assert free()
    model_directory.release(model_dir)  # nothing held: nothing happens


def test_a_prepared_file_made_anew_after_the_first_checkpoint_must_be_the_same(tmp_path):
    model_dir = tmp_path / "m"
    model_directory.claim(str(model_dir))  # a new directory: tfeff's
    (model_dir / "checkpoints").mkdir()
    vocabulary = model_dir / "vocabulary.txt"
    vocabulary.write_text("<pad>\t0\n<unk>\t0\nthe\t5\na\t3\n")
    try:
        model_directory.check_fingerprints(str(model_dir), made_now={"vocabulary.txt"})
        recorded = json.loads((model_dir / ".tfeff-model-dir").read_text())["files"]
        assert set(recorded) == {"vocabulary.txt"}
        # No checkpoint yet: a file made anew (say from a corrected corpus) is taken.
        vocabulary.write_text("<pad>\t0\n<unk>\t0\na\t9\nthe\t5\n")
        model_directory.check_fingerprints(str(model_dir), made_now={"vocabulary.txt"})
        # With a checkpoint: the same file made anew passes, another one is refused, and
        # so is an edit.
        (model_dir / "checkpoints" / "ckpt-10.index").write_bytes(b"")
        model_directory.check_fingerprints(str(model_dir), made_now={"vocabulary.txt"})
        vocabulary.write_text("<pad>\t0\n<unk>\t0\nthe\t5\na\t9\n")
        for made_now in ({"vocabulary.txt"}, set()):
            with pytest.raises(ValueError, match=f"{vocabulary} changed since tfeff made it"):
                model_directory.check_fingerprints(str(model_dir), made_now=made_now)
    finally:
        model_directory.release(str(model_dir))


def test_signals_wait_until_a_checkpoint_and_its_index_are_written():
    received = []
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: received.append(signum))
    try:
        with checkpoints.signals_deferred():
            os.kill(os.getpid(), signal.SIGTERM)
            np.zeros(1000).sum()  # bytecodes run: a handler would have run by now
            assert received == []
        assert received == [signal.SIGTERM]
    finally:
        signal.signal(signal.SIGTERM, previous)
