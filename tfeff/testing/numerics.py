"""Tolerances that follow from the computation, not from one machine's kernels.

Two implementations of one function (a fused kernel and a portable one, two Keras
backends, XLA and eager, tfeff and a NumPy reference) round differently, and how they
round depends on the machine: the CPU's vector width, the library's dispatch (oneDNN,
ATen, XLA, cuDNN), the number of threads that split a sum. A tolerance read off one run
passes there and fails on the next machine. The tests use one of two forms instead:

* **Compare in float64** where both sides can run it. The difference is then a few
  float64 roundings of the values, 1e-13 or less of their size, whatever the kernels;
  `keras_x64()` lets a Keras backend compute float64 as float64 (below).
* **A bound derived from the computation**, `rounding_bound(n, scale, dtype)`:

      |computed - exact| <= n * u * scale

  for a result that goes through at most `n` roundings along any path from the
  inputs, each of relative size at most u (u = 2**-24 in float32, the unit roundoff;
  2**-53 in float64), on values of magnitude at most `scale`. A sum or dot product of
  length K counts K (Higham, *Accuracy and Stability of Numerical Algorithms*, 2nd
  ed., Lemma 3.1 and eq. (3.4): |fl(x.y) - x.y| <= gamma_K |x|.|y|, gamma_K =
  K u / (1 - K u)); an elementwise operation counts 1 and a libm function (exp, tanh,
  erf, rsqrt) a few; the steps of a chain add up; a gradient runs the chain twice
  (forward and back) plus the batch reduction of a weight's gradient. Two
  implementations that each meet the bound differ by at most twice it: that is what
  `assert_close` checks. The bound is first order and assumes the computation does not
  amplify errors (a condition number of order 1: no subtraction of nearly equal large
  numbers beyond what `scale` accounts for): a test whose computation cancels passes
  the magnitude of the cancelling terms as `scale`, not that of the result.

Each use says in a comment how its `n` was counted. The count is a worst case; the
errors seen are one to two orders of magnitude below it (they grow like the square root
of the count on random data), which is the margin that makes the bound hold on another
machine.

`python -m pytest -m "numerics and not slow and not gpu"` selects the tests that compare
implementations (the default suite's share of them);
`make test-isa` runs them again under other CPU kernels and thread counts
(docs/contributing/testing.md).
"""

import contextlib

import numpy as np

# Unit roundoff (half the machine epsilon) of each floating-point type.
UNIT_ROUNDOFF = {
    "float64": 2.0 ** -53,
    "float32": 2.0 ** -24,
    "float16": 2.0 ** -11,
    "bfloat16": 2.0 ** -8,
}


def rounding_bound(n, scale, dtype="float32"):
    """The error bound of one implementation: `n` roundings of values of size `scale`."""
    return float(n) * UNIT_ROUNDOFF[str(dtype)] * float(scale)


def assert_close(actual, expected, *, n, dtype="float32", scale=None, err_msg=""):
    """`actual` and `expected` (two implementations computed in `dtype`, or one against
    a float64 reference) differ elementwise by at most 2 * n * u * scale.

    `scale` defaults to the largest magnitude in `expected` (at least 1e-30): the errors of
    small entries are those of the large values they were computed from, which a
    relative tolerance per entry misses.
    """
    actual = np.asarray(actual, dtype="float64")
    expected = np.asarray(expected, dtype="float64")
    if scale is None:
        scale = max(float(np.max(np.abs(expected), initial=0.0)), 1e-30)
    bound = 2 * rounding_bound(n, scale, dtype)
    np.testing.assert_allclose(
        actual, expected, rtol=0, atol=bound,
        err_msg=f"{err_msg} (bound 2 * {n} roundings * u({dtype}) * scale {scale:.3g} "
                f"= {bound:.3g})")
    return float(np.max(np.abs(actual - expected), initial=0.0)), bound


@contextlib.contextmanager
def keras_x64():
    """Keras computes float64 as float64 inside the block, on every backend.

    Keras' type promotion (`keras.backend.result_type`) follows JAX's default of
    demoting 64-bit types to 32 bits, so on PyTorch `ops.matmul`, `ops.var` and the
    layer normalization of float64 tensors run in float32 (TensorFlow's backend does
    not consult the rule for these). Emptying the demotion table is Keras' equivalent
    of JAX's `jax_enable_x64`, which this also turns on where JAX is loaded.

    A few float32 constants remain on every backend, TensorFlow's included: a Python
    float that Keras casts through float32 (the attention scale 1/sqrt(head size), exact
    only for head sizes that are powers of 4) and the constants of `tf.nn.gelu`. Each
    costs under one float32 rounding of the values it scales; tests/models/float64.py
    counts them where a model uses them.
    """
    import sys

    from keras.src.backend.common import dtypes

    saved = dict(dtypes.BIT64_TO_BIT32_DTYPE)
    jax = sys.modules.get("jax")
    jax_x64 = jax.config.jax_enable_x64 if jax is not None else None
    dtypes.BIT64_TO_BIT32_DTYPE.clear()
    if jax is not None:
        jax.config.update("jax_enable_x64", True)
    try:
        yield
    finally:
        dtypes.BIT64_TO_BIT32_DTYPE.update(saved)
        if jax is not None:
            jax.config.update("jax_enable_x64", jax_x64)
