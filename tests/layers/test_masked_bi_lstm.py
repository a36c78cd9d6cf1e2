import re

import keras
import numpy as np
import pytest
import tensorflow as tf

from tests.layers.layer_checks import run_layer_test
from tfeff.layers import MaskedBiLSTM
from tfeff.testing.lstm_reference import lstmp as _lstmp
from tfeff.testing.lstm_reference import sigmoid as _sigmoid
from tfeff.testing.lstm_reference import step_roundings
from tfeff.testing.masked_bi_lstm_reference import layer_norm as _layer_norm
from tfeff.testing.masked_bi_lstm_reference import numpy_masked_bilstm as _numpy_masked_bilstm
from tfeff.testing.masked_bi_lstm_reference import roundings
from tfeff.testing.numerics import assert_close


def _close(actual, expected, n, dtype="float64"):
    """Within `n` roundings in `dtype` at the LSTM's scale, max(1, max|expected|)."""
    scale = max(1.0, float(np.abs(expected).max(initial=0.0)))
    assert_close(actual, expected, n=n, dtype=dtype, scale=scale)


def _randomize(layer, seed):
    """Random weights everywhere (layer norms too), so every parameter matters."""
    rng = np.random.default_rng(seed)
    layer.set_weights([rng.normal(scale=0.4, size=w.shape) for w in layer.get_weights()])


@pytest.fixture(autouse=True)
def _seed():
    keras.utils.set_random_seed(0)  # initial weights: every test is deterministic


@pytest.fixture
def data():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(4, 7, 6))
    mask = np.array([[1] * 7, [1] * 4 + [0] * 3, [1] + [0] * 6, [0] * 7], bool)
    return x, mask


@pytest.mark.numerics
def test_layer_checks(tmp_path):
    x = np.random.default_rng(0).normal(size=(2, 4, 6)).astype("float32")
    kwargs = dict(units=5, projection_dim=3, num_layers=2, use_cudnn=False, name="masked_bilstm")
    layer = MaskedBiLSTM(**kwargs)
    run_layer_test(MaskedBiLSTM, kwargs, x, tmp_path, expected_num_weights=2 * (2 * 4 + 2 * 2),
                   xla_n=roundings(layer, 4), mixed_n=roundings(layer, 4, "float16"))
    layer.build((None, 4, 6))
    per_direction = 6 * 20 + 3 * 20 + 20 + 5 * 3
    assert layer.count_params() == 2 * 2 * (per_direction + 2 * 3)


@pytest.mark.numerics
def test_one_lstmp_step_golden():
    layer = MaskedBiLSTM(2, 1, num_layers=1, use_cudnn=False, dtype="float64")
    layer.build((None, None, 2))
    fw, bw = layer.cells[0]
    kernel = np.array([[0.1, -0.2, 0.3, 0.4, 0.5, -0.6, 0.7, 0.8],
                       [-0.5, 0.2, 0.1, -0.3, 0.2, 0.4, -0.1, 0.6]])
    for cell in (fw, bw):
        cell["kernel"].assign(kernel)
        cell["recurrent_kernel"].assign(np.full((1, 8), 0.5))
        cell["bias"].assign(np.arange(8) / 10)
        cell["projection_kernel"].assign([[1.5], [-2.0]])
    x = np.array([[[1.0, 2.0]]])
    h0, c0 = np.array([[0.3]]), np.array([[0.2, -0.1]])
    _, h, c, _, _ = _call_with_state(layer, x, [h0, c0, h0, c0])
    # By hand: z = x W + h R + b.
    z = np.array([1 * 0.1 + 2 * -0.5, -0.2 + 0.4, 0.3 + 0.2, 0.4 - 0.6,
                  0.5 + 0.4, -0.6 + 0.8, 0.7 - 0.2, 0.8 + 1.2]) + 0.15 + np.arange(8) / 10
    i, f, g, o = z[0:2], z[2:4], z[4:6], z[6:8]
    c_ref = _sigmoid(f) * c0[0] + _sigmoid(i) * np.tanh(g)
    h_ref = (_sigmoid(o) * np.tanh(c_ref)) @ np.array([[1.5], [-2.0]])
    # float64: one step (the by-hand z is exact to a few roundings, sigmoid and tanh ~4).
    _close(c, [c_ref], step_roundings(2, 1, 2))
    _close(h, [h_ref], step_roundings(2, 1, 2))


