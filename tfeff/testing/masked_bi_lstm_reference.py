"""A float64 NumPy reference of MaskedBiLSTM (no backend code: runs beside any Keras backend)."""

import keras
import numpy as np

from tfeff.testing.lstm_reference import STEP_ROUNDINGS_16
from tfeff.testing.lstm_reference import lstmp
from tfeff.testing.lstm_reference import step_roundings


def layer_norm(x, gamma, beta, eps):
    mean = x.mean(-1, keepdims=True)
    var = x.var(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * gamma + beta


def numpy_params(layer):
    """Per layer: ((fw cell), (bw cell), (fw norm), (bw norm)) in float64."""
    f64 = lambda v: keras.ops.convert_to_numpy(v).astype("float64")  # noqa: E731
    names = ("kernel", "recurrent_kernel", "bias", "projection_kernel")
    out = []
    for i in range(layer.num_layers):
        cells = [tuple(f64(cell[n]) for n in names) for cell in layer.cells[i]]
        norms = [(f64(n.gamma), f64(n.beta)) for n in layer.norms[i]]
        out.append((cells, norms))
    return out


def numpy_masked_bilstm(layer, x, mask, initial_state=None):
    """The whole layer, row by row, in float64: (outputs, states per row)."""
    params = numpy_params(layer)
    eps = layer.layer_norm_epsilon
    outputs = np.zeros(x.shape)
    states = []
    for b in range(x.shape[0]):
        n = int(mask[b].sum())
        seq = x[b, :n].astype("float64")
        row_states = []
        for i, ((fw, bw), (nf, nb)) in enumerate(params):
            s = [None] * 4
            if initial_state is not None:
                s = [np.asarray(t[b], "float64") for t in initial_state[4 * i: 4 * i + 4]]
            f, hf, cf = lstmp(seq, *fw, h=s[0], c=s[1])
            r, hb, cb = lstmp(seq[::-1], *bw, h=s[2], c=s[3])
            row_states += [hf, cf, hb, cb]
            seq = seq + np.concatenate(
                [layer_norm(f, *nf, eps), layer_norm(r[::-1], *nb, eps)], axis=-1)
        outputs[b, :n] = seq
        states.append(row_states)
    return outputs, states


def roundings(layer, steps, dtype="float32"):
    """Roundings on the way through `layer` over `steps` steps (numerics.py).

    Per layer: its LSTM steps (`lstm_reference.step_roundings`; in float16 the values
    stored in 16 bits), the layer norm of the P projected features (sums of P for the
    mean and the variance, the rsqrt, gamma and beta: 3 P + 8; in float16 its output)
    and the residual; layers add up. Values are compared at the scale of
    max(1, the values compared), as in torch_lstm_parity.py.
    """
    proj = layer.projection_dim
    if dtype == "float16":
        return 1 + layer.num_layers * (steps * STEP_ROUNDINGS_16 + 2)
    width = 3 * (proj or layer.units) + 8
    return layer.num_layers * (steps * step_roundings(layer.output_dim, proj, layer.units)
                               + width + 1)
