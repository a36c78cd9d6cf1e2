import json

import keras
import numpy as np
import pytest

from tests.layers.test_rotary import rotate_reference
from tests.models.bert_reference import hf_bert_forward
from tests.models.bert_reference import hf_mlm_logits
from tests.models.float64 import tf_gelu_roundings
from tfeff.convert import write_hf_bert
from tfeff.convert.hf_bert import read_weights
from tfeff.models import Bert
from tfeff.models import BertBackbone
from tfeff.models.relaxed_merge import probe_inputs
from tfeff.testing.numerics import assert_close

SIZES = dict(num_layers=2, hidden_dim=16, num_heads=2, intermediate_dim=24,
             max_sequence_length=20)
# Against NumPy in float64: heads of 4, whose attention scale 1/sqrt(4) is exact where Keras
# rounds a Python float to float32 even in a float64 model (1/sqrt(8) by 2e-8;
# tests/models/float64.py).
GOLDEN = {**SIZES, "num_heads": 4}


def make_bert(seed=0, use_nsp=False, dtype=None, **kwargs):
    """A built `Bert` of `SIZES` (`kwargs`: the backbone's), its weights moved off the
    initializers'."""
    backbone = BertBackbone(40, **{**SIZES, **kwargs}, name="bert_backbone", dtype=dtype)
    bert = Bert(backbone, use_nsp=use_nsp, name="bert", dtype=dtype)
    bert.build()
    rng = np.random.default_rng(seed)
    for w in bert.weights:  # away from the initializers' zeros and ones
        w.assign(w + rng.normal(0, 0.2, w.shape).astype("float32"))
    return bert


def config_with_dtype(config, dtype):
    """A task's config (`get_config()`) for the same model in `dtype`: the task's dtype and
    its nested backbone's."""
    backbone = config["backbone"]
    return {**config, "dtype": dtype,
            "backbone": {**backbone, "config": {**backbone["config"], "dtype": dtype}}}


def batch(bert, seed=0):
    x = probe_inputs(bert, batch_size=3, length=14, seed=seed)
    p = x["masked_positions"].shape[1]
    rng = np.random.default_rng(seed + 1)
    x["masked_ids"] = rng.integers(5, bert.backbone.vocabulary_size,
                                   size=(3, p)).astype("int32")
    x["masked_weights"] = np.ones((3, p), "float32")
    x["masked_weights"][1, -1] = 0.0
    x["nsp_labels"] = np.array([0, 1, 0], "int32")
    return x


def assert_golden(bert, out, expected, logits, tensors, mask, float32_roundings):
    """`out` of a float64 `bert` against the float64 NumPy BERT: `float32_roundings` per
    layer in the sequence output, plus TensorFlow's GELU constant in the product after
    each GELU and one for the ~500 float64 roundings; the head's GELU (its product over
    the hidden size), the logits' cast to float32 and the float32 bias more in the
    logits, whose cast rounds their value before the bias."""
    sizes = bert.backbone
    sequence = sizes.num_layers * (float32_roundings
                                   + tf_gelu_roundings(sizes.intermediate_dim)) + 1
    assert_close(np.asarray(out["sequence_output"])[mask], expected[mask], n=sequence,
                 err_msg="sequence_output")
    scale = np.abs(logits).max() + np.abs(tensors["cls.predictions.bias"]).max()
    assert_close(out["mlm_logits"], logits, n=sequence + tf_gelu_roundings(sizes.hidden_dim) + 2,
                 scale=scale, err_msg="mlm_logits")


