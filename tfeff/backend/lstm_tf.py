"""MaskedBiLSTM's fused path on TensorFlow: cuDNN's LSTM with a recurrent projection.

`tf.raw_ops.CudnnRNNV3` with `num_proj` is `MaskedBiLSTM`'s LSTMP cell; the layer's
variables are copied into its parameter buffer differentiably. TensorFlow is imported
inside the functions alone (this module is imported on every backend).
"""


def cudnn_available():
    """Whether TensorFlow sees a GPU (where cuDNN's LSTM runs)."""
    import tensorflow as tf

    return bool(tf.config.list_logical_devices("GPU"))


def bidirectional_lstmp(x, lengths, cells, h0, c0):
    """Both directions of one LSTMP layer in one `CudnnRNNV3` call with `num_proj`.

    Arguments and returns as `tfeff.backend.lstm_torch.bidirectional_lstmp`'s, but
    `lengths` is never None and the outputs at padded positions are not made zero.
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
    h, c = tf.where(keep, h0, h), tf.where(keep, c0, c)
    return outputs[..., :proj], outputs[..., proj:], h, c


def _canonical_to_params(weights, biases, units, input_size, proj):
    """cuDNN's parameter buffer from canonical weights, differentiably: the gradient of
    `CudnnRNNCanonicalToParamsV2` (none registered) is the reverse copy."""
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
