"""MaskedBiLSTM's torch LSTM path (`torch.nn.LSTM(proj_size=...)`) against its portable path.

Runs on the torch Keras backend without TensorFlow (only torch, Keras and
NumPy are imported), so it checks a CUDA machine that has no TensorFlow:

    python -m tfeff.testing.torch_lstm_parity --device cuda   # cuDNN (exit 0 = parity)
    python -m tfeff.testing.torch_lstm_parity --device cpu    # torch's native LSTM

wherever tfeff is importable. `--device cuda` fails if torch sees no CUDA
device. `tests/layers/test_masked_bi_lstm_torch.py` runs it in a subprocess:
the CPU check in the default suite, the CUDA one under `pytest -m gpu`; the
GPU suite (`benchmarks/gpu_suite.py`) runs it as its `lstm_parity_torch` part.

Both layers hold the same (random) weights; the reference is the portable
path (`use_cudnn=False`, `keras.ops` code) on the same device, in float64
(`numerics.keras_x64`: Keras would otherwise compute float64 matmuls and
layer norms in float32 on torch). Compared: the outputs, the final states, and
the gradients of a random linear function of all of them with respect to the
inputs, the initial states and every weight; on right-padded rows of full,
partial and length 1, a row with no real token, given initial states, and a
call without a mask (no packing). No tolerance is read off a run:

* in float64 the two paths agree to the float64 rounding bound of the
  computation (`N_ROUNDINGS` roundings of 2**-53, about 1e-12 of the values),
  whatever the kernels; one layer's LSTM outputs and states are also compared
  with a NumPy float64 recurrence;
* in float32 each path is within the float32 rounding bound of the float64
  reference (`N_ROUNDINGS` roundings of 2**-24: about 1e-4 of the values, one
  to two orders of magnitude above what any CPU or GPU is seen to produce, and
  as far below a wrong mask, gate or norm). On CUDA TF32 is switched off for the
  check (`torch.backends.cudnn.rnn.fp32_precision`, on by default for cuDNN's
  RNNs): with it matmul inputs are rounded to 10 mantissa bits, a bound of the
  order of the values themselves at this depth;
* in mixed precision (`mixed_float16`, `mixed_bfloat16`) the torch path is as
  accurate as the portable path in the same precision (both round to the
  16-bit type at the same places; twice its relative error against float64,
  plus the float32 bound), and in float16 also within the float16 rounding
  bound (`N_ROUNDINGS_16`, the values stored in 16 bits on the way).

`use_cudnn=True` is checked to run cuDNN on CUDA and to raise a `ValueError`
saying why where it cannot. On the CPU, the rule by which `"auto"` picks
torch's native LSTM or the portable path is checked, then the torch path is
taken for every call.
"""

import argparse
import os
import sys

os.environ["KERAS_BACKEND"] = "torch"

import keras  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

from tfeff.layers.masked_bi_lstm import PORTABLE  # noqa: E402
from tfeff.layers.masked_bi_lstm import TORCH_LSTM  # noqa: E402
from tfeff.layers.masked_bi_lstm import MaskedBiLSTM  # noqa: E402
from tfeff.testing.lstm_reference import lstmp  # noqa: E402
from tfeff.testing.lstm_reference import step_roundings  # noqa: E402
from tfeff.testing.masked_bi_lstm_reference import roundings  # noqa: E402
from tfeff.testing.numerics import UNIT_ROUNDOFF  # noqa: E402
from tfeff.testing.numerics import assert_close  # noqa: E402
from tfeff.testing.numerics import keras_x64  # noqa: E402

UNITS, PROJ, LAYERS = 16, 4, 2
SHAPE = (None, None, 2 * PROJ)
KWARGS = dict(units=UNITS, projection_dim=PROJ, num_layers=LAYERS, return_state=True)
BATCH, STEPS = 5, 9

# Roundings along the longest path from an input to an output or a gradient
# (numerics.py), counted by the float64 reference's `roundings`: a layer's
# STEPS LSTM steps (the state carries every step's error to the next), its layer norm
# and residual; layers add up. The gradients run the chain back again and sum a
# weight's gradient over BATCH * STEPS. In mixed precision (sums stay float32) the
# count is of the values stored in 16 bits on the way, forward and back.
_SHAPED = MaskedBiLSTM(**KWARGS)
_STEP = step_roundings(2 * PROJ, PROJ, UNITS)
N_ROUNDINGS = 2 * roundings(_SHAPED, STEPS) + BATCH * STEPS
N_ROUNDINGS_16 = 2 * roundings(_SHAPED, STEPS, "float16")


