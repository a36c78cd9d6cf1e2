"""The examples under examples/ run as a user would run them.

examples/keras_user.py runs whole on TensorFlow here, and whole on JAX and on
PyTorch with `make test-slow`; three of its cases (an output layer, anchor
attention with its random anchors, MaskedBiLSTM's portable path) run on JAX
and PyTorch here, the two processes side by side.
"""

import os
import subprocess
import sys

import pytest

from tests.conftest import backend_env
import tfeff.layers

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLE = os.path.join(ROOT, "examples", "keras_user.py")
LOSSES = ["cosine_distance", "l2_distance", "vmf_nll", "CosineDistance", "L2Distance",
          "VonMisesFisherLoss"]
OTHER_BACKENDS = ("jax", "torch")
SUBSET = ["FullSoftmax", "AnchorMultiHeadAttention", "MaskedBiLSTM"]


def _start(backend, output_dir, only=None):
    """The example in a subprocess; its output goes to files (a pipe could fill up and
    stall it while the test waits on something else)."""
    env = backend_env(backend)
    command = [sys.executable, EXAMPLE, "--output_dir", str(output_dir)]
    if only:
        command += ["--only", *only]
    with open(output_dir / "stdout.txt", "w") as stdout, \
            open(output_dir / "stderr.txt", "w") as stderr:
        return subprocess.Popen(command, env=env, stdout=stdout, stderr=stderr, text=True,
                                cwd=str(output_dir))


def _finish(process, output_dir, timeout):
    try:
        process.wait(timeout=timeout)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    return tuple((output_dir / name).read_text() for name in ("stdout.txt", "stderr.txt"))


def _check(process, output_dir, expected, timeout=900):
    """The run exits 0 and prints a row per expected case: loss fell, reload equal (the
    same weights through the same kernels in the same process: the same bits)."""
    stdout, stderr = _finish(process, output_dir, timeout)
    assert process.returncode == 0, stdout[-3000:] + stderr[-3000:]
    rows = {fields[0]: fields for fields in map(str.split, stdout.splitlines())
            if len(fields) >= 6 and fields[1] in ("layer", "loss")}
    assert set(rows) == set(expected), stdout
    for row in rows.values():
        first, last, difference = float(row[2]), float(row[3]), float(row[4])
        assert last < first and difference == 0.0, row
    assert {p.name for p in output_dir.glob("*.keras")} >= {f"{n}.keras" for n in rows}
    return stdout


def _portable_layers():
    return set(tfeff.layers.__all__) - set(tfeff.layers.TENSORFLOW_ONLY)


@pytest.fixture(scope="module")
def subset_runs(tmp_path_factory):
    """The SUBSET cases on JAX and on PyTorch, started before the TensorFlow run so that
    the three processes share the cores."""
    folders = {backend: tmp_path_factory.mktemp(backend) for backend in OTHER_BACKENDS}
    processes = {backend: _start(backend, folders[backend], SUBSET)
                 for backend in OTHER_BACKENDS}
    yield {backend: (processes[backend], folders[backend]) for backend in OTHER_BACKENDS}
    for process in processes.values():
        if process.poll() is None:
            process.kill()
            process.wait()


def test_keras_user_example_trains_saves_and_reloads_every_layer_and_loss(tmp_path,
                                                                         subset_runs):
    """examples/keras_user.py on TensorFlow: the user's own encoder, stock compile and
    fit, `.keras` save and `load_model` with the default safe_mode, equal outputs (the
    script checks each and exits non-zero on a failure). (`subset_runs`: the other
    backends' cases run meanwhile.)"""
    _check(_start("tensorflow", tmp_path), tmp_path, set(tfeff.layers.__all__) | set(LOSSES))


@pytest.mark.slow
@pytest.mark.parametrize("backend", OTHER_BACKENDS)
def test_keras_user_example_runs_whole_on_another_backend(tmp_path, backend):
    """Every layer but the TensorFlow-only ones, every loss; the script says which it left."""
    stdout = _check(_start(backend, tmp_path), tmp_path, _portable_layers() | set(LOSSES))
    for name in tfeff.layers.TENSORFLOW_ONLY:
        assert (f"note: {name} is TensorFlow-only (string ops): not run on the {backend} "
                "backend") in stdout


@pytest.mark.parametrize("backend", OTHER_BACKENDS)
def test_keras_user_example_cases_run_on_another_backend(subset_runs, backend):
    assert set(SUBSET) <= _portable_layers()
    process, folder = subset_runs[backend]
    _check(process, folder, set(SUBSET), timeout=600)


def test_keras_user_example_refuses_a_case_the_backend_does_not_have(tmp_path):
    """FastTextEmbedding off TensorFlow: the script names the case and the backend."""
    process = _start("torch", tmp_path, ["FastTextEmbedding"])
    stdout, stderr = _finish(process, tmp_path, timeout=300)
    assert process.returncode == 2, stdout + stderr
    assert "error: no case named ['FastTextEmbedding'] on the torch backend" in stderr
