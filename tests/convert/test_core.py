import keras
import numpy as np
import pytest

from tests.models.test_bert import SIZES
from tests.models.test_bert import batch
from tests.models.test_bert import make_bert
from tests.models.float64 import float64_models
from tests.numerics import assert_close
from tfeff.convert import ConversionError
from tfeff.models import relaxed_merge
from tfeff.convert import from_keras_hub
from tfeff.convert import merge_relaxed_bert
from tfeff.convert import read_hf_bert
from tfeff.convert import to_keras_hub
from tfeff.convert import write_hf_bert
from tfeff.convert.hf_bert import read_weights
from tfeff.layers import FactorizedDense
from tfeff.models import Bert

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
    assert not standard.is_relaxed and standard.name == source.name
    assert standard.compute_dtype == "float64"
    x = batch(source)
    expected, actual = source(x, exact_attention=True), standard(x)
    assert_bert_outputs_close(actual, expected, source, x)
    # ... and FFN kernels are the products, attention kernels copies.
    layer, merged = source.transformer_layers[0], standard.transformer_layers[0]
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
    standard = Bert(40, **SIZES)
    standard.build()
    plan = relaxed_merge._merge_plan(source, standard)
    used = [s for _, sources in plan.values() for s in sources]
    assert sorted(used) == sorted(w.path.split("/", 1)[1] for w in source.weights)
    assert len(used) == len(source.weights) == len(standard.weights) + 2 * 2  # 2 FFNs x 2 layers
    wider = Bert(40, **{**SIZES, "intermediate_dim": 32})
    wider.build()
    with pytest.raises(ConversionError, match="Shape mismatch for transformer_layer_0/"
                                              "intermediate_dense/kernel"):
        relaxed_merge._merge_plan(source, wider)
    with_nsp = Bert(40, **SIZES, use_nsp=True)
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
    copy = Bert.from_config({**source.get_config(), "dtype": "float32"})  # the reference
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
    for src_layer, dst_layer in zip(source.transformer_layers, merged.transformer_layers):
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
    np.testing.assert_array_equal(back.token_embedding.embeddings.numpy(), widened[word])


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
    bert = Bert(40, **SIZES, input_embedding="alone",
                alone={"intermediate_dim": 32, "num_codebooks": 2, "codebook_size": 4, "seed": 3},
                name="bert")
    bert.build()
    write_hf_bert(bert, tmp_path / "hf")
    back = read_hf_bert(tmp_path / "hf")
    x = batch(bert)
    # The same table rows and encoder; the logits' product with the table (its own einsum
    # for ALONE) may sum the hidden size in another order: d + 1 float32 roundings.
    assert_close(back(x)["mlm_logits"], bert(x)["mlm_logits"], n=bert.hidden_dim + 1)


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
        bert = Bert(40, **SIZES, input_embedding="alone", activation="gelu_approximate",
                    alone={"intermediate_dim": 32, "num_codebooks": 2, "codebook_size": 4,
                           "seed": 3}, name="bert")
        bert.build()
        backbone = to_keras_hub(bert)
    x = batch(bert)
    theirs = backbone({k: x[k] for k in ("token_ids", "segment_ids", "padding_mask")})
    assert_bert_outputs_close(theirs, {"sequence_output": bert(x)["sequence_output"]}, bert, x)
