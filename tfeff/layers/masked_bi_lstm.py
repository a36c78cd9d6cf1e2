"""MaskedBiLSTM: Masked ELMo's fully bidirectional LSTMP stack, with cuDNN paths.

The portable path is `keras.ops` code and runs on every Keras backend (its
recurrence, `scan_carries`, in `tf.scan` on TensorFlow, `keras.ops.scan` on
JAX, a Python loop on torch). The fused paths are backend-specific:
TensorFlow's `tf.raw_ops.CudnnRNNV3` (GPU; `tfeff.backend.lstm_tf`, TensorFlow
imported only when it runs) and PyTorch's `torch.nn.LSTM` with `proj_size`
(`tfeff.backend.lstm_torch`, imported only on the torch backend).
"""

import keras
from keras import ops

from tfeff.backend import lstm_tf
from tfeff.backend.checks import check_batch_size
from tfeff.backend.checks import check_float_inputs
from tfeff.backend.checks import check_mask_shape
from tfeff.backend.checks import check_rank
from tfeff.backend.checks import check_rank_of_shape
from tfeff.backend.checks import check_right_padded
from tfeff.backend.ops import reverse_sequence
from tfeff.backend.ops import scan_carries
from tfeff.layers.projected_lstm import forget_bias_initializer

USE_CUDNN = ("auto", True, False)
_CUDNN_DTYPES = ("float16", "float32", "float64")
PORTABLE, TENSORFLOW_CUDNN, TORCH_LSTM = "portable", "tensorflow_cudnn", "torch_lstm"


