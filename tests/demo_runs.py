"""Every shipped `configs/demo_*.yaml` through the binaries, shared by the suite.

Each run is `tfeff-pretrain` in a subprocess, then `tfeff-export`. The ELMo-C demo
runs unchanged (`make demo`'s training, about 3 minutes): it is also the trained
model directory of the training and export tests (`trained_dir` in conftest).
The others run a few steps on a small corpus (`--override`). Runs start on
demand, two processes at a time, longest first; a session that holds the
end-to-end tests starts them all at its beginning and runs those tests last, so
that the subprocesses overlap the in-process tests (the 2-core machine idles
while a process imports TensorFlow, traces a graph or waits on a child).

The runs are shared by every pytest process of a session (pytest-xdist's
workers, `make test`): a run's result is a JSON file in a folder they share; the
first process to ask for a run holds its lock file while it runs it, the others
wait on that lock and read the file; two slot lock files keep two runs going at
a time across processes.

One run (ELMo-FIXED) writes its stdout to a pseudo-terminal and must show Keras'
live progress bar; the others write to a pipe, as under nohup or a batch
scheduler, and log one line per `train.log_every` steps instead.
"""

import concurrent.futures
import contextlib
import fcntl
import glob
import json
import os
import pty
import subprocess
import sys
import threading
import time

import yaml

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIGS = sorted(os.path.basename(p)[:-len(".yaml")]
                 for p in glob.glob(os.path.join(REPO, "configs", "demo_*.yaml")))
FULL = "demo_elmo_c"  # runs unchanged: the demo's own training
TERMINAL = "demo_elmo_fixed"  # the run whose stdout is a terminal
STEPS = 4
LOG_EVERY = 2
_COMMON = [f"train.steps={STEPS}", "train.warmup_steps=1", f"train.checkpoint_every={STEPS}",
           f"train.log_every={LOG_EVERY}", "data.synthetic.num_heldout_sentences=60"]
# Small corpora, by what each config holds (no family names: a new family's demo runs
# too). A causal LM's run ranks held-out targets (`eval.max_targets`) and needs more
# than 2,000 words for ELMo-A's adaptive cutoffs and the sampled softmaxes' 512
# negatives; a masked LM's (`eval.max_batches`) runs on fewer sentences.
_LM_SENTENCES, _MASKED_LM_SENTENCES = 2000, 600
_SMALL = {"data.shuffle_buffer": 500, "train.validation_steps": 1, "eval.max_targets": 400,
          "eval.max_batches": 2, "fasttext.epoch": 1, "fasttext.bucket": 5000}
_CORE = ["core.coarse_steps=2", "core.plateau_window=2"]


def config(name):
    """The YAML of a shipped config, as a dict."""
    with open(os.path.join(REPO, "configs", f"{name}.yaml"), encoding="utf-8") as f:
        return yaml.safe_load(f)


def steps(name):
    return config(name)["train"]["steps"] if name == FULL else STEPS


def _value(loaded, key):
    """The value of a dotted `key` in a loaded config, or `_MISSING`."""
    for part in key.split("."):
        loaded = getattr(loaded, part, _MISSING)
    return loaded


_MISSING = object()


def overrides(name):
    """The `--override` arguments of a demo's short run: each of `_SMALL` where the
    config has the key (lowering a value, never raising it)."""
    if name == FULL:
        return []
    from tfeff.config import load_config

    path = os.path.join(REPO, "configs", f"{name}.yaml")
    loaded = load_config(path)
    lm = _value(loaded, "eval.max_targets") is not _MISSING
    extra = [f"data.synthetic.num_train_sentences={_LM_SENTENCES if lm else _MASKED_LM_SENTENCES}"]
    for key, value in _SMALL.items():
        current = _value(loaded, key)
        if current is not _MISSING and (current is None or current > value):
            extra.append(f"{key}={value}")
    if _value(loaded, "core.coarse_steps") not in (_MISSING, None, 0):
        extra += _CORE
    return [arg for o in _COMMON + extra for arg in ("--override", o)]