@pytest.mark.numerics
@pytest.mark.parametrize("activation", ["gelu", "gelu_approximate"])
def test_golden_against_a_numpy_bert_in_hugging_face_layout(tmp_path, activation):
    """The forward pass equals a float64 NumPy BERT written from the Hugging Face
    definition, reading the tensors that write_hf_bert produced (so the layout
    and the transposes are checked too); in float64, to float64 rounding but for
    GELU's float32 constant."""
    bert = make_bert(activation=activation, **GOLDEN)
    write_hf_bert(bert, tmp_path / "hf")
    tensors = read_weights(tmp_path / "hf" / "model.safetensors")
    cfg = json.loads((tmp_path / "hf" / "config.json").read_text())
    x = batch(bert)
    bert64 = Bert.from_config(config_with_dtype(bert.get_config(), "float64"))
    bert64.build()
    bert64.set_weights(bert.get_weights())
    mask = x["padding_mask"].astype(bool)
    expected = hf_bert_forward(tensors, cfg, x["token_ids"], x["segment_ids"], x["padding_mask"])
    logits = hf_mlm_logits(tensors, cfg, expected, x["masked_positions"])
    assert_golden(bert64, bert64(x), expected, logits, tensors, mask, 0)


@pytest.mark.numerics
def test_mlm_head_scores_only_masked_positions_and_is_tied():
    bert = make_bert(dtype="float64")
    x = batch(bert)
    out = bert(x)
    n = x["token_ids"].shape[1]
    all_positions = np.broadcast_to(np.arange(n), (3, n)).astype("int32")
    full = np.asarray(bert({**x, "masked_positions": all_positions})["mlm_logits"])
    # The head on other shapes in float64, then each side's cast to float32 and float32
    # bias: 2 float32 roundings, and under one for the float64 rest.
    assert_close(out["mlm_logits"],
                 np.take_along_axis(full, x["masked_positions"][:, :, None], 1), n=3,
                 scale=np.abs(full).max() + np.abs(np.asarray(bert.mlm_bias)).max())
    assert out["mlm_logits"].shape == (3, x["masked_positions"].shape[1], 40)
    # Tied: no output embedding of its own.
    assert not [w for w in bert.weights if w.shape == (16, 40) or w.shape == (40, 16)
                and "token_embedding" not in w.path]


@pytest.mark.numerics
def test_loss_is_the_weighted_mean_cross_entropy_plus_nsp():
    bert = make_bert(use_nsp=True)
    x = batch(bert)
    out = bert(x)
    logits = np.asarray(out["mlm_logits"], np.float64)
    logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    ce = -np.take_along_axis(logp, x["masked_ids"][:, :, None], -1)[..., 0]
    mlm = (ce * x["masked_weights"]).sum() / x["masked_weights"].sum()
    nsp_logits = np.asarray(out["nsp_logits"], np.float64)
    nsp_logp = nsp_logits - np.log(np.exp(nsp_logits).sum(-1, keepdims=True))
    nsp = -nsp_logp[np.arange(3), x["nsp_labels"]].mean()
    # float32 from the same logits: a log-softmax over V (shift, exp, sum, log: V + 10
    # roundings), the weights' product and sum over the 3 p masked positions, the division,
    # the sum of the two (NSP's path is shorter). A cross-entropy's terms are up to
    # 2 max|logit| + log V.
    p = x["masked_positions"].shape[1]
    scale = sum(2 * np.abs(z).max() + np.log(z.shape[-1]) for z in (logits, nsp_logits))
    assert_close(float(bert.compute_loss(x, None, out)), mlm + nsp,
                 n=bert.backbone.vocabulary_size + 10 + 1 + 3 * p + 2, scale=scale)


@pytest.mark.numerics
def test_rotary_positions_golden_against_the_numpy_bert(tmp_path):
    """A rotary Bert is the learned-position one without the position table and
    with queries and keys rotated (RoFormer), in float64 NumPy."""
    learned = make_bert(**GOLDEN)
    write_hf_bert(learned, tmp_path / "hf")
    tensors = read_weights(tmp_path / "hf" / "model.safetensors")
    cfg = json.loads((tmp_path / "hf" / "config.json").read_text())
    rotary = Bert(BertBackbone(40, **GOLDEN, position_embedding="rotary", name="bert_backbone",
                               dtype="float64"), name="bert", dtype="float64")
    rotary.build()
    assert not [w.path for w in rotary.weights if "position" in w.path]
    source = {w.path: w for w in learned.weights}
    for w in rotary.weights:
        w.assign(keras.ops.cast(source[w.path], "float64"))
    x = batch(rotary)
    mask = x["padding_mask"].astype(bool)
    expected = hf_bert_forward(tensors, cfg, x["token_ids"], x["segment_ids"],
                               x["padding_mask"], rotate=rotate_reference)
    logits = hf_mlm_logits(tensors, cfg, expected, x["masked_positions"])
    # The rotation computes in float32: rounding_counts' 5 n + 8 (its angles up to n).
    n = x["token_ids"].shape[1]
    assert_golden(rotary, rotary(x), expected, logits, tensors, mask, 5 * n + 8)


