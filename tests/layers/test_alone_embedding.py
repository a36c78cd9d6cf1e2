import hashlib
import math
import os
import subprocess
import sys
import zipfile

import h5py
import keras
import numpy as np
import pytest
import tensorflow as tf

from tests.conftest import REPO
from tests.layers.layer_checks import run_layer_test
from tfeff.layers import AloneEmbedding
from tfeff.testing.numerics import assert_close

# ---------------------------------------------------------------------------
# The documented construction, re-implemented independently in NumPy.
M32 = (1 << 32) - 1


def np_mix32(x):
    x = x.astype(np.uint64)
    for _ in range(2):
        x = (((x >> 16) ^ x) * 0x45D9F3B) & M32
    return (x >> 16) ^ x


def np_hash32(*words):
    h = np.uint64(0x243F6A88)
    for w in words:
        h = np_mix32(h ^ (np.asarray(w, np.uint64) & M32))
    return h


def np_codebooks(seed, m, c, d, filter_type, p_zero):
    k, j, i = np.meshgrid(np.arange(m), np.arange(c), np.arange(d), indexing="ij")
    s0, s1 = seed & M32, seed >> 32
    if filter_type == "binary":
        threshold = round((1 - p_zero ** (1 / m)) * 2**32)
        return (np_hash32(s0, s1, 1, k, j, i) < threshold).astype(np.float32)
    u0 = (np_hash32(s0, s1, 2, k, j, i, 0).astype(np.float64) + 0.5) / 2**32
    u1 = (np_hash32(s0, s1, 2, k, j, i, 1).astype(np.float64) + 0.5) / 2**32
    z = np.sqrt(-2 * np.log(u0)) * np.cos(2 * math.pi * u1)
    return (z / math.sqrt(m)).astype(np.float32)


def np_filters(ids, seed, m, c, d, filter_type, p_zero):
    books = np_codebooks(seed, m, c, d, filter_type, p_zero)
    s0, s1 = seed & M32, seed >> 32
    out = np.zeros((len(ids), d), np.float32)
    for k in range(m):
        cols = (np_hash32(s0, s1, 3, k, np.asarray(ids)) * np.uint64(c)) >> np.uint64(32)
        out = out + books[k][cols.astype(np.int64)]
    return np.minimum(out, 1.0) if filter_type == "binary" else out


def _terms(layer, ids):
    """The magnitude of the FFN's terms, |m_w o| |W1| |W2|: its rounding bound's scale."""
    base, w1, w2 = (np.abs(w).astype(np.float64) for w in layer.get_weights())
    m = np.abs(keras.ops.convert_to_numpy(layer.filters(np.ravel(ids))))
    return float(np.max((m * base) @ w1 @ w2))


def _ffn_roundings(layer):
    """float32 roundings of FFN(m_w o): the sums of base_dim and intermediate_dim (relu
    is exact; m_w o is rounded alike everywhere)."""
    return layer.base_dim + layer.intermediate_dim


# float16: m_w o, W1 and W2 cast to it, x W1 and h W2 rounded to it (sums in float32).
FFN_ROUNDINGS_16 = 5


def _layer(**kwargs):
    args = dict(vocabulary_size=50, output_dim=6, base_dim=8, intermediate_dim=12,
                num_codebooks=3, codebook_size=4, seed=11)
    args.update(kwargs)
    layer = AloneEmbedding(**args)
    layer.build()
    return layer


# ---------------------------------------------------------------------------


@pytest.mark.numerics
@pytest.mark.parametrize("lookup", ["table", "token", "unique"])
def test_standard_layer_checks_mixed_precision_and_fit(lookup, tmp_path):
    kwargs = dict(vocabulary_size=40, output_dim=6, base_dim=8, intermediate_dim=16, seed=3,
                  mask_zero=True, lookup=lookup, name=f"alone_{lookup}")
    ids = np.array([[5, 7, 7, 0], [39, 1, 0, 0]], np.int32)
    out, = run_layer_test(AloneEmbedding, kwargs, ids, tmp_path, expected_num_weights=3,
                          xla_n=8 + 16, mixed_n=FFN_ROUNDINGS_16,
                          scale=lambda layer: _terms(layer, ids))
    assert out.shape == (2, 4, 6)
    layer = AloneEmbedding(**kwargs)
    assert np.array_equal(keras.ops.convert_to_numpy(layer.compute_mask(ids)), ids != 0)
    mixed = AloneEmbedding.from_config({**kwargs, "dtype": "mixed_float16"})
    assert mixed(ids).dtype == "float16"


