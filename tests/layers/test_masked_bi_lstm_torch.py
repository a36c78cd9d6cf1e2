"""MaskedBiLSTM's torch LSTM path (`torch.nn.LSTM(proj_size=...)`) and its backend rules.

The torch side runs in subprocesses (`KERAS_BACKEND` is read when Keras is
first imported; this suite's process is TensorFlow): `torch_lstm_parity.py`
on the CPU in the default suite (torch's native projected LSTM against the
portable path), on CUDA (cuDNN) under `pytest -m gpu`. A CUDA machine without
TensorFlow runs the same check as `python -m tfeff.testing.torch_lstm_parity
--device cuda`.
"""

import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from tests.conftest import REPO
from tests.conftest import backend_env
from tfeff.layers import MaskedBiLSTM


_JAX_CODE = """
import sys
import numpy as np
from tfeff.layers import MaskedBiLSTM
layer = MaskedBiLSTM(4, 2, num_layers=1, use_cudnn=True)
try:
    layer(np.zeros((1, 3, 4), "float32"))
except ValueError as e:
    print("refused:", e)
auto = MaskedBiLSTM(4, 2, num_layers=1)
assert auto(np.zeros((1, 3, 4), "float32")).shape == (1, 3, 4)
assert not auto.cudnn_available()
assert "tfeff.backend.lstm_torch" not in sys.modules and "torch" not in sys.modules
print("ok")
"""


def _start(args, backend, **env):
    return subprocess.Popen([sys.executable] + args, env=backend_env(backend, **env), cwd=REPO,
                            text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _finish(process):
    stdout, stderr = process.communicate(timeout=600)
    assert process.returncode == 0, (stdout + stderr)[-6000:]
    return stdout


def _parity_args(device):
    return ["-m", "tfeff.testing.torch_lstm_parity", "--device", device]


@pytest.fixture(scope="module")
def cpu_runs():
    """The torch CPU parity check and the JAX check, side by side (two cores)."""
    torch_run = _start(_parity_args("cpu"), "torch", KERAS_TORCH_DEVICE="cpu")
    jax_run = _start(["-c", _JAX_CODE], "jax", JAX_PLATFORMS="cpu")
    try:
        return {"torch": _finish(torch_run), "jax": _finish(jax_run)}
    finally:
        for process in (torch_run, jax_run):
            if process.poll() is None:
                process.kill()


@pytest.mark.numerics
def test_torch_native_lstm_path_matches_portable_path_on_cpu(cpu_runs):
    """Outputs, final states, gradients (inputs, initial states, weights), an empty
    row, given initial states, no mask, float64 and mixed precision, each within the
    rounding bound of the computation: see tfeff/testing/torch_lstm_parity.py."""
    out = cpu_runs["torch"]
    assert "torch LSTM path on cpu: parity with the portable path" in out
    assert ("cpu float64 use_cudnn='auto' masked, initial states, gradients: 33 tensors "
            "within the float64 rounding bound") in out
    assert ("cpu float32 use_cudnn='auto' masked, initial states, gradients: 33 tensors "
            "within the float32 rounding bound") in out
    assert ("LSTM against NumPy float64, outputs and states: 6 tensors within the float64 "
            "rounding bound") in out
    assert "no cuDNN path can run: PyTorch sees no CUDA device" in out


@pytest.mark.gpu
def test_torch_cudnn_path_matches_portable_path():
    """Run on a CUDA machine with torch: `pytest -m gpu` (CI has no GPU)."""
    out = _finish(_start(_parity_args("cuda"), "torch"))
    assert "torch LSTM path on cuda: parity with the portable path" in out
    assert "cuda: TF32 off for the float32 comparisons" in out
    assert ("cuda float32 use_cudnn=True masked, initial states, gradients: 33 tensors "
            "within the float32 rounding bound") in out


def test_jax_has_no_cudnn_path_with_projection(cpu_runs):
    """On JAX "auto" is the portable path and True says why not; torch is not imported."""
    out = cpu_runs["jax"]
    assert "no cuDNN LSTM with a recurrent projection" in out and "'jax'" in out
    assert out.strip().endswith("ok")


@pytest.mark.skipif(bool(tf.config.list_logical_devices("GPU")), reason="has a GPU")
def test_tensorflow_without_gpu_runs_portable_and_never_imports_the_torch_module():
    layer = MaskedBiLSTM(4, 2, num_layers=1)
    assert not layer.cudnn_available()
    x = np.zeros((1, 3, 4), "float32")
    assert layer._choose_path(x) == "portable"
    layer(x)
    assert "tfeff.backend.lstm_torch" not in sys.modules