class TorchPath(MaskedBiLSTM):
    """MaskedBiLSTM on its torch LSTM path for every call. On the CPU, "auto" leaves
    training steps on padded rows to the portable path (the faster one there); what
    is checked here is the torch path, packed sequences included (as cuDNN runs them
    on CUDA)."""

    def _choose_path(self, x, lengths=None):
        return TORCH_LSTM


def _data(rng, dtype):
    x = rng.normal(size=(BATCH, STEPS, 2 * PROJ)).astype(dtype)
    mask = np.array([[1] * 9, [1] * 5 + [0] * 4, [1] + [0] * 8, [0] * 9, [1] * 8 + [0]], bool)
    state = [rng.normal(size=(BATCH, d)).astype(dtype)
             for d in (PROJ, UNITS, PROJ, UNITS) * LAYERS]
    return x, mask, state


def _weights(seed):
    """Random weights (norms included) for a layer of KWARGS's shape, in float64."""
    layer = MaskedBiLSTM(**KWARGS, use_cudnn=False, dtype="float64")
    layer.build(SHAPE)
    rng = np.random.default_rng(seed)
    return [rng.normal(scale=0.4, size=w.shape) for w in layer.get_weights()]


def _layer(device, dtype, use_cudnn, weights):
    """The portable path (`use_cudnn=False`) or the torch path, holding `weights`."""
    layer_class = MaskedBiLSTM if device == "cuda" or use_cudnn is False else TorchPath
    layer = layer_class(**KWARGS, use_cudnn=use_cudnn, dtype=dtype)
    layer.build(SHAPE)
    layer.set_weights(weights)
    return layer


def _run(layer, device, x, mask, state, coefficients):
    """Outputs and states (NumPy) and the gradients of sum(coefficient * output)."""
    x = torch.tensor(x, device=device, requires_grad=True)
    mask = None if mask is None else torch.tensor(mask, device=device)
    if state is not None:
        state = [torch.tensor(s, device=device, requires_grad=True) for s in state]
    outputs = layer(x, mask=mask, initial_state=state)
    loss = sum(torch.sum(o.double() * torch.tensor(c, device=device, dtype=torch.float64))
               for o, c in zip(outputs, coefficients))
    sources = [x] + (state or []) + [w.value for w in layer.trainable_weights]
    grads = torch.autograd.grad(loss, sources)
    to_numpy = lambda t: t.detach().cpu().double().numpy()  # noqa: E731
    return [to_numpy(o) for o in outputs], [to_numpy(g) for g in grads], outputs[0].dtype


def _reference(device, weights, x, mask, state, coefficients):
    """The portable path in float64 on the same float32 inputs (exactly widened)."""
    with keras_x64():
        layer = _layer(device, "float64", False, weights)
        wide = None if state is None else [s.astype("float64") for s in state]
        out, grad, out_dtype = _run(layer, device, x.astype("float64"), mask, wide,
                                    coefficients)
    assert out_dtype == torch.float64, out_dtype
    return out, grad


def _compare(name, expected, actual, n, dtype):
    """Every tensor within twice the rounding bound of `n` roundings in `dtype`."""
    worst = 0.0
    for k, (e, a) in enumerate(zip(expected, actual)):
        error, bound = assert_close(a, e, n=n, dtype=dtype, err_msg=f"{name}, tensor {k}")
        worst = max(worst, error / bound)
    print(f"{name}: {len(expected)} tensors within the {dtype} rounding bound "
          f"(largest error {worst:.1e} of its bound)")


def _relative_error(tensors, reference):
    flat = lambda ts: np.concatenate([t.ravel() for t in ts])  # noqa: E731
    return float(np.linalg.norm(flat(tensors) - flat(reference)) / np.linalg.norm(
        flat(reference)))


