"""Embedders of every model family: exported, reloaded in a process without tfeff,
and compared with a one-sentence-at-a-time reference (tests/export/embedder_reference.py).

The models are small and untrained (the embedder must reproduce whatever weights
it holds); exports of trained model directories, the relaxed (anchor-attention)
BERT among them, are tested with their training tests (tests/training/).
"""

import json
import os

import keras
import numpy as np
import pytest
import tensorflow as tf

from tests.export.embedder_reference import Reference, assert_matches, run_fresh
from tfeff.export import embedder_module, export_embedder, load_embedder, read_metadata
from tfeff.layers import FastTextEmbedding, ScalarMix
from tfeff.models import Bert, BertBackbone, ElmoBackbone, ElmoLM, MaskedElmo
from tfeff.models import MaskedElmoBackbone
from tfeff.testing.numerics import assert_close

MAX_TOKENS = 12
LONG = " ".join(f"w{i} unbelievable" for i in range(20))
SENTENCES = [
    "the dogs run .",
    "",
    "   \t ",
    "Zürich naïve 日本語 emoji🙂s , don't stop !",
    LONG,
    "a",
]
TOKEN_ROWS = [
    ["don't", "stop", "", ""],
    ["Zürich", "", "the", ""],   # an inner empty cell keeps its (masked) slot
    ["", "", "", ""],
    ["x"] * 4,
]


@pytest.fixture(scope="module")
def vocabularies(small_corpus, tmp_path_factory):
    from tfeff.data import Vocabulary, text_lines
    from tfeff.data.mlm_dataset import learn_bert_vocabulary

    d = tmp_path_factory.mktemp("vocab")
    pieces = str(d / "wordpiece.txt")
    learn_bert_vocabulary(small_corpus[0], 400, pieces, lower_case=True)
    words = str(d / "words.txt")
    Vocabulary.build(text_lines(small_corpus[0])).save(words)
    return {"wordpiece": pieces, "word": words}


def _size(path):
    return sum(1 for _ in open(path, encoding="utf-8"))


def _models(vocabularies):
    """(name, model, export kwargs, reference kind) for every family."""
    word_v, piece_v = _size(vocabularies["word"]), _size(vocabularies["wordpiece"])
    keras.utils.set_random_seed(3)
    common = {"num_layers": 2, "units": 16, "projection_dim": 8, "dropout_rate": 0.0}
    elmo_word = ElmoLM(ElmoBackbone(word_v, token_embedding_dim=8, input_embedding="trainable",
                                    **common), output_layer="full")
    alone = {"intermediate_dim": 16, "num_codebooks": 2, "codebook_size": 4}
    elmo_sub = ElmoLM(ElmoBackbone(piece_v, token_embedding_dim=8, input_embedding="alone",
                                   alone=alone, **common), output_layer="full")
    masked = MaskedElmo(MaskedElmoBackbone(piece_v, **common))
    bert_args = {"num_layers": 2, "hidden_dim": 16, "num_heads": 2, "intermediate_dim": 32,
                 "max_sequence_length": 32}
    bert = Bert(BertBackbone(piece_v, **bert_args))
    for m in (elmo_word, elmo_sub, masked, bert):
        m.build()
    pv = vocabularies["wordpiece"]
    return [
        ("elmo_word", elmo_word, {"vocabulary": vocabularies["word"]}, "elmo_word", False),
        ("elmo_sub", elmo_sub, {"vocabulary": pv, "tokenization": "wordpiece"},
         "elmo_wordpiece", False),
        ("masked_elmo", masked, {"vocabulary": pv}, "masked_elmo", False),
        ("bert", bert, {"vocabulary": pv, "lower_case": True}, "bert", True),
    ]


def _in_process(module):
    """The outputs `run_fresh` collects, from an in-memory module (no SavedModel)."""
    e = module.embed(tf.constant(SENTENCES))
    t = module.embed_tokens(tf.constant(TOKEN_ROWS))
    k = module.tokenize(tf.constant(SENTENCES))
    z = module.embed([])  # a Python list, as a Keras user would pass it
    zt = module.embed_tokens(tf.zeros([0, 3], tf.string))
    out = {"layers": e["layers"], "mask": e["mask"], "tokens": e["tokens"],
           "t_layers": t["layers"], "t_mask": t["mask"], "t_tokens": t["tokens"],
           "k_tokens": k["tokens"], "k_mask": k["mask"],
           "z_layers": z["layers"], "z_mask": z["mask"], "z_tokens": z["tokens"],
           "zt_layers": zt["layers"], "zt_mask": zt["mask"]}
    return {key: value.numpy() for key, value in out.items()}