def _env():
    # One thread per op: two runs go side by side with the suite's two processes, so each
    # has about half a core; a second thread per op would only wait for the first
    # (the suite's own processes keep TensorFlow's default).
    return dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1",
                TF_NUM_INTRAOP_THREADS=os.environ.get("TF_NUM_INTRAOP_THREADS", "1"))


def _run_on_terminal(args):
    """Runs `args` with stdout on a pseudo-terminal; returns (rc, stdout, stderr)."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(args, cwd=REPO, env=_env(), stdout=slave, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL)
    os.close(slave)
    chunks = []

    def drain():
        while True:
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not data:
                break
            chunks.append(data)

    reader = threading.Thread(target=drain)
    reader.start()
    _, stderr = proc.communicate(timeout=900)
    reader.join(timeout=60)
    os.close(master)
    return proc.returncode, b"".join(chunks).decode("utf-8", "replace"), stderr.decode()


def _run(args, terminal=False):
    if terminal:
        return _run_on_terminal(args)
    done = subprocess.run(args, cwd=REPO, env=_env(), capture_output=True, text=True,
                          timeout=900, stdin=subprocess.DEVNULL)
    return done.returncode, done.stdout, done.stderr


def pretrain_and_export(name, root):
    """`tfeff-pretrain` then (if it succeeded) `tfeff-export`; `(rc, stdout, stderr)` each."""
    model_dir, export = os.path.join(root, name), os.path.join(root, name + "-export")
    pre = _run([sys.executable, "-m", "tfeff.bin.pretrain", "--config",
                os.path.join(REPO, "configs", f"{name}.yaml"), "--model_dir", model_dir,
                *overrides(name)], terminal=name == TERMINAL)
    exp = (None, "", "")
    if pre[0] == 0:
        exp = _run([sys.executable, "-m", "tfeff.bin.export", "--model_dir", model_dir,
                    "--output", export])
    return {"model_dir": model_dir, "export": export, "pretrain": pre, "export_run": exp}


@contextlib.contextmanager
def _locked(path, blocking=True):
    """An exclusive `flock` on `path` (created), held for the block; with
    `blocking=False`, yields None at once if another process holds it."""
    with open(path, "a") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
        except BlockingIOError:
            yield None
            return
        try:
            yield f
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


@contextlib.contextmanager
def _slot(root, slots=2):
    """One of `slots` run slots shared by every process under `root`."""
    while True:
        for i in range(slots):
            with _locked(os.path.join(root, f"slot-{i}.lock"), blocking=False) as held:
                if held is not None:
                    yield
                    return
        time.sleep(0.2)


def shared_run(name, root):
    """The result of `pretrain_and_export(name, root)`, run once for every process
    that asks under `root`: the first runs it and writes `NAME.json`; the others
    wait on its lock and read that file."""
    result = os.path.join(root, f"{name}.json")
    with _locked(os.path.join(root, f"{name}.lock")):
        if not os.path.exists(result):
            with _slot(root):
                out = pretrain_and_export(name, root)
            with open(result + ".tmp", "w", encoding="utf-8") as f:
                json.dump(out, f)
            os.replace(result + ".tmp", result)
        with open(result, encoding="utf-8") as f:
            return {k: tuple(v) if isinstance(v, list) else v for k, v in json.load(f).items()}


class DemoRuns:
    """Runs started on first request, two at a time across the processes that share
    `root`; `get(name)` waits for one."""

    def __init__(self, root):
        self.root = root
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=2)
        self._futures = {}
        self._lock = threading.Lock()

    def start(self, names):
        with self._lock:
            for name in sorted(names, key=lambda n: n != FULL):  # the longest first
                if name not in self._futures:
                    self._futures[name] = self._pool.submit(shared_run, name, self.root)

    def get(self, name):
        self.start([name])
        return self._futures[name].result()

    def close(self):
        self._pool.shutdown(wait=True)