def check_parity(device, dtype, use_cudnn, with_mask=True, seed=0):
    """The torch path in `dtype` against the portable path in float64 (and, in float32
    and the mixed policies, the portable path in `dtype` too): outputs, states and
    gradients."""
    rng = np.random.default_rng(seed)
    x, mask, state = _data(rng, "float32")
    if not with_mask:
        mask, state = None, None
    weights = _weights(seed + 1)
    fused = _layer(device, dtype, use_cudnn, weights)
    probe = torch.zeros(x.shape, device=device, dtype=getattr(torch, fused.compute_dtype))
    lengths = None if mask is None else torch.tensor(mask.sum(1), device=device)
    path = fused._choose_path(probe, lengths)
    assert path == TORCH_LSTM, f"use_cudnn={use_cudnn!r} took the {path} path on {device}"
    shapes = [(BATCH, STEPS, 2 * PROJ)] + [(BATCH, d) for d in (PROJ, UNITS, PROJ, UNITS)
                                            * LAYERS]
    coefficients = [rng.normal(size=s).astype("float32") for s in shapes]
    out_r, grad_r = _reference(device, weights, x, mask, state, coefficients)
    if dtype == "float64":
        with keras_x64():
            wide = None if state is None else [s.astype("float64") for s in state]
            out_f, grad_f, out_dtype = _run(fused, device, x.astype("float64"), mask, wide,
                                            coefficients)
    else:
        out_f, grad_f, out_dtype = _run(fused, device, x, mask, state, coefficients)
    assert str(out_dtype) == f"torch.{fused.compute_dtype}", out_dtype
    # Guards the comparison: the reference is not trivially zero.
    assert all(np.abs(t).max() > 1e-2 for t in out_r + grad_r[:1]), "degenerate reference"
    if mask is not None:
        assert np.all(out_f[0][~mask] == 0), "padded outputs are not zero"
        empty = ~mask.any(axis=1)
        for k, s in enumerate(state):
            expected = torch.tensor(s[empty]).to(getattr(torch, fused.compute_dtype))
            expected = expected.double().numpy()
            np.testing.assert_array_equal(out_f[1 + k][empty], expected,
                                          err_msg="an empty row's final state")
    name = (f"{device} {dtype} use_cudnn={use_cudnn!r} "
            f"{'masked, initial states' if with_mask else 'no mask'}")
    if dtype in ("float32", "float64"):
        _compare(name + ", outputs and states", out_r, out_f, N_ROUNDINGS, dtype)
        _compare(name + ", gradients", grad_r, grad_f, N_ROUNDINGS, dtype)
        if dtype == "float32":  # the reference's own float32 run meets the same bound
            portable = _layer(device, dtype, False, weights)
            out_p, grad_p, _ = _run(portable, device, x, mask, state, coefficients)
            _compare(name + ", portable path", out_r + grad_r, out_p + grad_p,
                     N_ROUNDINGS, dtype)
        return
    # Mixed precision: as accurate as the portable path in the same precision. Both round
    # to the 16-bit type at the same places; only the order of the float32 sums differs.
    mixed = _layer(device, dtype, False, weights)
    out_m, grad_m, _ = _run(mixed, device, x, mask, state, coefficients)
    reference = out_r + grad_r
    error = {"torch": _relative_error(out_f + grad_f, reference),
             "portable": _relative_error(out_m + grad_m, reference)}
    floor = 2 * N_ROUNDINGS * UNIT_ROUNDOFF["float32"]
    assert error["torch"] <= 2 * error["portable"] + floor, error
    print(f"{name}: relative error {error['torch']:.1e} (portable path in {dtype}: "
          f"{error['portable']:.1e})")
    if dtype == "mixed_float16":
        # In bfloat16 (8 mantissa bits) the same count gives a bound of the order of the
        # values themselves: only the comparison above is informative there.
        _compare(name + ", outputs, states and gradients", reference, out_f + grad_f,
                 N_ROUNDINGS_16, "float16")