def _call_with_state(layer, x, state, mask=None):
    layer.return_state = True
    try:
        out = layer(x, mask=mask, initial_state=state)
    finally:
        layer.return_state = False
    return [keras.ops.convert_to_numpy(t) for t in out]


@pytest.mark.numerics
def test_portable_path_equals_numpy_recurrence(data):
    x, mask = data
    layer = MaskedBiLSTM(5, 3, num_layers=2, use_cudnn=False, dtype="float64")
    layer.build(x.shape)
    _randomize(layer, 1)
    rng = np.random.default_rng(2)
    state = [rng.normal(size=(4, d)) for d in (3, 5, 3, 5) * 2]
    outputs, *states = _call_with_state(layer, x, state, mask)
    ref, ref_states = _numpy_masked_bilstm(layer, x, mask, state)
    n = roundings(layer, 7)  # float64: 2 layers of up to 7 steps
    _close(outputs, ref, n)
    for b in range(4):
        for k in range(8):
            _close(states[k][b], ref_states[b][k] if mask[b].any() else state[k][b], n)


def test_return_all_layers_is_the_stack(data):
    x, mask = data
    layer = MaskedBiLSTM(4, 3, num_layers=2, use_cudnn=False, return_all_layers=True)
    stack = keras.ops.convert_to_numpy(layer(x.astype("float32"), mask=mask))
    assert stack.shape == (4, 3, 7, 6)
    np.testing.assert_array_equal(stack[:, 0], x.astype("float32") * mask[..., None])
    top = MaskedBiLSTM.from_config({**layer.get_config(), "return_all_layers": False})
    top(x.astype("float32"))
    top.set_weights(layer.get_weights())
    np.testing.assert_allclose(keras.ops.convert_to_numpy(top(x.astype("float32"), mask=mask)),
                               stack[:, -1], rtol=1e-6)


def test_padding_never_changes_real_positions_and_empty_rows_are_zero(data):
    x, mask = data
    layer = MaskedBiLSTM(5, 3, num_layers=2, use_cudnn=False)
    x = x.astype("float32")
    noisy = np.where(mask[..., None], x, 1e3).astype("float32")
    clean = keras.ops.convert_to_numpy(layer(x, mask=mask))
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(layer(noisy, mask=mask)), clean)
    assert np.all(clean[~mask] == 0)
    assert np.all(clean[3] == 0) and np.isfinite(clean).all()
    # Gradients flow and stay finite with a fully padded row in the batch.
    var = tf.Variable(x)
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(layer(var, mask=mask) ** 2)
    grads = tape.gradient(loss, [var] + layer.trainable_weights)
    assert all(np.isfinite(g.numpy()).all() for g in grads)
    assert np.all(grads[0].numpy()[~mask] == 0)


@pytest.mark.numerics
def test_state_chaining_over_two_halves_equals_one_pass():
    """The truncated-BPTT invariant, per direction: A then B forward, B then A backward."""
    rng = np.random.default_rng(3)
    x = rng.normal(size=(2, 8, 6))
    # float64: other lengths may take other kernels.
    layer = MaskedBiLSTM(5, 3, num_layers=1, use_cudnn=False, dtype="float64")
    layer.build(x.shape)
    _randomize(layer, 4)
    full, *_ = _call_with_state(layer, x, None)
    a, b = x[:, :4], x[:, 4:]
    zeros = [np.zeros((2, d)) for d in (3, 5)]
    _, hf, cf, _, _ = _call_with_state(layer, a, None)
    out_b, _, _, hb, cb = _call_with_state(layer, b, [hf, cf] + zeros)
    out_a, *_ = _call_with_state(layer, a, zeros + [hb, cb])
    _close(out_b, full[:, 4:], roundings(layer, 8))
    _close(out_a, full[:, :4], roundings(layer, 8))