@pytest.fixture(scope="module")
def exports(vocabularies, fasttext_model, tmp_path_factory):
    """Every family exported (first-piece pooling) with max_tokens=12 and run once in a
    fresh process; the other poolings of Masked ELMo run in-process (same module code).

    Returns `{name: (metadata, reference, outputs, path or None)}`.
    """
    base = tmp_path_factory.mktemp("embedders")
    entries, in_process = [], {}
    for name, model, kwargs, kind, lower in _models(vocabularies):
        path = str(base / name)
        meta = export_embedder(model, path, max_tokens=MAX_TOKENS, **kwargs)
        ref = Reference(kind, model, kwargs["vocabulary"], lower_case=lower,
                        max_tokens=MAX_TOKENS)
        entries.append((f"{name}_first", path, ref, meta))
        if name == "masked_elmo":
            for pooling in ("mean", "none"):
                module = embedder_module(model, max_tokens=MAX_TOKENS, subword_pooling=pooling,
                                         **kwargs)
                ref = Reference(kind, model, kwargs["vocabulary"], max_tokens=MAX_TOKENS,
                                pooling=pooling)
                in_process[f"{name}_{pooling}"] = (module.metadata(), ref, _in_process(module),
                                                   None)
    ft_path, ft = fasttext_model
    path = str(base / "fasttext")
    meta = export_embedder(FastTextEmbedding.from_fasttext(ft_path), path, max_tokens=MAX_TOKENS)
    entries.append(("fasttext", path, Reference("fasttext", None, max_tokens=MAX_TOKENS,
                                                   fasttext_model=ft), meta))
    outputs = run_fresh([p for _, p, _, _ in entries], SENTENCES, TOKEN_ROWS, base)
    fresh = {name: (meta, ref, out, path)
             for (name, path, ref, meta), out in zip(entries, outputs)}
    for name, (meta, _, _, path) in fresh.items():
        assert read_metadata(path) == meta
    return {**fresh, **in_process}


NAMES = ["elmo_word_first", "elmo_sub_first", "masked_elmo_first", "masked_elmo_mean",
         "masked_elmo_none", "bert_first", "fasttext"]


@pytest.mark.numerics
@pytest.mark.parametrize("name", NAMES)
def test_embed_equals_one_sentence_reference(exports, name):
    meta, ref, out, _ = exports[name]
    assert_matches(out, ref, SENTENCES)
    # Empty and whitespace-only sentences are rows without tokens, not errors.
    assert not out["mask"][1].any() and not out["mask"][2].any()
    # Truncation keeps whole words within max_tokens model tokens.
    words, pieces = ref.split(LONG)
    assert 0 < sum(len(p) for p in pieces) <= MAX_TOKENS
    assert out["mask"][4].sum() == len(words) < len(LONG.split())
    # `tokenize` gives embed's tokens without running the model.
    np.testing.assert_array_equal(out["k_tokens"], out["tokens"])
    np.testing.assert_array_equal(out["k_mask"], out["mask"])
    assert meta["num_layers"] == out["layers"].shape[1] and meta["dim"] == out["layers"].shape[3]
    # An empty batch gives empty outputs of the same rank and dtypes, not an error.
    for prefix in ("z_", "zt_"):
        assert out[prefix + "layers"].shape == (0, meta["num_layers"], 0, meta["dim"])
        assert out[prefix + "layers"].dtype == np.float32
        assert out[prefix + "mask"].shape == (0, 0) and out[prefix + "mask"].dtype == bool
    assert out["z_tokens"].shape == (0, 0) and out["z_tokens"].dtype == object
    assert meta["requires"] == ([] if name.startswith(("elmo_word", "fasttext"))
                                else ["tensorflow_text"])


