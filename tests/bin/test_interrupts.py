"""Ctrl-C and SIGTERM stop every binary with one line and a documented exit status, leaving
nothing half-written (`tfeff.bin.common.run_app`): 130 and 143, tfeff-pretrain's 42.

The binaries run as a shell runs them, in a job of their own: Ctrl-C is SIGINT to the
whole job (a child process, fastText's, gets it too), sent once the binary is at the point
under test (a temporary it writes exists, or it printed a known line). The converters'
temporaries are checked in process (`tfeff.convert.staging`), and the wrapper itself in
a process that imports no TensorFlow."""

import hashlib
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time

import pytest

from tests.conftest import REPO
from tfeff.bin import common
from tfeff.training import fault_tolerance

ENV = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1", PYTHONPATH=REPO)
DEMO = os.path.join(REPO, "configs", "demo_elmo_c.yaml")
# absl's log lines (`I1127 22:47:13.29 123 file.py:36] ...`): tfeff's own progress.
_LOG_LINE = re.compile(r"^[IWEF]\d{4} ")


class _Job:
    """A binary started in a session of its own; stderr read as it comes."""

    def __init__(self, args, cwd=REPO):
        self.proc = subprocess.Popen([sys.executable, "-m", *args], cwd=cwd, env=ENV,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     start_new_session=True)
        self.lines = []
        self._reader = threading.Thread(target=lambda: self.lines.extend(self.proc.stderr),
                                        daemon=True)
        self._reader.start()

    def stop_when(self, ready, signum, timeout=240):
        """Sends `signum` to the job once `ready()`; returns `(status, own stderr lines,
        all of stderr)`, where the own lines are those that are not log lines."""
        deadline = time.time() + timeout
        while not ready():
            assert self.proc.poll() is None and time.time() < deadline, "".join(self.lines)
            time.sleep(0.05)
        os.killpg(self.proc.pid, signum)
        self.proc.stdout.read()
        self.proc.wait(timeout=120)
        self._reader.join(timeout=60)
        stderr = "".join(self.lines)
        own = [line.rstrip("\n") for line in self.lines
               if line.strip() and not _LOG_LINE.match(line)]
        return self.proc.returncode, own, stderr


def _files(path):
    """Every file under `path` with its digest."""
    out = {}
    for root, _, names in os.walk(path):
        for name in names:
            with open(os.path.join(root, name), "rb") as f:
                out[os.path.relpath(os.path.join(root, name), path)] = \
                    hashlib.sha256(f.read()).hexdigest()
    return out


# The wrapper alone, in a process that imports no TensorFlow: a stop raised while a cleanup
# fails (the chained tracebacks of a second Ctrl-C), SIGTERM inside `main` (its `finally`
# runs), and a SIGTERM that the parent ignores (it stays ignored).
_WRAPPED = """
import os, signal, sys
from tfeff.bin import common

def main(argv):
    if argv[1] == "chained":
        try:
            raise KeyboardInterrupt
        finally:
            raise RuntimeError("a cleanup that failed while Ctrl-C unwound")
    try:
        os.kill(os.getpid(), signal.SIGTERM)
        print("went on", flush=True)
    finally:
        print("finally ran", flush=True)

common.run_app(main, stopped="stopped by {signal}: test")
"""


@pytest.mark.parametrize("case, status, stdout, line", [
    ("chained", 130, "", "stopped by Ctrl-C (SIGINT): test"),
    ("sigterm", 143, "finally ran\n", "stopped by SIGTERM: test"),
    ("ignored", 0, "went on\nfinally ran\n", None),
])
def test_the_wrapper_reports_a_stop_in_one_line_with_128_plus_the_signal(case, status,
                                                                         stdout, line):
    ignore = (lambda: signal.signal(signal.SIGTERM, signal.SIG_IGN)) if case == "ignored" \
        else None
    r = subprocess.run([sys.executable, "-c", _WRAPPED, case], cwd=REPO, env=ENV,
                       capture_output=True, text=True, timeout=60, preexec_fn=ignore)
    assert r.returncode == status, r.stderr[-3000:]
    assert r.stdout == stdout
    assert r.stderr.splitlines() == ([line] if line else []), r.stderr[-3000:]


