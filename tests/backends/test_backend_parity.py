"""The backend-neutral core computes the same on JAX as on TensorFlow (same inputs, weights).

The JAX side runs in a subprocess (`KERAS_BACKEND` is read when Keras is
first imported); its outputs must equal this process's TensorFlow outputs to
1e-5 (relative, with a 1e-5 absolute floor). The vMF normalizer is float64 on
TensorFlow; JAX computes float64 only with `jax_enable_x64`, so it is compared
both ways: with x64 to 1e-5, and in JAX's default float32 to 1e-4.
"""

import os
import subprocess
import sys

import numpy as np
import pytest

from tests.backends import cases
from tests.conftest import REPO

SCRIPT = os.path.join(REPO, "tests", "backends", "cases.py")


def _run_jax(tmp_path, x64):
    out = str(tmp_path / f"jax{'_x64' if x64 else ''}.npz")
    env = {**os.environ, "KERAS_BACKEND": "jax", "TFEFF_JAX_X64": "1" if x64 else "0",
           "JAX_PLATFORMS": "cpu"}
    done = subprocess.run([sys.executable, SCRIPT, out], env=env, capture_output=True,
                          text=True, cwd=REPO)
    assert done.returncode == 0, done.stderr[-4000:]
    results = dict(np.load(out))
    assert str(results.pop("backend")) == "jax"
    return results


@pytest.fixture(scope="module")
def tensorflow_results():
    return cases.run_all()


@pytest.mark.parametrize("x64", [True, False])
def test_jax_equals_tensorflow(tensorflow_results, tmp_path, x64):
    jax_results = _run_jax(tmp_path, x64)
    assert jax_results.keys() == tensorflow_results.keys()
    for key, expected in tensorflow_results.items():
        tol = 1e-4 if (not x64 and ("vmf" in key or "log_c" in key)) else 1e-5
        np.testing.assert_allclose(jax_results[key], expected, rtol=tol, atol=tol, err_msg=key)


def test_the_cases_are_not_trivial(tensorflow_results):
    """Guards the comparison: nonzero, finite values and gradients of every case."""
    for key, value in tensorflow_results.items():
        assert np.all(np.isfinite(value)), key
        assert np.abs(value).max() > 1e-3, key