@pytest.mark.numerics
@pytest.mark.parametrize("name", [n for n in NAMES if n != "masked_elmo_none"])
def test_embed_tokens_keeps_input_words_aligned(exports, name):
    _, ref, out, _ = exports[name]
    layers, mask, tokens = out["t_layers"], out["t_mask"], out["t_tokens"]
    for i, row in enumerate(TOKEN_ROWS):
        words, want, want_mask, roundings = ref.tokens(row)
        n = len(words)
        assert [t.decode() for t in tokens[i, :n]] == words
        np.testing.assert_array_equal(mask[i, :n], want_mask)
        assert not mask[i, n:].any() and not layers[i, :, n:].any()
        assert_close(layers[i, :, :n], want, n=roundings, err_msg=str(row))
    # "don't" stays one output token even where BERT's tokenizer splits it in three.
    assert tokens[0, 0].decode() == "don't" and mask[0, :2].all()
    assert mask[1].tolist()[:3] == [True, False, True]


def test_pooling_modes_differ_where_words_have_several_pieces(exports):
    first = exports["masked_elmo_first"][2]
    mean = exports["masked_elmo_mean"][2]
    pieces = exports["masked_elmo_none"][2]
    np.testing.assert_array_equal(first["tokens"], mean["tokens"])
    ref = exports["masked_elmo_first"][1]
    words, split = ref.split(SENTENCES[3])
    multi = [j for j, p in enumerate(split) if len(p) > 1]
    assert multi, split  # the probe sentence must exercise pooling
    j = multi[0]
    assert not np.allclose(first["layers"][3, :, j], mean["layers"][3, :, j])
    # Piece-level output: one position per WordPiece, continuation pieces marked.
    assert pieces["mask"][3].sum() == sum(len(p) for p in split)
    assert any(t.decode().startswith("##") for t in pieces["tokens"][3])


@pytest.mark.numerics
def test_unseen_words_get_the_fasttext_library_vector(exports, fasttext_model):
    _, ft = fasttext_model
    out = exports["fasttext"][2]
    vocab = set(ft.get_words())
    words = [t.decode() for t in out["tokens"][3] if t]
    unseen = [w for w in words if w not in vocab]
    assert len(unseen) >= 3, words
    for j, w in enumerate(words):
        # Both the mean of the word's n-gram rows: their sum, times 1/n (2 roundings).
        assert_close(out["layers"][3, 0, j], ft.get_word_vector(w),
                     n=len(ft.get_subwords(w)[1]) + 2, err_msg=w)