def test_rotary_positions_go_to_roformer_and_are_refused_by_keras_hub(tmp_path):
    rotary = make_bert(position_embedding="rotary")
    write_hf_bert(rotary, tmp_path / "hf")  # tests/convert/test_core.py: RoFormer's layout
    assert json.loads((tmp_path / "hf" / "config.json").read_text())["model_type"] == "roformer"
    pytest.importorskip("keras_hub")
    from tfeff.convert import to_keras_hub

    with pytest.raises(ValueError, match="learned position embeddings.*'rotary'"):
        to_keras_hub(rotary)


def test_reading_a_hugging_face_bert_with_relative_positions_is_refused(tmp_path):
    from tfeff.convert import read_hf_bert

    write_hf_bert(make_bert(), tmp_path / "hf")
    path = tmp_path / "hf" / "config.json"
    cfg = json.loads(path.read_text())
    path.write_text(json.dumps({**cfg, "position_embedding_type": "relative_key"}))
    with pytest.raises(ValueError, match="config.json: position_embedding_type 'relative_key'"):
        read_hf_bert(tmp_path / "hf")


@pytest.mark.numerics
@pytest.mark.parametrize("relaxed, position", [
    (None, "learned"),
    ({"num_anchors": 3, "ffn_rank": 4, "anchor_selection": "strided"}, "learned"),
    (None, "rotary"),
    ({"num_anchors": 3, "ffn_rank": 4, "anchor_selection": "strided"}, "rotary"),
])
def test_padding_never_leaks(relaxed, position):
    bert = make_bert(relaxed=relaxed, position_embedding=position)
    x = batch(bert)
    changed = dict(x)
    mask = x["padding_mask"].astype(bool)
    changed["token_ids"] = np.where(mask, x["token_ids"], 7).astype("int32")
    changed["segment_ids"] = np.where(mask, x["segment_ids"], 1).astype("int32")
    a, b = bert(x), bert(changed)
    # Bit-identical: a real position's values go through the same arithmetic (padded keys
    # get attention weights of exactly 0; every other step is per position).
    np.testing.assert_array_equal(np.asarray(a["sequence_output"])[mask],
                                  np.asarray(b["sequence_output"])[mask])
    np.testing.assert_array_equal(a["mlm_logits"], b["mlm_logits"])


@pytest.mark.parametrize("relaxed, position", [
    (None, "learned"),
    # The relaxed model with learned positions: its layers are the rotary case's below, its
    # positions the standard case's (18 s): `make test-slow`.
    pytest.param({"num_anchors": 3, "ffn_rank": 4}, "learned", marks=pytest.mark.slow),
    ({"num_anchors": 3, "ffn_rank": 4}, "rotary"),
])
def test_config_round_trip_save_load_and_fit(tmp_path, relaxed, position):
    bert = make_bert(relaxed=relaxed, use_nsp=True, seed=1, position_embedding=position)
    config = bert.get_config()
    json.dumps(config)
    assert Bert.from_config(config).get_config() == config
    x = batch(bert)
    bert.save(tmp_path / "bert.keras")
    reloaded = keras.saving.load_model(tmp_path / "bert.keras")
    for key, value in bert(x).items():  # the same weights and computation: bit-identical
        np.testing.assert_array_equal(reloaded(x)[key], value)
    bert.compile(optimizer=keras.optimizers.Adam(3e-3))
    losses = bert.fit(x, epochs=25, batch_size=3, verbose=0).history["loss"]
    assert losses[-1] < 0.6 * losses[0]
    names = [w.path for w in bert.weights]
    assert len(set(names)) == len(names)