def _stopped_after(monkeypatch, module, name, written, run):
    """Runs `run()` with `module.name` doing its real write and then raising SIGTERM in
    this process, as the binaries catch it (`written()` is checked between the two);
    asserts that `run` stops with `Stopped`."""
    real = getattr(module, name)

    def write_then_sigterm(*args, **kwargs):
        real(*args, **kwargs)
        assert written()
        os.kill(os.getpid(), signal.SIGTERM)

    monkeypatch.setattr(module, name, write_then_sigterm)
    previous = signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        common.catch_stop_signals()
        with pytest.raises(common.Stopped):
            run()
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_sigterm_while_an_export_is_written_keeps_the_earlier_one_and_leaves_nothing(
        fasttext_model, fasttext_export, tmp_path, monkeypatch):
    """SIGTERM, raised as the binaries raise it, once the SavedModel of an export with
    `overwrite` is written to its temporary: `Stopped`, the earlier export exactly as it
    was, no temporary and no lock beside it. (Through tfeff-export in a process of its
    own, with the one line and status 143: the `slow` test below; the line and status of
    every binary: the wrapper's test above.)"""
    import tensorflow as tf

    from tfeff.export import export_fasttext

    out = str(tmp_path / "export")
    shutil.copytree(fasttext_export, out)
    before = _files(out)
    _stopped_after(monkeypatch, tf.saved_model, "save",
                   lambda: any(".tmp-" in name for name in os.listdir(tmp_path)),
                   lambda: export_fasttext(fasttext_model[0], out, overwrite=True))
    assert os.listdir(tmp_path) == ["export"] and _files(out) == before


# A subprocess run: under `slow` for the default suite's time budget (the export's clean-up
# is checked in process above, the line and status by the wrapper's test).
@pytest.mark.slow
def test_sigterm_during_an_export_keeps_the_earlier_one_and_leaves_no_temporary_or_lock(
        fasttext_model, fasttext_export, tmp_path):
    """SIGTERM while tfeff-export writes (once: killed, status 143 without a word, the lock
    and the half-written temporary left beside the output): one line, status 143, and the
    earlier export at --output exactly as it was, nothing beside it."""
    path, _ = fasttext_model
    out = str(tmp_path / "export")
    shutil.copytree(fasttext_export, out)
    before = _files(out)
    job = _Job(["tfeff.bin.export", "--fasttext", path, "--output", out, "--overwrite"])
    status, own, stderr = job.stop_when(
        lambda: any(".tmp-" in name for name in os.listdir(tmp_path)), signal.SIGTERM)
    assert status == 143, stderr[-3000:]
    assert own == ["stopped by SIGTERM: nothing half-written is left; rerun the same command "
                   "to export"], stderr[-3000:]
    assert os.listdir(tmp_path) == ["export"] and _files(out) == before


