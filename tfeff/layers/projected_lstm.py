"""ProjectedLSTM: an LSTM with a recurrent projection (ELMo's LSTMP cell).

`keras.ops` code; the recurrence is `tfeff.backend.ops.scan_carries`.
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

    The cell of ELMo and ELMo-C: h_t = o_t * tanh(c_t) of size `units` is
    projected to r_t = h_t P, the output and the state fed back into the gates:

        z_t = x_t W + r_{t-1} R + b,   i, f, g, o = split(z_t)
        c_t = sigmoid(f) * c_{t-1} + sigmoid(i) * tanh(g)
        r_t = (sigmoid(o) * tanh(c_t)) P

    ELMo's cell (bilm-tf) clips the new cell state to [-cell_clip, cell_clip]
    before it is used and carried, and r_t to [-proj_clip, proj_clip], both 3:
    `cell_clip=3.0, proj_clip=3.0` here (off by default; no gradient when clipped).

    `projection_dim=None` is a plain LSTM (r_t = h_t, of size `units`), the
    one-layer and two-layer 2048-cell encoders of Li et al.'s Table 5.

    With 4096 units and a 512 projection this is 4x cheaper per step than a
    plain 4096-unit LSTM; x_t W of all steps is one matmul before the loop.

    Sequences must be right-padded, with the checks and caveats of
    `MaskedBiLSTM`: `go_backwards=True` starts at each sequence's own last
    real token, and padded output positions are zero.

    Args:
        units: positive int, LSTM cell size.
        projection_dim: positive int, size of the projected state and output; None: none.
        go_backwards: run each sequence from its last real token back (outputs in input order).
        kernel_initializer: initializer of the input kernel W.
        recurrent_initializer: initializer of the recurrent kernel R.
        projection_initializer: initializer of the projection P.
        unit_forget_bias: if True, the forget-gate bias starts at 1.
        cell_clip: positive float or None: the cell state's clipping bound.
        proj_clip: positive float or None: the projected state's clipping bound.
        **kwargs: base `Layer` arguments.

    Call arguments:
        inputs: float `(batch, time, features)`; time length 0 gives an empty output.
        mask: optional boolean `(batch, time)`, right-padded (cast to bool). Non-float
            inputs, another rank or mask shape raise a `ValueError`.

    Returns:
        `(batch, time, projection_dim or units)`.

    Raises:
        ValueError: an argument is outside the values its entry above allows, or
            `proj_clip` is given without a projection.

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
                    f"integer. Received: {arg}={value}")
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
                    f"number. Received: {arg}={value!r}")
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
                "ProjectedLSTM needs a known feature dimension. "
                f"Received: input_shape={input_shape}")
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
        inputs, mask = checked_sequence(self, inputs, mask)
        # An empty scan fails on PyTorch; as in `MaskedBiLSTM.call`, only a batch
        # known to have no steps gets this branch.
        if inputs.shape[1] == 0:
            return ops.zeros((ops.shape(inputs)[0], 0, self.output_dim), inputs.dtype)
        return self._run(inputs, mask)

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
        config.update({
            "units": self.units,
            "projection_dim": self.projection_dim,
            "go_backwards": self.go_backwards,
            "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
            "recurrent_initializer": keras.initializers.serialize(self.recurrent_initializer),
            "projection_initializer": keras.initializers.serialize(self.projection_initializer),
            "unit_forget_bias": self.unit_forget_bias,
            "cell_clip": self.cell_clip,
            "proj_clip": self.proj_clip,
        })
        return config


def checked_sequence(layer, inputs, mask):
    """`(inputs, mask)` of a recurrent layer, checked: float `(batch, time, features)`
    inputs, a bool right-padded mask of their batch and time (all True if None)."""
    check_float_inputs(layer, inputs)
    inputs = check_rank(layer, inputs, ("batch", "time", "features"))
    if mask is None:
        return inputs, ops.ones(ops.shape(inputs)[:2], dtype="bool")
    mask = check_right_padded(layer, check_mask_shape(layer, inputs, mask))
    return inputs, ops.cast(mask, "bool")


def forget_bias_initializer(units, unit_forget_bias):
    """Initializer of a fused LSTM bias (gates i, f, g, o): 1 for f when `unit_forget_bias`."""

    def initializer(shape, dtype=None):
        forget = ops.full((units,), 1.0 if unit_forget_bias else 0.0, dtype=dtype)
        zeros = ops.zeros((units,), dtype=dtype)
        return ops.concatenate([zeros, forget, zeros, zeros])

    return initializer
