"""The backend-neutral core computes the same on JAX and PyTorch as on TensorFlow.

Same inputs, same weights. Each other backend runs in its own subprocess
(`KERAS_BACKEND` is read when Keras is first imported); its outputs must equal
this process's TensorFlow outputs to 1e-5 (relative, with a 1e-5 absolute
floor), and the keys that say "exact" (integer-hash draws, chosen anchors) bit
for bit. The vMF normalizer is float64 on TensorFlow and PyTorch; JAX computes
float64 only with `jax_enable_x64`, so its cases are compared both ways: with
x64 to 1e-5, and in JAX's default float32 to 1e-4.
(The two subprocesses run while this process computes the TensorFlow side:
eager JAX would compile op by op, so it runs each model in one jax.jit.)
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
def test_the_neutral_core_imports_and_builds_without_tensorflow(backend):
    """TensorFlow made unimportable (a None entry in sys.modules fails its import): the
    neutral core imports and builds all three models; `import *` gives every other layer;
    the TensorFlow-only layer raises an ImportError naming TensorFlow and the backend, by
    attribute and by from-import; eager checks refuse bad inputs with tfeff's messages.
    (One process per backend: each costs seconds of imports.)"""
    code = """
import sys
sys.modules["tensorflow"] = None
from tfeff.layers import *
import keras
import tfeff.config, tfeff.layers, tfeff.losses, tfeff.models
print(sorted(name for name in dir() if name[0].isupper()))
print(sorted(tfeff.layers.__all__))
for get in (lambda: tfeff.layers.FastTextEmbedding,
            lambda: __import__("tfeff.layers", fromlist=["FastTextEmbedding"])):
    try:
        get()
    except ImportError as e:
        print(type(e).__name__, " ".join(str(e).split()))
from tfeff.models import Bert, ElmoLM, MaskedElmo
MaskedElmo(30, num_layers=1, units=8, projection_dim=4, output_layer="adaptive",
           adaptive_cutoffs=[10], tbptt_batch_size=2, input_embedding="alone",
           alone={"intermediate_dim": 8}).build()
Bert(40, num_layers=1, hidden_dim=16, num_heads=2, intermediate_dim=24,
     max_sequence_length=20, relaxed={"num_anchors": 3, "ffn_rank": 4}).build()
ElmoLM(30, input_embedding="trainable", output_layer="adaptive", adaptive_cutoffs=[10],
       num_layers=1, units=8, projection_dim=4).build()
assert sys.modules["tensorflow"] is None, "TensorFlow was imported"
print(keras.backend.backend(), sorted(tfeff.layers.TENSORFLOW_ONLY))
# Off TensorFlow, eager targets are range-checked in Python, with the same message.
import numpy as np
layer = tfeff.layers.FullSoftmax(5, name="head")
for bad in (5, -1):
    try:
        layer(np.ones((2, 3), "float32"), np.array([0, bad]))
    except ValueError as e:
        print(" ".join(str(e).split()))
# SampledSoftmax trains here: negatives with replacement from a SeedGenerator, log-uniform.
from tfeff.layers.sampled_softmax import log_uniform_probability, log_uniform_sample
sampled = tfeff.layers.SampledSoftmax(50, 10, seed=0, name="sampled")
hidden, targets = np.ones((4, 8), "float32"), np.array([1, 2, 3, 40])
losses = [float(sampled(hidden, targets, training=True, return_loss=True)[1]) for _ in "ab"]
draws = np.asarray(log_uniform_sample(400_000, 50, keras.random.SeedGenerator(1)))
gap = np.abs(np.bincount(draws, minlength=50) / draws.size
             - np.asarray(log_uniform_probability(np.arange(50), 50))).max()
print(losses[0] != losses[1], all(np.isfinite(losses)), 0 < gap < 3e-3)
alone = tfeff.layers.AloneEmbedding(5, 4, 4, 4, name="alone")
for lookup in ("unique", "token", "table"):
    alone.lookup = lookup
    try:
        alone(np.array([[0, 5]]))
    except ValueError as e:
        print(" ".join(str(e).split()))
# Eager (concrete) left-padded masks and targets of another shape are refused here too.
bi = tfeff.layers.MaskedBiLSTM(4, 2, num_layers=1, use_cudnn=False, name="bi")
for bad_call in (lambda: bi(np.ones((2, 3, 4), "float32"), mask=np.array([[1, 1, 1], [0, 1, 1]])),
                 lambda: layer(np.ones((2, 3), "float32"), np.zeros((3,), "int32"))):
    try:
        bad_call()
    except ValueError as e:
        print(" ".join(str(e).split()))
"""
    env = backend_env(backend)
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, cwd=REPO)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.split("\n")
    expected = ["AdaptiveSoftmax", "AloneEmbedding", "AnchorMultiHeadAttention",
                "ContinuousOutput", "FactorizedDense", "FixedEmbedding", "FullSoftmax",
                "MaskedBiLSTM", "ProjectedLSTM", "RotaryMultiHeadAttention",
                "SampledSoftmax", "ScalarMix"]
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