# A subprocess run: under `slow` for the default suite's time budget (the mechanism is
# also checked in process there).
@pytest.mark.slow
def test_ctrl_c_while_pretrain_makes_its_fasttext_vectors_exits_42_in_one_line(tmp_path):
    """Ctrl-C outside a training step (fastText's training here; once a 40-line traceback
    and status -2): one line, `PREEMPTED_EXIT_CODE` as in training, no temporary, no
    fastText vectors, its child process gone; the directory resumes (test_fault_tolerance
    reruns such a directory)."""
    model_dir = str(tmp_path / "m")
    overrides = ["data.synthetic.num_train_sentences=3000", "fasttext.bucket=20000",
                 "fasttext.epoch=2000", "fasttext.threads=1"]
    job = _Job(["tfeff.bin.pretrain", "--config", DEMO, "--model_dir", model_dir,
                *sum((["--override", o] for o in overrides), [])])

    def fasttext_training():
        return os.path.isdir(model_dir) and any(
            n.startswith("fasttext.bin.tmp-") for n in os.listdir(model_dir)) and any(
            line.startswith("I") and "Training" in line and "fastText" in line
            for line in job.lines)

    status, own, stderr = job.stop_when(fasttext_training, signal.SIGINT)
    assert status == fault_tolerance.PREEMPTED_EXIT_CODE == 42, stderr[-3000:]
    assert own == ["stopped by Ctrl-C (SIGINT) outside a training step (preparing the data, "
                   "building, evaluating; or a second Ctrl-C): nothing half-written is left; "
                   "rerun the same command to resume"], stderr[-3000:]
    assert not [n for n in os.listdir(model_dir) if ".tmp-" in n or n == "fasttext.bin"]
    children = subprocess.run(["pgrep", "-s", str(job.proc.pid)], capture_output=True,
                              text=True).stdout.split()
    assert not children, children  # fastText's child ended with the binary


def test_a_stopped_or_killed_converter_leaves_nothing_its_next_run_would_keep(tmp_path,
                                                                              monkeypatch):
    """A converter's output (here `write_hf_bert`, as `tfeff-convert-core --hf_dir`) is
    written to `<output>.tmp-XXXXXXXX` under `<output>.lock`. A killed run's temporary and
    lock (once a hidden `.keras-hub-*`, `.hf-*` or `.convert-*` folder that no run removed)
    are removed by the next run; SIGTERM in the middle of writing, raised as the binaries
    raise it, leaves neither the output nor its temporary or lock."""
    import safetensors.numpy

    from tests.models.test_bert import make_bert
    from tfeff.convert import write_hf_bert

    bert = make_bert()
    out = str(tmp_path / "hf")
    stale = tmp_path / "hf.tmp-0123abcd"  # what SIGKILL while writing `hf` leaves
    stale.mkdir()
    (stale / "model.safetensors").write_bytes(b"half")
    (tmp_path / "hf.lock").write_text("tfeff.convert.write_hf_bert (pid 1)\n")
    (tmp_path / "hf.tmp-notes").write_text("the user's\n")  # not a temporary of tfeff's
    write_hf_bert(bert, out)
    assert sorted(os.listdir(tmp_path)) == ["hf", "hf.tmp-notes"]

    _stopped_after(monkeypatch, safetensors.numpy, "save_file", lambda: True,
                   lambda: write_hf_bert(bert, str(tmp_path / "other")))
    assert sorted(os.listdir(tmp_path)) == ["hf", "hf.tmp-notes"]