@pytest.mark.numerics
def test_dropout_in_training_and_under_xla_without_it(tmp_path):
    """Keras' own Dropout draws other masks under XLA on the TensorFlow backend
    (its stateless draws use the auto-selected algorithm), so the XLA check runs in
    inference mode with dropout, and in both modes without it (above)."""
    kwargs = dict(vocabulary_size=40, output_dim=6, base_dim=8, intermediate_dim=16, seed=3,
                  dropout_rate=0.5, name="alone_dropout")
    ids = np.array([[5, 7, 7, 0], [39, 1, 0, 0]], np.int32)
    run_layer_test(AloneEmbedding, kwargs, ids, tmp_path, xla_training=False, xla_n=8 + 16,
                   mixed_n=FFN_ROUNDINGS_16, scale=lambda layer: _terms(layer, ids))
    layer = AloneEmbedding(**kwargs)
    assert not np.allclose(layer(ids, training=True), layer(ids, training=False))


def test_a_regression_through_the_embedding_learns():
    """Fixed random targets through the embedding: the loss falls."""
    rng = np.random.default_rng(0)
    x = rng.integers(0, 40, size=(64, 5))
    y = rng.normal(size=(40, 6)).astype("float32")[x]  # a random table to mimic
    inp = keras.Input((5,), dtype="int32")
    model = keras.Model(inp, AloneEmbedding(40, 6, 8, 64, seed=3)(inp))
    model.compile(keras.optimizers.Adam(0.03), "mse")
    history = model.fit(x, y, epochs=25, batch_size=64, verbose=0).history["loss"]
    assert history[-1] < 0.8 * history[0], history


@pytest.mark.numerics
@pytest.mark.parametrize("filter_type", ["binary", "real"])
def test_golden_filters_and_embeddings_follow_the_documented_construction(filter_type):
    seed = 2**33 + 5  # both 32-bit halves of the seed are used
    layer = _layer(filter_type=filter_type, zero_probability=0.3, seed=seed, dtype="float64")
    ids = np.arange(50)
    expected = np_filters(ids, seed, 3, 4, 8, filter_type, 0.3)
    np.testing.assert_array_equal(layer.codebooks.numpy(), np_codebooks(seed, 3, 4, 8, filter_type, 0.3))
    np.testing.assert_array_equal(layer.filters(ids).numpy(), expected)

    base, w1, w2 = layer.get_weights()
    # FFN(m_w * o) in float64, m_w * o rounded to float32 as documented.
    reference = np.maximum((expected * base.astype(np.float32)).astype(np.float64) @ w1, 0) @ w2
    assert_close(layer(ids).numpy(), reference, n=_ffn_roundings(layer), dtype="float64",
                 scale=_terms(layer, ids))


@pytest.mark.parametrize("p_zero", [0.2, 0.5, 0.8])
def test_binary_filter_zero_rate_is_zero_probability(p_zero):
    m, c, d, v = 8, 64, 256, 4000
    layer = AloneEmbedding(v, 4, d, 4, num_codebooks=m, codebook_size=c,
                           zero_probability=p_zero, seed=1)
    q = 1 - p_zero ** (1 / m)
    books = layer.codebooks.numpy()
    assert set(np.unique(books)) == {0.0, 1.0}
    # Codebook entries are Bernoulli(q) ...
    assert abs(books.mean() - q) < 4 * math.sqrt(q * (1 - q) / books.size)
    # ... so the OR of M columns is 0 with probability p_o. The spread comes from the
    # finite codebooks (c columns per row; delta method) and from sampling V words.
    sd = p_zero * math.sqrt(m * q / ((1 - q) * c * d)) + math.sqrt(p_zero * (1 - p_zero) / (v * d))
    zero_rate = 1 - layer.filters(np.arange(v)).numpy().mean()
    assert abs(zero_rate - p_zero) < 4 * sd, (zero_rate, sd)


FILTER_TYPES = ("binary", "real")


def _digest(filter_type, seed=7):
    """The SHA-256 of an `AloneEmbedding`'s filters and table, built from `seed`."""
    layer = AloneEmbedding(3000, 16, 32, 24, filter_type=filter_type, seed=seed)
    layer.build()
    digest = hashlib.sha256(layer.filters(np.arange(3000)).numpy().tobytes())
    digest.update(layer.embedding_table().numpy().tobytes())
    return digest.hexdigest()