def check_float64(device, use_cudnn, seed=0):
    """In float64, one layer's LSTM outputs and final states (`torch.nn.LSTM`, before the
    layer norms) against the NumPy float64 recurrence, row by row."""
    rng = np.random.default_rng(seed)
    x, mask, state = _data(rng, "float64")
    layer = _layer(device, "float64", use_cudnn, _weights(seed + 1))
    assert layer._choose_path(torch.tensor(x, device=device)) == TORCH_LSTM
    lengths = mask.sum(1)
    fwd, bwd, states = layer._torch_layer(
        0, torch.tensor(x * mask[..., None], device=device),
        torch.tensor(lengths, device=device), [torch.tensor(s, device=device) for s in state[:4]])
    actual = [t.detach().cpu().numpy() for t in [fwd, bwd] + states]
    expected = [np.zeros_like(a) for a in actual]
    cells = [[keras.ops.convert_to_numpy(cell[n]) for n in
              ("kernel", "recurrent_kernel", "bias", "projection_kernel")]
             for cell in layer.cells[0]]
    for b, n in enumerate(lengths):
        s = [t[b] for t in state[:4]]
        f, hf, cf = lstmp(x[b, :n], *cells[0], h=s[0], c=s[1])
        r, hb, cb = lstmp(x[b, :n][::-1], *cells[1], h=s[2], c=s[3])
        expected[0][b, :n], expected[1][b, :n] = f, r[::-1]
        for k, t in enumerate((hf, cf, hb, cb)):
            expected[2 + k][b] = t
    # One layer's LSTM, no norm or residual: STEPS steps of _STEP roundings.
    _compare(f"{device} float64 use_cudnn={use_cudnn!r} LSTM against NumPy float64, outputs "
             "and states", expected, actual, STEPS * _STEP, "float64")


def check_cpu_rule():
    """On the CPU, "auto" takes torch's native LSTM unless a training step (gradients
    recorded) has padded rows: there the portable path is faster."""
    layer = MaskedBiLSTM(UNITS, PROJ, num_layers=1)
    x = torch.zeros((3, 5, 2 * PROJ))
    full, some_padded = torch.tensor([5, 5, 5]), torch.tensor([5, 2, 0])
    assert layer._choose_path(x, None) == TORCH_LSTM
    assert layer._choose_path(x, full) == TORCH_LSTM
    assert layer._choose_path(x, some_padded) == PORTABLE
    with torch.no_grad():
        assert layer._choose_path(x, some_padded) == TORCH_LSTM
    print("cpu use_cudnn='auto': torch LSTM without gradients or padding, else portable")


def check_refusals(device):
    """`use_cudnn=True` where cuDNN cannot run raises a ValueError saying why."""
    x = torch.zeros((1, 3, 2 * PROJ), device=device)
    cases = [("bfloat16", "mixed_bfloat16")] if device == "cuda" else [("CUDA", "float32")]
    for reason, dtype in cases:
        layer = MaskedBiLSTM(UNITS, PROJ, num_layers=1, use_cudnn=True, dtype=dtype)
        try:
            layer(x)
        except ValueError as e:
            assert "use_cudnn=True" in str(e) and reason in str(e), e
            print(f"{device} {dtype} use_cudnn=True refused: {e}")
        else:
            raise AssertionError(f"use_cudnn=True ran on {device} in {dtype}")


def ieee_float32_on_cuda():
    """float32 matmuls and cuDNN RNNs in IEEE float32 on CUDA. cuDNN's RNNs run in TF32 by
    default (torch's `cudnn.rnn.fp32_precision` is "tf32"): the float32 rounding bound
    does not hold for them, and a TF32 bound (10 mantissa bits) is of the order of the
    values at this depth."""
    if hasattr(torch.backends.cudnn, "rnn"):  # torch 2.9 and newer
        torch.backends.cudnn.rnn.fp32_precision = "ieee"
        torch.backends.cuda.matmul.fp32_precision = "ieee"
    else:
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cuda.matmul.allow_tf32 = False
    print("cuda: TF32 off for the float32 comparisons")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", choices=("cuda", "cpu"), required=True)
    args = parser.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: torch sees no CUDA device")
    if args.device == "cpu":
        check_cpu_rule()
    else:
        ieee_float32_on_cuda()
    with keras.device(args.device):
        check_parity(args.device, "float64", "auto")
        check_parity(args.device, "float32", "auto")
        check_parity(args.device, "float32", "auto", with_mask=False, seed=2)
        check_float64(args.device, "auto", seed=4)
        if args.device == "cuda":
            check_parity(args.device, "float32", True, seed=6)
        check_parity(args.device, "mixed_float16", "auto", seed=8)
        check_parity(args.device, "mixed_bfloat16", "auto", seed=10)
        check_refusals(args.device)
    # Absent, or None where a caller made it unimportable (a None entry fails the import).
    assert sys.modules.get("tensorflow") is None, "TensorFlow was imported"
    print(f"torch LSTM path on {args.device}: parity with the portable path")


if __name__ == "__main__":
    main()
