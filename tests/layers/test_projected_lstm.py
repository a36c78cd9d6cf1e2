import keras
import numpy as np

from tests.layers.layer_checks import run_layer_test
from tests.layers.lstm_reference import lstmp
from tfeff.layers import ProjectedLSTM


def test_layer_checks(tmp_path):
    x = np.random.default_rng(0).normal(size=(2, 5, 4)).astype("float32")
    run_layer_test(ProjectedLSTM, dict(units=6, projection_dim=3, name="lstmp"), x, tmp_path,
                   expected_num_weights=4)
    layer = ProjectedLSTM(6, 3)
    layer.build((None, 5, 4))
    assert layer.count_params() == 4 * 24 + 3 * 24 + 24 + 6 * 3


def test_equals_numpy_recurrence_both_directions_with_padding():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(2, 6, 4)).astype("float32")
    mask = np.array([[1, 1, 1, 1, 0, 0], [1] * 6], bool)
    for backwards in (False, True):
        layer = ProjectedLSTM(5, 3, go_backwards=backwards)
        out = layer(x, mask=mask).numpy()
        w = [keras.ops.convert_to_numpy(v).astype("float64") for v in layer.weights]
        for b in range(2):
            n = mask[b].sum()
            seq = x[b, :n].astype("float64")
            ref, _, _ = lstmp(seq[::-1] if backwards else seq, *w)
            ref = ref[::-1] if backwards else ref
            np.testing.assert_allclose(out[b, :n], ref, rtol=1e-5, atol=1e-6)
            assert np.all(out[b, n:] == 0)


def test_padding_never_changes_real_positions():
    rng = np.random.default_rng(2)
    x = rng.normal(size=(1, 6, 4)).astype("float32")
    mask = np.array([[1, 1, 1, 0, 0, 0]], bool)
    noisy = x.copy()
    noisy[:, 3:] = 1e3
    for backwards in (False, True):
        layer = ProjectedLSTM(5, 3, go_backwards=backwards)
        np.testing.assert_array_equal(layer(x, mask=mask).numpy(), layer(noisy, mask=mask).numpy())
