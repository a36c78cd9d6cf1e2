import json
import os
import stat

import keras
import numpy as np
import pytest

from tests.models.test_bert import SIZES
from tests.models.test_bert import batch
from tests.models.test_bert import config_with_dtype
from tests.models.test_bert import make_bert
from tests.models.float64 import float64_models
from tfeff.testing.numerics import assert_close
from tfeff.convert import ConversionError
from tfeff.models import relaxed_merge
from tfeff.convert import from_keras_hub
from tfeff.convert import merge_relaxed_bert
from tfeff.convert import read_hf_bert
from tfeff.convert import to_keras_hub
from tfeff.convert import write_hf_bert
from tfeff.convert.hf_bert import read_weights
from tfeff.convert.hf_roformer import rotary_pair_order
from tfeff.convert.hf_roformer import sinusoidal_table
from tfeff.layers import FactorizedDense
from tfeff.models import Bert
from tfeff.models import BertBackbone

RELAXED = {"num_anchors": 3, "ffn_rank": 4}


def assert_bert_outputs_close(actual, expected, bert, x):
    """Two float64 implementations of `bert` (a `Bert`) on `x`: `rounding_counts`' float64
    roundings, but for the logits, which `Bert` casts to float32 at the end: that cast
    and the masked-LM bias added in float32 (under one more for the float64 rest)."""
    counts = relaxed_merge.rounding_counts(bert, x["token_ids"].shape[1])
    mask = np.asarray(x["padding_mask"], bool)
    for key in expected:
        a, e = np.asarray(actual[key]), np.asarray(expected[key])
        if key == "sequence_output":
            a, e = a[mask], e[mask]
        if key.endswith("logits"):
            assert_close(a, e, n=3 if key == "mlm_logits" else 2, err_msg=key)
        else:
            assert_close(a, e, n=counts[key], dtype="float64", err_msg=key)


@pytest.mark.numerics
@pytest.mark.parametrize("relaxed", [RELAXED, {"num_anchors": 0, "ffn_rank": 4},
                                     {"num_anchors": 5, "ffn_rank": 0}])
def test_merge_reproduces_the_relaxed_model_with_exact_attention(relaxed):
    # float64: the merge's own float32 check passes (within check_tolerances), and the
    # models then compare to float64 rounding.
    source = make_bert(relaxed=relaxed, use_nsp=True, dtype="float64")
    standard = merge_relaxed_bert(source)
    assert not standard.backbone.is_relaxed and standard.name == source.name
    assert standard.compute_dtype == "float64"
    x = batch(source)
    expected, actual = source(x, exact_attention=True), standard(x)
    assert_bert_outputs_close(actual, expected, source, x)
    # ... and FFN kernels are the products, attention kernels copies.
    layer = source.backbone.transformer_layers[0]
    merged = standard.backbone.transformer_layers[0]
    if relaxed["ffn_rank"]:
        kernel, bias = layer.intermediate_dense.merged()
        np.testing.assert_array_equal(merged.intermediate_dense.kernel, kernel)
        np.testing.assert_array_equal(merged.intermediate_dense.bias, bias)
    for a, b in zip(layer.self_attention.weights, merged.self_attention.weights):
        np.testing.assert_array_equal(a, b)
    # Anchor attention itself is an approximation: the relaxed outputs differ.
    if relaxed["num_anchors"]:
        assert not np.allclose(source(x)["sequence_output"], expected["sequence_output"],
                               atol=1e-3)


