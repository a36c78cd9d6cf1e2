import keras
import numpy as np
import pytest
import tensorflow as tf

from tests.layers.layer_checks import run_layer_test
from tfeff.layers import ProjectedLSTM
from tfeff.testing.lstm_reference import STEP_ROUNDINGS_16
from tfeff.testing.lstm_reference import lstmp
from tfeff.testing.lstm_reference import step_roundings
from tfeff.testing.numerics import assert_close


@pytest.mark.numerics
def test_layer_checks(tmp_path):
    x = np.random.default_rng(0).normal(size=(2, 5, 4)).astype("float32")
    # 5 steps (lstm_reference.step_roundings); in float16 also the inputs' cast. The
    # outputs are below 1, the LSTM's scale.
    run_layer_test(ProjectedLSTM, dict(units=6, projection_dim=3, name="lstmp"), x, tmp_path,
                   expected_num_weights=4, xla_n=5 * step_roundings(4, 3, 6),
                   mixed_n=1 + 5 * STEP_ROUNDINGS_16, scale=1.0)
    layer = ProjectedLSTM(6, 3)
    layer.build((None, 5, 4))
    assert layer.count_params() == 4 * 24 + 3 * 24 + 24 + 6 * 3


@pytest.mark.numerics
def test_equals_numpy_recurrence_both_directions_with_padding():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(2, 6, 4))
    mask = np.array([[1, 1, 1, 1, 0, 0], [1] * 6], bool)
    for backwards in (False, True):
        layer = ProjectedLSTM(5, 3, go_backwards=backwards, dtype="float64")
        out = layer(x, mask=mask).numpy()
        w = [keras.ops.convert_to_numpy(v) for v in layer.weights]
        for b in range(2):
            n = mask[b].sum()
            seq = x[b, :n]
            ref, _, _ = lstmp(seq[::-1] if backwards else seq, *w)
            ref = ref[::-1] if backwards else ref
            # float64: up to 6 steps; outputs below 1, the LSTM's scale.
            assert_close(out[b, :n], ref, n=6 * step_roundings(4, 3, 5), dtype="float64",
                         scale=1.0)
            assert np.all(out[b, n:] == 0)


@pytest.mark.numerics
def test_cell_and_projection_clipping_equal_elmos_cell(tmp_path):
    """bilm-tf's LSTMP cell: the new cell state clipped before use, the projection after."""
    rng = np.random.default_rng(3)
    x = 3.0 * rng.normal(size=(2, 6, 4))
    mask = np.array([[1, 1, 1, 1, 1, 0], [1] * 6], bool)
    for backwards in (False, True):
        # Seeded weights large enough that both bounds are reached.
        init = [keras.initializers.RandomNormal(stddev=1.0, seed=s) for s in (1, 2, 3)]
        layer = ProjectedLSTM(5, 3, go_backwards=backwards, cell_clip=0.5, proj_clip=0.2,
                              kernel_initializer=init[0], recurrent_initializer=init[1],
                              projection_initializer=init[2], dtype="float64")
        out = layer(x, mask=mask).numpy()
        w = [keras.ops.convert_to_numpy(v) for v in layer.weights]
        for b in range(2):
            n = mask[b].sum()
            seq = x[b, :n][::-1] if backwards else x[b, :n]
            ref, _, _ = lstmp(seq, *w, cell_clip=0.5, proj_clip=0.2)
            ref = ref[::-1] if backwards else ref
            assert_close(out[b, :n], ref, n=6 * step_roundings(4, 3, 5), dtype="float64",
                         scale=1.0)
            # The clips are reached: without them the recurrence goes past both bounds.
            free, _, _ = lstmp(seq, *w)
            assert np.abs(free).max() > 0.2 and np.abs(ref).max() == pytest.approx(0.2)
            proj_only, _, _ = lstmp(seq, *w, proj_clip=0.2)
            assert np.abs((proj_only[::-1] if backwards else proj_only) - ref).max() > 1e-3
        assert np.abs(out).max() <= 0.2
    # Saved and restored with its bounds.
    restored = ProjectedLSTM.from_config(layer.get_config())
    assert (restored.cell_clip, restored.proj_clip) == (0.5, 0.2)
    with pytest.raises(ValueError, match=r"`cell_clip`, expected None or a positive number"):
        ProjectedLSTM(5, 3, cell_clip=0)
    with pytest.raises(ValueError, match=r"`proj_clip`.*Received: proj_clip=True"):
        ProjectedLSTM(5, 3, proj_clip=True)


