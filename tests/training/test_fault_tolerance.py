"""Fault tolerance of tfeff-pretrain: exact resume, preemption, checkpoint integrity, faults,
multi-worker training (two real worker processes on loopback).

The runs share one prepared data directory (synthetic corpus, vocabulary, fastText, table)
and a small ELMo-C; each test copies the data into a fresh model directory. With
`--deterministic`, runs on this CPU are bit-reproducible, so "resumed = uninterrupted" is
checked bit for bit.
"""

import json
import os
import random
import re
import resource
import shutil
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf

from tests.conftest import REPO
from tfeff.config import ConfigError, load_config
from tfeff.data import CorpusError
from tfeff.training import checkpoints
from tfeff.training import errors
from tfeff.training import fault_tolerance
from tfeff.training import pretrain
from tfeff.training.model_directory import resolve_config
from tfeff.training import prepare_data

DEMO = os.path.join(REPO, "configs", "demo_elmo_c.yaml")
STEPS = 60
BASE = [
    "data.synthetic.num_train_sentences=3000",
    "data.synthetic.num_heldout_sentences=200",
    "data.shuffle_buffer=2000",
    "fasttext.bucket=20000",
    "model.units=32",
    f"train.steps={STEPS}",
    "train.checkpoint_every=10",
    "train.keep_checkpoints=20",
    "train.warmup_steps=5",
    "train.validation_steps=0",
    "eval.max_targets=100",
]
DATA_FILES = ("corpus", "vocabulary.txt", "fasttext.bin", "vocabulary_vectors.npy",
              "vocabulary_vectors.mean.npy", ".tfeff-model-dir")
ENV = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1")


def _command(model_dir, *extra, overrides=()):
    return [sys.executable, "-m", "tfeff.bin.pretrain", "--config", DEMO, "--model_dir",
            model_dir, "--deterministic",
            *sum((["--override", o] for o in [*BASE, *overrides]), []), *extra]


def _run(model_dir, *extra, overrides=(), timeout=300, **kwargs):
    return subprocess.run(_command(model_dir, *extra, overrides=overrides), cwd=REPO, env=ENV,
                          capture_output=True, text=True, timeout=timeout, **kwargs)


def _copy_data(data_dir, model_dir):
    os.makedirs(model_dir)
    for name in DATA_FILES:
        src = os.path.join(data_dir, name)
        if os.path.isdir(src):
            shutil.copytree(src, os.path.join(model_dir, name))
        elif os.path.exists(src):
            shutil.copy(src, model_dir)
    return model_dir


def _tensors(prefix, groups=("model/", "optimizer/", "rng/")):
    reader = tf.train.load_checkpoint(prefix)
    return {k: reader.get_tensor(k) for k, d in reader.get_variable_to_dtype_map().items()
            if k.startswith(groups) and d != tf.variant}


def _assert_bit_identical(a, b):
    ta, tb = _tensors(a), _tensors(b)
    assert ta.keys() == tb.keys() and any(k.startswith("rng/") for k in ta)
    different = [k for k in ta if not np.array_equal(ta[k], tb[k])]
    assert not different, different[:5]


def _checkpoint(model_dir, step):
    return os.path.join(model_dir, "checkpoints", f"ckpt-{step}")


def _latest_step(model_dir):
    latest = tf.train.latest_checkpoint(os.path.join(model_dir, "checkpoints"))
    return int(latest.rsplit("-", 1)[-1]) if latest else 0


def _wait_for(predicate, proc, timeout=240):
    deadline = time.time() + timeout
    while time.time() < deadline and proc.poll() is None:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    """Corpus, vocabulary, fastText and table of BASE, prepared once (in-process)."""
    model_dir = str(tmp_path_factory.mktemp("ft_data"))
    prepare_data(load_config(DEMO, BASE), model_dir)
    return model_dir


@pytest.fixture(scope="module")
def reference(data_dir, tmp_path_factory):
    """The uninterrupted run (checkpoints every 10 steps, all kept)."""
    model_dir = _copy_data(data_dir, str(tmp_path_factory.mktemp("ref") / "m"))
    done = _run(model_dir)
    assert done.returncode == 0, done.stderr[-3000:]
    return model_dir


