import keras
import numpy as np
import pytest
import tensorflow as tf

from tests.models.float64 import float64_models
from tests.models.lm_roundings import assert_normalized
from tests.models.lm_roundings import assert_same_update
from tests.models.lm_roundings import head_roundings
from tests.models.lm_tasks import language_model
from tfeff.models import ElmoBackbone
from tfeff.models import ElmoLM
from tfeff.testing.numerics import assert_close
from tfeff.training import make_strategy


ALONE = {"intermediate_dim": 12, "seed": 1, "dropout_rate": 0.0}
# ALONE input tied to a full softmax: each replica computes its own table once per step.
ALONE_TIED = {"output_layer": "full", "input_embedding": "alone", "tie_output": True,
              "token_embedding_dim": 6, "alone": ALONE}


def _one_step(strategy, table, ids, **kwargs):
    keras.utils.set_random_seed(0)
    with strategy.scope(), float64_models():
        model = language_model(ElmoLM, embedding_table=table, num_layers=2, units=16,
                               projection_dim=8, dropout_rate=0.0, **kwargs)
        model.build()
        model.compile(optimizer=keras.optimizers.SGD(0.5), jit_compile=False)
    before = [keras.ops.convert_to_numpy(w) for w in model.weights]
    history = model.fit(tf.data.Dataset.from_tensors(ids), epochs=1, verbose=0)
    return (history.history["loss"][0], [keras.ops.convert_to_numpy(w) for w in model.weights],
            before)


# Two models with other variables on the same devices in one process: this also
# checks that make_strategy reuses its MirroredStrategy (tensorflow#62790).
@pytest.mark.numerics
@pytest.mark.parametrize("kwargs", [{}, ALONE_TIED], ids=["continuous", "alone_tied"])
def test_two_replicas_equal_one_on_the_same_global_batch(kwargs, tmp_path):
    rng = np.random.default_rng(0)
    table = rng.normal(size=(30, 6)).astype("float32")
    table[:2] = 0
    np.save(str(tmp_path / "t.npy"), table)
    ids = rng.integers(2, 30, size=(4, 7)).astype("int32")
    ids[0, 4:] = 0  # uneven padding: replica token counts differ
    ids[3, 2:] = 0
    devices = ["/cpu:0", "/cpu:1"]
    assert len(tf.config.list_logical_devices("CPU")) >= 2
    loss1, w1, before = _one_step(make_strategy("default"), str(tmp_path / "t.npy"), ids,
                                  **kwargs)
    loss2, w2, _ = _one_step(make_strategy("mirrored", devices), str(tmp_path / "t.npy"), ids,
                             **kwargs)
    # float64 on other batch shapes, the gradients summed per replica first; float32 in
    # the output layer (the loss from its cast on: the mean over 28 targets at most) and
    # ALONE's filter product (2), the step back through them too; the float64 rest adds
    # under one.
    n = head_roundings(8, 30, 28) + 2 + 1
    assert_close(loss2, loss1, n=n)
    for a, b, w in zip(w1, w2, before):
        assert_same_update(a, b, w, n=2 * n)


@pytest.mark.numerics
def test_loss_is_mean_over_predictable_targets(tmp_path):
    table = np.random.default_rng(1).normal(size=(10, 4)).astype("float32")
    table[:2] = 0
    model = ElmoLM(ElmoBackbone(embedding_table=table, num_layers=1, units=8, projection_dim=4,
                                dropout_rate=0.0))
    ids = np.array([[2, 5, 1, 3, 0]], "int32")  # <s> w <unk> </s> <pad>
    pred = model(ids)
    loss = float(model.compute_loss(x=ids, y_pred=pred))
    out = model.output_head
    f = out.position_loss(table[ids[:, 1:]], pred["forward"][:, :-1]).numpy()[0]
    b = out.position_loss(table[ids[:, :-1]], pred["backward"][:, 1:]).numpy()[0]
    # Forward targets: 5, (unk), 3, (pad); backward targets: 2, 5, (unk), and 3 from the
    # padding after </s>, where the backward LM has read nothing: no target.
    f, b = np.asarray(f, np.float64), np.asarray(b, np.float64)
    expected = (f[0] + f[2]) / 2 + (b[0] + b[1]) / 2
    # The model's position losses (float32, on other shapes: a continuous loss of 4-dim
    # vectors) and their means over 4 targets at most, summed.
    assert_close(loss, expected, n=head_roundings(4, 10, 4),
                 scale=2 * max(np.abs(f).max(), np.abs(b).max()))
    # ELMo's (bilm-tf's) combination: the mean of the two directions' losses.
    model.direction_loss = "mean"
    assert_close(float(model.compute_loss(x=ids, y_pred=pred)), expected / 2,
                 n=head_roundings(4, 10, 4), scale=max(np.abs(f).max(), np.abs(b).max()))
    assert model.backbone.token_embedding.weights == []
    assert all("token_embedding" not in w.path for w in model.weights)


