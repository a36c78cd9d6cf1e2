"""The backend-neutral core computes the same on JAX and PyTorch as on TensorFlow.

Same inputs, same weights. Each other backend runs in its own subprocess
(`KERAS_BACKEND` is read when Keras is first imported); its outputs must equal
this process's TensorFlow outputs to 1e-5 (relative, with a 1e-5 absolute
floor), and the keys that say "exact" (integer-hash draws, chosen anchors) bit
for bit. The vMF normalizer is float64 on TensorFlow and PyTorch; JAX computes
float64 only with `jax_enable_x64`, so its cases are compared both ways: with
x64 to 1e-5, and in JAX's default float32 to 1e-4.
(The two subprocesses run while this process computes the TensorFlow side:
eager JAX would compile op by op, so it runs each model in one jax.jit.
TensorFlow is unimportable in them, so they also show that the neutral core
runs without it.)
"""

import os
import subprocess
import sys

import numpy as np
import pytest

from tests.backends import cases
from tests.conftest import REPO
from tests.conftest import backend_env

SCRIPT = os.path.join(REPO, "tests", "backends", "cases.py")
OTHER_BACKENDS = ("jax", "torch")


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    """`{"tensorflow": ..., "jax": ..., "torch": ...}`: the JAX and PyTorch
    subprocesses run while this process computes the TensorFlow side."""
    folder = tmp_path_factory.mktemp("backends")
    processes = {}
    for backend in OTHER_BACKENDS:
        env = backend_env(backend)
        processes[backend] = subprocess.Popen(
            [sys.executable, SCRIPT, str(folder / f"{backend}.npz")], env=env,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)
    try:
        out = {"tensorflow": cases.run_all()}
    finally:
        errors = {backend: process.communicate()[1] for backend, process in processes.items()}
    for backend, process in processes.items():
        assert process.returncode == 0, f"{backend}:\n{errors[backend][-4000:]}"
        other = dict(np.load(folder / f"{backend}.npz"))
        assert str(other.pop("backend")) == backend
        out[backend] = other
    return out


@pytest.fixture(scope="module")
def tensorflow_results(results):
    return results["tensorflow"]


def _assert_equal_to_tensorflow(run, tensorflow_results, cases_run, vmf_tolerance=1e-5):
    expected = {k: v for k, v in tensorflow_results.items() if k.split("/")[0] in cases_run}
    assert run.keys() == expected.keys()
    for key, value in expected.items():
        if "/exact/" in key:
            np.testing.assert_array_equal(run[key], value, err_msg=key)
            continue
        tol = vmf_tolerance if ("vmf" in key or "log_c" in key) else 1e-5
        np.testing.assert_allclose(run[key], value, rtol=tol, atol=tol, err_msg=key)


def _precision(results, precision):
    return {k.split("/", 1)[1]: v for k, v in results.items() if k.startswith(precision + "/")}


@pytest.mark.parametrize("precision", ["x64", "float32"])
def test_jax_equals_tensorflow(results, precision):
    expected_cases = cases.FLOAT64_CASES if precision == "x64" else tuple(cases.CASES)
    _assert_equal_to_tensorflow(_precision(results["jax"], precision), results["tensorflow"],
                                expected_cases,
                                vmf_tolerance=1e-4 if precision == "float32" else 1e-5)


def test_torch_equals_tensorflow(results):
    """Every case, float64 vMF normalizer included, to 1e-5; the anchors bit for bit."""
    torch_run = _precision(results["torch"], "float32")
    assert not _precision(results["torch"], "x64")
    _assert_equal_to_tensorflow(torch_run, results["tensorflow"], tuple(cases.CASES))


def test_the_cases_are_not_trivial(tensorflow_results):
    """Guards the comparison: nonzero, finite values and gradients of every case."""
    for key, value in tensorflow_results.items():
        assert np.all(np.isfinite(value)), key
        assert np.abs(value).max() > 1e-3, key


@pytest.mark.parametrize("backend", OTHER_BACKENDS)
def test_the_neutral_core_imports_and_builds_without_tensorflow(results, backend):
    """The other backends' subprocesses run with TensorFlow unimportable (every case
    above, too); `cases.without_tensorflow` prints what they import, build and refuse."""
    lines = [str(line) for line in results[backend]["without_tensorflow"]]
    expected = ["AdaptiveSoftmax", "AloneEmbedding", "AnchorMultiHeadAttention",
                "ContinuousOutput", "FactorizedDense", "FixedEmbedding", "FullSoftmax",
                "MaskedBiLSTM", "ProjectedLSTM", "RotaryMultiHeadAttention",
                "SampledSoftmax", "ScalarMix"]
    assert len(lines) == 14, lines
    assert lines[0] == str(expected)
    assert lines[1] == str(expected)
    for line in lines[2:4]:
        assert line.startswith("ImportError `tfeff.layers.FastTextEmbedding` is "
                               "TensorFlow-only (it uses TensorFlow string ops) and needs "
                               "TensorFlow"), line
        assert f"The Keras backend is '{backend}'" in line, line
    assert lines[4] == f"{backend} ['FastTextEmbedding']"
    assert "FullSoftmax `head`: targets must be < vocabulary_size=5" in lines[5]
    assert "FullSoftmax `head`: targets must be >= 0" in lines[6]
    assert lines[7] == "True True True"
    for line in lines[8:11]:
        assert "AloneEmbedding `alone`: ids must be < vocabulary_size=5" in line
    assert "MaskedBiLSTM `bi` needs a right-padded `mask`" in lines[11]
    assert "Row 1 is True at position 1 after a False" in lines[11]
    assert ("FullSoftmax `head`: `targets` must have the shape of `inputs` without its last "
            "axis, (2,). Received: inputs.shape=(2, 3), targets.shape=(3,)") in lines[12]
    assert lines[13] == "tensorflow: unimportable"


@pytest.mark.slow
def test_fasttext_embedding_refuses_to_run_as_a_layer_off_tensorflow():
    """On PyTorch (TensorFlow installed): calling the layer raises a ValueError naming the
    backend; its `word_vectors` (tf.string in, as a tf.data pipeline calls it) still run."""
    code = """
import numpy as np
from tfeff.layers import FastTextEmbedding
layer = FastTextEmbedding(words=["a", "bb"], input_matrix=np.ones((12, 4), "float32"),
                          minn=1, maxn=2, bucket=10)
import tensorflow as tf
print(tuple(layer.word_vectors(tf.constant(["a", "zz"])).shape))
try:
    layer(np.array([["a", "zz"]]))
except ValueError as e:
    print(" ".join(str(e).split()))
"""
    env = backend_env("torch")
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, cwd=REPO)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.split("\n")
    assert lines[0] == "(2, 4)"
    assert lines[1].startswith("`FastTextEmbedding` runs as a layer only where TensorFlow is "
                               "the Keras backend"), lines[1]
    assert "Received: backend='torch'" in lines[1]
