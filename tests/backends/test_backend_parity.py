"""The backend-neutral core computes the same on JAX and PyTorch as on TensorFlow.

Same inputs, same weights. Each other backend runs in its own subprocess
(`KERAS_BACKEND` is read when Keras is first imported); its outputs must equal
this process's TensorFlow outputs to the rounding of each case's float32
computation (`ROUNDINGS`, tfeff/testing/numerics.py), and the keys that say "exact"
(integer-hash draws, chosen anchors) bit for bit. The vMF normalizer is float64
on TensorFlow and PyTorch; JAX computes float64 only with `jax_enable_x64`, so
its cases are compared both ways: with x64 (`keras_x64`) as the others, and in
JAX's default float32 to the rounding of the normalizer's float32 logarithms
(`_vmf_float32`).
(The two subprocesses run while this process computes the TensorFlow side:
eager JAX would compile op by op, so it runs each model in one jax.jit.
TensorFlow is unimportable in them, so they also show that the neutral core
runs without it.)
"""

import math
import subprocess
import sys

import numpy as np
import pytest

from tests.backends import cases
from tests.conftest import REPO
from tests.conftest import backend_env
from tfeff.testing.numerics import assert_close

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
            [sys.executable, "-m", "tests.backends.cases", str(folder / f"{backend}.npz")], env=env,
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


# Roundings (tfeff/testing/numerics.py) along the longest path of each case's float32 computation,
# at the cases' sizes: a dot or sum of K counts K; exp, log, tanh, sigmoid, erf, sqrt 4; an
# elementwise step 1; a gradient the forward path twice plus its reduction over rows. Every
# backend rounds to float32, so two differ by at most twice the bound; the scale is each
# output's largest value (the dots of random weights cancel by about sqrt(K) <= 5 here, which
# these worst-case counts, 1-2 orders above the errors seen, absorb).
ROUNDINGS = {
    # cosine: two normalizations (sum of 16 squares, rsqrt, product: 21 each), the
    # products' sum of 16: 60; its gradient 120, the reduced vMF loss a mean of 15 more. The
    # vMF normalizer computes in float64 and rounds once to float32.
    "losses": 150,
    # a Dense 8 -> 16 (9) into the vMF loss (60)
    "continuous_output": 80,
    # logits (dot of 8, bias), log-softmax over 20 (max, exp, sum of 20, log: ~30), the
    # masked mean of 15: ~55; the gradient: back through the logits (a sum over 20 classes)
    "softmax_layers": 100,
    # head (dot of 16), a tail (dots of 16 and 8), two log-softmaxes (10 and 14 classes:
    # ~50), the mean of 24 targets: ~115; the gradient twice that
    "adaptive_softmax": 250,
    # ScalarMix's masked layer norm (mean and variance over 3 x 5 x 8 = 120 values each,
    # sqrt: ~250), a softmax of 4 and the weighted sum of 4; FactorizedDense ~25
    "mixing_layers": 270,
    # a layer: projections (16), scores (8), softmax over 14 (~25), context (14), output
    # (16), layer norm (2 x 16, sqrt: ~40), feed-forward (16, gelu, 24), layer norm: ~210;
    # the embeddings' layer norm, 2 layers, the MLM head (dense 16, gelu, layer norm,
    # logits 16: ~80), the loss (log-softmax over 40, means): ~600
    "bert": 600,
    # an LSTM step: gates (dot of 16), sigmoids and tanh, the cell, the projection (dot of
    # 12): ~45; a path crosses at most 7 steps and 2 layers (~400), then the output and the
    # loss (softmax over 30 or vMF; the mean of 42 positions: ~100)
    "elmo": 500,
    # steps of ~40, a path of 6 steps and 2 layers (~300); the gradient twice that
    "masked_bilstm": 600,
    # two mask sets of 7 steps (carried states) and 2 layers at ~40 per step, the softmax
    # over 30 and the weighted mean: ~700. The SGD update w - 0.5 g: the gradient twice
    # that plus the batch reduction (42 rows), at the weights' size (above the step's here).
    "masked_elmo": 1500,
    # codebook sums of 3, filter x base, dots of 8 and 12: ~25; attend a dot of 6, its
    # gradient a sum over the 60 rows of the table
    "alone_embedding": 100,
    # integer-hash draws and chosen anchors: every key is "exact"
    "anchor_draws": 0,
}


