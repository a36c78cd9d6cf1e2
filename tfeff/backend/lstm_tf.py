"""MaskedBiLSTM's fused path on TensorFlow: cuDNN's LSTM with a recurrent projection.

TensorFlow-only: `tf.raw_ops.CudnnRNNV3` with `num_proj`, one bidirectional
call per layer, on a GPU (the op's graph also builds without one). TensorFlow
is imported inside the functions alone, so that importing this module (as
`tfeff.layers.masked_bi_lstm` does on every backend) imports no TensorFlow.
Its PyTorch counterpart, with the same `bidirectional_lstmp` interface, is
`tfeff.backend.lstm_torch`.

`CudnnRNNV3` with `num_proj` is the LSTMP cell of `MaskedBiLSTM` (gates
i, f, g, o; the projection inside the recurrence; no cell clipping). The
weights are the layer's Keras variables, transposed into cuDNN's canonical
matrices and copied into its parameter buffer differentiably, so gradients
reach the variables and a checkpoint is the same on every path and backend.
"""


def cudnn_available():
    """Whether TensorFlow sees a GPU (where cuDNN's LSTM runs)."""
    import tensorflow as tf

    return bool(tf.config.list_logical_devices("GPU"))


def bidirectional_lstmp(x, lengths, cells, h0, c0):
    """Both directions of one LSTMP layer in one `CudnnRNNV3` call with `num_proj`.

    Args:
        x: `(batch, time, features)`, zero at padded positions.
        lengths: int `(batch,)`, each row's number of real (leading) steps
            (0 for a row with no real step).
        cells: `(forward, backward)`, each a dict of `kernel` (features, 4U),
            `recurrent_kernel` (P, 4U), `bias` (4U,), `projection_kernel`
            (U, P) tensors, in `x`'s dtype.
        h0: `(2, batch, P)`, c0: `(2, batch, U)`: initial states, forward
            then backward.

    Returns:
        `(forward, backward, h, c)`: the outputs `(batch, time, P)` of each
        direction in the input's time order; the final states `(2, batch, P)`
        and `(2, batch, U)`, forward at each row's last real step, backward at
        its first, the initial states for rows with no real step.
    """
    import tensorflow as tf

    features = cells[0]["kernel"].shape[0]
    units, proj = cells[0]["projection_kernel"].shape
    weights, biases = [], []
    for cell in cells:
        kernel, recurrent, bias = cell["kernel"], cell["recurrent_kernel"], cell["bias"]
        # cuDNN's canonical matrices are (out, in); gate order i, f, g, o as here.
        weights += [tf.transpose(w) for w in tf.split(kernel, 4, axis=1)]
        weights += [tf.transpose(w) for w in tf.split(recurrent, 4, axis=1)]
        weights.append(tf.transpose(cell["projection_kernel"]))
        # cuDNN adds an input and a recurrent bias: the second is zero.
        biases += tf.split(bias, 4) + [tf.zeros_like(bias[:units])] * 4
    params = _canonical_to_params(weights, biases, units, features, proj)
    # cuDNN fails on zero-length sequences: run them as length 1 and undo below.
    empty = lengths == 0
    outputs, h, c, _, _ = tf.raw_ops.CudnnRNNV3(
        input=tf.transpose(x, (1, 0, 2)), input_h=h0, input_c=c0, params=params,
        sequence_lengths=tf.maximum(lengths, 1), rnn_mode="lstm",
        input_mode="linear_input", direction="bidirectional", num_proj=proj,
        is_training=True, time_major=True,
    )
    outputs = tf.transpose(outputs, (1, 0, 2))  # (B, T, 2P)
    keep = empty[None, :, None]
    h = tf.where(keep, h0, h)
    c = tf.where(keep, c0, c)
    return outputs[..., :proj], outputs[..., proj:], h, c


def _canonical_to_params(weights, biases, units, input_size, proj):
    """cuDNN's opaque parameter buffer from canonical weights, differentiably.

    `CudnnRNNCanonicalToParamsV2` copies each tensor into its region of the
    buffer and has no registered gradient; the adjoint of that copy is the
    reverse copy, `CudnnRNNParamsToCanonicalV2`.
    """
    import tensorflow as tf

    kwargs = dict(num_layers=1, num_units=units, input_size=input_size, rnn_mode="lstm",
                  input_mode="linear_input", direction="bidirectional", num_proj=proj)
    n_weights = len(weights)

    @tf.custom_gradient
    def to_params(*tensors):
        params = tf.raw_ops.CudnnRNNCanonicalToParamsV2(
            weights=list(tensors[:n_weights]), biases=list(tensors[n_weights:]), **kwargs)

        def grad(d_params):
            d_weights, d_biases = tf.raw_ops.CudnnRNNParamsToCanonicalV2(
                params=d_params, num_params_weights=n_weights,
                num_params_biases=len(tensors) - n_weights, **kwargs)
            return list(d_weights) + list(d_biases)

        return params, grad

    return to_params(*weights, *biases)
