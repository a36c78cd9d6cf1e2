"""NumPy float64 references of the LSTM cells (shared by the LSTM layer tests)."""

import numpy as np


def sigmoid(x):
    return 1 / (1 + np.exp(-x))


def lstmp(x, kernel, recurrent, bias, projection, h=None, c=None, cell_clip=None,
          proj_clip=None):
    """Unrolled float64 LSTMP recurrence over one sequence (time, features); with
    `cell_clip`/`proj_clip`, TensorFlow's LSTMCell clipping (the new cell state, the
    projected state); `projection=None`: a plain LSTM."""
    units = recurrent.shape[1] // 4
    h = np.zeros(recurrent.shape[0]) if h is None else h
    c = np.zeros(units) if c is None else c
    out = []
    for x_t in x:
        z = x_t @ kernel + h @ recurrent + bias
        i, f, g, o = np.split(z, 4)
        c = sigmoid(f) * c + sigmoid(i) * np.tanh(g)
        if cell_clip is not None:
            c = np.clip(c, -cell_clip, cell_clip)
        h = sigmoid(o) * np.tanh(c)
        if projection is not None:
            h = h @ projection
        if proj_clip is not None:
            h = np.clip(h, -proj_clip, proj_clip)
        out.append(h)
    return np.array(out).reshape(len(x), len(h)), h, c


def step_roundings(features, proj, units):
    """Roundings of one LSTMP step on the way from the state to the next (numerics.py).

    The gate sums (`features` inputs, `proj` recurrent inputs, the bias, 2 additions), a
    gate (~4), c's 3 operations, tanh(c) (~4), their product and the projection's sum of
    `units` (`proj=None`: no projection, `units` recurrent inputs). An LSTM's values, the
    gates, tanh(c) and their products, are at most 1: its errors are compared at the scale
    of max(1, the values compared), as in torch_lstm_parity.py.
    """
    recurrent, projection = (units, 0) if proj is None else (proj, units)
    return (features + recurrent + 3) + 4 + 3 + 4 + 1 + projection


# Mixed precision keeps sums in float32: per step the values stored in 16 bits (gate
# pre-activations, four activations, c and h: 7) and the weights cast to 16 bits (4).
STEP_ROUNDINGS_16 = 7 + 4