def test_every_source_tensor_is_used_once_and_shapes_are_checked():
    source = make_bert(relaxed=RELAXED)
    standard = Bert(BertBackbone(40, **SIZES, name="bert_backbone"), name="bert")
    standard.build()
    plan = relaxed_merge._merge_plan(source, standard)
    used = [s for _, sources in plan.values() for s in sources]
    assert sorted(used) == sorted(w.path.split("/", 1)[1] for w in source.weights)
    assert len(used) == len(source.weights) == len(standard.weights) + 2 * 2  # 2 FFNs x 2 layers
    wider = Bert(BertBackbone(40, **{**SIZES, "intermediate_dim": 32}, name="bert_backbone"),
                 name="bert")
    wider.build()
    with pytest.raises(ConversionError, match="Shape mismatch for bert_backbone/"
                                              "transformer_layer_0/intermediate_dense/kernel"):
        relaxed_merge._merge_plan(source, wider)
    with_nsp = Bert(BertBackbone(40, **SIZES, name="bert_backbone"), use_nsp=True, name="bert")
    with_nsp.build()
    with pytest.raises(ConversionError, match="pooler/kernel has no source"):
        relaxed_merge._merge_plan(source, with_nsp)


def test_refuses_non_relaxed_models_and_failed_checks(monkeypatch):
    with pytest.raises(ConversionError, match="relaxed=None"):
        merge_relaxed_bert(make_bert())
    with pytest.raises(ConversionError, match="got Dense"):
        merge_relaxed_bert(keras.layers.Dense(3))
    source = make_bert(relaxed=RELAXED)
    wrong = relaxed_merge._merge_plan

    def off_by_a_little(relaxed, standard):  # a converter bug: one kernel slightly off
        plan = wrong(relaxed, standard)
        key = next(k for k in plan if k.endswith("output_dense/kernel"))
        plan[key] = (plan[key][0] * 1.001, plan[key][1])
        return plan

    # 0.1% off moves the logits by about 1e-4, past the float32 check's tolerance (about
    # 3e-5 here: check_tolerances).
    monkeypatch.setattr(relaxed_merge, "_merge_plan", off_by_a_little)
    with pytest.raises(ConversionError, match="relative error"):
        merge_relaxed_bert(source)


def test_a_mixed_precision_model_is_checked_in_float32_and_stays_mixed():
    """bf16 compute alone puts the relaxed and merged outputs about 5e-3 apart, far past
    the check's float32 tolerance: the check must compute in float32, at full
    matrix-product precision (not TF32)."""
    source = make_bert(relaxed=RELAXED, dtype="mixed_bfloat16")
    copy = Bert.from_config(config_with_dtype(source.get_config(), "float32"))  # the reference
    copy.build()
    copy.set_weights(source.get_weights())
    x = batch(source)
    bf16 = source(x, exact_attention=True)
    fp32 = copy(x, exact_attention=True)
    bounds = relaxed_merge.check_tolerances(source, x["token_ids"].shape[1])
    errors = relaxed_merge.compare_outputs(fp32, bf16, x["padding_mask"])
    assert all(errors[k] > 10 * bounds[k] for k in bounds), (errors, bounds)
    with relaxed_merge.float32_compute(source):
        inside = source(x, exact_attention=True)
    for key in fp32:  # the float32 model's computation: bit-identical
        np.testing.assert_array_equal(np.asarray(inside[key]), np.asarray(fp32[key]))
    # Every layer's policy is back (also after an error inside the block).
    with pytest.raises(RuntimeError):
        with relaxed_merge.float32_compute(source):
            raise RuntimeError
    policies = {layer.dtype_policy.name for layer in source._flatten_layers()}
    assert policies == {"mixed_bfloat16"}
    again = source(x, exact_attention=True)
    for key in bf16:
        np.testing.assert_array_equal(np.asarray(again[key]), np.asarray(bf16[key]))
    standard, errors = relaxed_merge.merge_and_check(source)  # passes its float32 check
    assert standard.dtype_policy.name == "mixed_bfloat16"
    assert standard.compute_dtype == "bfloat16" and standard.variable_dtype == "float32"


def test_exact_float32_matmuls_switch_tf32_off_and_back():
    import tensorflow as tf

    before = tf.config.experimental.tensor_float_32_execution_enabled()
    for outer in (True, False):
        tf.config.experimental.enable_tensor_float_32_execution(outer)
        with relaxed_merge.exact_float32_matmuls():
            assert not tf.config.experimental.tensor_float_32_execution_enabled()
        assert tf.config.experimental.tensor_float_32_execution_enabled() == outer
    tf.config.experimental.enable_tensor_float_32_execution(before)


