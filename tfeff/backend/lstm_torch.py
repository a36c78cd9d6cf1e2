"""MaskedBiLSTM's fused path on PyTorch: `torch.nn.LSTM` with `proj_size`.

PyTorch-only: `tfeff.layers.masked_bi_lstm` imports this module on the torch
Keras backend alone, so that TensorFlow and JAX never import torch. Its
TensorFlow counterpart, with the same `bidirectional_lstmp` interface, is
`tfeff.backend.lstm_tf`.

`torch.nn.LSTM(proj_size=P)` is the LSTMP cell of `MaskedBiLSTM` (gates
i, f, g, o; the projection inside the recurrence; no cell clipping). On CUDA
it runs cuDNN's LSTM with a recurrent projection (float16, float32, float64);
on the CPU, PyTorch's native projected LSTM (a C++ loop; the input products
of all steps computed before it). The weights are the layer's Keras
variables, transposed into the module's parameter names and passed with
`torch.func.functional_call`, so gradients reach the variables and a
checkpoint is the same on every path and backend.
"""

import functools
import warnings

import torch

# What cuDNN's RNN takes through torch; torch's LSTM also runs bfloat16 (natively).
CUDNN_DTYPES = ("float16", "float32", "float64")
LSTM_DTYPES = CUDNN_DTYPES + ("bfloat16",)
# The devices on which torch's LSTM runs (not "meta": shape inference takes the
# portable path).
DEVICES = ("cuda", "cpu")


def cudnn_available():
    """Whether this torch build sees a CUDA device with cuDNN."""
    return torch.cuda.is_available() and torch.backends.cudnn.is_available()


def device_type(x):
    """"cuda", "cpu", "meta", ...: where `x` lives."""
    return x.device.type


def padded(lengths, time):
    """Whether some row is shorter than `time` steps (then the call packs sequences)."""
    return lengths is not None and bool(torch.any(lengths < time))


def native_is_faster(lengths, time):
    """On the CPU, whether torch's native LSTM beats the portable path for this call.

    Measured with `benchmarks/lstm.py --threads 1` under
    `KERAS_BACKEND=torch` (2-core CPU; two layers, batch 32, time 64, 512
    cells, projection 64), the native LSTM's time over the portable path's:
    0.60 for the forward pass alone (`--step forward`), 0.66 for a training
    step on full-length rows (`--lengths full`; no packing), but 1.14 for a
    training step on padded rows: torch's backward pass over packed
    sequences is the slower one there.
    """
    return not torch.is_grad_enabled() or not padded(lengths, time)


@functools.lru_cache(maxsize=None)
def _module(input_size, units, projection_dim):
    # On the meta device: the module only names and shapes the parameters; the
    # call supplies them.
    return torch.nn.LSTM(input_size, units, batch_first=True, bidirectional=True,
                         proj_size=projection_dim, device="meta")


def _parameters(cell, suffix):
    """A Keras cell's weights as `torch.nn.LSTM` parameters of one direction.

    Keras matrices are (in, out); torch's are (out, in); the gate order
    (i, f, g, o) is the same. torch adds an input and a recurrent bias: the
    layer has one, the recurrent one is zero.
    """
    bias = cell["bias"]
    return {
        f"weight_ih_l0{suffix}": cell["kernel"].T.contiguous(),
        f"weight_hh_l0{suffix}": cell["recurrent_kernel"].T.contiguous(),
        f"bias_ih_l0{suffix}": bias,
        f"bias_hh_l0{suffix}": torch.zeros_like(bias),
        f"weight_hr_l0{suffix}": cell["projection_kernel"].T.contiguous(),
    }


def bidirectional_lstmp(x, lengths, cells, h0, c0):
    """Both directions of one LSTMP layer in one `torch.nn.LSTM` call.

    Args:
        x: `(batch, time, features)`, zero at padded positions.
        lengths: int `(batch,)`, each row's number of real (leading) steps;
            None when every row is `time` steps long (then, or when every
            length is `time`, the sequences are not packed).
        cells: `(forward, backward)`, each a dict of `kernel` (features, 4U),
            `recurrent_kernel` (P, 4U), `bias` (4U,), `projection_kernel`
            (U, P) tensors, in `x`'s dtype.
        h0: `(2, batch, P)`, c0: `(2, batch, U)`: initial states, forward
            then backward.

    Returns:
        `(forward, backward, h, c)`: the outputs `(batch, time, P)` of each
        direction in the input's time order, zero at padded positions; the
        final states `(2, batch, P)` and `(2, batch, U)`, forward at each
        row's last real step, backward at its first, the initial states for
        rows with no real step.
    """
    batch, time, features = x.shape
    units, proj = c0.shape[-1], h0.shape[-1]
    module = _module(features, units, proj)
    params = {**_parameters(cells[0], ""), **_parameters(cells[1], "_reverse")}
    with warnings.catch_warnings():
        # On CUDA, cuDNN copies the weights into its own buffer on every call
        # (they are the layer's variables, not one contiguous block) and says so;
        # on the CPU, torch says that oneDNN has no projected LSTM (its own runs).
        warnings.filterwarnings("ignore", message="RNN module weights are not part")
        warnings.filterwarnings("ignore", message="LSTM with projections is not supported")
        if not padded(lengths, time):
            outputs, (h, c) = torch.func.functional_call(module, params, (x, (h0, c0)))
            return outputs[..., :proj], outputs[..., proj:], h, c
        # Packed sequences need a length >= 1: a row with no real step runs one
        # (zero) step, and gets its initial states back and zero outputs below.
        lengths = lengths.to(torch.int64)
        packed = torch.nn.utils.rnn.pack_padded_sequence(
            x, torch.clamp(lengths, min=1).cpu(), batch_first=True, enforce_sorted=False)
        outputs, (h, c) = torch.func.functional_call(module, params, (packed, (h0, c0)))
    outputs, _ = torch.nn.utils.rnn.pad_packed_sequence(outputs, batch_first=True,
                                                        total_length=time)
    empty = (lengths == 0).to(h.device)
    outputs = outputs * (~empty)[:, None, None].to(outputs.dtype)  # (batch, time, 2P)
    h = torch.where(empty[None, :, None], h0, h)
    c = torch.where(empty[None, :, None], c0, c)
    return outputs[..., :proj], outputs[..., proj:], h, c