VARIANTS = {
    "full": {},
    "adaptive": {"adaptive_cutoffs": [4, 7], "adaptive_div_value": 2.0},
    "sampled": {"num_sampled": 5},
    "fixed": {"num_sampled": 5},
    "tied": {"output_layer": "full", "input_embedding": "trainable", "tie_output": True,
             "token_embedding_dim": 6},
    "alone": {"output_layer": "full", "input_embedding": "alone", "token_embedding_dim": 6,
              "alone": ALONE},
    "alone_tied": ALONE_TIED,
}


@pytest.mark.numerics
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_softmax_variants_loss_is_mean_target_nll(variant):
    table = np.random.default_rng(1).normal(size=(10, 4)).astype("float32")
    kwargs = {"output_layer": variant, **VARIANTS[variant]}
    model = language_model(ElmoLM, embedding_table=table, num_layers=1, units=8,
                           projection_dim=4, dropout_rate=0.0, seed=0, **kwargs)
    ids = np.array([[2, 5, 1, 3, 0], [2, 9, 8, 7, 3]], "int32")
    out = model(ids)
    loss = float(model.compute_loss(x=ids, y_pred=out, training=False))
    expected, largest = 0.0, 0.0
    # Each position's target; a target counts if it is a word (not <pad>, not <unk>) and
    # the position predicting it is a token (not the padding after </s>).
    for h, tgt, source in ((out["forward"][:, :-1], ids[:, 1:], ids[:, :-1]),
                           (out["backward"][:, 1:], ids[:, :-1], ids[:, 1:])):
        log_probs = np.asarray(model.log_prob(h).numpy(), np.float64)
        largest = max(largest, np.abs(log_probs).max())
        lp = np.take_along_axis(log_probs, tgt[..., None], -1)[..., 0]
        expected += -lp[(tgt >= 2) & (source > 0)].mean()
    # float32 from the same features by another path (6-dim at most; 8 targets per
    # direction), in terms up to max|log p|.
    assert_close(loss, expected, n=head_roundings(6, 10, 8), scale=2 * largest)
    assert_normalized(model.log_prob(out["forward"]).numpy())
    if variant == "tied":
        assert model.output_head.embeddings is model.backbone.token_embedding.embeddings
        paths = [w.path for w in model.weights]
        assert len(paths) == len(set(paths))
        assert not any("full_softmax/embeddings" in p for p in paths)
    if variant.startswith("alone"):
        alone = model.backbone.token_embedding
        assert alone.lookup == ("table" if variant == "alone_tied" else "unique")
        assert alone.count_params() == 6 + 12 * (6 + 6)
        paths = [w.path for w in model.weights]
        assert sum("embeddings" in p for p in paths) == (0 if variant == "alone_tied" else 1)
    if variant == "alone_tied":
        # The softmax scores against the ALONE table: logits = h @ table^T + bias.
        h = out["forward"]
        logits = alone.attend(h).numpy() + np.asarray(model.output_head.bias.numpy(), np.float64)
        expected_lp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
        # float32: the logits by another product over the 6 dims (and bias, cast), a
        # log-softmax over 10 ids (20), in terms up to max|logit| + log V.
        assert_close(model.log_prob(h).numpy(), expected_lp, n=6 + 3 + 10 + 10,
                     scale=np.abs(logits).max() + np.log(10))
    if variant == "fixed":
        assert not any("fixed_sampled_softmax" in w.path for w in model.weights)
    # A training step (sampled losses for sampled/fixed) gives finite gradients to every weight.
    with tf.GradientTape() as tape:
        train_loss = model.compute_loss(x=ids, y_pred=model(ids, training=True), training=True)
    grads = tape.gradient(train_loss, model.trainable_weights)
    assert np.isfinite(float(train_loss))
    missing = [w.path for w, g in zip(model.trainable_weights, grads) if g is None]
    assert missing == [] or (variant == "adaptive" and all("tail" in m for m in missing)), missing