def test_factorized_dense_weights_are_the_merge_source():
    """Each merged feed-forward kernel is its factorized source's A @ B (float64, rounded
    once), each bias the source's; an unfactorized dense is copied as it is."""
    source = make_bert(relaxed=RELAXED)
    merged = merge_relaxed_bert(source)
    factorized = 0
    for src_layer, dst_layer in zip(source.backbone.transformer_layers,
                                    merged.backbone.transformer_layers):
        for name in ("intermediate_dense", "output_dense"):
            src, dst = getattr(src_layer, name), getattr(dst_layer, name)
            assert not isinstance(dst, FactorizedDense)
            kernel = keras.ops.convert_to_numpy(dst.kernel)
            if isinstance(src, FactorizedDense):
                factorized += 1
                a, b = (np.asarray(keras.ops.convert_to_numpy(w), np.float64)
                        for w in (src.input_kernel, src.output_kernel))
                np.testing.assert_array_equal(kernel, (a @ b).astype(np.float32))
            else:
                np.testing.assert_array_equal(kernel, keras.ops.convert_to_numpy(src.kernel))
            np.testing.assert_array_equal(keras.ops.convert_to_numpy(dst.bias),
                                          keras.ops.convert_to_numpy(src.bias))
    assert factorized >= 2


@pytest.mark.parametrize("kwargs", [{"use_nsp": True}, {"activation": "relu"}])
def test_hugging_face_round_trip_preserves_outputs(tmp_path, kwargs):
    bert = make_bert(**kwargs)
    write_hf_bert(bert, tmp_path / "hf")
    back = read_hf_bert(tmp_path / "hf")
    x = batch(bert)
    for key, value in bert(x).items():
        np.testing.assert_array_equal(back(x)[key], value)
    with pytest.raises(FileExistsError):
        write_hf_bert(bert, tmp_path / "hf")


def test_hugging_face_bf16_weights_are_read_widened_to_float32(tmp_path):
    """A checkpoint saved in bfloat16 (as many on the Hub are) reads as its exact values."""
    import ml_dtypes
    from safetensors.numpy import save_file

    bert = make_bert()
    write_hf_bert(bert, tmp_path / "hf")
    path = str(tmp_path / "hf" / "model.safetensors")
    tensors = read_weights(path)
    halved = {k: v.astype(ml_dtypes.bfloat16) for k, v in tensors.items()}
    save_file(halved, path, metadata={"format": "pt"})
    widened = read_weights(path)
    assert widened.keys() == tensors.keys()
    for k, v in widened.items():
        assert v.dtype == np.float32, k
        np.testing.assert_array_equal(v, halved[k].astype(np.float32), err_msg=k)
    assert max(np.abs(widened[k] - tensors[k]).max() for k in tensors) > 0  # really rounded
    back = read_hf_bert(tmp_path / "hf")
    word = "bert.embeddings.word_embeddings.weight"
    np.testing.assert_array_equal(back.backbone.token_embedding.embeddings.numpy(),
                                  widened[word])


def test_hugging_face_reader_rejects_a_bad_directory(tmp_path):
    bert = make_bert()
    write_hf_bert(bert, tmp_path / "hf")
    (tmp_path / "hf" / "model.safetensors").write_bytes(
        (tmp_path / "hf" / "model.safetensors").read_bytes()[:-100])
    with pytest.raises(ValueError, match=r"model.safetensors: not a readable safetensors file "
                                         r"\(.*not fully covered"):
        read_hf_bert(tmp_path / "hf")
    (tmp_path / "hf" / "model.safetensors").write_bytes(b"\x08\x00")
    with pytest.raises(ValueError, match=r"model.safetensors: not a readable safetensors file"):
        read_hf_bert(tmp_path / "hf")
    with pytest.raises(FileNotFoundError, match="no config.json"):
        read_hf_bert(tmp_path)
    with pytest.raises(ValueError, match="standard Bert"):
        write_hf_bert(make_bert(relaxed=RELAXED), tmp_path / "x")


