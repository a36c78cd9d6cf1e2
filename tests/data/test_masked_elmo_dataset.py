import importlib

import numpy as np
import pytest
import tensorflow as tf

from tfeff import data

me = importlib.import_module("tfeff.data.masked_elmo_dataset")
mlm = importlib.import_module("tfeff.data.mlm_dataset")


@pytest.fixture(scope="module")
def paragraph_corpus(tmp_path_factory):
    directory = str(tmp_path_factory.mktemp("paragraph_corpus"))
    train, heldout = data.write_synthetic_corpus(directory, 300, 40, seed=3,
                                                 paragraph_sentences=4)
    return train, heldout


@pytest.fixture(scope="module")
def vocab_path(paragraph_corpus, tmp_path_factory):
    path = str(tmp_path_factory.mktemp("me_vocab") / "vocabulary.txt")
    data.learn_bert_vocabulary(paragraph_corpus[0], 300, path)
    return path


def test_paragraphs_split_at_blank_lines_and_file_ends(tmp_path):
    (tmp_path / "a.txt").write_text("one\ntwo\n\n\nthree\n")
    (tmp_path / "b.txt").write_text("four\n  \nfive\nsix")
    assert list(data.paragraphs(str(tmp_path / "*.txt"))) == [
        ["one", "two"], ["three"], ["four"], ["five", "six"]]
    # Line readers are unaffected by the blank lines.
    assert list(data.text_lines(str(tmp_path / "a.txt"))) == ["one", "two", "three"]


def test_synthetic_paragraphs_keep_the_sentences(paragraph_corpus, tmp_path):
    plain, _ = data.write_synthetic_corpus(str(tmp_path), 300, 40, seed=3)
    assert list(data.text_lines(paragraph_corpus[0])) == list(data.text_lines(plain))
    sizes = [len(p) for p in data.paragraphs(paragraph_corpus[0])]
    assert sum(sizes) == 300 and 1 <= min(sizes) and max(sizes) <= 7 and len(sizes) > 40


def test_documents_have_cls_first_and_sep_between_sentences(paragraph_corpus, vocab_path):
    docs = data.tokenize_documents(paragraph_corpus[0], vocab_path)
    paragraphs = list(data.paragraphs(paragraph_corpus[0]))
    assert len(docs) == len(paragraphs)
    tokenizer = mlm.bert_tokenizer(vocab_path)
    for doc, lines in zip(docs[:20], paragraphs[:20]):
        pieces = [np.asarray(p) for p in
                  tokenizer.tokenize(tf.constant(lines)).merge_dims(1, 2).to_list()]
        expected = [mlm.CLS_ID]
        for i, p in enumerate(pieces):
            expected += ([mlm.SEP_ID] if i else []) + list(p)
        np.testing.assert_array_equal(doc, expected)
        assert doc.dtype == np.int32


def test_tbptt_plan_two_streams_forward_and_reversed():
    # Document 0: 3 windows, document 1: 2 windows, document 2: 1 window (window = 4).
    lengths = [10, 8, 3]

    class NoShuffle:
        def permutation(self, n):
            return np.arange(n)

    plan = me.tbptt_plan(lengths, 2, 4, NoShuffle())
    # Stream 0 takes doc 0 (3 windows), stream 1 doc 1 (2) then doc 2 (1), reversed.
    np.testing.assert_array_equal(plan["document"], [[0, 2], [0, 1], [0, 1]])
    np.testing.assert_array_equal(plan["window"], [[0, 0], [1, 1], [2, 0]])
    np.testing.assert_array_equal(plan["reset"], [[True, True], [False, True], [False, False]])
    # Without reversal, stream 1 reads doc 1 forward then doc 2.
    plain = me.tbptt_plan(lengths, 2, 4, NoShuffle(), reverse_half=False)
    np.testing.assert_array_equal(plain["document"][:, 1], [1, 1, 2])
    np.testing.assert_array_equal(plain["window"][:, 1], [0, 1, 0])
    np.testing.assert_array_equal(plain["reset"][:, 1], [True, False, True])


def test_tbptt_plan_fills_short_streams_with_empty_reset_windows():
    plan = me.tbptt_plan([40, 4], 2, 4, np.random.default_rng(0))
    docs = plan["document"]
    assert docs.shape == (10, 2)
    filler = docs < 0
    assert filler.sum() == 9 and plan["reset"][filler].all()
    # Every window of every document appears exactly once.
    seen = sorted(zip(docs[~filler].tolist(), plan["window"][~filler].tolist()))
    assert seen == [(0, w) for w in range(10)] + [(1, 0)]