def test_config_round_trip_of_variants(tmp_path):
    table = np.random.default_rng(1).normal(size=(10, 4)).astype("float32")
    path = str(tmp_path / "t.npy")
    np.save(path, table)
    for variant, extra in VARIANTS.items():
        kwargs = {"output_layer": variant, **extra}
        model = language_model(ElmoLM, embedding_table=path, num_layers=1, units=8,
                               projection_dim=4, **kwargs)
        config = model.get_config()
        assert ElmoLM.from_config(config).get_config() == config
    # ELMo's cell: the clipping bounds reach every LSTM and survive the round trip.
    model = ElmoLM(ElmoBackbone(embedding_table=path, num_layers=2, units=8, projection_dim=4,
                                cell_clip=3.0, proj_clip=3.0), direction_loss="mean")
    clone = ElmoLM.from_config(model.get_config())
    for m in (model, clone):
        assert m.direction_loss == "mean"
        assert {(lstm.cell_clip, lstm.proj_clip)
                for lstm in m.backbone.forward_lstms + m.backbone.backward_lstms} == {
                    (3.0, 3.0)}
    with pytest.raises(ValueError, match="`direction_loss`.*Received: direction_loss='avg'"):
        ElmoLM(ElmoBackbone(embedding_table=path), direction_loss="avg")
    # An ALONE seed drawn at construction is kept: the clone has the same filters.
    model = ElmoLM(ElmoBackbone(embedding_table=path, num_layers=1, units=8, projection_dim=4,
                                input_embedding="alone", alone={"intermediate_dim": 8}),
                   output_layer="full")
    clone = ElmoLM.from_config(model.get_config())
    assert (clone.backbone.token_embedding.filter_fingerprint
            == model.backbone.token_embedding.filter_fingerprint)


def test_tied_alone_computes_its_table_once_per_train_step():
    table = np.random.default_rng(1).normal(size=(10, 4)).astype("float32")
    model = language_model(ElmoLM, embedding_table=table, num_layers=1, units=8,
                           projection_dim=4, **ALONE_TIED)
    model.compile(optimizer=keras.optimizers.SGD(0.1), jit_compile=False)
    alone = model.backbone.token_embedding
    calls = []
    embed = alone._embed

    def counting_embed(ids, training):  # instruments the real computation
        calls.append((tf.compat.v1.get_default_graph(), training, ids.shape[0]))
        return embed(ids, training)

    alone._embed = counting_embed
    ids = np.array([[2, 5, 1, 3, 0], [2, 9, 8, 7, 3]], "int32")
    model.fit(tf.data.Dataset.from_tensors(ids).repeat(3), epochs=1, verbose=0)
    # Keras traces the step for its symbolic build, then for training: each graph
    # runs one whole-table FFN, shared by the input and both output directions.
    graphs = [graph for graph, _, _ in calls]
    assert len(graphs) == len(set(graphs)) >= 1, calls
    assert all(training and rows == 10 for _, training, rows in calls), calls


def test_constructors_take_the_vocabulary_size_and_the_backbone_first(tmp_path):
    table = np.random.default_rng(1).normal(size=(10, 4)).astype("float32")
    path = str(tmp_path / "t.npy")
    np.save(path, table)
    # The table's rows give the size; a given size must agree with them.
    assert ElmoBackbone(embedding_table=path, num_layers=1, units=8,
                        projection_dim=4).vocabulary_size == 10
    assert ElmoBackbone(np.int64(10), embedding_table=path, num_layers=1, units=8,
                        projection_dim=4).vocabulary_size == 10
    with pytest.raises(ValueError, match="`vocabulary_size`=11 differs from the table's 10"):
        ElmoBackbone(11, embedding_table=path, num_layers=1, units=8, projection_dim=4)
    # The old positional table is refused by name, not read as a size.
    for old_style in (path, table):
        with pytest.raises(TypeError, match="first argument is `vocabulary_size`.*embedding_table="):
            ElmoBackbone(old_style, num_layers=1, units=8, projection_dim=4)
        # The task takes its backbone: given the table (or a size) it names what it takes.
        with pytest.raises(TypeError, match="ElmoLM takes its backbone, an? ElmoBackbone.*Received: backbone"):
            ElmoLM(old_style)
    with pytest.raises(TypeError, match="ElmoLM takes its backbone, an? ElmoBackbone.*of type int"):
        ElmoLM(10)