def test_relaxed_model_uses_the_core_layers_and_fewer_parameters():
    from tfeff.layers import AnchorMultiHeadAttention
    from tfeff.layers import FactorizedDense

    standard = make_bert()
    relaxed = make_bert(relaxed={"num_anchors": 3, "ffn_rank": 4})
    layer = relaxed.backbone.transformer_layers[0]
    assert isinstance(layer.self_attention, AnchorMultiHeadAttention)
    assert isinstance(layer.intermediate_dense, FactorizedDense)
    d, f, r = 16, 24, 4
    per_layer = (d * f) * 2 - (d * r + r * f) * 2
    assert standard.count_params() - relaxed.count_params() == 2 * per_layer


@pytest.mark.numerics
def test_alone_input_embedding_scores_against_its_table():
    alone = {"intermediate_dim": 32, "num_codebooks": 2, "codebook_size": 4, "seed": 3}
    bert = Bert(BertBackbone(40, **SIZES, input_embedding="alone", alone=alone,
                             dtype="float64"), name="bert", dtype="float64")
    bert.build()
    x = batch(bert)
    out = bert(x)
    table = np.asarray(bert.backbone.token_embedding.embedding_table(), np.float64)
    h = np.take_along_axis(np.asarray(out["sequence_output"], np.float64),
                           x["masked_positions"][:, :, None], 1)
    h = np.asarray(bert.mlm_norm(bert.mlm_dense(h)), np.float64)
    logits = h @ table.T
    # float64 but for the model's cast of the logits to float32 and its float32 bias: 2
    # roundings, and under one for the float64 rest.
    assert_close(out["mlm_logits"], logits + np.asarray(bert.mlm_bias), n=3,
                 scale=np.abs(logits).max() + np.abs(np.asarray(bert.mlm_bias)).max())
    # The embedding's parameters do not grow with the vocabulary.
    bigger = Bert(BertBackbone(4000, **SIZES, input_embedding="alone",
                               alone=bert.backbone.alone))
    bigger.build()
    assert (bigger.backbone.token_embedding.count_params()
            == bert.backbone.token_embedding.count_params())


@pytest.mark.parametrize("kwargs,message", [
    ({"num_heads": 3}, "multiple of `num_heads`"),
    ({"relaxed": {"anchors": 3}}, "Unknown `relaxed` key"),
    ({"relaxed": {"num_anchors": 0, "ffn_rank": 0}}, "needs num_anchors or ffn_rank"),
    ({"activation": "swish"}, "activation='swish'"),
    ({"input_embedding": "fixed"}, "input_embedding='fixed'"),
    ({"position_embedding": "sinusoidal"}, "position_embedding='sinusoidal'"),
])
def test_invalid_arguments_are_named(kwargs, message):
    with pytest.raises(ValueError, match=message):
        BertBackbone(40, **{**SIZES, **kwargs})


def test_the_task_takes_a_backbone_and_names_its_class():
    """The encoder's arguments are the backbone's: the task given anything else (the
    vocabulary size it took before) says what it takes."""
    for call in (lambda: Bert(40), lambda: Bert(40, num_layers=1, use_nsp=True)):
        with pytest.raises(TypeError, match=r"Bert takes its backbone, a BertBackbone object"
                                            r".*Received: backbone of type int"):
            call()