def test_mask_sets_are_disjoint_with_the_configured_rate():
    rng = np.random.default_rng(0)
    ids = rng.integers(5, 100, size=(6, 40)).astype(np.int32)
    ids[:, 0] = mlm.CLS_ID
    ids[:, 20] = mlm.SEP_ID
    lengths = np.array([40, 40, 30, 21, 3, 0])
    ids[np.arange(40)[None, :] >= lengths[:, None]] = 0
    out = me.mask_sets(ids, lengths, np.random.default_rng(1), 4, 100, 10)
    for b, n in enumerate(lengths):
        maskable = max(0, n - 1 - (n > 20))
        per_set = min(10, max(1, round(0.15 * maskable)), maskable // 4)
        chosen = []
        for s in range(4):
            w = out["masked_weights"][b, s]
            assert w.sum() == per_set
            pos = out["masked_positions"][b, s][w > 0]
            chosen.extend(pos.tolist())
            assert np.all(ids[b, pos] > 4)  # never [CLS]/[SEP]/padding
            np.testing.assert_array_equal(out["masked_ids"][b, s][w > 0], ids[b, pos])
            # Only the set's own positions differ from the original ids.
            differs = np.flatnonzero(out["masked_token_ids"][b, s] != ids[b])
            assert set(differs) <= set(pos.tolist())
        assert len(chosen) == len(set(chosen)) == 4 * per_set  # disjoint
    # The union covers 4 x 15% of the maskable tokens of a full row.
    assert out["masked_weights"][0].sum() == 4 * round(0.15 * 38)


def test_mask_sets_never_choose_an_unknown_word():
    rng = np.random.default_rng(2)
    ids = rng.integers(5, 100, size=(8, 40)).astype(np.int32)
    ids[:, ::3] = mlm.UNK_ID  # a literal <unk> every third token...
    ids[:, 0] = mlm.CLS_ID  # ...but the first
    out = me.mask_sets(ids, np.full(8, 40), np.random.default_rng(1), 2, 100, 10)
    w = out["masked_weights"] > 0
    assert w.sum() == 8 * 2 * round(0.15 * 26)  # 15% of the 26 known tokens, per set
    assert not (out["masked_ids"][w] == mlm.UNK_ID).any()


def test_mask_values_are_80_10_10():
    rng = np.random.default_rng(2)
    ids = rng.integers(5, 1000, size=(200, 100)).astype(np.int32)
    out = me.mask_sets(ids, np.full(200, 100), np.random.default_rng(3), 2, 1000, 15)
    w = out["masked_weights"] > 0
    rows, sets = np.nonzero(w.any(-1))
    inputs = np.take_along_axis(out["masked_token_ids"], out["masked_positions"], axis=2)[w]
    targets = out["masked_ids"][w]
    mask_share = np.mean(inputs == mlm.MASK_ID)
    kept_share = np.mean(inputs == targets)
    assert abs(mask_share - 0.8) < 0.02 and abs(kept_share - 0.1) < 0.02


def test_dataset_batches_and_exact_resume(paragraph_corpus, vocab_path):
    docs = data.tokenize_documents(paragraph_corpus[0], vocab_path)
    kwargs = dict(batch_size=4, max_sequence_length=16, max_predictions_per_seq=3,
                  vocabulary_size=300, num_sets=2, seed=5)
    batches = list(data.masked_elmo_dataset(docs, **kwargs).take(12))
    b0 = batches[0]
    assert b0["masked_token_ids"].shape == (4, 2, 16)
    assert b0["reset"].numpy().all()  # every stream starts a document
    # The padding mask is right-padded and unmasking recovers the planned windows.
    plan = me.tbptt_plan([len(d) for d in docs], 4, 16, np.random.default_rng([5, 0]))
    for t, batch in enumerate(batches):
        ids, lengths = me.window_ids(docs, plan["document"][t], plan["window"][t], 16)
        np.testing.assert_array_equal(batch["padding_mask"].numpy().sum(1), lengths)
        np.testing.assert_array_equal(batch["reset"].numpy(), plan["reset"][t])
        for s in range(2):
            restored = batch["masked_token_ids"].numpy()[:, s].copy()
            pos, tgt = batch["masked_positions"].numpy()[:, s], batch["masked_ids"].numpy()[:, s]
            w = batch["masked_weights"].numpy()[:, s] > 0
            for row in range(4):
                restored[row, pos[row][w[row]]] = tgt[row][w[row]]
            np.testing.assert_array_equal(restored, ids)
    resumed = list(data.masked_elmo_dataset(docs, start_step=7, **kwargs).take(5))
    for a, b in zip(batches[7:], resumed):
        for key in a:
            np.testing.assert_array_equal(a[key].numpy(), b[key].numpy())


def test_dataset_argument_errors():
    with pytest.raises(ValueError, match="disjoint"):
        data.masked_elmo_dataset([np.arange(5, 20)], 2, 8, 2, 30, num_sets=7)
    with pytest.raises(ValueError, match="batch_size"):
        data.masked_elmo_dataset([np.arange(5, 20)], 0, 8, 2, 30)


def test_the_log_line_says_which_documents_it_counts(caplog):
    documents = [np.arange(5, 12, dtype=np.int32), np.arange(5, 9, dtype=np.int32)]
    with caplog.at_level("INFO"):
        for name in ("training", "held-out"):
            data.masked_elmo_dataset(documents, 2, 4, 2, 20, name=name)
    assert [r.getMessage() for r in caplog.records if "Masked ELMo" in r.getMessage()] == [
        "Masked ELMo training data: 2 documents (paragraphs), 11 tokens",
        "Masked ELMo held-out data: 2 documents (paragraphs), 11 tokens"]