def _vmf_float32(key, tensorflow_results):
    """`(n, scale)` of a key that goes through the vMF normalizer, for JAX without x64.

    There the normalizer's float64 algorithm runs in float32: log I_v(kappa) by the Debye
    expansion at an order top >= 60 (~20 roundings of its size per evaluation: the value
    takes one, the gradient's ratio exp(log I_top+1 - log I_top) two and the exp: ~45), then
    one backward-recurrence step per order down to v, each subtracting log R from the
    running log I (1 rounding of its size, 1 for log R) while the recurrence damps the
    ratios' own errors (by R_v R_v-1 < 1): n = 50 + 2 steps, and ~60 more for the rest of
    a loss (smaller terms). The scale is the size L of those logarithms, |log I_v(kappa)| <=
    |v log(kappa / 2) - lgamma(v + 1)| + kappa at the orders v..top+1, and of v log kappa,
    the term they cancel against.
    """
    data, out = cases.inputs(), tensorflow_results
    if key.startswith("losses/log_c300/"):
        dim, kappa = 300, data["kappa"]
    elif key.startswith(("losses/vmf/", "losses/vmf_loss/")):
        dim, kappa = 16, np.linalg.norm(data["y_pred"], axis=-1)
    elif key == "continuous_output/vmf_position_loss":
        dim, kappa = 16, np.linalg.norm(out["continuous_output/predictions"], axis=-1)
    elif key == "elmo/elmo_c/loss":  # the predictions of both directions
        dim, kappa = 6, np.linalg.norm(
            np.stack([out["elmo/elmo_c/forward"], out["elmo/elmo_c/backward"]]), axis=-1)
    else:
        return None
    v = dim / 2 - 1
    steps = max(0, math.ceil(60 - v))
    scale = max(max(abs(order * math.log(k / 2) - math.lgamma(order + 1)) + k,
                    v * abs(math.log(k)))
                for k in np.ravel(kappa).astype("float64") for order in (v, v + steps + 1))
    return 50 + 2 * steps + (0 if key.startswith("losses/log_c300/") else 60), scale


def _assert_equal_to_tensorflow(run, tensorflow_results, cases_run, jax_float32=False):
    expected = {k: v for k, v in tensorflow_results.items() if k.split("/")[0] in cases_run}
    assert run.keys() == expected.keys()
    for key, value in expected.items():
        if "/exact/" in key:
            np.testing.assert_array_equal(run[key], value, err_msg=key)
            continue
        n, scale = ROUNDINGS[key.split("/")[0]], None
        vmf = _vmf_float32(key, tensorflow_results) if jax_float32 else None
        if vmf:
            n, scale = vmf[0], max(vmf[1], float(np.abs(value).max()))
        assert_close(run[key], value, n=n, dtype="float32", scale=scale, err_msg=key)


def _precision(results, precision):
    return {k.split("/", 1)[1]: v for k, v in results.items() if k.startswith(precision + "/")}


@pytest.mark.numerics
@pytest.mark.parametrize("precision", ["x64", "float32"])
def test_jax_equals_tensorflow(results, precision):
    expected_cases = cases.FLOAT64_CASES if precision == "x64" else tuple(cases.CASES)
    _assert_equal_to_tensorflow(_precision(results["jax"], precision), results["tensorflow"],
                                expected_cases, jax_float32=precision == "float32")


@pytest.mark.numerics
def test_torch_equals_tensorflow(results):
    """Every case, float64 vMF normalizer included, to float32 rounding; the anchors bit
    for bit."""
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
                "CausalAnchorAttention", "ContinuousOutput", "FactorizedDense",
                "FixedEmbedding", "FullSoftmax",
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
