import numpy as np
import pytest
import tensorflow as tf

from tests.layers.layer_checks import run_layer_test
from tfeff.layers import FixedEmbedding


@pytest.mark.numerics
def test_gathers_rows_and_is_not_a_weight(tmp_path):
    table = np.random.default_rng(0).normal(size=(7, 3)).astype("float32")
    path = str(tmp_path / "t.npy")
    np.save(path, table)
    ids = np.array([[1, 6, 0]], "int32")
    # Nothing to fit: the table is not a weight. A gather is exact, and the rows stay
    # float32 under mixed_float16: no rounding (n=0) anywhere.
    out, = run_layer_test(FixedEmbedding, dict(table=path, mask_zero=True, name="fixed"), ids,
                          tmp_path, expected_num_weights=0, fit=False, xla_n=0, mixed_n=0)
    np.testing.assert_array_equal(out, table[ids])
    layer = FixedEmbedding(path, mask_zero=True, name="fixed")
    layer(ids)
    assert layer.weights == [] and layer.count_params() == 0
    assert "CPU" in layer.table.device
    np.testing.assert_array_equal(layer.compute_mask(ids).numpy(), [[True, True, False]])


def test_in_memory_table_is_not_serializable_and_bad_tables_are_rejected(tmp_path):
    with pytest.raises(NotImplementedError, match="numpy.save"):
        FixedEmbedding(np.eye(2)).get_config()
    with pytest.raises(ValueError, match="2-D"):
        FixedEmbedding(np.zeros(3))
    with pytest.raises(ValueError, match="missing.npy"):
        FixedEmbedding(str(tmp_path / "missing.npy"))
    with pytest.raises(tf.errors.InvalidArgumentError):
        FixedEmbedding(np.eye(2, dtype="float32"))(np.array([5]))


def test_a_table_with_nan_or_inf_rows_is_refused_naming_them(tmp_path):
    """NaN rows once reached training as a NaN loss (with the advice to skip steps) and
    an export as they were."""
    table = np.ones((10, 3), "float32")
    table[[2, 7]] = np.nan
    table[9, 1] = np.inf
    path = tmp_path / "vectors.npy"
    np.save(path, table)
    with pytest.raises(ValueError, match=rf"The embedding table `{path}` holds NaN or Inf in 3 "
                                         r"of its 10 rows \(ids 2, 7, 9\)"):
        FixedEmbedding(str(path))
    with pytest.raises(ValueError, match=r"table` holds NaN or Inf in 3 of its 10 rows"):
        FixedEmbedding(table)
