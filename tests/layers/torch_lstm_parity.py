"""MaskedBiLSTM's torch LSTM path (`torch.nn.LSTM(proj_size=...)`) against its portable path.

Runs on the torch Keras backend without TensorFlow (only torch, Keras and
NumPy are imported), so it checks a CUDA machine that has no TensorFlow:

    python -m tests.layers.torch_lstm_parity --device cuda   # cuDNN (exit 0 = parity)
    python -m tests.layers.torch_lstm_parity --device cpu    # torch's native LSTM

from the repository root. `--device cuda` fails if torch sees no CUDA device.
`tests/layers/test_masked_bi_lstm_torch.py` runs it in a subprocess: the CPU
check in the default suite, the CUDA one under `pytest -m gpu`.

Both layers hold the same (random) weights; the reference is the portable
path (`use_cudnn=False`, `keras.ops` code) on the same device. Compared to
1e-5 in float32: the outputs, the final states, and the gradients of a
random linear function of all of them with respect to the inputs, the
initial states and every weight; on right-padded rows of full, partial and
length 1, a row with no real token, given initial states, and a call
without a mask (no packing). In float64 one layer's LSTM outputs and states
are compared with a NumPy float64 recurrence to 1e-10 (on torch Keras
computes float64 `ops.matmul` and layer norms in float32, so the portable
path is no float64 reference there). Mixed precision (`mixed_float16`,
`mixed_bfloat16`) is compared with float32 to the precision of the 16-bit
type, and must be as accurate as the portable path in the same precision.
`use_cudnn=True` is checked to run cuDNN on CUDA and to raise a
`ValueError` saying why where it cannot. On the CPU, the rule by which
`"auto"` picks torch's native LSTM or the portable path is checked, then
the torch path is taken for every call.
"""

import argparse
import os
import sys

os.environ["KERAS_BACKEND"] = "torch"

import keras  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

from tests.layers.lstm_reference import lstmp  # noqa: E402
from tfeff.layers.masked_bi_lstm import PORTABLE  # noqa: E402
from tfeff.layers.masked_bi_lstm import TORCH_LSTM  # noqa: E402
from tfeff.layers.masked_bi_lstm import MaskedBiLSTM  # noqa: E402

UNITS, PROJ, LAYERS = 16, 4, 2
KWARGS = dict(units=UNITS, projection_dim=PROJ, num_layers=LAYERS, return_state=True)


class TorchPath(MaskedBiLSTM):
    """MaskedBiLSTM on its torch LSTM path for every call. On the CPU, "auto" leaves
    training steps on padded rows to the portable path (the faster one there); what
    is checked here is the torch path, packed sequences included (as cuDNN runs them
    on CUDA)."""

    def _choose_path(self, x, lengths=None):
        return TORCH_LSTM


def _data(rng, dtype):
    x = rng.normal(size=(5, 9, 2 * PROJ)).astype(dtype)
    mask = np.array([[1] * 9, [1] * 5 + [0] * 4, [1] + [0] * 8, [0] * 9, [1] * 8 + [0]], bool)
    state = [rng.normal(size=(5, d)).astype(dtype) for d in (PROJ, UNITS, PROJ, UNITS) * LAYERS]
    return x, mask, state


def _layers(device, dtype, use_cudnn, seed):
    """(portable, fused): two layers with the same random weights (norms included)."""
    shape = (None, None, 2 * PROJ)
    portable = MaskedBiLSTM(**KWARGS, use_cudnn=False, dtype="float32" if "mixed" in dtype
                            else dtype)
    portable.build(shape)
    rng = np.random.default_rng(seed)
    portable.set_weights([rng.normal(scale=0.4, size=w.shape) for w in portable.get_weights()])
    fused_class = MaskedBiLSTM if device == "cuda" else TorchPath
    fused = fused_class(**KWARGS, use_cudnn=use_cudnn, dtype=dtype)
    fused.build(shape)
    fused.set_weights(portable.get_weights())
    return portable, fused


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


