"""MaskedBiLSTM's fused path on PyTorch: `torch.nn.LSTM` with `proj_size`.

`torch.nn.LSTM(proj_size=P)` (cuDNN on CUDA) gets the layer's Keras variables through
`torch.func.functional_call`, so gradients reach them. Imported on the torch backend
alone; `tfeff.backend.lstm_tf` has the same `bidirectional_lstmp`.
"""

import functools
import warnings

import torch

CUDNN_DTYPES = ("float16", "float32", "float64")  # what cuDNN's RNN takes through torch
LSTM_DTYPES = CUDNN_DTYPES + ("bfloat16",)  # torch's LSTM also runs bfloat16 (natively)
# Where torch's LSTM runs (on "meta", shape inference takes the portable path).
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
    """On the CPU, whether torch's native LSTM beats the portable path for this call:
    `benchmarks/lstm.py --threads 1` (torch backend, 2-core CPU; two layers, batch 32,
    time 64, 512 cells, projection 64), native time over portable: 0.60 forward only,
    0.66 training on full rows, but 1.14 training on padded rows (packed backward)."""
    return not torch.is_grad_enabled() or not padded(lengths, time)


@functools.lru_cache(maxsize=None)
def _module(input_size, units, projection_dim):
    # On the meta device: it only names and shapes the parameters the call supplies.
    return torch.nn.LSTM(input_size, units, batch_first=True, bidirectional=True,
                         proj_size=projection_dim, device="meta")


def _parameters(cell, suffix):
    """A Keras cell's (in, out) weights as `torch.nn.LSTM`'s (out, in) of one direction
    (same gate order; torch's recurrent bias is zero)."""
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
        lengths: int `(batch,)`, each row's number of real (leading) steps; None
            when every row is `time` steps long (then the sequences are not packed).
        cells: `(forward, backward)`, each a dict of `kernel` (features, 4U),
            `recurrent_kernel` (P, 4U), `bias` (4U,), `projection_kernel` (U, P), in x's dtype.
        h0: `(2, batch, P)`, c0: `(2, batch, U)`: initial states, forward first.

    Returns:
        `(forward, backward, h, c)`: each direction's outputs `(batch, time, P)`, zero
        when padded; the final states `(2, batch, P)`, `(2, batch, U)` (the initial ones
        for rows with no real step).
    """
    batch, time, features = x.shape
    units, proj = c0.shape[-1], h0.shape[-1]
    module = _module(features, units, proj)
    params = {**_parameters(cells[0], ""), **_parameters(cells[1], "_reverse")}
    with warnings.catch_warnings():
        # cuDNN copies the (non-contiguous) weights on every call and says so; on the
        # CPU, torch says that oneDNN has no projected LSTM (its own runs).
        warnings.filterwarnings("ignore", message="RNN module weights are not part")
        warnings.filterwarnings("ignore", message="LSTM with projections is not supported")
        if not padded(lengths, time):
            outputs, (h, c) = torch.func.functional_call(module, params, (x, (h0, c0)))
            return outputs[..., :proj], outputs[..., proj:], h, c
        # Packed sequences need a length >= 1: an empty row runs one step, undone below.
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
