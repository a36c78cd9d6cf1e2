"""The names tfeff writes in a model directory are its own: a symbolic link or a foreign
entry at one of them is never written or emptied through, and a run that is refused or
ends without a checkpoint leaves `config.yaml` as it was. (The binaries' outputs:
tests/bin/test_owned_writes.py.)"""

import json
import os
import resource
import signal

import pytest

from tests.conftest import REPO
from tfeff.config import load_config
from tfeff.data import files
from tfeff.training import model_directory

DEMO = os.path.join(REPO, "configs", "demo_elmo_c.yaml")


def _config(steps):
    return load_config(DEMO, [f"train.steps={steps}"])


@pytest.mark.parametrize("entry", ["link to a file", "dangling link", "directory"])
def test_a_lock_file_that_is_not_tfeffs_is_refused_and_nothing_is_written(entry, tmp_path):
    """`.tfeff-lock` a link to the user's file (once: the file overwritten with the lock's
    holder), a dangling link (once: a file made outside the directory) or a directory:
    `claim` (tfeff-pretrain) and `exclusive_output` (tfeff-export, tfeff-embed) refuse,
    naming it; the file, the link's target and the directory are as they were."""
    mine = tmp_path / "mine.txt"
    mine.write_text("precious\n", encoding="utf-8")
    outside = tmp_path / "outside.txt"
    model_dir = tmp_path / "m"
    model_dir.mkdir()
    for lock in (model_dir / ".tfeff-lock", tmp_path / "export.lock"):
        if entry == "link to a file":
            lock.symlink_to(mine)
        elif entry == "dangling link":
            lock.symlink_to(outside)
        else:
            lock.mkdir()
    what = {"link to a file": f"a symbolic link to {mine}",
            "dangling link": f"a symbolic link to {outside}", "directory": "a directory"}[entry]
    message = "not a lock file tfeff made: nothing was written there or through it"
    with pytest.raises(FileExistsError, match=f"^{model_dir}/.tfeff-lock is {what}, {message}"):
        model_directory.claim(str(model_dir))
    with pytest.raises(FileExistsError, match=f"^{tmp_path}/export.lock is {what}, {message}"):
        with files.exclusive_output(str(tmp_path / "export"), "tfeff-export"):
            pytest.fail("the output was taken")
    assert os.listdir(model_dir) == [".tfeff-lock"]  # no mark, no probe
    assert mine.read_text(encoding="utf-8") == "precious\n"
    assert not os.path.lexists(outside)
    assert sorted(os.listdir(tmp_path)) == ["export.lock", "m", "mine.txt"]


def test_a_killed_runs_leftover_that_is_a_link_is_removed_not_what_it_names(tmp_path):
    """A leftover's name (`config.yaml.tmp-XXXXXXXX`) that is a link to the user's folder:
    the next run removes the link, and the folder keeps its files (once: TensorFlow's
    rmtree emptied it)."""
    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / "data.txt").write_text("mine\n", encoding="utf-8")
    model_dir = tmp_path / "m"
    model_directory.claim(str(model_dir))
    model_directory.release(str(model_dir))
    leftover = model_dir / "config.yaml.tmp-0123abcd"
    leftover.symlink_to(folder)
    model_directory.claim(str(model_dir))
    model_directory.release(str(model_dir))
    assert not os.path.lexists(leftover)
    assert (folder / "data.txt").read_text(encoding="utf-8") == "mine\n"


def test_tfeffs_own_files_replace_a_link_and_refuse_a_directory(tmp_path):
    """config.yaml a link to the user's copy of it: written anew, the copy untouched (the
    rename replaces the link). eval.json a directory (once: IsADirectoryError and the
    temporary left): refused naming it, nothing left."""
    model_dir = tmp_path / "m"
    model_directory.claim(str(model_dir))
    try:
        model_directory.resolve_config(_config(10), str(model_dir))
        copy = tmp_path / "my_config.yaml"
        os.replace(model_dir / "config.yaml", copy)
        written = copy.read_bytes()
        (model_dir / "config.yaml").symlink_to(copy)
        model_directory.resolve_config(_config(20), str(model_dir))
        assert not os.path.islink(model_dir / "config.yaml")
        assert load_config(str(model_dir / "config.yaml")).train.steps == 20
        assert copy.read_bytes() == written
        (model_dir / "eval.json").mkdir()
        with pytest.raises(FileExistsError, match=f"^{model_dir}/eval.json is a directory, "
                           "where tfeff writes a file: nothing was written there"):
            files.write_text_atomic(str(model_dir / "eval.json"), "{}\n")
        assert not [n for n in os.listdir(model_dir) if ".tmp-" in n]
    finally:
        model_directory.release(str(model_dir))