def test_hugging_face_vocabulary_gets_bert_names_or_is_refused(tmp_path):
    """vocab.txt: tfeff's reserved tokens under BERT's names at the same ids, the rest as
    they are; a vocabulary of another size, or one whose id 4 is not [MASK], is refused
    before anything is written."""
    from tfeff.data import SPECIALS
    from tfeff.data import Vocabulary
    from tfeff.data.vocabulary import MASK

    bert = make_bert()  # 40 ids
    words = [*SPECIALS, MASK] + [f"w{i}" for i in range(35)]
    path = str(tmp_path / "vocabulary.txt")
    Vocabulary(words, [0] * len(words)).save(path)
    write_hf_bert(bert, tmp_path / "hf", vocabulary_path=path)
    written = (tmp_path / "hf" / "vocab.txt").read_text(encoding="utf-8").splitlines()
    assert written == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + words[5:]
    for bad, message in ((words[:-1], "39 tokens, but the model has 40"),
                         ([*SPECIALS, "w"] + words[5:] + ["x"], "not a BERT vocabulary")):
        Vocabulary(bad, [0] * len(bad)).save(path)
        with pytest.raises(ValueError, match=message):
            write_hf_bert(bert, tmp_path / "other", vocabulary_path=path)
        assert not (tmp_path / "other").exists()


@pytest.mark.numerics
def test_alone_embedding_is_written_as_its_table(tmp_path):
    alone = {"intermediate_dim": 32, "num_codebooks": 2, "codebook_size": 4, "seed": 3}
    bert = Bert(BertBackbone(40, **SIZES, input_embedding="alone", alone=alone), name="bert")
    bert.build()
    write_hf_bert(bert, tmp_path / "hf")
    back = read_hf_bert(tmp_path / "hf")
    x = batch(bert)
    # The same table rows and encoder; the logits' product with the table (its own einsum
    # for ALONE) may sum the hidden size in another order: d + 1 float32 roundings.
    assert_close(back(x)["mlm_logits"], bert(x)["mlm_logits"], n=bert.backbone.hidden_dim + 1)


@pytest.mark.numerics
def test_keras_hub_round_trip_has_numeric_parity():
    with float64_models():  # keras-hub's code against tfeff's, to float64 rounding
        bert = make_bert(activation="gelu_approximate", use_nsp=True)
        backbone = to_keras_hub(bert)
        back = from_keras_hub(backbone)
    assert backbone.compute_dtype == "float64"
    x = batch(bert)
    mask = x["padding_mask"].astype(bool)
    theirs = backbone({k: x[k] for k in ("token_ids", "segment_ids", "padding_mask")})
    ours = bert(x)
    assert_bert_outputs_close(theirs, {k: ours[k] for k in ("sequence_output", "pooled_output")},
                              bert, x)
    # Back in tfeff: the same weights and computation, bit-identical.
    np.testing.assert_array_equal(np.asarray(back(x)["sequence_output"])[mask],
                                  np.asarray(ours["sequence_output"])[mask])


def test_keras_hub_refuses_what_its_bert_cannot_compute():
    with pytest.raises(ValueError, match=r"'relu' \(model.activation\)"):
        to_keras_hub(make_bert(activation="relu"))
    with pytest.raises(ValueError, match=r"'rotary' positions \(model.position_embedding\)"):
        to_keras_hub(make_bert(position_embedding="rotary"))
    with pytest.raises(ValueError, match="merge_relaxed_bert first"):
        to_keras_hub(make_bert(relaxed=RELAXED))


@pytest.mark.numerics
def test_keras_hub_gets_an_alone_embedding_as_its_table():
    with float64_models():
        alone = {"intermediate_dim": 32, "num_codebooks": 2, "codebook_size": 4, "seed": 3}
        bert = Bert(BertBackbone(40, **SIZES, input_embedding="alone",
                                 activation="gelu_approximate", alone=alone), name="bert")
        bert.build()
        backbone = to_keras_hub(bert)
    x = batch(bert)
    theirs = backbone({k: x[k] for k in ("token_ids", "segment_ids", "padding_mask")})
    assert_bert_outputs_close(theirs, {"sequence_output": bert(x)["sequence_output"]}, bert, x)