def test_same_seed_gives_bit_identical_embeddings_in_separate_processes():
    # Both filter types in each process: two TensorFlow imports, not four.
    script = ("from tests.layers.test_alone_embedding import FILTER_TYPES, _digest\n"
              "print('DIGESTS', *(_digest(t) for t in FILTER_TYPES))")
    env = dict(os.environ, PYTHONPATH=REPO, TF_CPP_MIN_LOG_LEVEL="3")
    digests = []
    for _ in range(2):
        run = subprocess.run([sys.executable, "-c", script], cwd=REPO, env=env,
                             capture_output=True, text=True, timeout=300)
        assert run.returncode == 0, run.stderr[-2000:]
        digests.append(run.stdout.split("DIGESTS ")[1].split())
    here = [_digest(t) for t in FILTER_TYPES]
    assert digests == [here] * 2
    assert len(set(here)) == 2
    for filter_type in FILTER_TYPES:  # another seed, other filters
        assert _digest(filter_type, seed=8) != _digest(filter_type)


def _colliding_pairs(rows):
    _, counts = np.unique(rows, axis=0, return_counts=True)
    return int((counts * (counts - 1) // 2).sum())


@pytest.mark.parametrize("filter_type", ["binary", "real"])
def test_filter_collisions_match_the_birthday_bound(filter_type):
    # c**M = 64 possible column choices: pairs of words collide with probability 1/64.
    v = 400
    layer = AloneEmbedding(v, 4, 64, 4, num_codebooks=3, codebook_size=4,
                           filter_type=filter_type, seed=5)
    pairs = v * (v - 1) // 2
    expected = pairs / 64
    sd = math.sqrt(pairs * (1 / 64) * (63 / 64))  # pairwise-independent indicators
    observed = _colliding_pairs(layer.filters(np.arange(v)).numpy())
    assert abs(observed - expected) < 5 * sd, (observed, expected, sd)
    # The paper's setting (c=64, M=8): 2**48 choices, expected 4e-6 colliding pairs.
    big = AloneEmbedding(50000, 4, 64, 4, filter_type=filter_type, seed=5)
    assert _colliding_pairs(big.filters(np.arange(50000)).numpy()) == 0


@pytest.mark.parametrize("train_base", [True, False])
def test_gradients_reach_the_base_vector_and_the_ffn_only(train_base):
    layer = _layer(train_base=train_base, dropout_rate=0.2)
    ids = np.array([[1, 2, 3], [3, 4, 49]])
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(tf.square(layer(ids, training=True)))
    names = ["base", "intermediate_kernel", "output_kernel"]
    assert [w.name for w in layer.trainable_weights] == names[0 if train_base else 1:]
    assert sorted(w.name for w in layer.weights) == sorted(names)  # no filter or table weight
    grads = tape.gradient(loss, layer.trainable_weights)
    assert all(g is not None and np.abs(g.numpy()).sum() > 0 for g in grads)


def test_checkpoints_hold_no_vocabulary_sized_tensor(tmp_path):
    v = 997  # a size no other dimension has
    inp = keras.Input((None,), dtype="int32")
    layer = AloneEmbedding(v, 16, 24, 32, seed=1)
    model = keras.Model(inp, layer(inp))
    path = tf.train.Checkpoint(model=model).save(str(tmp_path / "ckpt" / "c"))
    shapes = {name: shape for name, shape in tf.train.list_variables(path)}
    assert all(v not in shape for shape in shapes.values()), shapes
    fingerprint = [n for n in shapes if "fingerprint" in n]
    assert len(fingerprint) == 1 and shapes[fingerprint[0]] == []
    stored = sum(int(np.prod(s)) for n, s in shapes.items() if "VARIABLE_VALUE" in n
                 and "save_counter" not in n)
    assert stored == layer.count_params() == 24 + 32 * (24 + 16)

    model.save(str(tmp_path / "m.keras"))
    with zipfile.ZipFile(tmp_path / "m.keras") as archive:
        archive.extract("model.weights.h5", tmp_path)
    datasets = []
    with h5py.File(tmp_path / "model.weights.h5") as f:
        f.visititems(lambda n, o: datasets.append((n, o.shape)) if isinstance(o, h5py.Dataset) else None)
    assert all(v not in shape for _, shape in datasets), datasets
    fingerprint = [s for n, s in datasets if n.endswith("filter_fingerprint")]
    assert len(fingerprint) == 1 and fingerprint[0][0] < 300  # a short text, not a table


def _model(seed, **kwargs):
    inp = keras.Input((None,), dtype="int32")
    layer = AloneEmbedding(60, 8, 8, 16, seed=seed, name="alone", **kwargs)
    return keras.Model(inp, layer(inp)), layer


def test_restoring_weights_into_other_filters_raises(tmp_path):
    ids = np.array([[1, 5, 59]])
    model, _ = _model(seed=1)
    path = tf.train.Checkpoint(model=model).save(str(tmp_path / "ckpt" / "c"))
    same, _ = _model(seed=1)
    same.set_weights([np.zeros_like(w) for w in same.get_weights()])
    tf.train.Checkpoint(model=same).restore(path).assert_consumed()
    np.testing.assert_array_equal(same(ids), model(ids))

    other, _ = _model(seed=2)
    with pytest.raises(ValueError, match=r"seed: saved 1 vs layer 2"):
        tf.train.Checkpoint(model=other).restore(path)
    other, _ = _model(seed=1, filter_type="real")
    with pytest.raises(ValueError, match=r"filter_type: saved binary vs layer real"):
        tf.train.Checkpoint(model=other).restore(path)

    model.save_weights(str(tmp_path / "w.weights.h5"))
    other, _ = _model(seed=1, num_codebooks=4)
    with pytest.raises(ValueError, match=r"num_codebooks: saved 8 vs layer 4"):
        other.load_weights(str(tmp_path / "w.weights.h5"))
    same, _ = _model(seed=1)
    same.load_weights(str(tmp_path / "w.weights.h5"))
    np.testing.assert_array_equal(same(ids), model(ids))


class CountingAlone(AloneEmbedding):
    """Records the number of rows each FFN evaluation runs on."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, name="counting", **kwargs)
        self.ffn_rows = []

    def _embed(self, ids, training):
        self.ffn_rows.append(ids.shape[0])
        return super()._embed(ids, training)


@pytest.mark.numerics
def test_unique_id_lookup_equals_the_naive_per_token_path_exactly():
    rng = np.random.default_rng(0)
    v = 5000
    ids = np.minimum(rng.zipf(1.3, size=(128, 128)), v) - 1  # few thousand distinct ids
    distinct = len(np.unique(ids))
    layers = {}
    for lookup in ("unique", "token", "table"):
        layers[lookup] = CountingAlone(v, 32, 32, 64, seed=4, lookup=lookup)
        layers[lookup].build()
        layers[lookup].set_weights(layers["unique"].get_weights())
    out = {lookup: layer(ids).numpy() for lookup, layer in layers.items()}
    np.testing.assert_array_equal(out["unique"], out["token"])
    # The table's rows come from other matmul shapes (chunks of the vocabulary).
    assert_close(out["table"], out["token"], n=_ffn_roundings(layers["token"]),
                 scale=_terms(layers["token"], ids))
    assert layers["unique"].ffn_rows == [distinct] and distinct < 128 * 128 // 4
    assert layers["token"].ffn_rows == [128 * 128]


@pytest.mark.numerics
def test_attend_scores_against_the_chunked_table():
    layer = _layer(vocabulary_size=50, table_chunk_size=7)
    table = layer.embedding_table().numpy()
    # Chunks of 7 rows, one of 50, a lookup: other matmul shapes, the same FFN.
    bound = dict(n=_ffn_roundings(layer), scale=_terms(layer, np.arange(50)))
    assert_close(table, layer(np.arange(50)).numpy(), **bound)
    whole = _layer(vocabulary_size=50)
    whole.set_weights(layer.get_weights())
    assert_close(whole.embedding_table().numpy(), table, **bound)
    hidden = np.random.default_rng(1).normal(size=(3, 4, 6)).astype("float32")
    # Against NumPy's float32 product: a sum of output_dim (6) terms |hidden| |table|.
    assert_close(layer.attend(hidden).numpy(), hidden @ table.T, n=6,
                 scale=float(np.max(np.abs(hidden) @ np.abs(table).T)))


@pytest.mark.numerics
def test_table_is_computed_once_per_traced_step_and_gradients_match_eager():
    ids = tf.constant([[1, 2, 2, 40]])
    targets = tf.constant([[3, 2, 9, 0]])

    def loss_fn(layer):
        hidden = layer(ids)  # lookup="table": rows of the table
        logits = layer.attend(hidden)  # the same table, tied
        return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(targets, logits))

    def step(layer):
        with tf.GradientTape() as tape:
            loss = loss_fn(layer)
        return loss, tape.gradient(loss, layer.trainable_weights)

    # float64 (past m_w o): grappler's graph may fuse and order other than eager.
    layer = CountingAlone(50, 6, 8, 12, seed=2, lookup="table", table_chunk_size=20,
                          dtype="float64")
    layer.build()
    graph_loss, graph_grads = tf.function(lambda: step(layer))()
    assert layer.ffn_rows == [20, 20, 10]  # one table (3 chunks) for both uses
    layer.ffn_rows.clear()
    eager_loss, eager_grads = step(layer)  # eager: the table is computed per use
    assert layer.ffn_rows == [20, 20, 10] * 2
    # The FFN (8 + 12), attend (6), the softmax over 50 (~60), the mean of 4; the
    # gradient runs it back and sums over the 50 rows of the table and the 4 tokens.
    forward = 8 + 12 + 6 + 60 + 4
    table = np.abs(layer.embedding_table().numpy())
    logits = float(np.max(table @ table.T))  # the log-softmax cancels terms this large
    assert_close(graph_loss, eager_loss, n=forward, dtype="float64",
                 scale=max(float(eager_loss), logits))
    assert [w.name for w in layer.trainable_weights][0] == "base"
    # The base vector's gradient leaves float64 at m_w o (computed in float32): its
    # product with m_w and the sum over the table's 50 rows are float32 roundings.
    assert_close(graph_grads[0], eager_grads[0], n=52, dtype="float32")
    for g, e in zip(graph_grads[1:], eager_grads[1:]):
        assert_close(g, e, n=2 * forward + 54, dtype="float64")


def test_parameter_count_does_not_grow_with_the_vocabulary():
    # The paper's WMT setting: 4,194,816 parameters against 18.9M for a table.
    wmt = AloneEmbedding(37000, 512, 512, 4096, seed=0)
    wmt.build()
    assert wmt.count_params() == 512 + 4096 * (512 + 512) == 4_194_816
    for v in (10, 10**6):
        layer = AloneEmbedding(v, 48, 32, 100, seed=0)
        layer.build()
        assert layer.count_params() == 32 + 100 * (32 + 48)


def test_ids_out_of_range_raise_in_eager_and_graph():
    layer = _layer()
    for bad in ([[50]], [[-1, 3]]):
        with pytest.raises(tf.errors.InvalidArgumentError, match="alone"):
            layer(np.array(bad))
        with pytest.raises(tf.errors.InvalidArgumentError, match="ids must be"):
            tf.function(layer)(tf.constant(bad))
    table_layer = _layer(lookup="table")
    with pytest.raises(tf.errors.InvalidArgumentError, match="vocabulary_size=50"):
        table_layer(np.array([[50]]))


@pytest.mark.parametrize("kwargs, match", [
    ({"vocabulary_size": 0}, "vocabulary_size"),
    ({"output_dim": -1}, "output_dim"),
    ({"base_dim": 0}, "base_dim"),
    ({"intermediate_dim": 2.5}, "intermediate_dim"),
    ({"num_codebooks": 0}, "num_codebooks"),
    ({"codebook_size": -4}, "codebook_size"),
    ({"zero_probability": 0.0}, "zero_probability"),
    ({"zero_probability": 1.0}, "zero_probability"),
    ({"filter_type": "ternary"}, "filter_type"),
    ({"lookup": "cached"}, "lookup"),
    ({"dropout_rate": 1.0}, "dropout_rate"),
    ({"seed": -1}, "seed"),
])
def test_bad_arguments_name_the_argument(kwargs, match):
    args = dict(vocabulary_size=10, output_dim=4, base_dim=4, intermediate_dim=4, seed=0)
    args.update(kwargs)
    with pytest.raises(ValueError, match=f"`{match}`"):
        AloneEmbedding(**args)


def test_seed_none_draws_a_seed_that_the_config_keeps():
    layer = AloneEmbedding(30, 4, 8, 8)
    layer.build()
    clone = AloneEmbedding.from_config(layer.get_config())
    clone.build()
    assert isinstance(layer.get_config()["seed"], int)
    np.testing.assert_array_equal(clone.filters(np.arange(30)), layer.filters(np.arange(30)))
    # Default initializers are seeded too: same seed, same embeddings.
    np.testing.assert_array_equal(clone(np.arange(30)), layer(np.arange(30)))


@pytest.mark.numerics
def test_table_methods_before_any_call_build_the_layer():
    layer = AloneEmbedding(20, 4, 8, 8, seed=1)
    table = np.asarray(layer.attend(np.eye(4, dtype="float32")))
    assert layer.built and table.shape == (4, 20)
    # The table and a lookup: two FFN calls, maybe of other shapes.
    assert_close(np.asarray(layer.embeddings), np.asarray(layer(np.arange(20))),
                 n=_ffn_roundings(layer), scale=_terms(layer, np.arange(20)))
