"""MaskedBiLSTM: Masked ELMo's fully bidirectional LSTMP stack, with cuDNN paths.

The portable path (the reference) is `keras.ops` code for every backend: input
products hoisted out of the loop, both directions in one scan. The fused paths are
TensorFlow's `CudnnRNNV3` with `num_proj` on a GPU (`tfeff.backend.lstm_tf`) and
`torch.nn.LSTM(proj_size=...)`, cuDNN on CUDA (`tfeff.backend.lstm_torch`).
"""

import keras
from keras import ops

from tfeff.backend import lstm_tf
from tfeff.backend.checks import check_batch_size
from tfeff.backend.checks import check_rank_of_shape
from tfeff.backend.ops import reverse_sequence
from tfeff.backend.ops import scan_carries
from tfeff.layers.projected_lstm import checked_sequence
from tfeff.layers.projected_lstm import forget_bias_initializer

USE_CUDNN = ("auto", True, False)
_CUDNN_DTYPES = ("float16", "float32", "float64")
PORTABLE, TENSORFLOW_CUDNN, TORCH_LSTM = "portable", "tensorflow_cudnn", "torch_lstm"


@keras.saving.register_keras_serializable(package="tfeff")
class MaskedBiLSTM(keras.layers.Layer):
    """A stack of bidirectional LSTMP layers in which every layer sees both directions.

    Layer l (of `num_layers`) runs a forward and a backward LSTMP cell (the
    recurrence of `ProjectedLSTM`, without clipping) over the layer's input x,
    layer-normalizes each direction's output r, concatenates them and adds x:

        y = x + dropout(concat(LN(r_fwd), LN(r_bwd)))  # (2 * projection_dim,)

    Unlike ELMo, whose two directions never meet, layer l + 1 of both
    directions reads y, i.e. both directions of layer l (Masked ELMo, Senay &
    Salin). One weight layout runs on every path (see the module docstring):
    which runs where by `use_cudnn`, and how the fused paths are checked
    against the portable one: docs/papers/masked-elmo.md#use-cudnn.

    With `projection_dim=None` each direction is a `keras.layers.LSTM` of
    `units` cells, and the layer's width is `2 * units`.

    Masking: sequences must be right-padded (real tokens first), as cuDNN
    requires; padding never reaches real positions and is zero in every output.
    Fully padded rows and time length 0 are valid (zero or empty outputs, the
    initial states as final states). Left padding raises a `ValueError` eagerly,
    an `InvalidArgumentError` in a `tf.function`, and goes unchecked in compiled
    code (XLA, `jax.jit`), where it silently gives wrong outputs.

    Args:
        units: positive int, LSTM cell size.
        projection_dim: positive int, each direction's output size; None for plain LSTMs.
        num_layers: positive int.
        dropout_rate: dropout on each direction's normalized output, in [0, 1).
        use_cudnn: `"auto"` (the fastest path here), True (cuDNN, else a `ValueError`) or False.
        layer_norm_epsilon: epsilon of the layer normalizations.
        return_state: also return the final states (see Returns).
        return_all_layers: return the stack `[x, y_1, ..., y_L]` (ELMo's R_k, for `ScalarMix`).
        kernel_initializer: initializer of the input kernels W.
        recurrent_initializer: initializer of the recurrent kernels R.
        projection_initializer: initializer of the projections P.
        unit_forget_bias: if True, the forget-gate bias starts at 1.
        **kwargs: base `Layer` arguments.

    Call arguments:
        inputs: float `(batch, time, 2 * projection_dim)` (`2 * units` without
            projection), checked as `ProjectedLSTM` checks its inputs and mask.
        mask: optional bool `(batch, time)`, right-padded.
        initial_state: optional list of the `4 * num_layers` states (as returned); None: zeros.
        training: bool, for dropout.

    Returns:
        The top layer `(batch, time, d)`, or with `return_all_layers` the stack
        `(batch, num_layers + 1, time, d)`. With `return_state`, a list: that,
        then per layer `h_fwd, c_fwd, h_bwd, c_bwd` (sizes `projection_dim` and
        `units`), at each sequence's last real token forward and its first
        backward: the next window continues from them (truncated BPTT).

    Raises:
        ValueError: an argument is outside the values its entry above allows.

    Example:

    >>> layer = MaskedBiLSTM(units=16, projection_dim=4, num_layers=2, use_cudnn=False)
    >>> tuple(layer(keras.ops.ones((2, 5, 8))).shape)
    (2, 5, 8)

    Reference:
        Senay & Salin, "Masked ELMo: An evolution of ELMo towards fully
        contextual RNN language models", 2020; Peters et al., "Deep
        contextualized word representations", 2018.
    """

    def __init__(
        self,
        units,
        projection_dim=None,
        num_layers=2,
        dropout_rate=0.0,
        use_cudnn="auto",
        layer_norm_epsilon=1e-5,
        return_state=False,
        return_all_layers=False,
        kernel_initializer="glorot_uniform",
        recurrent_initializer="orthogonal",
        projection_initializer="glorot_uniform",
        unit_forget_bias=True,
        **kwargs,
    ):
        super().__init__(**kwargs)
        for arg, value in (("units", units), ("num_layers", num_layers)):
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ValueError(
                    f"Received an invalid value for `{arg}`, expected a positive "
                    f"integer. Received: {arg}={value}")
        if projection_dim is not None and not (isinstance(projection_dim, int)
                                               and projection_dim > 0):
            raise ValueError(
                "Received an invalid value for `projection_dim`, expected a positive "
                f"integer or None. Received: projection_dim={projection_dim}")
        if not 0 <= dropout_rate < 1:
            raise ValueError(
                "Received an invalid value for `dropout_rate`, expected a value in "
                f"[0, 1). Received: dropout_rate={dropout_rate}")
        if use_cudnn not in USE_CUDNN or not isinstance(use_cudnn, (str, bool)):
            raise ValueError(
                "Received an invalid value for `use_cudnn`, expected 'auto', True or "
                f"False. Received: use_cudnn={use_cudnn!r}")
        self.units = units
        self.projection_dim = projection_dim
        self.num_layers = num_layers
        self.dropout_rate = float(dropout_rate)
        self.use_cudnn = use_cudnn
        self.layer_norm_epsilon = float(layer_norm_epsilon)
        self.return_state = bool(return_state)
        self.return_all_layers = bool(return_all_layers)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.recurrent_initializer = keras.initializers.get(recurrent_initializer)
        self.projection_initializer = keras.initializers.get(projection_initializer)
        self.unit_forget_bias = bool(unit_forget_bias)
        self.supports_masking = True
        self.state_dim = projection_dim or units
        self.output_dim = 2 * self.state_dim
        self.dropout = keras.layers.Dropout(self.dropout_rate, dtype=self.dtype_policy,
                                            name="dropout")
        self.norms = [
            [keras.layers.LayerNormalization(epsilon=self.layer_norm_epsilon,
                                             dtype=self.dtype_policy,
                                             name=f"{direction}_norm_{i}")
             for direction in ("forward", "backward")]
            for i in range(num_layers)
        ]
        self.lstms = None
        if projection_dim is None:
            self.lstms = [
                [keras.layers.LSTM(
                    units, return_sequences=True, return_state=True,
                    go_backwards=direction == "backward", use_cudnn=use_cudnn,
                    kernel_initializer=kernel_initializer,
                    recurrent_initializer=recurrent_initializer,
                    unit_forget_bias=unit_forget_bias, dtype=self.dtype_policy,
                    name=f"{direction}_lstm_{i}")
                 for direction in ("forward", "backward")]
                for i in range(num_layers)
            ]

    def build(self, input_shape):
        check_rank_of_shape(self, input_shape, ("batch", "time", "features"))
        input_dim = input_shape[-1]
        if input_dim != self.output_dim:
            raise ValueError(
                f"MaskedBiLSTM adds each layer's input to its output, so the input "
                f"width must be 2 * {'projection_dim' if self.projection_dim else 'units'}"
                f" = {self.output_dim}. Received: input_shape={input_shape}")
        self.cells = []
        for i in range(self.num_layers):
            layer_weights = []
            for d, direction in enumerate(("forward", "backward")):
                self.norms[i][d].build((None, None, self.state_dim))
                if self.lstms is not None:
                    self.lstms[i][d].build((None, None, self.output_dim))
                    continue
                layer_weights.append(self._add_cell_weights(f"{direction}_{i}"))
            self.cells.append(layer_weights)

    def _add_cell_weights(self, prefix):
        units, projection_dim = self.units, self.projection_dim
        specs = {
            "kernel": ((self.output_dim, 4 * units), self.kernel_initializer),
            "recurrent_kernel": ((projection_dim, 4 * units), self.recurrent_initializer),
            "bias": ((4 * units,), forget_bias_initializer(units, self.unit_forget_bias)),
            "projection_kernel": ((units, projection_dim), self.projection_initializer),
        }
        return {name: self.add_weight(shape=shape, initializer=init, name=f"{prefix}_{name}")
                for name, (shape, init) in specs.items()}

    def cudnn_available(self):
        """Whether a cuDNN path with a projection can run here (never on JAX)."""
        return self._cudnn_unavailable_reason() is None

    def _cudnn_unavailable_reason(self, device=None):
        """Why no cuDNN path can run (a sentence), or None; `device`: torch inputs' device."""
        backend = keras.backend.backend()
        if self.projection_dim is None:
            return "without a projection Keras' LSTM chooses its own path"
        if backend == "tensorflow":
            if not lstm_tf.cudnn_available():
                return "TensorFlow sees no GPU"
        elif backend == "torch":
            from tfeff.backend import lstm_torch

            if not lstm_torch.cudnn_available():
                return "PyTorch sees no CUDA device with cuDNN"
            if device not in (None, "cuda"):
                return f"the inputs are on the {device!r} device, not CUDA"
        else:
            return (f"the Keras backend {backend!r} has no cuDNN LSTM with a recurrent "
                    "projection (cuDNN paths exist on TensorFlow and torch)")
        if self.compute_dtype not in _CUDNN_DTYPES:
            return (f"cuDNN's LSTM takes {', '.join(_CUDNN_DTYPES)}, not the compute dtype "
                    f"{self.compute_dtype}")
        return None

    def _choose_path(self, x, lengths=None):
        """PORTABLE, TENSORFLOW_CUDNN or TORCH_LSTM; `lengths` matter on the torch CPU."""
        if self.use_cudnn is False or self.projection_dim is None:
            return PORTABLE
        backend = keras.backend.backend()
        device = None
        if backend == "torch":
            from tfeff.backend import lstm_torch

            device = lstm_torch.device_type(x)
            if device not in lstm_torch.DEVICES:
                return PORTABLE  # shape inference on the "meta" device
            if self.use_cudnn == "auto" and self.compute_dtype in lstm_torch.LSTM_DTYPES:
                # On CUDA, cuDNN (bfloat16: as torch runs it).
                faster = device == "cuda" or lstm_torch.native_is_faster(lengths, ops.shape(x)[1])
                return TORCH_LSTM if faster else PORTABLE
        reason = self._cudnn_unavailable_reason(device)
        if reason is None:
            return TORCH_LSTM if backend == "torch" else TENSORFLOW_CUDNN
        if self.use_cudnn is True:
            raise ValueError(
                f"MaskedBiLSTM `{self.name}` got use_cudnn=True, but no cuDNN path can run: "
                f"{reason}. Use use_cudnn='auto' to fall back to the fastest path that "
                "runs, or False for the portable one.")
        return PORTABLE

    def call(self, inputs, mask=None, initial_state=None, training=None):
        mask_given = mask
        x, mask = checked_sequence(self, inputs, mask)
        batch_size = ops.shape(x)[0]
        if initial_state is None:
            initial_state = self._zero_state(batch_size, x.dtype) * self.num_layers
        elif len(initial_state) != 4 * self.num_layers:
            raise ValueError(
                f"`initial_state` must hold 4 * num_layers = {4 * self.num_layers} "
                f"tensors (h_fwd, c_fwd, h_bwd, c_bwd per layer). Received "
                f"{len(initial_state)}.")
        else:
            initial_state = [
                check_batch_size(self, x, s, ("batch", dim), f"initial_state[{i}]")
                for i, (s, dim) in enumerate(zip(initial_state, self._state_dims()))]
        initial_state = [ops.cast(s, x.dtype) for s in initial_state]
        # A batch known to have no steps: empty outputs, the initial states as final
        # ones (every path fails on no steps). A graph traced for an unknown length has
        # no branch for it: a conditional around the recurrence would cost every step,
        # and under XLA its two branches' shapes differ.
        if x.shape[1] == 0:
            shape = (batch_size, 0, self.output_dim)
            if self.return_all_layers:
                shape = (batch_size, self.num_layers + 1, 0, self.output_dim)
            return self._outputs(ops.zeros(shape, x.dtype), initial_state)
        return self._run(x, mask, mask_given, initial_state, training)

    def _state_dims(self):
        """Sizes of the states `h_fwd, c_fwd, h_bwd, c_bwd` of every layer, in order."""
        return [self.state_dim, self.units] * (2 * self.num_layers)

    def _outputs(self, outputs, states):
        return [outputs] + states if self.return_state else outputs

    def _run(self, x, mask, mask_given, initial_state, training):
        """The layer on at least one step: `call` after its checks."""
        lengths = ops.sum(ops.cast(mask, "int32"), axis=1)  # (batch,)
        keep = ops.cast(mask, x.dtype)[:, :, None]
        x = x * keep
        path = self._choose_path(x, None if mask_given is None else lengths)
        stack, states = [x], []
        for i in range(self.num_layers):
            state = initial_state[4 * i: 4 * i + 4]
            if self.lstms is not None:
                fwd, bwd, layer_states = self._keras_lstm_layer(i, x, mask, lengths, state)
            elif path == TENSORFLOW_CUDNN:
                fwd, bwd, layer_states = self._cudnn_layer(i, x, lengths, state)
            elif path == TORCH_LSTM:
                fwd, bwd, layer_states = self._torch_layer(
                    i, x, None if mask_given is None else lengths, state)
            else:
                fwd, bwd, layer_states = self._portable_layer(i, x, mask, lengths, state)
            fwd = self.dropout(self.norms[i][0](fwd), training=training)
            bwd = self.dropout(self.norms[i][1](bwd), training=training)
            x = (x + ops.concatenate([fwd, bwd], axis=-1)) * keep  # (batch, time, d)
            stack.append(x)
            states.extend(layer_states)
        return self._outputs(ops.stack(stack, axis=1) if self.return_all_layers else x, states)

    def _zero_state(self, batch_size, dtype):
        return [ops.zeros((batch_size, size), dtype=dtype) for size in self._state_dims()[:4]]

    def _portable_layer(self, i, x, mask, lengths, state):
        """Both directions of layer i in one scan; input products hoisted out of it."""
        fw, bw = self.cells[i]
        dtype = x.dtype
        # Hoisted input products of every step and both directions, computed
        # time-major so that no large gate tensor is transposed: (T, 2, B, 4U).
        gates = ops.stack([
            ops.matmul(ops.transpose(inputs, (1, 0, 2)), _cast(cell["kernel"], dtype))
            + _cast(cell["bias"], dtype)
            for inputs, cell in ((x, fw), (reverse_sequence(x, lengths), bw))
        ], axis=1)
        # (2, P, 4U), (2, U, P)
        recurrent, projection = (ops.stack([_cast(fw[name], dtype), _cast(bw[name], dtype)])
                                 for name in ("recurrent_kernel", "projection_kernel"))
        h0 = ops.stack([state[0], state[2]])  # (2, B, P)
        c0 = ops.stack([state[1], state[3]])  # (2, B, U)

        # No masking inside the loop: with right padding, padded steps come after a row's
        # real ones in both (length-reversed) directions, so they never reach real outputs.
        def step(carry, gate_x):
            h_prev, c_prev = carry
            z = gate_x + ops.matmul(h_prev, recurrent)  # (2, B, 4U)
            gi, gf, gg, go = ops.split(z, 4, axis=-1)
            c = ops.sigmoid(gf) * c_prev + ops.sigmoid(gi) * ops.tanh(gg)
            h = ops.matmul(ops.sigmoid(go) * ops.tanh(c), projection)  # (2, B, P)
            return h, c

        h, c = scan_carries(step, gates, (h0, c0))  # (T, 2, B, P), (T, 2, B, U)
        keep = ops.cast(mask, h.dtype)[:, :, None]
        fwd = ops.transpose(h[:, 0], (1, 0, 2)) * keep  # (B, T, P)
        bwd = reverse_sequence(ops.transpose(h[:, 1], (1, 0, 2)) * keep, lengths)
        # Final states: step lengths - 1 of each row; the initial state if empty.
        # Rows (time, direction, row) of h and c flattened to (T * 2 * B, ...): a row gather.
        batch = ops.shape(lengths)[0]
        rows = ops.arange(batch, dtype="int32")
        last = ops.maximum(lengths - 1, 0) * (2 * batch)
        index = ops.stack([last + rows, last + batch + rows])  # (2, B)
        empty = (lengths == 0)[None, :, None]  # (1, B, 1)
        h_last, c_last = (  # (2, B, P), (2, B, U)
            ops.where(empty, s0, ops.take(ops.reshape(s, (-1, size)), index, axis=0))
            for s0, s, size in ((h0, h, self.state_dim), (c0, c, self.units)))
        return fwd, bwd, [h_last[0], c_last[0], h_last[1], c_last[1]]

    def _cudnn_layer(self, i, x, lengths, state):
        """Layer i as one bidirectional `CudnnRNNV3` call with `num_proj` (TensorFlow)."""
        return self._fused_layer(lstm_tf, i, x, lengths, state)

    def _torch_layer(self, i, x, lengths, state):
        """Layer i as one bidirectional `torch.nn.LSTM(proj_size=...)` call (PyTorch)."""
        from tfeff.backend import lstm_torch

        return self._fused_layer(lstm_torch, i, x, lengths, state)

    def _fused_layer(self, backend_lstm, i, x, lengths, state):
        """Layer i through `bidirectional_lstmp` of `tfeff.backend.lstm_tf` or `lstm_torch`."""
        if state is None:
            state = self._zero_state(ops.shape(x)[0], x.dtype)
        cells = [{name: _cast(weight, x.dtype) for name, weight in cell.items()}
                 for cell in self.cells[i]]
        h0 = ops.stack([state[0], state[2]])  # (2, B, P)
        c0 = ops.stack([state[1], state[3]])  # (2, B, U)
        fwd, bwd, h, c = backend_lstm.bidirectional_lstmp(x, lengths, cells, h0, c0)
        return fwd, bwd, [h[0], c[0], h[1], c[1]]

    def _keras_lstm_layer(self, i, x, mask, lengths, state):
        fw, bw = self.lstms[i]
        # Keras' cuDNN path asserts that no row is fully masked: such rows run as
        # length 1 and get their initial states back below.
        empty = lengths == 0
        first = ops.arange(ops.shape(mask)[1]) == 0
        safe_mask = ops.logical_or(mask, ops.logical_and(empty[:, None], first[None, :]))
        fwd, h_f, c_f = fw(x, mask=safe_mask, initial_state=state[:2])
        bwd, h_b, c_b = bw(x, mask=safe_mask, initial_state=state[2:])
        # go_backwards returns the outputs in reversed time order.
        bwd = ops.flip(bwd, axis=1)
        keep = ops.cast(mask, fwd.dtype)[:, :, None]
        states = [ops.where(empty[:, None], s0, s)
                  for s0, s in zip(state, (h_f, c_f, h_b, c_b))]
        return fwd * keep, bwd * keep, states

    def compute_output_shape(self, input_shape):
        batch, time = input_shape[0], input_shape[1]
        out = (batch, time, self.output_dim)
        if self.return_all_layers:
            out = (batch, self.num_layers + 1, time, self.output_dim)
        return self._outputs(out, [(batch, size) for size in self._state_dims()])

    def compute_mask(self, inputs, mask=None):
        states = [None] * (4 * self.num_layers)
        return self._outputs(None if self.return_all_layers else mask, states)

    def get_config(self):
        config = super().get_config()
        config.update({
            "units": self.units,
            "projection_dim": self.projection_dim,
            "num_layers": self.num_layers,
            "dropout_rate": self.dropout_rate,
            "use_cudnn": self.use_cudnn,
            "layer_norm_epsilon": self.layer_norm_epsilon,
            "return_state": self.return_state,
            "return_all_layers": self.return_all_layers,
            "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
            "recurrent_initializer": keras.initializers.serialize(self.recurrent_initializer),
            "projection_initializer": keras.initializers.serialize(self.projection_initializer),
            "unit_forget_bias": self.unit_forget_bias,
        })
        return config


def _cast(variable, dtype):
    return ops.cast(ops.convert_to_tensor(variable), dtype)