def _roformer_rotate(x, table):
    """`transformers`' `RoFormerSelfAttention.apply_rotary_position_embeddings` in float64
    NumPy: `x` `(batch, n, heads, k)`, `table` RoFormer's `(n, k)` sinusoidal table;
    features (2i, 2i+1) turn together, `[-x1, x0, -x3, x2, ...]` times sin."""
    x = np.asarray(x, np.float64)
    sin, cos = np.split(np.asarray(table, np.float64)[None, :, None, :], 2, axis=-1)
    sin_pos, cos_pos = np.repeat(sin, 2, axis=-1), np.repeat(cos, 2, axis=-1)
    rotated_half = np.stack([-x[..., 1::2], x[..., ::2]], axis=-1).reshape(x.shape)
    return x * cos_pos + rotated_half * sin_pos


@pytest.mark.numerics
def test_roformer_rotation_of_reordered_features_is_tfeffs_reordered():
    """RoFormer's rotation (interleaved pairs) of q[sigma] is tfeff's (rotate-half) of q,
    reordered by sigma, from the table write_hf_bert writes: the identity that makes the
    RoFormer export exact. Without the reordering the two are far apart."""
    from tests.layers.test_rotary import rotation_roundings
    from tfeff.layers.rotary import apply_rotary

    n, k = 20, 8
    sigma = rotary_pair_order(k)
    np.testing.assert_array_equal(sigma, [0, 4, 1, 5, 2, 6, 3, 7])
    table = sinusoidal_table(n, k)
    theta = 10000.0 ** (-2 * np.arange(k // 2) / k)
    # float64 sines and cosines rounded to float32 (their last float64 bits may differ,
    # which moves a float32 value only at a tie: one rounding of values up to 1).
    assert_close(table, np.concatenate(
        [np.sin(np.arange(n)[:, None] * theta), np.cos(np.arange(n)[:, None] * theta)],
        axis=1).astype(np.float32), n=1, scale=1.0)
    q = np.random.default_rng(0).normal(size=(2, n, 3, k)).astype(np.float32)
    ours = np.asarray(keras.ops.convert_to_numpy(apply_rotary(q)), np.float64)
    # tfeff's float32 rotation (its roundings), against the float64 one of a float32 table.
    roundings = rotation_roundings(n) + 1
    assert_close(ours[..., sigma], _roformer_rotate(q[..., sigma], table), n=roundings,
                 scale=np.abs(q).max())
    wrong = np.abs(ours - _roformer_rotate(q, table)).max()
    assert wrong > 1000 * roundings * 2.0 ** -24 * np.abs(q).max(), wrong


@pytest.mark.numerics
def test_a_rotary_bert_loads_as_roformer_and_computes_the_same(tmp_path):
    """A rotary Bert is written in RoFormer's layout; the real
    `transformers.RoFormerForMaskedLM` loads every tensor (none missing or unused) and
    its masked-LM logits and last hidden states equal tfeff's within the float32 bound
    of two implementations (`check_tolerances`, as for BERT); with the query and key
    features in tfeff's order instead (not reordered) they are far apart."""
    transformers = pytest.importorskip("transformers")
    import torch

    bert = make_bert(position_embedding="rotary", use_nsp=True)
    d, k, n_max = SIZES["hidden_dim"], SIZES["hidden_dim"] // SIZES["num_heads"], 20
    out = tmp_path / "hf"
    write_hf_bert(bert, out)
    config = json.loads((out / "config.json").read_text())
    assert (config["model_type"], config["architectures"]) == ("roformer",
                                                               ["RoFormerForMaskedLM"])
    assert config["rotary_value"] is False and "position_embedding_type" not in config
    assert config["embedding_size"] == config["hidden_size"] == d
    assert config["max_position_embeddings"] == n_max == SIZES["max_sequence_length"]
    tensors = read_weights(out / "model.safetensors")
    assert all(name.startswith(("roformer.", "cls.predictions.")) for name in tensors)
    assert not [name for name in tensors if "pooler" in name or "position_embeddings" in name]
    model, info = transformers.RoFormerForMaskedLM.from_pretrained(
        out, output_loading_info=True)
    assert not any(info[key] for key in ("missing_keys", "unexpected_keys",
                                         "mismatched_keys")), info
    model.eval()
    # The sinusoidal table loaded is the one written, and the one transformers computes for
    # a new model (float64 sines rounded to float32 on both sides: equal but at a tie).
    fresh = transformers.RoFormerForMaskedLM(model.config).roformer.encoder.embed_positions
    table = model.roformer.encoder.embed_positions.weight.detach().numpy()
    np.testing.assert_array_equal(table, sinusoidal_table(n_max, k))
    assert_close(table, fresh.weight.detach().numpy(), n=1, scale=1.0)
    x = batch(bert)
    n = x["token_ids"].shape[1]
    positions = np.broadcast_to(np.arange(n), x["token_ids"].shape).astype("int32")
    mine = bert({**x, "masked_positions": positions})
    mask = np.asarray(x["padding_mask"], bool)
    bounds = relaxed_merge.check_tolerances(bert, n)

    def errors():
        with torch.no_grad():
            hf = model(input_ids=torch.tensor(x["token_ids"], dtype=torch.long),
                       token_type_ids=torch.tensor(x["segment_ids"], dtype=torch.long),
                       attention_mask=torch.tensor(x["padding_mask"], dtype=torch.long),
                       output_hidden_states=True)
        result = {}
        for name, ours, theirs in (("mlm_logits", mine["mlm_logits"], hf.logits),
                                   ("sequence_output", mine["sequence_output"],
                                    hf.hidden_states[-1])):
            ours = np.asarray(ours, np.float64)[mask]
            theirs = np.asarray(theirs.numpy(), np.float64)[mask]
            result[name] = np.abs(ours - theirs).max() / np.abs(ours).max()
        return result

    exact = errors()
    assert all(exact[name] <= bounds[name] for name in exact), (exact, bounds)
    inverse = np.argsort(rotary_pair_order(k))
    heads = SIZES["num_heads"]
    with torch.no_grad():  # each head's query and key features back in tfeff's order
        for layer in model.roformer.encoder.layer:
            for dense in (layer.attention.self.query, layer.attention.self.key):
                dense.weight.copy_(dense.weight.view(heads, k, d)[:, inverse].reshape(d, d))
                dense.bias.copy_(dense.bias.view(heads, k)[:, inverse].reshape(d))
    unordered = errors()
    assert all(unordered[name] > 100 * bounds[name] for name in unordered), (unordered, bounds)


def test_what_roformer_cannot_hold_is_refused_before_writing(tmp_path):
    """A relaxed rotary model must be merged first; a rotation with another base than
    RoFormer's fixed 10000 is refused, naming the layer."""
    with pytest.raises(ValueError, match="standard Bert.*merge_relaxed_bert first"):
        write_hf_bert(make_bert(relaxed=RELAXED, position_embedding="rotary"), tmp_path / "hf")
    bert = make_bert(position_embedding="rotary")
    bert.backbone.transformer_layers[1].self_attention.max_wavelength = 500.0
    with pytest.raises(ValueError, match=r"rotary base is 10000; transformer_layer_1 rotates "
                                         r"with max_wavelength=500\.0"):
        write_hf_bert(bert, tmp_path / "hf")
    assert os.listdir(tmp_path) == []


def _bert_vocabulary(path, size):
    from tfeff.data import SPECIALS
    from tfeff.data import Vocabulary
    from tfeff.data.vocabulary import MASK

    words = [*SPECIALS, MASK] + [f"w{i}" for i in range(size - len(SPECIALS) - 1)]
    Vocabulary(words, [0] * len(words)).save(str(path))
    return str(path)


@pytest.mark.parametrize("umask, position", [(0o022, "learned"), (0o027, "rotary")])
def test_the_hugging_face_directory_follows_the_umask(tmp_path, umask, position):
    """The directory and every file get the modes any new directory and file get under
    the umask (0755 and 0644 under 022), the weights too (the safetensors package
    creates its file 0600)."""
    vocabulary = _bert_vocabulary(tmp_path / "vocabulary.txt", 40)
    out = tmp_path / "hf"
    old = os.umask(umask)
    try:
        write_hf_bert(make_bert(position_embedding=position), out, vocabulary_path=vocabulary)
    finally:
        os.umask(old)
    modes = {name: stat.S_IMODE(os.stat(out / name).st_mode) for name in os.listdir(out)}
    assert len(modes) == 5
    assert modes == dict.fromkeys(modes, 0o666 & ~umask), {k: oct(v) for k, v in modes.items()}
    assert stat.S_IMODE(os.stat(out).st_mode) == 0o777 & ~umask


@pytest.mark.numerics
def test_the_binary_writes_a_rotary_model_directory_as_roformer(tmp_path, capsys):
    """`tfeff-convert-core --hf_dir` (its `main`, in this process) on a trained rotary model
    directory (the demo BERT's recipe, tests/compat/saved/bert_dir): it succeeds, the
    directory's modes follow the umask, `transformers` loads its tokenizer (tfeff's ids)
    and its RoFormer, whose masked-LM logits equal tfeff's to float32 rounding."""
    transformers = pytest.importorskip("transformers")
    import shutil

    import torch
    from absl import flags

    from tests.conftest import REPO
    from tfeff.bin import convert_core
    from tfeff.data import Vocabulary
    from tfeff.training import restore_model

    model_dir = str(tmp_path / "bert_dir")
    shutil.copytree(os.path.join(REPO, "tests", "compat", "saved", "bert_dir"), model_dir)
    out = str(tmp_path / "hf")
    old = os.umask(0o022)
    try:
        flags.FLAGS(["tfeff-convert-core", "--model_dir", model_dir, "--hf_dir", out])
        convert_core.main(["tfeff-convert-core"])  # exits non-zero on any error
    finally:
        flags.FLAGS.unparse_flags()
        os.umask(old)
    assert f"(step 2) as the Hugging Face directory {out}" in capsys.readouterr().out
    assert sorted(os.listdir(out)) == ["config.json", "model.safetensors",
                                       "special_tokens_map.json", "tokenizer_config.json",
                                       "vocab.txt"]
    assert stat.S_IMODE(os.stat(out).st_mode) == 0o755
    assert {stat.S_IMODE(os.stat(os.path.join(out, f)).st_mode) for f in os.listdir(out)} == {
        0o644}
    bert, _, _, config = restore_model(model_dir)
    assert config.model.position_embedding == "rotary"
    words = Vocabulary.load(os.path.join(model_dir, "vocabulary.txt")).words
    chosen = [w for w in words[5:] if w.isalpha()][:3]
    tokenizer = transformers.AutoTokenizer.from_pretrained(out)
    assert tokenizer(" ".join(chosen), add_special_tokens=False)["input_ids"] == [
        words.index(w) for w in chosen]
    model = transformers.RoFormerForMaskedLM.from_pretrained(out)
    model.eval()
    x = relaxed_merge.probe_inputs(bert, 3)
    n = x["token_ids"].shape[1]
    positions = np.broadcast_to(np.arange(n), x["token_ids"].shape).astype("int32")
    ours = np.asarray(bert({**x, "masked_positions": positions})["mlm_logits"], np.float64)
    with torch.no_grad():
        theirs = model(input_ids=torch.tensor(x["token_ids"], dtype=torch.long),
                       token_type_ids=torch.tensor(x["segment_ids"], dtype=torch.long),
                       attention_mask=torch.tensor(x["padding_mask"], dtype=torch.long)
                       ).logits.numpy()
    mask = np.asarray(x["padding_mask"], bool)
    error = np.abs(ours[mask] - theirs[mask]).max() / np.abs(ours[mask]).max()
    assert error <= relaxed_merge.check_tolerances(bert, n)["mlm_logits"], error