def test_every_dropout_draws_its_own_mask():
    """The attention and output dropouts of a layer (same shape, one seed given)
    used to drop the same units at every step."""
    from tfeff.models.bert_layer import BertLayer

    layer = BertLayer(16, 2, 24, dropout_rate=0.5, seed=3)
    layer.build((None, None, 16))
    ones = np.ones((4, 10, 16), "float32")
    kept_attention = np.asarray(layer.attention_dropout(ones, training=True)) != 0
    kept_output = np.asarray(layer.output_dropout(ones, training=True)) != 0
    assert 0.4 < kept_attention.mean() < 0.6 and 0.4 < kept_output.mean() < 0.6
    assert 0.4 < (kept_attention == kept_output).mean() < 0.6  # independent, not equal
    # Still reproducible: the same seed draws the same masks.
    again = BertLayer(16, 2, 24, dropout_rate=0.5, seed=3)
    again.build((None, None, 16))
    np.testing.assert_array_equal(np.asarray(again.attention_dropout(ones, training=True)) != 0,
                                  kept_attention)
    # Across a whole model no two dropouts (attention probabilities included) share a seed.
    bert = Bert(BertBackbone(40, **{**SIZES, "num_layers": 3}, seed=0))
    bert.build()
    seeds = [sub.seed for sub in bert._flatten_layers()
             if isinstance(sub, keras.layers.Dropout)]
    assert len(seeds) == 1 + 3 * 3 and len(set(seeds)) == len(seeds)


def test_a_left_padded_padding_mask_is_refused():
    """Positions count from the first token and [CLS] is position 0: padding comes last."""
    bert = Bert(BertBackbone(40, **{**SIZES, "num_layers": 1}, name="bert_backbone"),
                name="bert")
    ids = np.array([[2, 5, 6, 0], [0, 0, 2, 5]], "int32")
    with pytest.raises(ValueError, match=r"BertBackbone `bert_backbone` needs a right-padded `padding_mask`.*"
                                         r"Row 1 is True at position 2"):
        bert({"token_ids": ids})


def test_the_backbone_is_the_encoder_of_the_task_and_stands_alone(tmp_path):
    """`Bert.backbone` computes the task's sequence output and export layers with the task's
    own variables (one set, under the backbone's name in the task's paths); the task's
    config nests the backbone's; saved alone the backbone reloads as a `BertBackbone` with
    the same outputs, and the task as a `Bert` (files written before the backbone was
    split off: tests/compat)."""
    bert = make_bert(use_nsp=True)
    x = batch(bert)
    backbone = bert.backbone
    assert isinstance(backbone, BertBackbone) and backbone.built
    assert {id(w) for w in backbone.weights} < {id(w) for w in bert.weights}
    # The heads': the MLM dense and norm (2 each) and bias, the pooler and NSP dense (2 each).
    assert len(bert.weights) == len(backbone.weights) + 9
    assert all(w.path.startswith("bert/bert_backbone/") for w in backbone.weights)
    assert all(w.path.startswith("bert/") and "backbone" not in w.path
               for w in bert.weights if not any(w is v for v in backbone.weights))
    config = bert.get_config()
    assert config["backbone"] == keras.saving.serialize_keras_object(backbone)
    assert config["use_nsp"] is True and "hidden_dim" not in config
    inputs = {k: x[k] for k in ("token_ids", "segment_ids", "padding_mask")}
    sequence = np.asarray(backbone(inputs))
    np.testing.assert_array_equal(sequence, np.asarray(bert(x)["sequence_output"]))
    ids, mask = x["token_ids"], x["padding_mask"]
    np.testing.assert_array_equal(np.asarray(backbone.embedding_layers(ids, mask)),
                                  np.asarray(bert.embedding_layers(ids, mask)))
    backbone.save(tmp_path / "backbone.keras")
    loaded = keras.saving.load_model(tmp_path / "backbone.keras")
    assert type(loaded) is BertBackbone and loaded.get_config()["relaxed"] is None
    np.testing.assert_array_equal(np.asarray(loaded(inputs)), sequence)
    bert.save(tmp_path / "bert.keras")
    reloaded = keras.saving.load_model(tmp_path / "bert.keras")
    np.testing.assert_array_equal(np.asarray(reloaded(x)["mlm_logits"]),
                                  np.asarray(bert(x)["mlm_logits"]))