@pytest.mark.numerics
def test_plain_lstm_without_projection(data):
    x, mask = data
    layer = MaskedBiLSTM(3, None, num_layers=1, use_cudnn=False, dtype="float64")
    layer.build((None, None, 6))
    _randomize(layer, 5)
    out = keras.ops.convert_to_numpy(layer(x, mask=mask))
    fw, bw = layer.lstms[0]
    (nf, nb) = [(keras.ops.convert_to_numpy(n.gamma), keras.ops.convert_to_numpy(n.beta))
                for n in layer.norms[0]]
    eye = np.eye(3)
    for b in range(4):
        n = int(mask[b].sum())
        seq = x[b, :n]
        f, _, _ = _lstmp(seq, *[w.numpy() for w in fw.cell.weights], eye)
        r, _, _ = _lstmp(seq[::-1], *[w.numpy() for w in bw.cell.weights], eye)
        ref = seq + np.concatenate([_layer_norm(f, *nf, 1e-5), _layer_norm(r[::-1], *nb, 1e-5)],
                                   axis=-1)
        _close(out[b, :n], ref.reshape(n, 6), roundings(layer, 7))  # float64
        assert np.all(out[b, n:] == 0)
    # A fully padded row keeps its initial state (Keras' cuDNN path forbids such rows).
    state = [np.full((4, 3), 0.5)] * 4
    _, *states = _call_with_state(layer, x, state, mask)
    for s in states:
        np.testing.assert_array_equal(s[3], 0.5)
        assert not np.allclose(s[0], 0.5)


@pytest.mark.numerics
def test_mixed_precision_matches_float32(data):
    x, mask = data
    layer = MaskedBiLSTM(5, 3, num_layers=2, use_cudnn=False)
    ref = keras.ops.convert_to_numpy(layer(x.astype("float32"), mask=mask))
    mixed = MaskedBiLSTM.from_config({**layer.get_config(), "dtype": "mixed_float16"})
    out = mixed(x.astype("float32"), mask=mask)
    mixed.set_weights(layer.get_weights())
    out = mixed(x.astype("float32"), mask=mask)
    assert out.dtype == "float16"
    # The values stored in float16 on the way (masked_bi_lstm_reference.roundings).
    _close(keras.ops.convert_to_numpy(out), ref, roundings(layer, 7, "float16"), "float16")


def test_argument_errors():
    with pytest.raises(ValueError, match="use_cudnn"):
        MaskedBiLSTM(4, 2, use_cudnn="yes")
    with pytest.raises(ValueError, match="units"):
        MaskedBiLSTM(0, 2)
    with pytest.raises(ValueError, match="projection_dim"):
        MaskedBiLSTM(4, -1)
    with pytest.raises(ValueError, match="input width must be 2"):
        MaskedBiLSTM(4, 2)(np.zeros((1, 3, 5), "float32"))
    with pytest.raises(ValueError, match="initial_state"):
        MaskedBiLSTM(4, 2, num_layers=1)(np.zeros((1, 3, 4), "float32"),
                                         initial_state=[np.zeros((1, 2), "float32")])