@keras.saving.register_keras_serializable(package="tfeff")
class MaskedBiLSTM(keras.layers.Layer):
    """A stack of bidirectional LSTMP layers in which every layer sees both directions.

    Layer l (of `num_layers`) runs a forward and a backward LSTM with a
    recurrent projection (ELMo's LSTMP cell, without its in-cell clipping) over
    the layer's input x, layer-normalizes each direction's output, concatenates
    them and adds x (skip connection):

        z_t = x_t W + r_{t-1} R + b,   i, f, g, o = split(z_t)
        c_t = sigmoid(f) * c_{t-1} + sigmoid(i) * tanh(g)
        r_t = (sigmoid(o) * tanh(c_t)) P                # (projection_dim,)
        y   = x + dropout(concat(LN(r_fwd), LN(r_bwd)))  # (2 * projection_dim,)

    Unlike ELMo, whose two directions never meet, layer l + 1 of both
    directions reads y, i.e. both directions of layer l (Masked ELMo, Senay &
    Salin). Nothing sits inside the recurrence but the LSTMP cell itself, so one
    weight layout (these variables, a checkpoint unchanged) runs on every path:

    * **portable** (every backend): the input product x_t W of every step and
      both directions is computed in two matmuls before the loop; the loop
      runs only the recurrent part, both directions at once (a batched matmul
      per step). It is the reference.
    * **TensorFlow cuDNN**: `tf.raw_ops.CudnnRNNV3` with `num_proj`, one
      bidirectional call per layer, on a GPU.
    * **PyTorch LSTM**: `torch.nn.LSTM(proj_size=projection_dim,
      bidirectional=True)`, one call per layer (on packed sequences when a
      row is padded): cuDNN on CUDA, PyTorch's native projected LSTM (a C++
      loop) on the CPU.

    Which path runs, by backend and `use_cudnn`:

    * TensorFlow with a GPU: cuDNN (`"auto"` and True). Without a GPU:
      portable (`"auto"`), a `ValueError` (True).
    * torch on CUDA: the torch LSTM (`"auto"`; cuDNN in float16, float32 and
      float64, and in bfloat16 whichever kernel torch picks), cuDNN (True;
      a `ValueError` in bfloat16).
    * torch on the CPU, `"auto"`: the torch LSTM, except for training steps
      (gradients recorded) on padded rows, which take the portable path;
      True raises a `ValueError`. Measured on a 2-core CPU (two layers,
      batch 32, time 64, 512 cells, projection 64; `benchmarks/lstm.py`
      under `KERAS_BACKEND=torch`), the native LSTM takes 0.60x the portable
      path's time for the forward pass alone and 0.66x for a training step on
      full-length rows, but 1.14x for a training step on padded rows, whose
      packed sequences torch's backward pass handles more slowly.
    * JAX: portable (`"auto"`), a `ValueError` (True): JAX has no cuDNN LSTM
      with a projection (`jax.experimental.rnn` has none).

    The fused paths must match the portable one to the rounding of the
    computation (in float64 to about 1e-12 of the values; in float32, with
    TF32 off on GPUs, within a bound counted from the recurrence): `pytest -m gpu`
    checks outputs, states and gradients on a GPU machine (TensorFlow's in
    this process, torch's in a subprocess); `python -m
    tfeff.testing.torch_lstm_parity --device cuda` checks the torch path on a
    CUDA machine without TensorFlow, `--device cpu` on the CPU (in the
    default suite).

    With `projection_dim=None` each direction is a plain `keras.layers.LSTM`
    of `units` cells, and the layer's width is `2 * units`. Keras chooses its
    kernel: cuDNN on a TensorFlow GPU; on JAX and torch Keras takes cuDNN for
    unmasked calls only, and this layer always passes a mask (fully padded
    rows run one step), so there its generic loop runs.

    Masking: sequences must be right-padded (real tokens first), as cuDNN
    requires. Padded positions never influence real ones (the backward
    direction starts at each sequence's own last token) and are zero in every
    output. Rows with no real token (fully padded) are valid: their outputs are
    zero and their final states equal the initial states (cuDNN alone fails on
    zero-length sequences; the layer handles it). So is a batch of time length
    0, on every path and backend: empty outputs, and the initial states as
    final states (Keras' `LSTM` fails on zero steps). A mask with a True after a
    False (left padding) is rejected, not handled: eagerly with a `ValueError`
    naming the first such row, inside a TensorFlow `tf.function` with an
    `InvalidArgumentError`. Compiled code cannot check (XLA compiles the
    assertion out; under `jax.jit` the mask is abstract): there a left-padded
    mask gives wrong outputs silently, so build masks right-padded in the
    input pipeline.

    Args:
        units: positive int, LSTM cell size.
        projection_dim: positive int, size of each direction's projected
            output and recurrent state; None for plain LSTMs.
        num_layers: positive int.
        dropout_rate: dropout on each direction's normalized output, in [0, 1).
        use_cudnn: `"auto"` (the fastest path that runs here, see above),
            True (cuDNN or a `ValueError` that says why not) or False
            (portable).
        layer_norm_epsilon: epsilon of the layer normalizations.
        return_state: also return the final states (see Returns).
        return_all_layers: return the stack of all layers
            `[x, y_1, ..., y_L]` instead of the top layer (ELMo's R_k, for
            `ScalarMix`).
        kernel_initializer: initializer of the input kernels W.
        recurrent_initializer: initializer of the recurrent kernels R.
        projection_initializer: initializer of the projections P (unused
            when `projection_dim` is None).
        unit_forget_bias: if True, the forget-gate bias starts at 1.
        **kwargs: base `Layer` arguments.

    Call arguments:
        inputs: float `(batch, time, 2 * projection_dim)` (`2 * units` without
            projection): the skip connection needs the layer's width. Integer
            inputs (token ids) raise a `ValueError`: embed them first, and so
            does another rank (`tfeff.backend.checks`).
        mask: optional bool `(batch, time)`, right-padded, of the inputs'
            batch and time (another shape raises a `ValueError`).
        initial_state: optional list of `4 * num_layers` tensors `(batch,
            size)`, the order of the returned states; None starts from zeros.
        training: bool, for dropout.

    Returns:
        The top layer `(batch, time, d)`, or with `return_all_layers` the stack
        `(batch, num_layers + 1, time, d)`. With `return_state`, a list: that,
        then per layer `h_fwd, c_fwd, h_bwd, c_bwd` (`h` of size
        `projection_dim`, `c` of size `units`). The forward states are at each
        sequence's last real token, the backward states at its first: feeding
        them to the next window continues the text (truncated BPTT).

    Raises:
        ValueError: `units` or `num_layers` is not a positive integer,
            `projection_dim` is neither None nor a positive integer,
            `dropout_rate` is not in [0, 1), or `use_cudnn` is not `"auto"`,
            True or False.

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
                    f"integer. Received: {arg}={value}"
                )
        if projection_dim is not None and (
            not isinstance(projection_dim, int) or projection_dim <= 0
        ):
            raise ValueError(
                "Received an invalid value for `projection_dim`, expected a positive "
                f"integer or None. Received: projection_dim={projection_dim}"
            )
        if not 0 <= dropout_rate < 1:
            raise ValueError(
                "Received an invalid value for `dropout_rate`, expected a value in "
                f"[0, 1). Received: dropout_rate={dropout_rate}"
            )
        if use_cudnn not in USE_CUDNN or not isinstance(use_cudnn, (str, bool)):
            raise ValueError(
                "Received an invalid value for `use_cudnn`, expected 'auto', True or "
                f"False. Received: use_cudnn={use_cudnn!r}"
            )
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
                f" = {self.output_dim}. Received: input_shape={input_shape}"
            )
        seq_shape = (None, None, self.output_dim)
        state_shape = (None, None, self.state_dim)
        self.cells = []
        for i in range(self.num_layers):
            layer_weights = []
            for d, direction in enumerate(("forward", "backward")):
                self.norms[i][d].build(state_shape)
                if self.lstms is not None:
                    self.lstms[i][d].build(seq_shape)
                    continue
                layer_weights.append(self._add_cell_weights(f"{direction}_{i}"))
            self.cells.append(layer_weights)
        self.built = True

    def _add_cell_weights(self, prefix):
        units = self.units
        return {
            "kernel": self.add_weight(shape=(self.output_dim, 4 * units),
                                      initializer=self.kernel_initializer,
                                      name=f"{prefix}_kernel"),
            "recurrent_kernel": self.add_weight(shape=(self.projection_dim, 4 * units),
                                                initializer=self.recurrent_initializer,
                                                name=f"{prefix}_recurrent_kernel"),
            "bias": self.add_weight(shape=(4 * units,),
                                    initializer=forget_bias_initializer(units,
                                                                        self.unit_forget_bias),
                                    name=f"{prefix}_bias"),
            "projection_kernel": self.add_weight(shape=(units, self.projection_dim),
                                                 initializer=self.projection_initializer,
                                                 name=f"{prefix}_projection_kernel"),
        }

    # ------------------------------------------------------------------ paths

    def cudnn_available(self):
        """Whether a cuDNN path with a projection can run here: TensorFlow with a
        visible GPU, or PyTorch with CUDA and cuDNN; and a dtype that cuDNN takes
        (float16, float32, float64). Always False without a projection (Keras'
        LSTM then chooses) and on JAX."""
        return self._cudnn_unavailable_reason() is None

    def _cudnn_unavailable_reason(self, device=None):
        """Why no cuDNN path can run (a sentence), or None if one can.

        `device` is where the inputs are on torch ("cuda", "cpu"); None asks
        whether this machine has a CUDA device at all.
        """
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
        """The path that runs layer by layer: PORTABLE, TENSORFLOW_CUDNN or TORCH_LSTM.

        `lengths` (None without a mask) matter on the torch CPU only.
        """
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
                if device == "cuda":
                    return TORCH_LSTM  # cuDNN (bfloat16: as torch runs it)
                if lstm_torch.native_is_faster(lengths, ops.shape(x)[1]):
                    return TORCH_LSTM
                return PORTABLE
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
        check_float_inputs(self, inputs)
        x = check_rank(self, inputs, ("batch", "time", "features"))
        mask_given = mask
        batch_size, time = ops.shape(x)[0], ops.shape(x)[1]
        if mask is None:
            mask = ops.ones((batch_size, time), dtype="bool")
        else:
            mask = check_mask_shape(self, x, mask)
            mask = check_right_padded(self, mask)
        mask = ops.cast(mask, "bool")
        if initial_state is not None:
            if len(initial_state) != 4 * self.num_layers:
                raise ValueError(
                    f"`initial_state` must hold 4 * num_layers = {4 * self.num_layers} "
                    f"tensors (h_fwd, c_fwd, h_bwd, c_bwd per layer). Received "
                    f"{len(initial_state)}."
                )
            initial_state = [
                check_batch_size(self, x, s, ("batch", dim), f"initial_state[{i}]")
                for i, (s, dim) in enumerate(zip(initial_state, self._state_dims()))]
        # A batch known to have no steps: the empty outputs (every path fails on no
        # steps). A graph traced for an unknown length has no branch for it: a
        # conditional around the recurrence would cost every step, and under XLA its
        # two branches' shapes differ.
        if x.shape[1] == 0:
            return self._empty_outputs(x, initial_state)
        return self._run(x, mask, mask_given, initial_state, training)

    def _state_dims(self):
        """Sizes of the states `h_fwd, c_fwd, h_bwd, c_bwd` of every layer, in order."""
        return [self.state_dim, self.units] * (2 * self.num_layers)

    def _empty_outputs(self, x, initial_state):
        """The outputs of no steps: empty sequences; the final states are the initial
        ones (zeros by default), as for a fully padded row."""
        batch_size = ops.shape(x)[0]
        if self.return_all_layers:
            outputs = ops.zeros((batch_size, self.num_layers + 1, 0, self.output_dim), x.dtype)
        else:
            outputs = ops.zeros((batch_size, 0, self.output_dim), x.dtype)
        if not self.return_state:
            return outputs
        if initial_state is None:
            states = self._zero_state(batch_size, x.dtype) * self.num_layers
        else:
            states = [ops.cast(s, x.dtype) for s in initial_state]
        return [outputs] + states

    def _run(self, x, mask, mask_given, initial_state, training):
        """The layer on at least one step: `call` after its checks."""
        lengths = ops.sum(ops.cast(mask, "int32"), axis=1)  # (batch,)
        keep = ops.cast(mask, x.dtype)[:, :, None]
        x = x * keep
        path = self._choose_path(x, None if mask_given is None else lengths)
        stack, states = [x], []
        for i in range(self.num_layers):
            state = None
            if initial_state is not None:
                state = [ops.cast(s, x.dtype) for s in initial_state[4 * i: 4 * i + 4]]
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
        outputs = ops.stack(stack, axis=1) if self.return_all_layers else x
        if self.return_state:
            return [outputs] + states
        return outputs

    def _zero_state(self, batch_size, dtype):
        h = ops.zeros((batch_size, self.state_dim), dtype=dtype)
        c = ops.zeros((batch_size, self.units), dtype=dtype)
        return [h, c, h, c]

    def _portable_layer(self, i, x, mask, lengths, state):
        """Both directions of layer i in one scan; input products hoisted out of it."""
        fw, bw = self.cells[i]
        if state is None:
            state = self._zero_state(ops.shape(x)[0], x.dtype)
        dtype = x.dtype
        # Hoisted input products of every step and both directions, computed
        # time-major so that no large gate tensor is transposed: (T, 2, B, 4U).
        gates = ops.stack([
            ops.matmul(ops.transpose(inputs, (1, 0, 2)), _cast(cell["kernel"], dtype))
            + _cast(cell["bias"], dtype)
            for inputs, cell in ((x, fw), (reverse_sequence(x, lengths), bw))
        ], axis=1)
        recurrent = ops.stack([_cast(fw["recurrent_kernel"], dtype),
                               _cast(bw["recurrent_kernel"], dtype)])  # (2, P, 4U)
        projection = ops.stack([_cast(fw["projection_kernel"], dtype),
                                _cast(bw["projection_kernel"], dtype)])  # (2, U, P)
        h0 = ops.stack([state[0], state[2]])  # (2, B, P)
        c0 = ops.stack([state[1], state[3]])  # (2, B, U)

        # No masking inside the loop: with right padding, padded steps come after
        # a row's real ones in both (length-reversed) directions, so they never
        # reach real outputs; the final states are taken at each row's last real
        # step below.
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
        h_last = ops.where(empty, h0, ops.take(ops.reshape(h, (-1, self.state_dim)), index,
                                               axis=0))  # (2, B, P)
        c_last = ops.where(empty, c0, ops.take(ops.reshape(c, (-1, self.units)), index,
                                               axis=0))  # (2, B, U)
        return fwd, bwd, [h_last[0], c_last[0], h_last[1], c_last[1]]

    def _cudnn_layer(self, i, x, lengths, state):
        """Layer i as one bidirectional `CudnnRNNV3` call with `num_proj` (TensorFlow)."""
        return self._fused_layer(lstm_tf, i, x, lengths, state)

    def _torch_layer(self, i, x, lengths, state):
        """Layer i as one bidirectional `torch.nn.LSTM(proj_size=...)` call (PyTorch).

        `lengths` is None when the call had no mask (every row full length).
        """
        from tfeff.backend import lstm_torch

        return self._fused_layer(lstm_torch, i, x, lengths, state)

    def _fused_layer(self, backend_lstm, i, x, lengths, state):
        """Layer i through `backend_lstm.bidirectional_lstmp` (`tfeff.backend.lstm_tf`
        or `lstm_torch`): this layer's weights in `x`'s dtype, the states stacked."""
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
        if state is None:
            state = self._zero_state(ops.shape(x)[0], x.dtype)
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

    # ------------------------------------------------------------------ Keras API

    def compute_output_shape(self, input_shape):
        batch, time = input_shape[0], input_shape[1]
        if self.return_all_layers:
            out = (batch, self.num_layers + 1, time, self.output_dim)
        else:
            out = (batch, time, self.output_dim)
        if not self.return_state:
            return out
        states = []
        for _ in range(self.num_layers):
            states += [(batch, self.state_dim), (batch, self.units)] * 2
        return [out] + states

    def compute_mask(self, inputs, mask=None):
        if self.return_all_layers:
            mask = None
        if self.return_state:
            return [mask] + [None] * (4 * self.num_layers)
        return mask

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