def test_preempted_then_killed_run_ends_bit_identical_to_uninterrupted(data_dir, reference,
                                                                       tmp_path):
    """SIGTERM: a checkpoint at that step and exit 42; then SIGKILL at a random step; the
    same command, rerun, ends with the uninterrupted run's weights, moments and RNG states."""
    rng = random.Random(time.time_ns())
    model_dir = _copy_data(data_dir, str(tmp_path / "m"))

    proc = subprocess.Popen(_command(model_dir), cwd=REPO, env=ENV, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    assert _wait_for(lambda: os.path.exists(_checkpoint(model_dir, 10) + ".index"), proc)
    time.sleep(rng.uniform(0.0, 0.3))
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=120)
    preempted = _latest_step(model_dir)
    assert proc.returncode == fault_tolerance.PREEMPTED_EXIT_CODE, stderr[-3000:]
    assert f"preempted: saved the checkpoint of step {preempted}" in stderr
    assert 10 <= preempted < STEPS

    proc = subprocess.Popen(_command(model_dir), cwd=REPO, env=ENV, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    assert _wait_for(lambda: _latest_step(model_dir) > preempted, proc)
    delay = rng.uniform(0.0, 0.5)
    time.sleep(delay)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    killed_after = _latest_step(model_dir)

    done = _run(model_dir)
    assert done.returncode == 0, done.stderr[-3000:]
    if killed_after < STEPS:
        assert f"Restored the input iterator of {_checkpoint(model_dir, killed_after)}" \
            in done.stderr, (killed_after, done.stderr[-3000:])
    _assert_bit_identical(_checkpoint(model_dir, STEPS), _checkpoint(reference, STEPS))


def test_corrupted_checkpoint_is_named_and_fallback_resumes_exactly(data_dir, reference,
                                                                    tmp_path):
    model_dir = _copy_data(data_dir, str(tmp_path / "m"))
    shutil.copytree(os.path.join(reference, "checkpoints"), os.path.join(model_dir, "checkpoints"))
    for step in (50, 60):
        os.remove(_checkpoint(model_dir, step) + ".index")
        os.remove(_checkpoint(model_dir, step) + ".data-00000-of-00001")
    tf.compat.v1.train.update_checkpoint_state(
        os.path.join(model_dir, "checkpoints"), _checkpoint(model_dir, 40),
        [_checkpoint(model_dir, s) for s in (20, 30, 40)])
    data = _checkpoint(model_dir, 40) + ".data-00000-of-00001"
    size = os.path.getsize(data)
    with open(data, "r+b") as f:
        f.truncate(size // 2)

    refused = _run(model_dir)
    assert refused.returncode == 1
    assert f"checkpoint {_checkpoint(model_dir, 40)}" in refused.stderr
    assert "corrupted or truncated" in refused.stderr and "--restore_fallback" in refused.stderr
    assert os.path.getsize(data) == size // 2  # nothing was overwritten

    done = _run(model_dir, "--restore_fallback")
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"Restored {_checkpoint(model_dir, 30)}" in done.stderr
    _assert_bit_identical(_checkpoint(model_dir, STEPS), _checkpoint(reference, STEPS))


def test_a_lost_checkpoint_index_is_refused_then_rebuilt_from_the_files(data_dir, reference,
                                                                       tmp_path):
    """Checkpoints without a usable index are never trained over from step 0: refused
    (garbage, empty, missing), naming the files; --restore_fallback restores the newest
    readable one, writes the index again, and the run ends as the uninterrupted one."""
    model_dir = _copy_data(data_dir, str(tmp_path / "m"))
    directory = os.path.join(model_dir, "checkpoints")
    shutil.copytree(os.path.join(reference, "checkpoints"), directory)
    for step in (50, 60):
        os.remove(_checkpoint(model_dir, step) + ".index")
        os.remove(_checkpoint(model_dir, step) + ".data-00000-of-00001")
    index = os.path.join(directory, "checkpoint")
    before = {name: os.path.getmtime(os.path.join(directory, name))
              for name in os.listdir(directory) if name.startswith("ckpt-")}
    names = ("holds the checkpoints ckpt-40, ckpt-30, ckpt-20, ckpt-10: not starting from "
             "step 0 over them")
    for content in (b"\x00garbage{", b""):  # what the run reads first (in-process)
        with open(index, "wb") as f:
            f.write(content)
        problem = "cannot be parsed" if content == b"" else "cannot be"
        with pytest.raises(errors.CheckpointError, match=re.escape(
                f"{index} (the checkpoint index) {problem}")) as refused:
            checkpoints.select_checkpoint(directory)
        assert names in str(refused.value)
    os.remove(index)
    refused = _run(model_dir)  # through the binary
    assert refused.returncode == 1, refused.stderr[-3000:]
    assert f"{index} (the checkpoint index) is missing" in refused.stderr, refused.stderr
    assert names in refused.stderr and "Traceback" not in refused.stderr
    assert (f"--restore_fallback to restore the newest readable one "
            f"({_checkpoint(model_dir, 40)})") in refused.stderr
    assert {name: os.path.getmtime(os.path.join(directory, name)) for name in
            os.listdir(directory) if name.startswith("ckpt-")} == before

    done = _run(model_dir, "--restore_fallback")
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"Restored {_checkpoint(model_dir, 40)}" in done.stderr
    _assert_bit_identical(_checkpoint(model_dir, STEPS), _checkpoint(reference, STEPS))
    # The index lists the files again, with their times, so the older ones rotate out.
    state = tf.train.get_checkpoint_state(directory)
    assert [os.path.basename(p) for p in state.all_model_checkpoint_paths] == [
        f"ckpt-{s}" for s in (10, 20, 30, 40, 50, 60)]
    assert len(state.all_model_checkpoint_timestamps) == 6


def test_a_directory_of_the_users_own_files_is_refused_and_left_as_it_was(tmp_path):
    """The user's own config (with its comments) and corpus in the directory given as
    --model_dir: refused, naming them, nothing written."""
    model_dir = tmp_path / "mine"
    (model_dir / "corpus").mkdir(parents=True)
    config = model_dir / "config.yaml"
    shutil.copy(DEMO, config)
    (model_dir / "corpus" / "train.txt").write_text("my own text\n")
    before = {p: p.read_bytes() for p in model_dir.rglob("*") if p.is_file()}
    refused = subprocess.run(
        [sys.executable, "-m", "tfeff.bin.pretrain", "--config", str(config), "--model_dir",
         str(model_dir)], cwd=REPO, env=ENV, capture_output=True, text=True, timeout=300)
    assert refused.returncode == 1, refused.stderr[-3000:]
    assert (f"{model_dir} holds config.yaml, corpus but is not a directory tfeff made"
            in refused.stderr), refused.stderr[-3000:]
    assert "Traceback" not in refused.stderr
    assert {p: p.read_bytes() for p in model_dir.rglob("*") if p.is_file()} == before


def test_a_second_run_is_refused_at_once_and_a_killed_one_holds_nothing(data_dir, tmp_path):
    """Two tfeff-pretrain on one directory: the second is refused, naming the first (its
    pid); after the first is killed the directory is free again and the run resumes."""
    model_dir = _copy_data(data_dir, str(tmp_path / "m"))
    lock = os.path.join(model_dir, ".tfeff-lock")
    first = subprocess.Popen(_command(model_dir, overrides=["train.steps=100000"]), cwd=REPO,
                             env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                             text=True)
    try:
        assert _wait_for(lambda: _latest_step(model_dir) >= 10, first), \
            first.stderr.read()[-3000:] if first.poll() is not None else "no checkpoint"
        second = _run(model_dir)
        assert second.returncode == 1, second.stderr[-3000:]
        assert (f"{model_dir} is in use by tfeff-pretrain (pid {first.pid} on "
                in second.stderr), second.stderr[-3000:]
        assert "one run writes a model directory at a time" in second.stderr
        with open(os.path.join(model_dir, "config.yaml")) as f:
            assert "steps: 100000" in f.read()  # the first run's, untouched
    finally:
        first.kill()
        first.wait()
    assert os.path.exists(lock)  # left behind by the killed run, and no obstacle
    # What a run killed while saving leaves (TensorFlow's checkpoint being written, a
    # temporary sibling): removed by the next run.
    leftovers = [os.path.join("checkpoints", "ckpt-99990_temp"),
                 "vocabulary.txt.tmp-0badf00d", "fasttext.bin.tmp-deadbeef.txt"]
    os.makedirs(os.path.join(model_dir, leftovers[0]))
    with open(os.path.join(model_dir, leftovers[0], "part-00000-of-00001.data"), "wb") as f:
        f.write(b"\0" * 1024)
    for name in leftovers[1:]:
        with open(os.path.join(model_dir, name), "w") as f:
            f.write("half")
    from tfeff.training import model_directory

    model_directory.claim(model_dir)  # what the next run does first: free, and swept
    try:
        assert not any(os.path.exists(os.path.join(model_dir, name)) for name in leftovers)
        assert _latest_step(model_dir) >= 10  # the checkpoints the next run resumes from
    finally:
        model_directory.release(model_dir)


def _children(pid):
    """The pids whose parent is `pid` (from /proc), but the binary's stderr filter
    (`tfeff.bin.quiet`, which ends when the binary does)."""
    out = []
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                command = f.read()
        except (OSError, IndexError):
            continue
        if int(fields[1]) == pid and b"tfeff.bin.quiet" not in command:
            out.append(int(entry))
    return out


def _alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_a_kill_during_fasttext_takes_its_child_and_sigterm_exits_42_leaving_nothing(
        tmp_path):
    """SIGKILL while fastText trains: its child process dies too (it once trained on);
    SIGTERM there: exit 42 (resumable), the child gone, no temporary left, and the
    first run's leftovers removed."""
    model_dir = str(tmp_path / "m")
    slow = ["fasttext.epoch=2000", "fasttext.threads=1"]

    def fasttext_running(process):
        def ready():
            temporaries = [n for n in os.listdir(model_dir) if n.startswith("fasttext.bin.tmp-")] \
                if os.path.isdir(model_dir) else []
            return bool(temporaries) and bool(_children(process.pid))
        assert _wait_for(ready, process), process.stderr.read()[-3000:]
        return _children(process.pid)

    killed = subprocess.Popen(_command(model_dir, overrides=slow), cwd=REPO, env=ENV,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    children = fasttext_running(killed)
    killed.kill()
    killed.wait()
    deadline = time.time() + 20  # the kernel signals the child; it dies a moment later
    while any(_alive(c) for c in children) and time.time() < deadline:
        time.sleep(0.05)
    assert not any(_alive(c) for c in children), children
    left = [n for n in os.listdir(model_dir) if ".tmp-" in n]
    assert left  # the killed run could not clean up; the next run does

    stopped = subprocess.Popen(_command(model_dir, overrides=slow), cwd=REPO, env=ENV,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    children = fasttext_running(stopped)
    stopped.send_signal(signal.SIGTERM)
    _, stderr = stopped.communicate(timeout=60)
    assert stopped.returncode == 42, stderr[-3000:]
    assert "stopped by SIGTERM outside a training step" in stderr and "Traceback" not in stderr
    assert not any(_alive(c) for c in children)
    assert not [n for n in os.listdir(model_dir) if ".tmp-" in n]
    assert not os.path.exists(os.path.join(model_dir, "fasttext.bin"))


def test_a_vocabulary_edited_between_runs_is_refused_by_name(data_dir, tmp_path):
    """vocabulary.txt with two lines swapped after a run once trained on with the ids of
    the old order: the rerun exits 1 naming the file, and trains nothing."""
    model_dir = _copy_data(data_dir, str(tmp_path / "m"))
    done = _run(model_dir, overrides=["train.steps=10"])
    assert done.returncode == 0, done.stderr[-3000:]
    path = os.path.join(model_dir, "vocabulary.txt")
    lines = open(path, encoding="utf-8").readlines()
    lines[10], lines[11] = lines[11], lines[10]
    open(path, "w", encoding="utf-8").writelines(lines)
    refused = _run(model_dir, overrides=["train.steps=20"])
    assert refused.returncode == 1, refused.stderr[-3000:]
    assert f"{path} changed since tfeff made it" in refused.stderr and \
        "Traceback" not in refused.stderr
    assert _latest_step(model_dir) == 10


def test_bad_inputs_of_pretrain_are_named_before_training(data_dir, tmp_path):
    """NaN rows in the vectors table (once reported as a NaN loss with the advice to skip
    steps): exit 1, one line, no step. fasttext.pretrained naming a directory (once
    IsADirectoryError) and a synthetic lexicon of 1e12 words (once minutes without a word)
    are refused by the checks the run makes first."""
    model_dir = _copy_data(data_dir, str(tmp_path / "m"))
    path = os.path.join(model_dir, "vocabulary_vectors.npy")
    table = np.load(path)
    table[[7, 9]] = np.nan
    np.save(path, table)
    refused = _run(model_dir, timeout=120)
    assert refused.returncode == 1, refused.stderr[-3000:]
    assert f"The embedding table `{path}` holds NaN or Inf in 2 of its" in refused.stderr
    assert "ids 7, 9" in refused.stderr and "Traceback" not in refused.stderr
    assert _latest_step(model_dir) == 0

    from tfeff.data import check_word_vectors_file

    with pytest.raises(ValueError, match=re.escape(
            f"The word-vector file {tmp_path} is a directory")):
        check_word_vectors_file(str(tmp_path))
    with pytest.raises(ConfigError, match=re.escape(
            "`data.synthetic.lexicon_size` must be between 20 and 1,000,000")):
        load_config(DEMO, ["data.synthetic.lexicon_size=1000000000000"])


def test_flipped_byte_fails_its_checksum(reference, tmp_path):
    for name in os.listdir(os.path.join(reference, "checkpoints")):
        if name.startswith("ckpt-20."):
            shutil.copy(os.path.join(reference, "checkpoints", name), tmp_path)
    prefix = str(tmp_path / "ckpt-20")
    assert "model/elmo_lm..elmo_lm_backbone..token_projection..kernel/.ATTRIBUTES/VARIABLE_VALUE" in \
        checkpoints.verify_checkpoint(prefix)
    data = prefix + ".data-00000-of-00001"
    raw = bytearray(open(data, "rb").read())
    raw[len(raw) // 3] ^= 0xFF
    open(data, "wb").write(bytes(raw))
    with pytest.raises(errors.CheckpointError, match="ckpt-20.*corrupted or truncated"):
        checkpoints.verify_checkpoint(prefix)


def _limit_file_size(limit):
    def apply():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails (EFBIG)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return apply


def test_full_disk_keeps_the_previous_checkpoint_and_resumes(data_dir, reference, tmp_path):
    """A file-size limit makes checkpoint writes fail half-way, as a full disk does."""
    model_dir = _copy_data(data_dir, str(tmp_path / "m"))
    os.makedirs(os.path.join(model_dir, "checkpoints"))
    for name in os.listdir(os.path.join(reference, "checkpoints")):
        if name.startswith("ckpt-30."):
            shutil.copy(os.path.join(reference, "checkpoints", name),
                        os.path.join(model_dir, "checkpoints"))
    tf.compat.v1.train.update_checkpoint_state(os.path.join(model_dir, "checkpoints"),
                                               _checkpoint(model_dir, 30))
    limit = os.path.getsize(_checkpoint(model_dir, 30) + ".data-00000-of-00001") // 2
    full = _run(model_dir, preexec_fn=_limit_file_size(limit))
    assert full.returncode == 1, full.stderr[-3000:]
    assert "could not write the checkpoint of step 40" in full.stderr, full.stderr[-3000:]
    assert f"previous checkpoint {_checkpoint(model_dir, 30)} is intact" in full.stderr
    assert _latest_step(model_dir) == 30
    done = _run(model_dir)
    assert done.returncode == 0, done.stderr[-3000:]
    _assert_bit_identical(_checkpoint(model_dir, STEPS), _checkpoint(reference, STEPS))


def test_unwritable_model_dir_is_reported(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(errors.TrainingError,
                       match=f"model_dir {blocker}/m is not writable"):
        pretrain(load_config(DEMO, BASE), str(blocker / "m"), verbose=0)


def _poison_one_word(model_dir, batches_hit=0.2):
    """A row in the fixed table, for a word in about `batches_hit` of the batches, that
    overflows float32 in the model's first product (finite itself: a NaN table is refused
    before training)."""
    counts = np.array([int(line.split("\t")[1]) for line in
                       open(os.path.join(model_dir, "vocabulary.txt"), encoding="utf-8")])
    per_batch = counts / counts.sum() * 64 * 12  # tokens per batch, roughly
    word = int(np.argmin(np.abs(per_batch - batches_hit)))
    table = np.load(os.path.join(model_dir, "vocabulary_vectors.npy"))
    table[word] = np.finfo("float32").max
    np.save(os.path.join(model_dir, "vocabulary_vectors.npy"), table)


def test_nan_loss_stops_at_the_step_or_is_skipped(data_dir, tmp_path):
    model_dir = _copy_data(data_dir, str(tmp_path / "m"))
    _poison_one_word(model_dir)
    config = load_config(DEMO, BASE + ["train.steps=40"])
    with pytest.raises(errors.NonFiniteLossError) as stopped:
        pretrain(config, model_dir, verbose=0)
    step = int(str(stopped.value).split("NaN/Inf at step ")[1].split(":")[0])
    assert 1 <= step <= 40
    assert _latest_step(model_dir) == (step - 1) // 10 * 10  # nothing of the bad step

    import dataclasses
    skipping = dataclasses.replace(config, train=dataclasses.replace(config.train, on_nan="skip"))
    results = pretrain(skipping, model_dir, verbose=0)
    assert results["step"] == 40
    weights = _tensors(_checkpoint(model_dir, 40), ("model/", "optimizer/"))
    skipped = weights["optimizer/adam..non_finite_steps/.ATTRIBUTES/VARIABLE_VALUE"]
    assert skipped >= 1
    assert all(np.isfinite(w).all() for w in weights.values())


def _tiny_training(tmp_path, config):
    """A real `ResumableTraining` of a one-layer model (what every family's run uses)."""
    import keras

    from tfeff.training.optimizers import make_optimizer

    model = keras.Sequential([keras.layers.Dense(2, name="dense")], name="tiny")
    model.build((None, 3))
    optimizer = make_optimizer(config.train, 4)
    optimizer.build(model.trainable_variables)
    model.compile(optimizer=optimizer, loss="mse", jit_compile=False)
    directory = str(tmp_path / "checkpoints")
    return model, fault_tolerance.ResumableTraining(model, optimizer, directory, 5,
                                                    tf.distribute.get_strategy())


def test_on_nan_skip_never_calls_a_run_finished_that_could_not_train(tmp_path):
    """Every batch NaN: `skip` skips them all and Keras runs out of batches at step 0; that
    is an error naming the step and the skips, not a finished run, and nothing is saved."""
    config = load_config(DEMO, BASE + ["train.on_nan=skip"])
    model, training = _tiny_training(tmp_path, config)

    def build(position, file_shard):
        x = np.full((4, 3), np.nan, np.float32)
        return tf.data.Dataset.from_tensors((x, np.zeros((4, 2), np.float32))).repeat()

    with pytest.raises(errors.NonFiniteLossError,
                       match=r"training reached only step 0 of 4: 8 update\(s\) were skipped "
                             r"for NaN/Inf loss or gradients \(train.on_nan: skip\)"):
        training.fit(build, 4, global_batch_size=4, every=2, on_nan="skip", verbose=0)
    assert tf.train.latest_checkpoint(training.directory) is None


def test_non_finite_weights_are_never_saved(tmp_path):
    """A finite update can still overflow the weights (a huge learning rate): such
    weights are refused by name, and the last good checkpoint stays the latest."""
    model, training = _tiny_training(tmp_path, load_config(DEMO, BASE))
    good = training.save()
    model.get_layer("dense").kernel.assign(np.full((3, 2), np.inf, np.float32))
    with pytest.raises(errors.NonFiniteLossError,
                       match=rf"weights are NaN/Inf after step 0 \(1 of 2, e.g. "
                             rf"tiny/dense/kernel\): not saved; the previous checkpoint "
                             rf"{re.escape(good)} is intact"):
        training.save()
    assert tf.train.latest_checkpoint(training.directory) == good
    assert sorted(os.listdir(training.directory)) == [
        "checkpoint", "ckpt-0.data-00000-of-00001", "ckpt-0.index"]


def test_a_model_too_large_to_build_is_reported(data_dir, tmp_path):
    model_dir = _copy_data(data_dir, str(tmp_path / "m"))
    huge = load_config(DEMO, BASE + [f"model.units={2 ** 40}"])
    with pytest.raises(errors.TrainingError,
                       match=r"^out of memory while building the ELMo model \(OOM when allocating "
                             r"tensor with shape\[\d+,\d+\] .*\): its weights do not fit"):
        pretrain(huge, model_dir, verbose=0)
    assert not os.path.exists(os.path.join(model_dir, "checkpoints", "checkpoint"))


def _fake_checkpoint(model_dir, step):
    """The index file `resolve_config` counts as a written checkpoint."""
    os.makedirs(os.path.join(model_dir, "checkpoints"), exist_ok=True)
    open(_checkpoint(model_dir, step) + ".index", "wb").close()


def test_resume_refuses_an_optimizer_change_before_writing_anything(tmp_path, caplog):
    model_dir = str(tmp_path / "m")
    resolve_config(load_config(DEMO, BASE), model_dir)
    _fake_checkpoint(model_dir, 3)
    written = open(os.path.join(model_dir, "config.yaml"), "rb").read()
    with pytest.raises(ConfigError, match=r"holds checkpoints up to step 3; these keys differ "
                       r".*train.weight_decay: 0.0 -> 0.01 \(switches the optimizer from Adam "
                       r"to AdamW"):
        resolve_config(load_config(DEMO, BASE + ["train.weight_decay=0.01"]), model_dir)
    assert open(os.path.join(model_dir, "config.yaml"), "rb").read() == written
    # What may change does: more warmup; fewer steps than reached is said, not silent.
    with caplog.at_level("WARNING"):
        resolve_config(load_config(DEMO, BASE + ["train.warmup_steps=7", "train.steps=2"]),
                       model_dir)
    assert "train.steps=2 is below step 3, which" in caplog.text
    assert load_config(os.path.join(model_dir, "config.yaml")).train.warmup_steps == 7


def test_resume_may_change_what_only_costs_time_and_nothing_else_of_the_model(tmp_path):
    model_dir = str(tmp_path / "m")
    adaptive = BASE + ["model.output_layer=adaptive", "model.adaptive_cutoffs=[10]"]
    resolve_config(load_config(DEMO, adaptive), model_dir)
    _fake_checkpoint(model_dir, 3)
    resolve_config(load_config(DEMO, adaptive + ["model.adaptive_tail_capacity=0.1"]),
                   model_dir)
    saved = os.path.join(model_dir, "config.yaml")
    assert load_config(saved).model.adaptive_tail_capacity == 0.1
    with pytest.raises(ConfigError, match=r"model.adaptive_cutoffs: \[10\] -> \[12\]"):
        resolve_config(load_config(DEMO, adaptive + ["model.adaptive_cutoffs=[12]"]), model_dir)
    assert load_config(saved).model.adaptive_cutoffs == [10]


def test_a_run_without_a_checkpoint_restarts_with_a_corrected_config(data_dir, tmp_path):
    """An empty corpus fails the first start; the corrected config is taken. Prepared data
    made from a changed data section is never reused silently, and never deleted."""
    model_dir = str(tmp_path / "m")
    empty = tmp_path / "empty.txt"
    empty.write_text("\n  \n")
    corpus = os.path.join(data_dir, "corpus")
    files = ["data.synthetic=null", f"data.heldout_files={corpus}/heldout.txt"]
    with pytest.raises(CorpusError, match=rf"The corpus is empty: no non-blank line in "
                                          rf"{re.escape(str(empty))}$"):
        pretrain(load_config(DEMO, BASE + files + [f"data.train_files={empty}"]), model_dir,
                 verbose=0)
    assert sorted(os.listdir(model_dir)) == [".tfeff-lock", ".tfeff-model-dir", "config.yaml"]
    corrected = load_config(DEMO, BASE + files + [f"data.train_files={corpus}/train.txt"])
    resolve_config(corrected, model_dir)
    assert load_config(os.path.join(model_dir, "config.yaml")).data.train_files == \
        f"{corpus}/train.txt"

    prepared = _copy_data(data_dir, str(tmp_path / "prepared"))
    resolve_config(load_config(DEMO, BASE), prepared)
    before = {name: os.path.getmtime(os.path.join(prepared, name))
              for name in os.listdir(prepared)}
    written = open(os.path.join(prepared, "config.yaml"), "rb").read()
    with pytest.raises(ConfigError, match=r"has no checkpoint yet, but it holds data prepared "
                       r"with its old config \(corpus, vocabulary.txt, fasttext.bin, "
                       r"vocabulary_vectors.npy, vocabulary_vectors.mean.npy\) .* these keys "
                       r"differ: data.heldout_files: .*Remove those files"):
        resolve_config(corrected, prepared)
    assert {name: os.path.getmtime(os.path.join(prepared, name))
            for name in os.listdir(prepared)} == before
    assert open(os.path.join(prepared, "config.yaml"), "rb").read() == written
    resolve_config(load_config(DEMO, BASE + ["model.units=16"]), prepared)  # data unchanged
    # A corrected fasttext.pretrained (after a refused .vec) leaves the vocabulary valid:
    # only the files made from the fastText section are named.
    vectors_only = _copy_data(data_dir, str(tmp_path / "vectors_only"))
    for name in ("fasttext.bin", "vocabulary_vectors.npy", "vocabulary_vectors.mean.npy"):
        os.remove(os.path.join(vectors_only, name))
    resolve_config(load_config(DEMO, BASE), vectors_only)
    resolve_config(load_config(DEMO, BASE + ["fasttext.pretrained=/elsewhere/good.vec"]),
                   vectors_only)
    with pytest.raises(ConfigError, match=r"old config \(fasttext.bin, vocabulary_vectors.npy, "
                       r"vocabulary_vectors.mean.npy\) .* these keys differ: fasttext.dim: 64 "
                       r"-> 32\. Remove"):
        resolve_config(load_config(DEMO, BASE + ["fasttext.dim=32"]), prepared)


def _sharded(data_dir, tmp_path, num_shards):
    """A model dir whose config overrides read the training corpus as `num_shards` files."""
    shards = tmp_path / "shards"
    shards.mkdir()
    lines = open(os.path.join(data_dir, "corpus", "train.txt"), encoding="utf-8").readlines()
    for i in range(num_shards):
        (shards / f"part-{i}.txt").write_text("".join(lines[i::num_shards]), encoding="utf-8")
    model_dir = _copy_data(data_dir, str(tmp_path / "m"))
    return model_dir, shards, ["data.synthetic=null", f"data.train_files={shards}/part-*.txt",
                               f"data.heldout_files={model_dir}/corpus/heldout.txt"]


def test_missing_corpus_shard_mid_run_is_reported(data_dir, tmp_path):
    model_dir, shards, overrides = _sharded(data_dir, tmp_path, 6)
    config = load_config(DEMO, BASE + overrides + ["data.shuffle_buffer=64", "train.steps=300"])

    import keras

    class DeleteShard(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            step = int(self.model.optimizer.iterations.numpy())
            if os.path.exists(shards / "part-5.txt") and step >= 12:
                os.remove(shards / "part-5.txt")

    with pytest.raises(errors.TrainingError,
                       match="input file disappeared during training.*part-5.txt.*resumes from"):
        pretrain(config, model_dir, verbose=0, callbacks=[DeleteShard()])
    assert _latest_step(model_dir) >= 10
    checkpoints.verify_checkpoint(_checkpoint(model_dir, _latest_step(model_dir)))


def _free_port():
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def _two_workers(model_dir, overrides):
    cluster = {"worker": [f"localhost:{_free_port()}", f"localhost:{_free_port()}"]}
    workers = []
    for index in range(2):
        env = dict(ENV, TF_CONFIG=json.dumps(
            {"cluster": cluster, "task": {"type": "worker", "index": index}}))
        workers.append(subprocess.Popen(
            _command(model_dir, "--strategy", "multi_worker", overrides=overrides), cwd=REPO,
            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outputs = []
    try:
        for proc in workers:
            outputs.append(proc.communicate(timeout=300))
    finally:
        for proc in workers:
            proc.kill()
    for proc, (_, stderr) in zip(workers, outputs):
        assert proc.returncode == 0, stderr[-3000:]
    return outputs


@pytest.mark.slow
def test_two_workers_read_their_own_files_when_there_are_enough(data_dir, tmp_path):
    model_dir, _, overrides = _sharded(data_dir, tmp_path, 4)
    outputs = _two_workers(model_dir, overrides + ["train.steps=20"])
    for index, (_, stderr) in enumerate(outputs):
        assert f"Worker {index} of 2 reads its share of the files" in stderr
    weights = _tensors(_checkpoint(model_dir, 20), ("model/",))
    assert all(np.isfinite(w).all() for w in weights.values())


def test_two_workers_equal_one_process_on_the_same_global_batch(data_dir, tmp_path):
    """Two MultiWorkerMirroredStrategy workers on loopback, rows of each global batch split
    between them, end with the weights of one process on the same global batch."""
    no_dropout = ["model.dropout_rate=0", "train.steps=30"]  # dropout masks depend on the split
    single = _copy_data(data_dir, str(tmp_path / "single"))
    done = _run(single, overrides=no_dropout)
    assert done.returncode == 0, done.stderr[-3000:]

    shared = _copy_data(data_dir, str(tmp_path / "shared"))
    outputs = _two_workers(shared, no_dropout)
    assert "Worker 1 of 2 reads its rows of every batch" in outputs[1][1]
    a = _tensors(_checkpoint(single, 30), ("model/",))
    b = _tensors(_checkpoint(shared, 30), ("model/",))
    assert a.keys() == b.keys()
    for k in a:
        np.testing.assert_allclose(b[k], a[k], rtol=2e-5, atol=2e-6, err_msg=k)
    # Only the chief writes summaries, evaluation and kept checkpoints.
    assert "held-out top-1" in outputs[0][0] and "held-out top-1" not in outputs[1][0]
    assert not [f for f in os.listdir(os.path.join(shared, "checkpoints")) if "worker" in f]


def test_out_of_memory_is_reported_and_a_smaller_batch_may_rerun(data_dir, tmp_path):
    """TensorFlow's own CPU allocator is capped at 256 MiB (the best-fit allocator of the
    GPUs, `TF_CPU_ALLOCATOR_USE_BFC`), so the failure is the allocator's real
    ResourceExhaustedError of a GPU run, in the first step of a wide model. (A cap on the
    process's address space instead is hit by whichever allocation comes first, often a C++
    `new` that aborts the process.)"""
    model_dir = _copy_data(data_dir, str(tmp_path / "m"))
    overrides = ["model.units=4096", "train.steps=4", "train.checkpoint_every=2"]
    wide = [*BASE, *overrides]
    capped = dict(ENV, TF_CPU_ALLOCATOR_USE_BFC="true", TF_CPU_BFC_MEM_LIMIT_IN_MB="256")
    oom = subprocess.run(_command(model_dir, overrides=overrides), cwd=REPO, env=capped,
                         capture_output=True, text=True, timeout=300)
    assert oom.returncode == 1 and "Traceback" not in oom.stderr, oom.stderr[-3000:]
    assert "out of memory at the configured batch size (OOM when allocating tensor" in oom.stderr
    assert "rerun with a smaller data.batch_size" in oom.stderr
    assert "no checkpoint was written yet" in oom.stderr
    assert tf.train.latest_checkpoint(os.path.join(model_dir, "checkpoints")) is None
    # Resumable: before the first checkpoint the rerun may lower the batch (data.* is
    # otherwise frozen); after one, the batch is part of the run.
    smaller = load_config(DEMO, wide + ["data.batch_size=2"])
    resolve_config(smaller, model_dir)
    os.makedirs(os.path.join(model_dir, "checkpoints"), exist_ok=True)
    shutil.copy(os.path.join(data_dir, "vocabulary.txt"),
                os.path.join(model_dir, "checkpoints", "ckpt-2.index"))
    tf.compat.v1.train.update_checkpoint_state(os.path.join(model_dir, "checkpoints"),
                                               _checkpoint(model_dir, 2))
    with pytest.raises(ConfigError, match="data.batch_size: 2 -> 64"):
        resolve_config(load_config(DEMO, wide), model_dir)


def test_the_checkpoint_index_is_written_as_tensorflow_reads_it_without_a_deprecation(
        tmp_path, caplog):
    """tfeff writes the `checkpoint` index itself: TensorFlow's reader gets every field
    back, nothing is logged (TensorFlow's own writer logs a deprecation warning), and
    the temporary file is gone."""
    with caplog.at_level("INFO"):
        checkpoints.write_checkpoint_state(
            str(tmp_path), "ckpt-3", ["ckpt-1", "ckpt-2", "ckpt-3"],
            [1795000000.25, 1795000100.5, 1795000200.75], 1794999999.0)
    state = tf.train.get_checkpoint_state(str(tmp_path))
    assert os.path.basename(state.model_checkpoint_path) == "ckpt-3"
    assert [os.path.basename(p) for p in state.all_model_checkpoint_paths] == [
        "ckpt-1", "ckpt-2", "ckpt-3"]
    assert list(state.all_model_checkpoint_timestamps) == [1795000000.25, 1795000100.5,
                                                           1795000200.75]
    assert state.last_preserved_timestamp == 1794999999.0
    assert os.listdir(tmp_path) == ["checkpoint"] and not caplog.records