def test_left_padded_ids_are_refused():
    model = ElmoLM(ElmoBackbone(30, input_embedding="trainable", num_layers=1, units=8,
                                projection_dim=4, name="elmo_backbone"),
                   output_layer="full", name="elmo")
    with pytest.raises(ValueError, match=r"ElmoBackbone `elmo_backbone` needs a right-padded `mask`.*"
                                         r"Row 0 is True at position 2"):
        model(np.array([[0, 0, 5, 6], [5, 6, 7, 0]], "int32"))


def test_the_old_name_of_token_embedding_dim_is_read_from_saved_configs():
    """`embedding_dim`, the input width's name in saved (flat) ElmoLM configs, still sets the
    backbone's `token_embedding_dim`; the model's `embedding_dim` is now the exported width,
    as for the other models."""
    saved = dict(vocabulary_size=20, num_layers=1, units=4, projection_dim=4,
                 input_embedding="trainable", output_layer="full", embedding_dim=6,
                 name="elmo_lm")
    lm = ElmoLM.from_config(saved)
    assert (lm.backbone.token_embedding_dim, lm.embedding_dim,
            lm.embedding_num_layers) == (6, 8, 2)
    backbone_config = lm.get_config()["backbone"]["config"]
    assert backbone_config["token_embedding_dim"] == 6 and "embedding_dim" not in backbone_config
    ids = np.array([[2, 5, 6, 3, 0]], "int32")
    stack, _, _ = lm.backbone.encode(lm.backbone.token_embedding(ids), ids > 0)
    np.testing.assert_array_equal(np.asarray(lm.embedding_layers(ids, ids > 0)), np.asarray(stack))


def test_plain_lstms_without_layer_norm_save_load_and_embed(tmp_path):
    """Li et al.'s Table 5 encoders (`projection_dim=None`: 2048-cell LSTMs, here 8) and
    ELMo's (`layer_norm=False`): the width is `units`, no projection or norm weights exist,
    and a `.keras` round trip gives the same outputs and embedding layers."""
    table = str(tmp_path / "table.npy")
    np.save(table, np.random.default_rng(2).normal(size=(12, 4)).astype("float32"))
    model = ElmoLM(ElmoBackbone(embedding_table=table, num_layers=2, units=8,
                                projection_dim=None, layer_norm=False, dropout_rate=0.0))
    model.build()
    # Every LSTM's kernel, recurrent kernel and bias is trained, and nothing else of the
    # encoder but the token projection.
    names = [w.path.split("/")[-1] for w in model.trainable_weights]
    assert sorted(n for n in names if n in ("kernel", "recurrent_kernel", "bias")) == \
        sorted(["kernel", "bias"] + ["kernel", "recurrent_kernel", "bias"] * 4 + ["kernel",
                                                                                   "bias"])
    assert not set(names) & {"projection_kernel", "gamma", "beta"}, names
    assert model.count_params() == (4 * 8 + 8) + 2 * 2 * (8 * 32 * 2 + 32) + (8 * 4 + 4)
    assert (model.backbone.width, model.embedding_dim, model.backbone.layer_norm) == (8, 16, False)
    ids = np.array([[2, 5, 6, 3, 0], [2, 7, 3, 0, 0]], "int32")
    assert tuple(model(ids)["forward"].shape) == (2, 5, 4)  # the continuous head: 4-d
    path = str(tmp_path / "plain.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)
    assert loaded.backbone.projection_dim is None and loaded.backbone.layer_norm is False
    for key in ("forward", "backward"):
        np.testing.assert_array_equal(loaded(ids)[key], model(ids)[key])
    np.testing.assert_array_equal(loaded.embedding_layers(ids, ids > 0),
                                  model.embedding_layers(ids, ids > 0))
    # With the norms (the default), each direction of each layer has one.
    normed = ElmoLM(ElmoBackbone(embedding_table=table, num_layers=2, units=8,
                                 projection_dim=None, dropout_rate=0.0))
    normed.build()
    assert sum("gamma" in w.path for w in normed.weights) == 4