@pytest.mark.slow
def test_ctrl_c_while_embedding_keeps_the_lines_done_and_the_rerun_resumes(fasttext_model,
                                                                           small_corpus,
                                                                           tmp_path):
    """Ctrl-C in tfeff-embed's embedding pass (once a traceback and status -2): status 130,
    the stop line last and no traceback, the lock gone, `<output>.partial` kept; the same
    command then finishes from there."""
    from tfeff.export import export_fasttext

    embedder = str(tmp_path / "export")
    export_fasttext(fasttext_model[0], embedder)
    out = str(tmp_path / "embedded")
    args = ["tfeff.bin.embed", "--embedder", embedder, "--input", small_corpus[0], "--output",
            out, "--chunk_lines", "50", "--batch_size", "2"]
    job = _Job(args)
    status, own, stderr = job.stop_when(
        lambda: os.path.exists(os.path.join(out + ".partial", "progress.json")), signal.SIGINT)
    assert status == 130, stderr[-3000:]
    assert own == ["stopped by Ctrl-C (SIGINT): nothing half-written is left; rerun the same "
                   "command to resume"], stderr[-3000:]
    assert sorted(os.listdir(tmp_path)) == ["embedded.partial", "export"]
    done = subprocess.run([sys.executable, "-m", *args], cwd=REPO, env=ENV,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Resuming" in done.stderr and sorted(os.listdir(tmp_path)) == ["embedded", "export"]


@pytest.mark.slow
def test_ctrl_c_while_evaluating_writes_no_table(fasttext_model, tmp_path):
    """Ctrl-C while tfeff-evaluate trains its probes (once a traceback): status 130, the
    stop's line, no table at --output and nothing beside it."""
    from tfeff.export import export_fasttext

    embedder = str(tmp_path / "export")
    export_fasttext(fasttext_model[0], embedder)
    train, test = tmp_path / "train.conll", tmp_path / "test.conll"
    train.write_text("the\tDET\ndog\tNOUN\n\na\tDET\ncat\tNOUN\n" * 50, encoding="utf-8")
    test.write_text("the\tDET\ncat\tNOUN\n\na\tDET\ndog\tNOUN\n", encoding="utf-8")
    table = tmp_path / "out" / "table.md"
    job = _Job(["tfeff.bin.evaluate", "--embedder", f"ft={embedder}", "--tagging",
                f"pos={train},{test}", "--probe", "linear,bilstm", "--seeds", "0,1,2,3",
                "--epochs", "30", "--output", str(table)])
    status, own, stderr = job.stop_when(
        lambda: any("accuracy" in line for line in job.lines), signal.SIGINT)
    assert status == 130, stderr[-3000:]
    # The stop's line comes last, once, and no traceback (a one-layer export gives Keras'
    # warning that the probe's layer mix has no gradient, before it).
    assert own[-1] == ("stopped by Ctrl-C (SIGINT): nothing half-written is left; rerun the "
                       "same command"), stderr[-3000:]
    assert sum("stopped by" in line for line in own) == 1 and "Traceback" not in stderr
    assert not table.exists() and not any(".tmp-" in n for n in os.listdir(tmp_path))


@pytest.fixture(scope="module")
def standard_bert(tmp_path_factory):
    """A tiny two-phase CoRe run after its switch: a standard BERT with learned positions,
    which keras-hub's BERT holds (as tests/convert/test_keras_hub_preset.py trains it)."""
    pytest.importorskip("keras_hub")
    from tests.convert.test_keras_hub_preset import CORE
    from tests.convert.test_keras_hub_preset import TINY
    from tfeff.config import load_config
    from tfeff.training import pretrain

    model_dir = str(tmp_path_factory.mktemp("core") / "core")
    pretrain(load_config(CORE, TINY), model_dir, verbose=0)
    return model_dir


@pytest.mark.slow
def test_sigterm_while_writing_a_keras_hub_preset_leaves_nothing_and_a_kill_is_swept(
        standard_bert, tmp_path):
    """SIGTERM while `tfeff-convert-core --keras_hub_preset` writes (once: status 143, a
    hidden `.keras-hub-*` folder left for good): status 143, one line, nothing beside the
    model; after SIGKILL there, the rerun removes the temporary and lock and writes the
    preset."""
    preset = str(tmp_path / "preset")
    args = ["tfeff.bin.convert_core", "--model_dir", standard_bert, "--keras_hub_preset", preset]

    def writing():
        return any(n.startswith("preset.tmp-") for n in os.listdir(tmp_path))

    status, own, stderr = _Job(args).stop_when(writing, signal.SIGTERM)
    assert status == 143, stderr[-3000:]
    assert own == ["stopped by SIGTERM: nothing half-written is left; rerun the same "
                   "command"], stderr[-3000:]
    assert os.listdir(tmp_path) == []
    status, _, stderr = _Job(args).stop_when(writing, signal.SIGKILL)
    assert status == -signal.SIGKILL and os.listdir(tmp_path), stderr[-3000:]
    done = subprocess.run([sys.executable, "-m", *args], cwd=REPO, env=ENV,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert os.listdir(tmp_path) == ["preset"]