def test_a_write_that_fails_half_way_leaves_the_file_as_it_was_and_no_temporary(tmp_path):
    """A full disk (here a file-size limit) while eval.json is written anew: the old file
    stays whole and the temporary goes (once: `eval.json.tmp-XXXXXXXX` was left)."""
    path = tmp_path / "eval.json"
    path.write_text("{}\n", encoding="utf-8")
    ignored = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # an error, not the signal
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (4096, hard))
    try:
        with pytest.raises(OSError, match="File too large"):
            files.write_text_atomic(str(path), "x" * 100_000)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, ignored)
    assert os.listdir(tmp_path) == ["eval.json"]
    assert path.read_text(encoding="utf-8") == "{}\n"


def _trained(model_dir, steps):
    """A model directory as a run to `steps` leaves it: its config, a vocabulary with its
    fingerprint in the mark, a checkpoint's index file."""
    model_directory.claim(str(model_dir))
    try:
        model_directory.resolve_config(_config(steps), str(model_dir))
        (model_dir / "vocabulary.txt").write_text("<pad>\t0\n<unk>\t0\nthe\t5\na\t3\n")
        model_directory.check_fingerprints(str(model_dir), made_now={"vocabulary.txt"})
        (model_dir / "checkpoints").mkdir()
        (model_dir / "checkpoints" / f"ckpt-{steps}.index").write_bytes(b"")
    finally:
        model_directory.release(str(model_dir))
    return (model_dir / "config.yaml").read_bytes()


def test_a_run_without_a_new_checkpoint_leaves_config_yaml_as_it_was(tmp_path):
    """config.yaml is the config of the directory's checkpoints: a run that takes new
    `train.*` settings and ends without a checkpoint (refused after the config was checked,
    e.g. by a corrupt checkpoint; failed before its first; nothing left to train) puts it
    back (once: the refused run's overrides stayed); a run that wrote one keeps its own,
    also one at a step the directory had."""
    model_dir = tmp_path / "m"
    written = _trained(model_dir, 10)
    model_directory.claim(str(model_dir))
    try:
        model_directory.resolve_config(_config(30), str(model_dir))
        assert load_config(str(model_dir / "config.yaml")).train.steps == 30  # while it runs
    finally:
        model_directory.release(str(model_dir))
    assert (model_dir / "config.yaml").read_bytes() == written
    model_directory.claim(str(model_dir))
    try:
        model_directory.resolve_config(_config(30), str(model_dir))
        (model_dir / "checkpoints" / "ckpt-20.index").write_bytes(b"")
    finally:
        model_directory.release(str(model_dir))
    assert load_config(str(model_dir / "config.yaml")).train.steps == 30
    # A checkpoint written again at a step the directory had (after --restore_fallback).
    model_directory.claim(str(model_dir))
    try:
        model_directory.resolve_config(_config(40), str(model_dir))
        index = model_dir / "checkpoints" / "ckpt-20.index"
        stamp = os.stat(index).st_mtime_ns + 10**9
        os.utime(index, ns=(stamp, stamp))
    finally:
        model_directory.release(str(model_dir))
    assert load_config(str(model_dir / "config.yaml")).train.steps == 40


def test_a_changed_vocabulary_is_refused_before_the_config_is_written(tmp_path):
    """vocabulary.txt edited after a run, rerun with `train.steps=30` (once: config.yaml
    rewritten with the override, then the run refused): refused naming the file, before
    config.yaml is written or any data is prepared."""
    model_dir = tmp_path / "m"
    written = _trained(model_dir, 10)
    mark = (model_dir / ".tfeff-model-dir").read_bytes()
    (model_dir / "vocabulary.txt").write_text("<pad>\t0\n<unk>\t0\na\t3\nthe\t5\n")
    prepared = []
    try:
        with pytest.raises(ValueError, match=f"{model_dir}/vocabulary.txt changed since tfeff "
                           "made it"):
            model_directory.start_run(_config(30), str(model_dir), "default", None,
                                      lambda: prepared.append(True))
        assert (model_dir / "config.yaml").read_bytes() == written and not prepared
        assert (model_dir / ".tfeff-model-dir").read_bytes() == mark
        assert json.loads(mark)["files"]["vocabulary.txt"]
    finally:
        model_directory.release(str(model_dir))