def test_scalar_mix_on_a_loaded_embedder_inside_a_keras_model(exports):
    """The documented downstream use: TFSMLayer + ScalarMix + a head, trained end to end
    with the embedder frozen; the mix's weights get gradients, the embedder none."""
    path = exports["bert_first"][3]
    embedder = keras.layers.TFSMLayer(path, call_endpoint="embed", trainable=False)
    sentences = keras.Input(shape=(), dtype="string")
    out = embedder(sentences)
    mixed = ScalarMix(3, layer_norm=True, name="mix")(out["layers"], mask=out["mask"])
    mask = keras.ops.cast(out["mask"], "float32")[..., None]
    pooled = keras.ops.sum(mixed * mask, axis=1) / keras.ops.maximum(
        keras.ops.sum(mask, axis=1), 1.0)
    model = keras.Model(sentences, keras.layers.Dense(2, name="head")(pooled))
    assert not embedder.trainable_weights and embedder.non_trainable_weights
    frozen = [w.numpy().copy() for w in embedder.non_trainable_weights]
    x = tf.constant(["the dogs run .", "a cat", "", "Zürich"])
    y = np.array([0, 1, 0, 1])
    model.compile(optimizer=keras.optimizers.SGD(0.5),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    before = model.get_layer("mix").get_weights()
    model.fit(x, y, epochs=1, batch_size=4, verbose=0)
    after = model.get_layer("mix").get_weights()
    assert not np.allclose(before[0], after[0])
    for w, f in zip(embedder.non_trainable_weights, frozen):
        np.testing.assert_array_equal(w.numpy(), f)
    assert np.isfinite(model.predict(x, verbose=0)).all()


def test_load_embedder_imports_tensorflow_text_and_predicts(exports):
    loaded = load_embedder(exports["bert_first"][3])
    assert set(loaded.signatures) == {"embed", "embed_tokens", "tokenize"}
    out = loaded.signatures["embed"](sentences=tf.constant(["the dogs run ."]))
    assert out["layers"].shape == (1, 3, 4, 16)


def test_export_errors_are_clear_and_leave_nothing(vocabularies, tmp_path):
    models = _models(vocabularies)
    name, masked, kwargs, _, _ = models[2]
    with pytest.raises(ValueError, match="vocabulary"):
        export_embedder(masked, str(tmp_path / "a"))
    with pytest.raises(ValueError, match="not the vocabulary the model was trained with"):
        export_embedder(masked, str(tmp_path / "a"), vocabulary=vocabularies["word"])
    with pytest.raises(ValueError, match="subword_pooling"):
        export_embedder(masked, str(tmp_path / "a"), subword_pooling="last", **kwargs)
    bert = models[3][1]
    with pytest.raises(ValueError, match="does not fit this Bert: it embeds at most 30 tokens"):
        embedder_module(bert, vocabulary=vocabularies["wordpiece"], max_tokens=40)
    with pytest.raises(TypeError, match="a model with `embedding_layers`"):
        export_embedder(keras.layers.Dense(3), str(tmp_path / "a"))
    assert os.listdir(tmp_path) == []
    # An existing export is never replaced without overwrite=True.
    (tmp_path / "b").mkdir()
    with pytest.raises(FileExistsError, match="overwrite"):
        export_embedder(masked, str(tmp_path / "b"), **kwargs)
    assert os.listdir(tmp_path) == ["b"]
    meta = export_embedder(masked, str(tmp_path / "b"), overwrite=True, **kwargs)
    assert json.load(open(tmp_path / "b" / "assets.extra" / "embedder.json")) == meta
    assert sorted(os.listdir(tmp_path)) == ["b"]


def test_word_and_wordpiece_tokenizations_map_literal_specials_as_training_does(tmp_path):
    """`<pad>` in text is `<unk>` (the LM pipeline's `unknown_for_padding`), `<unk>` too."""
    from tfeff.data import lines_to_windows
    from tfeff.data.pipeline import lookup_table
    from tfeff.data.wordpiece import wordpiece_tokenizer
    from tfeff.export.tokenization import Tokenization

    words = ["<pad>", "<unk>", "<s>", "</s>", "the", "cat", "##s"]
    vocab = tmp_path / "v.txt"
    vocab.write_text("".join(f"{w}\t1\n" for w in words), encoding="utf-8")
    text = ["the <pad> cats <unk> dog"]
    for kind, tokenizer in (("ids", None),
                            ("wordpiece", wordpiece_tokenizer(lookup_table(str(vocab), -1)))):
        pieces = Tokenization(kind, words).pieces(tf.strings.split(tf.constant(text)))
        served = [p for word in pieces.to_list()[0] for p in word]
        trained = lines_to_windows(tf.constant(text), lookup_table(str(vocab)), 20,
                                   tokenizer).to_list()[0][1:-1]
        assert served == trained, kind
        assert served[1] == 1  # <pad> is <unk>, never padding


@pytest.mark.parametrize("lower_case", [False, True])
def test_bert_tokenization_keeps_a_literal_unk_whole_as_training_does(tmp_path, lower_case):
    """BERT's basic tokenizer would split `<unk>` into `<`, `unk`, `>`: in the export as in
    the masked-LM pipeline it is one word, the unknown id, inside a word too."""
    from tfeff.data.mlm_dataset import bert_tokenizer
    from tfeff.export.tokenization import Tokenization

    words = ["<pad>", "<unk>", "<s>", "</s>", "[MASK]", "a", "of", "species", "lob", "##ster",
             "<", ">", "unk", "x", "y", "##y"]
    vocab = tmp_path / "v.txt"
    vocab.write_text("".join(f"{w}\t1\n" for w in words), encoding="utf-8")
    text = ["a species of <unk> lobster", "x<unk>y <unk>"]
    tokenization = Tokenization("wordpiece", words, basic=True, lower_case=lower_case)
    split = tokenization.words(tf.constant(text)).to_list()
    assert split == [[b"a", b"species", b"of", b"<unk>", b"lobster"],
                     [b"x", b"<unk>", b"y", b"<unk>"]]
    served = [[p for word in line for p in word]
              for line in tokenization.pieces(tokenization.words(tf.constant(text))).to_list()]
    trained = bert_tokenizer(str(vocab), lower_case).tokenize(
        tf.constant(text)).merge_dims(1, 2).to_list()
    assert served == trained == [[5, 7, 6, 1, 8, 9], [13, 1, 14, 1]]