def test_padding_never_changes_real_positions():
    rng = np.random.default_rng(2)
    x = rng.normal(size=(1, 6, 4)).astype("float32")
    mask = np.array([[1, 1, 1, 0, 0, 0]], bool)
    noisy = x.copy()
    noisy[:, 3:] = 1e3
    for backwards in (False, True):
        layer = ProjectedLSTM(5, 3, go_backwards=backwards)
        np.testing.assert_array_equal(layer(x, mask=mask).numpy(), layer(noisy, mask=mask).numpy())


def test_integer_inputs_and_masks_that_are_not_right_padded_are_refused():
    layer = ProjectedLSTM(5, 3, name="lstmp")
    with pytest.raises(ValueError, match=r"ProjectedLSTM `lstmp` takes float vectors.*int32"):
        layer(np.ones((2, 4, 3), "int32"))
    x = np.random.default_rng(3).normal(size=(2, 4, 3)).astype("float32")
    left = np.array([[1, 1, 1, 1], [0, 1, 1, 1]], bool)
    for backwards in (False, True):
        layer = ProjectedLSTM(5, 3, go_backwards=backwards, name="lstmp")
        with pytest.raises(ValueError, match=r"ProjectedLSTM `lstmp` needs a right-padded "
                                             r"`mask`.*Row 1 is True at position 1"):
            layer(x, mask=left)
    with pytest.raises(tf.errors.InvalidArgumentError, match="needs a right-padded `mask`"):
        tf.function(lambda a, m: layer(a, mask=m))(x, left)


@pytest.mark.numerics
def test_right_padded_full_and_empty_rows_equal_the_unpadded_prefix():
    x = np.random.default_rng(4).normal(size=(3, 5, 3))
    mask = np.array([[1] * 5, [1, 1, 1, 0, 0], [0] * 5], bool)
    for backwards in (False, True):
        # float64: other batch shapes may take other kernels; up to 5 steps.
        layer = ProjectedLSTM(5, 3, go_backwards=backwards, dtype="float64")
        out = layer(x, mask=mask).numpy()
        bound = dict(n=5 * step_roundings(3, 3, 5), dtype="float64", scale=1.0)
        assert_close(out[0], layer(x[:1]).numpy()[0], **bound)
        assert_close(out[1, :3], layer(x[1:2, :3]).numpy()[0], **bound)
        assert np.all(out[1, 3:] == 0) and np.all(out[2] == 0)


@pytest.mark.numerics
def test_without_projection_is_keras_lstm_and_the_plain_recurrence(tmp_path):
    """`projection_dim=None`: the plain LSTM of Li et al.'s Table 5 rows (2048 cells, no
    projection): Keras' LSTM with the same weights, and the NumPy recurrence without P,
    in float64; the layer's own checks (serialization, XLA, mixed precision) too."""
    rng = np.random.default_rng(4)
    x = rng.normal(size=(2, 6, 4))
    run_layer_test(ProjectedLSTM, dict(units=5, projection_dim=None, name="lstm"),
                   x.astype("float32"), tmp_path, expected_num_weights=3,
                   xla_n=6 * step_roundings(4, None, 5), mixed_n=1 + 6 * STEP_ROUNDINGS_16,
                   scale=1.0)
    layer = ProjectedLSTM(5, None, dtype="float64")
    out = layer(x).numpy()
    assert out.shape == (2, 6, 5)
    assert layer.count_params() == 4 * 20 + 5 * 20 + 20
    keras_lstm = keras.layers.LSTM(5, return_sequences=True, dtype="float64")
    keras_lstm.build((None, 6, 4))
    keras_lstm.set_weights(layer.get_weights())
    # float64, 6 steps; outputs below 1, the LSTM's scale.
    assert_close(out, keras_lstm(x).numpy(), n=6 * step_roundings(4, None, 5),
                 dtype="float64", scale=1.0)
    mask = np.array([[1, 1, 1, 0, 0, 0], [1] * 6], bool)
    backward = ProjectedLSTM(5, None, go_backwards=True, dtype="float64")
    out = backward(x, mask=mask).numpy()
    kernel, recurrent, bias = [keras.ops.convert_to_numpy(v) for v in backward.weights]
    for b in range(2):
        n = mask[b].sum()
        ref, _, _ = lstmp(x[b, :n][::-1], kernel, recurrent, bias, None)
        assert_close(out[b, :n], ref[::-1], n=6 * step_roundings(4, None, 5),
                     dtype="float64", scale=1.0)
        assert np.all(out[b, n:] == 0)
    with pytest.raises(ValueError, match=r"`proj_clip` bounds the projected state"):
        ProjectedLSTM(5, None, proj_clip=3.0)