@pytest.mark.skipif(bool(tf.config.list_logical_devices("GPU")), reason="has a GPU")
def test_use_cudnn_true_raises_without_gpu():
    layer = MaskedBiLSTM(4, 2, use_cudnn=True)
    with pytest.raises(ValueError, match="use_cudnn=True.*no cuDNN path can run: TensorFlow "
                                         "sees no GPU"):
        layer(np.zeros((1, 3, 4), "float32"))
    # "auto" falls back silently.
    auto = MaskedBiLSTM(4, 2, use_cudnn="auto")
    assert auto(np.zeros((1, 3, 4), "float32")).shape == (1, 3, 4)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_cudnn_path_matches_portable_path(dtype):
    """Run on a GPU machine: `pytest -m gpu` (CI has no GPU). cuDNN in `dtype` against the
    portable path in float64: in float64 the bound holds whatever the kernels; in float32
    with TF32 off (TensorFlow's default on recent NVIDIA GPUs rounds matmul inputs to 10
    mantissa bits, a bound of the order of the values at this depth)."""
    assert tf.config.list_logical_devices("GPU"), "this test needs a GPU"
    rng = np.random.default_rng(6)
    x = rng.normal(size=(5, 9, 8))
    mask = np.array([[1] * 9, [1] * 5 + [0] * 4, [1] + [0] * 8, [0] * 9, [1] * 8 + [0]], bool)
    if dtype == "float32":
        x = x.astype("float32").astype("float64")  # both sides see the same inputs
    portable = MaskedBiLSTM(16, 4, num_layers=2, use_cudnn=False, dtype="float64")
    portable.build(x.shape)
    _randomize(portable, 7)
    cudnn = MaskedBiLSTM.from_config({**portable.get_config(), "use_cudnn": True,
                                      "dtype": dtype})
    cudnn.build(x.shape)
    cudnn.set_weights(portable.get_weights())
    state = [rng.normal(size=(5, d)) for d in (4, 16, 4, 16) * 2]
    if dtype == "float32":
        state = [s.astype("float32").astype("float64") for s in state]
        portable.set_weights(cudnn.get_weights())  # the float32 weights, exactly widened
    tf32 = tf.config.experimental.tensor_float_32_execution_enabled()
    tf.config.experimental.enable_tensor_float_32_execution(False)
    results = []
    try:
        for layer in (portable, cudnn):
            var = tf.Variable(x.astype(layer.compute_dtype))
            with tf.GradientTape() as tape:
                out = _call_with_state_tape(layer, var, [s.astype(layer.compute_dtype)
                                                         for s in state], mask)
                out = [tf.cast(o, tf.float64) for o in out]
                loss = tf.reduce_sum(out[0] * tf.sin(tf.range(8, dtype=tf.float64)))
                loss += sum(tf.reduce_sum(s) for s in out[1:])
            grads = tape.gradient(loss, [var] + layer.trainable_weights)
            results.append(([o.numpy() for o in out],
                            [tf.cast(g, tf.float64).numpy() for g in grads]))
    finally:
        tf.config.experimental.enable_tensor_float_32_execution(tf32)
    # The forward pass, the chain back again and a weight gradient's sum over 5 * 9.
    n = 2 * roundings(portable, 9) + 5 * 9
    for a, b in zip(results[0][0] + results[0][1], results[1][0] + results[1][1]):
        _close(b, a, n, dtype)


def _call_with_state_tape(layer, x, state, mask):
    layer.return_state = True
    try:
        return layer(x, mask=mask, initial_state=state)
    finally:
        layer.return_state = False


def test_cudnn_path_builds_a_differentiable_graph_on_cpu():
    """Running the kernel needs a GPU; tracing it does not: the op arguments, shapes
    and the gradient wiring (CudnnRNNBackpropV3, the canonical-to-params adjoint) are
    checked here, in CI. `test_cudnn_path_matches_portable_path` checks the numbers."""
    layer = MaskedBiLSTM(16, 4, num_layers=2, use_cudnn=False)
    x = tf.constant(np.random.default_rng(8).normal(size=(3, 5, 8)).astype("float32"))
    layer.build(x.shape)
    lengths = tf.constant([5, 2, 0])

    @tf.function
    def step(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            fwd, bwd, states = layer._cudnn_layer(1, x, lengths, None)
            loss = tf.reduce_sum(fwd) + tf.reduce_sum(bwd) + sum(tf.reduce_sum(s) for s in states)
        return (fwd, bwd, states), tape.gradient(loss, [x] + layer.trainable_weights)

    graph = step.get_concrete_function(tf.TensorSpec((3, 5, 8), tf.float32)).graph
    op_types = {op.type for op in graph.get_operations()}
    for inner in graph._functions.values():
        op_types |= {op.type for op in inner.graph.get_operations()}
    assert {"CudnnRNNV3", "CudnnRNNCanonicalToParamsV2"} <= op_types
    assert {"CudnnRNNBackpropV3", "CudnnRNNParamsToCanonicalV2"} <= op_types
    (fwd, bwd, states), grads = graph.structured_outputs
    assert fwd.shape == bwd.shape == (3, 5, 4)
    assert [s.shape for s in states] == [(3, 4), (3, 16)] * 2
    # The layer-1 cell weights receive gradients; the other layer's do not.
    layer1 = {id(v) for v in layer.cells[1][0].values()} | {id(v) for v in layer.cells[1][1].values()}
    for var, grad in zip(layer.trainable_weights, grads[1:]):
        assert (grad is not None) == (id(var) in layer1), var.path


def test_integer_inputs_are_refused_with_the_dtype():
    layer = MaskedBiLSTM(4, 2, num_layers=1, use_cudnn=False, name="bi")
    with pytest.raises(ValueError, match=r"MaskedBiLSTM `bi` takes float vectors.*int32"):
        layer(np.ones((2, 3, 4), "int32"))


def test_a_mask_that_is_not_right_padded_is_refused():
    """A left-padded row (or a hole) would otherwise give outputs off by O(1), silently."""
    x = np.random.default_rng(6).normal(size=(2, 4, 4)).astype("float32")
    layer = MaskedBiLSTM(4, 2, num_layers=1, use_cudnn=False, name="bi")
    for row in ([0, 0, 1, 1], [1, 0, 1, 0]):
        mask = np.array([[1, 1, 1, 1], row], bool)
        with pytest.raises(ValueError, match=r"MaskedBiLSTM `bi` needs a right-padded `mask`.*"
                                             r"Row 1 is True at position 2 after a False"):
            layer(x, mask=mask)
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=r"(?s)MaskedBiLSTM `bi` needs a right-padded.*after a False:\] \[1\]"):
        tf.function(lambda a, m: layer(a, mask=m))(x, mask)