def _compare(name, expected, actual, tol):
    worst = 0.0
    for k, (e, a) in enumerate(zip(expected, actual)):
        np.testing.assert_allclose(a, e, rtol=tol, atol=tol, err_msg=f"{name}, tensor {k}")
        worst = max(worst, float(np.max(np.abs(a - e), initial=0.0)))
    print(f"{name}: {len(expected)} tensors equal to {tol:g} (max abs difference {worst:.2e})")


def check_parity(device, dtype, use_cudnn, with_mask=True, seed=0):
    """The fused layer against the portable one: outputs, states and gradients."""
    rng = np.random.default_rng(seed)
    x, mask, state = _data(rng, "float32")
    if not with_mask:
        mask, state = None, None
    portable, fused = _layers(device, dtype, use_cudnn, seed + 1)
    probe = torch.zeros(x.shape, device=device, dtype=getattr(torch, fused.compute_dtype))
    lengths = None if mask is None else torch.tensor(mask.sum(1), device=device)
    path = fused._choose_path(probe, lengths)
    assert path == TORCH_LSTM, f"use_cudnn={use_cudnn!r} took the {path} path on {device}"
    shapes = [(5, 9, 2 * PROJ)] + [(5, d) for d in (PROJ, UNITS, PROJ, UNITS) * LAYERS]
    coefficients = [rng.normal(size=s).astype("float32") for s in shapes]
    out_p, grad_p, _ = _run(portable, device, x, mask, state, coefficients)
    out_f, grad_f, out_dtype = _run(fused, device, x, mask, state, coefficients)
    assert str(out_dtype) == f"torch.{fused.compute_dtype}", out_dtype
    # Guards the comparison: the reference is not trivially zero.
    assert all(np.abs(t).max() > 1e-2 for t in out_p + grad_p[:1]), "degenerate reference"
    if mask is not None:
        assert np.all(out_f[0][~mask] == 0), "padded outputs are not zero"
        empty = ~mask.any(axis=1)
        for k, s in enumerate(state):
            expected = torch.tensor(s[empty]).to(getattr(torch, fused.compute_dtype))
            expected = expected.double().numpy()
            np.testing.assert_array_equal(out_f[1 + k][empty], expected,
                                          err_msg="an empty row's final state")
    tol = {"float32": 1e-5, "mixed_float16": 3e-2, "mixed_bfloat16": 1.5e-1}[dtype]
    name = (f"{device} {dtype} use_cudnn={use_cudnn!r} "
            f"{'masked, initial states' if with_mask else 'no mask'}")
    _compare(name + ", outputs and states", out_p, out_f, tol)
    _compare(name + ", gradients", grad_p, grad_f, tol)
    if "mixed" in dtype:
        # As accurate as the portable path in the same precision (relative error of
        # all outputs, states and gradients against float32).
        mixed = MaskedBiLSTM(**KWARGS, use_cudnn=False, dtype=dtype)
        mixed.build((None, None, 2 * PROJ))
        mixed.set_weights(portable.get_weights())
        out_m, grad_m, _ = _run(mixed, device, x, mask, state, coefficients)
        reference = np.concatenate([t.ravel() for t in out_p + grad_p])
        error = {k: np.linalg.norm(np.concatenate([t.ravel() for t in ts]) - reference)
                 / np.linalg.norm(reference)
                 for k, ts in (("torch", out_f + grad_f), ("portable", out_m + grad_m))}
        assert error["torch"] <= 2 * error["portable"] + 1e-4, error
        print(f"{name}: relative error {error['torch']:.1e} (portable path in {dtype}: "
              f"{error['portable']:.1e})")


def check_float64(device, use_cudnn, seed=0):
    """In float64, one layer's LSTM outputs and final states (`torch.nn.LSTM`, before the
    layer norms) against the NumPy float64 recurrence, row by row."""
    rng = np.random.default_rng(seed)
    x, mask, state = _data(rng, "float64")
    _, layer = _layers(device, "float64", use_cudnn, seed + 1)
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
    _compare(f"{device} float64 use_cudnn={use_cudnn!r} LSTM against NumPy float64, outputs "
             "and states", expected, actual, 1e-10)


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


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", choices=("cuda", "cpu"), required=True)
    args = parser.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: torch sees no CUDA device")
    if args.device == "cpu":
        check_cpu_rule()
    with keras.device(args.device):
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
