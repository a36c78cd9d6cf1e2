"""A float64 NumPy reference of MaskedBiLSTM (no backend code: runs beside any Keras backend)."""

import keras
import numpy as np

from tests.layers.lstm_reference import lstmp


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