@pytest.mark.parametrize("layer_class", ["MaskedBiLSTM", "ProjectedLSTM"])
def test_a_mask_of_another_shape_than_the_inputs_is_refused(layer_class):
    """A mask of batch 3 for 2 input rows once gave a third row that was never input."""
    from tfeff.layers import ProjectedLSTM

    x = np.random.default_rng(6).normal(size=(2, 4, 4)).astype("float32")
    layer = (MaskedBiLSTM(4, 2, num_layers=1, use_cudnn=False, name="m")
             if layer_class == "MaskedBiLSTM" else ProjectedLSTM(4, 2, name="m"))
    for mask in (np.ones((3, 4), bool), np.ones((2, 5), bool), np.ones((2, 4, 1), bool)):
        with pytest.raises(ValueError, match=rf"{layer_class} `m` needs a `mask` of shape "
                                             r"\(batch, time\) equal to its inputs' first two "
                                             r"dimensions. Received: mask.shape="
                                             + re.escape(str(mask.shape))):
            layer(x, mask=mask)
    # Unknown shapes in a graph: checked when the graph runs.
    spec = [tf.TensorSpec((None, None, 4), tf.float32), tf.TensorSpec((None, None), tf.bool)]
    graph = tf.function(lambda a, m: layer(a, mask=m), input_signature=spec)
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=rf"{layer_class} `m` needs a `mask` of shape \(batch, time\)"):
        graph(x, np.ones((3, 4), bool))


@pytest.mark.numerics
def test_right_padded_full_and_empty_rows_pass_and_equal_the_unpadded_prefix():
    x = np.random.default_rng(7).normal(size=(3, 5, 6))
    mask = np.array([[1] * 5, [1, 1, 0, 0, 0], [0] * 5], bool)
    # float64: other shapes and graphs may take other kernels.
    layer = MaskedBiLSTM(5, 3, num_layers=1, use_cudnn=False, dtype="float64")
    out = keras.ops.convert_to_numpy(layer(x, mask=mask))
    n = roundings(layer, 5)
    _close(out[0], keras.ops.convert_to_numpy(layer(x[:1]))[0], n)
    _close(out[1, :2], keras.ops.convert_to_numpy(layer(x[1:2, :2]))[0], n)
    assert np.all(out[1, 2:] == 0) and np.all(out[2] == 0)
    graph = tf.function(lambda a, m: layer(a, mask=m))(x, mask)  # the runtime check passes
    _close(graph.numpy(), out, n)


def test_the_graph_padding_check_takes_an_empty_batch():
    """A replica's share of a short last batch may have no rows: the check must pass."""
    from tfeff.backend.checks import check_right_padded

    layer = MaskedBiLSTM(4, 2, num_layers=1, use_cudnn=False, name="bi")
    check = tf.function(lambda m: check_right_padded(layer, m))
    assert check(np.zeros((0, 4), bool)).shape == (0, 4)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"after a False:\] \[2\]"):
        check(np.array([[1, 0], [1, 1], [0, 1]], bool))
