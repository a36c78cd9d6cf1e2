"""ProjectedLSTM: an LSTM with a recurrent projection (ELMo's LSTMP cell).

Written in `keras.ops`: on TensorFlow the recurrence runs in `tf.scan` (its
per-step outputs need not have the carry's shape, unlike `ops.scan` there),
on JAX in `ops.scan`, on PyTorch in a Python loop over `ops.unstack`
(`tfeff.backend.ops.scan_carries`).
"""

import keras
from keras import ops

from tfeff.backend.checks import check_float_inputs
from tfeff.backend.checks import check_mask_shape
from tfeff.backend.checks import check_rank
from tfeff.backend.checks import check_rank_of_shape
from tfeff.backend.checks import check_right_padded
from tfeff.backend.ops import reverse_sequence
from tfeff.backend.ops import scan_carries


@keras.saving.register_keras_serializable(package="tfeff")
class ProjectedLSTM(keras.layers.Layer):
    """LSTM whose hidden state is projected to `projection_dim` (LSTMP).

    The cell of ELMo and ELMo-C: a cell of size `units` whose output
    h_t = o_t * tanh(c_t) is projected to r_t = h_t P (size `projection_dim`);
    r_t is both the layer's output and the state fed back into the gates:

        z_t = x_t W + r_{t-1} R + b,   i, f, g, o = split(z_t)
        c_t = sigmoid(f) * c_{t-1} + sigmoid(i) * tanh(g)
        r_t = (sigmoid(o) * tanh(c_t)) P

    ELMo's cell (bilm-tf's `cell_clip` and `proj_clip`, both 3) clips the new
    cell state to [-cell_clip, cell_clip] before it is used and carried, and the
    projected state to [-proj_clip, proj_clip]: `cell_clip=3.0, proj_clip=3.0`
    here. Off by default. A clipped value passes no gradient.

    `projection_dim=None` is a plain LSTM (no P: r_t = h_t, of size `units`,
    Keras' `LSTM` cell with `unit_forget_bias`), the one-layer and two-layer
    2048-cell encoders of Li et al.'s Table 5; `proj_clip` needs a projection.

    With 4096 units and a 512 projection this is 4x cheaper per step than a
    plain 4096-unit LSTM. The input product x_t W is computed for all steps in
    one matmul before the loop; only the recurrent part runs per step.

    Sequences must be right-padded (real tokens first). The mask is used to
    run `go_backwards=True` from each sequence's own last real token
    (`reverse_sequence` by length), so padding never reaches real positions;
    padded output positions are zero. The recurrence itself is not masked
    (in either direction padding comes after the real steps), so a mask with
    a True after a False (left padding) is rejected: eagerly with a
    `ValueError` naming the first such row, inside a TensorFlow `tf.function`
    with an `InvalidArgumentError`. Compiled code cannot check (XLA compiles
    the assertion out; under `jax.jit` the mask is abstract): there a
    left-padded mask gives wrong outputs silently, so build masks
    right-padded in the input pipeline.

    Args:
        units: positive int, LSTM cell size.
        projection_dim: positive int, size of the projected state and output;
            None: no projection (a plain LSTM whose output has `units`).
        go_backwards: if True, process each sequence from its last real token
            to its first; outputs are returned in the original order.
        kernel_initializer: initializer of the input kernel W.
        recurrent_initializer: initializer of the recurrent kernel R.
        projection_initializer: initializer of the projection P.
        unit_forget_bias: if True, the forget-gate bias starts at 1.
        cell_clip: positive float or None: the cell state's clipping bound.
        proj_clip: positive float or None: the projected state's clipping bound.
        **kwargs: base `Layer` arguments.

    Call arguments:
        inputs: float `(batch, time, features)`; integer inputs (token ids)
            raise a `ValueError`: embed them first, and so does another rank.
            Time length 0 gives an empty output.
        mask: optional boolean `(batch, time)`, right-padded, of the inputs'
            batch and time (another shape raises a `ValueError`).

    Returns:
        `(batch, time, projection_dim or units)`.

    Raises:
        ValueError: `units` is not a positive integer, `projection_dim` is
            neither None nor one, `cell_clip` or `proj_clip` is neither None
            nor a positive number, or `proj_clip` is given without a
            projection.

    Example:

    >>> layer = ProjectedLSTM(units=16, projection_dim=4)
    >>> tuple(layer(keras.ops.ones((2, 5, 3))).shape)
    (2, 5, 4)

    Reference:
        Sak, Senior & Beaufays, "Long Short-Term Memory Recurrent Neural
        Network Architectures for Large Scale Acoustic Modeling", 2014;
        Peters et al., "Deep contextualized word representations", 2018.
    """

    def __init__(
        self,
        units,
        projection_dim,
        go_backwards=False,
        kernel_initializer="glorot_uniform",
        recurrent_initializer="orthogonal",
        projection_initializer="glorot_uniform",
        unit_forget_bias=True,
        cell_clip=None,
        proj_clip=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        for arg, value in (("units", units), ("projection_dim", projection_dim)):
            if arg == "projection_dim" and value is None:
                continue
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ValueError(
                    f"Received an invalid value for `{arg}`, expected a positive "
                    f"integer. Received: {arg}={value}"
                )
        self.units = units
        self.projection_dim = projection_dim
        self.go_backwards = bool(go_backwards)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.recurrent_initializer = keras.initializers.get(recurrent_initializer)
        self.projection_initializer = keras.initializers.get(projection_initializer)
        self.unit_forget_bias = bool(unit_forget_bias)
        for arg, value in (("cell_clip", cell_clip), ("proj_clip", proj_clip)):
            if value is not None and not (isinstance(value, (int, float))
                                          and not isinstance(value, bool) and value > 0):
                raise ValueError(
                    f"Received an invalid value for `{arg}`, expected None or a positive "
                    f"number. Received: {arg}={value!r}"
                )
        self.cell_clip = None if cell_clip is None else float(cell_clip)
        self.proj_clip = None if proj_clip is None else float(proj_clip)
        if projection_dim is None and proj_clip is not None:
            raise ValueError(
                "`proj_clip` bounds the projected state: it needs a `projection_dim`. "
                f"Received: projection_dim=None, proj_clip={proj_clip!r}")
        self.supports_masking = True

    def build(self, input_shape):
        check_rank_of_shape(self, input_shape, ("batch", "time", "features"))
        input_dim = input_shape[-1]
        if input_dim is None:
            raise ValueError(
                f"ProjectedLSTM needs a known feature dimension. Received: input_shape={input_shape}"
            )
        self.kernel = self.add_weight(
            shape=(input_dim, 4 * self.units),
            initializer=self.kernel_initializer,
            name="kernel",
        )
        self.recurrent_kernel = self.add_weight(
            shape=(self.output_dim, 4 * self.units),
            initializer=self.recurrent_initializer,
            name="recurrent_kernel",
        )
        self.bias = self.add_weight(
            shape=(4 * self.units,),
            initializer=forget_bias_initializer(self.units, self.unit_forget_bias), name="bias"
        )
        if self.projection_dim is not None:
            self.projection_kernel = self.add_weight(
                shape=(self.units, self.projection_dim),
                initializer=self.projection_initializer,
                name="projection_kernel",
            )

    @property
    def output_dim(self):
        """The size of the output and of the state fed back: `projection_dim` or `units`."""
        return self.units if self.projection_dim is None else self.projection_dim

    def call(self, inputs, mask=None):
        check_float_inputs(self, inputs)
        inputs = check_rank(self, inputs, ("batch", "time", "features"))
        if mask is None:
            mask = ops.ones(ops.shape(inputs)[:2], dtype="bool")
        else:
            mask = check_mask_shape(self, inputs, mask)
            mask = check_right_padded(self, mask)
        mask = ops.cast(mask, "bool")
        # A batch known to have no steps: the empty output (an empty scan fails on
        # PyTorch). A graph traced for an unknown length has no branch for it: a
        # conditional around the recurrence would cost every step, and under XLA its
        # two branches' shapes differ.
        if inputs.shape[1] == 0:
            return self._empty_outputs(inputs)
        return self._run(inputs, mask)

    def _empty_outputs(self, inputs):
        return ops.zeros((ops.shape(inputs)[0], 0, self.output_dim), inputs.dtype)

    def _run(self, inputs, mask):
        """The layer on at least one step: `call` after its checks."""
        batch_size = ops.shape(inputs)[0]
        lengths = ops.sum(ops.cast(mask, "int32"), axis=1)
        if self.go_backwards:
            inputs = reverse_sequence(inputs, lengths)
        # Hoisted input product for every step: (time, batch, 4 * units).
        gates_x = ops.einsum("btf,fg->tbg", inputs, self.kernel) + self.bias
        recurrent_kernel = ops.convert_to_tensor(self.recurrent_kernel)
        projection_kernel = (None if self.projection_dim is None
                             else ops.convert_to_tensor(self.projection_kernel))
        cell_clip, proj_clip = self.cell_clip, self.proj_clip

        def step(state, gate_x):
            r_prev, c_prev = state
            z = gate_x + ops.matmul(r_prev, recurrent_kernel)  # (batch, 4 * units)
            i, f, g, o = ops.split(z, 4, axis=-1)
            c = ops.sigmoid(f) * c_prev + ops.sigmoid(i) * ops.tanh(g)
            if cell_clip is not None:
                c = ops.clip(c, -cell_clip, cell_clip)
            r = ops.sigmoid(o) * ops.tanh(c)
            if projection_kernel is not None:
                r = ops.matmul(r, projection_kernel)
            if proj_clip is not None:
                r = ops.clip(r, -proj_clip, proj_clip)
            return r, c

        dtype = gates_x.dtype
        init = (ops.zeros((batch_size, self.output_dim), dtype=dtype),
                ops.zeros((batch_size, self.units), dtype=dtype))
        outputs, _ = scan_carries(step, gates_x, init)  # (time, batch, proj)
        outputs = ops.transpose(outputs, (1, 0, 2))  # (batch, time, output_dim)
        if self.go_backwards:
            outputs = reverse_sequence(outputs, lengths)
        return outputs * ops.cast(mask, outputs.dtype)[:, :, None]

    def compute_output_shape(self, input_shape):
        return tuple(input_shape[:-1]) + (self.output_dim,)

    def compute_mask(self, inputs, mask=None):
        return mask

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "units": self.units,
                "projection_dim": self.projection_dim,
                "go_backwards": self.go_backwards,
                "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
                "recurrent_initializer": keras.initializers.serialize(
                    self.recurrent_initializer
                ),
                "projection_initializer": keras.initializers.serialize(
                    self.projection_initializer
                ),
                "unit_forget_bias": self.unit_forget_bias,
                "cell_clip": self.cell_clip,
                "proj_clip": self.proj_clip,
            }
        )
        return config


def forget_bias_initializer(units, unit_forget_bias):
    """Initializer of a fused LSTM bias (gates i, f, g, o): 1 for f when `unit_forget_bias`."""

    def initializer(shape, dtype=None):
        forget = 1.0 if unit_forget_bias else 0.0
        return ops.concatenate([
            ops.zeros((units,), dtype=dtype),
            ops.full((units,), forget, dtype=dtype),
            ops.zeros((2 * units,), dtype=dtype),
        ])

    return initializer
