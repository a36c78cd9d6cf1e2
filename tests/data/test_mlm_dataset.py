import importlib
import math

import numpy as np
import pytest
import tensorflow as tf

from tfeff import data

# The module (tfeff.data.mlm_dataset is also the name of its main function).
mlm = importlib.import_module("tfeff.data.mlm_dataset")


@pytest.fixture(scope="module")
def bert_vocab(small_corpus, tmp_path_factory):
    path = str(tmp_path_factory.mktemp("bert_vocab") / "vocabulary.txt")
    vocab = data.learn_bert_vocabulary(small_corpus[0], 400, path)
    return path, vocab


def _first_lines(path, n):
    with open(path, encoding="utf-8") as f:
        return [line.strip() for line, _ in zip(f, range(n)) if line.strip()]


def test_vocabulary_has_bert_reserved_tokens_and_basic_tokenization(bert_vocab):
    _, vocab = bert_vocab
    assert vocab.words[:5] == ["<pad>", "<unk>", "<s>", "</s>", "[MASK]"]
    assert mlm.MASK_ID == 4 and mlm.CLS_ID == 2 and mlm.SEP_ID == 3
    assert list(mlm.basic_words(["Hello, wörld!  日本"])) == ["Hello , wörld ! 日 本"]
    assert list(mlm.basic_words(["Hello, World"], lower_case=True)) == ["hello , world"]


def _unmasked(batch):
    ids = batch["token_ids"].numpy().copy()
    for row, (pos, tgt, w) in enumerate(zip(batch["masked_positions"].numpy(),
                                            batch["masked_ids"].numpy(),
                                            batch["masked_weights"].numpy())):
        ids[row, pos[w > 0]] = tgt[w > 0]
    return ids


def test_sequences_pack_the_token_stream(small_corpus, bert_vocab):
    path, _ = bert_vocab
    n = 24
    ds = data.mlm_dataset(small_corpus[0], path, batch_size=8, max_sequence_length=n,
                          max_predictions_per_seq=4)
    batch = next(iter(ds))
    lines = _first_lines(small_corpus[0], 256)
    stream = np.concatenate(
        mlm.bert_tokenizer(path).tokenize(tf.constant(lines)).merge_dims(1, 2).to_list())
    window = n - 2
    expected = np.zeros((8, n), np.int64)
    for i in range(8):
        row = [mlm.CLS_ID, *stream[i * window:(i + 1) * window], mlm.SEP_ID]
        expected[i, :len(row)] = row
    np.testing.assert_array_equal(_unmasked(batch), expected)
    np.testing.assert_array_equal(batch["padding_mask"], (expected > 0).astype(int))
    assert not batch["segment_ids"].numpy().any()


def test_masking_rates_and_limits(small_corpus, bert_vocab):
    path, vocab = bert_vocab
    n, p = 32, 3
    tf.random.set_seed(0)
    ds = data.mlm_dataset(small_corpus[0], path, batch_size=32, max_sequence_length=n,
                          max_predictions_per_seq=p)
    selected = kinds = 0
    counts = np.zeros(3)
    for batch in ds.take(30):
        original = _unmasked(batch)
        ids = batch["token_ids"].numpy()
        w = batch["masked_weights"].numpy() > 0
        real = (original > 0) & (original != mlm.CLS_ID) & (original != mlm.SEP_ID)
        # ceil(15% of the maskable tokens), at most p per sequence
        expect = np.minimum(np.ceil(real.sum(1) * 0.15), p)
        np.testing.assert_array_equal(w.sum(1), expect)
        for row in range(len(ids)):
            pos = batch["masked_positions"].numpy()[row][w[row]]
            assert real[row, pos].all()  # never [CLS], [SEP] or padding
            assert len(set(pos)) == len(pos)
            new, old = ids[row, pos], original[row, pos]
            counts += [(new == mlm.MASK_ID).sum(), ((new != mlm.MASK_ID) & (new == old)).sum(),
                       ((new != mlm.MASK_ID) & (new != old)).sum()]
        # positions that were not selected are unchanged
        unselected = np.ones_like(ids, bool)
        for row in range(len(ids)):
            unselected[row, batch["masked_positions"].numpy()[row][w[row]]] = False
        np.testing.assert_array_equal(ids[unselected], original[unselected])
    total = counts.sum()
    rates = counts / total
    keep_expected = 0.1 + 0.1 / len(vocab)  # kept, or a random token equal to the original
    for rate, expected in zip(rates, (0.8, keep_expected, 0.1 - 0.1 / len(vocab))):
        sigma = math.sqrt(expected * (1 - expected) / total)
        assert abs(rate - expected) < 5 * sigma, (rates, total)


def test_next_sentence_pairs(small_corpus, bert_vocab):
    path, _ = bert_vocab
    n = 24
    tf.random.set_seed(1)
    ds = data.mlm_dataset(small_corpus[0], path, batch_size=16, max_sequence_length=n,
                          max_predictions_per_seq=3, use_nsp=True, seed=2)
    lines = _first_lines(small_corpus[0], 256)
    stream = np.concatenate(
        mlm.bert_tokenizer(path).tokenize(tf.constant(lines)).merge_dims(1, 2).to_list())
    batch = next(iter(ds))
    ids, seg = _unmasked(batch), batch["segment_ids"].numpy()
    labels = batch["nsp_labels"].numpy()
    assert 0 < labels.sum() < len(labels)
    window = n - 3
    for row in range(len(ids)):
        sep = np.flatnonzero(ids[row] == mlm.SEP_ID)
        assert ids[row, 0] == mlm.CLS_ID and len(sep) == 2
        first, second = ids[row, 1:sep[0]], ids[row, sep[0] + 1:sep[1]]
        assert (seg[row, :sep[0] + 1] == 0).all() and (seg[row, sep[0] + 1:sep[1] + 1] == 1).all()
        np.testing.assert_array_equal(first, stream[row * window:row * window + len(first)])
        if labels[row] == 0:  # the true continuation
            np.testing.assert_array_equal(
                np.concatenate([first, second]), stream[row * window:(row + 1) * window])


def test_vocabulary_without_mask_token_is_refused(small_corpus, tmp_path):
    path = str(tmp_path / "v.txt")
    words = data.Vocabulary.build(data.text_lines(small_corpus[0]))
    data.learn_wordpiece_vocabulary(words, 200, path)
    with pytest.raises(ValueError, match=r"id 4 must be \[MASK\]"):
        data.mlm_dataset(small_corpus[0], path, 4, 16, 2)


def test_batches_are_a_function_of_seed_and_index_only(small_corpus, bert_vocab):
    """Exact resume rebuilds the pipeline: shuffle, pairs and masks must replay identically,
    for a new iterator, a new pipeline and a pipeline skipped to a position."""
    path, _ = bert_vocab

    def pipeline(seed):
        return data.mlm_dataset(small_corpus[0], path, batch_size=8, max_sequence_length=24,
                                max_predictions_per_seq=4, use_nsp=True, shuffle_buffer=50,
                                seed=seed, repeat=True)

    ds = pipeline(5)
    first = [b["token_ids"].numpy() for b in ds.take(6)]
    again = [b["token_ids"].numpy() for b in ds.take(6)]
    rebuilt = [b for b in pipeline(5).take(6)]
    skipped = next(iter(pipeline(5).skip(4)))
    for a, b, c in zip(first, again, rebuilt):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(a, c["token_ids"].numpy())
    for key, value in skipped.items():
        np.testing.assert_array_equal(value.numpy(), rebuilt[4][key].numpy())
    other = next(iter(pipeline(6)))["token_ids"].numpy()
    assert not np.array_equal(other, first[0])


def test_block_shuffle_permutes_each_block_by_seed_and_epoch():
    from tfeff.data.pipeline import shuffle_and_repeat

    ds = tf.data.Dataset.range(100).map(lambda i: tf.fill([i % 3 + 1], i))
    order = [int(x[0]) for x in shuffle_and_repeat(ds, 16, 3, True).take(300)]
    assert order == [int(x[0]) for x in shuffle_and_repeat(ds, 16, 3, True).take(300)]
    epochs = [order[e * 100:(e + 1) * 100] for e in range(3)]
    for epoch in epochs:
        for start in range(0, 100, 16):  # a permutation of each block of 16
            assert sorted(epoch[start:start + 16]) == list(range(start, min(start + 16, 100)))
    assert epochs[0] != list(range(100)) and epochs[0] != epochs[1] != epochs[2]
    assert order != [int(x[0]) for x in shuffle_and_repeat(ds, 16, 4, True).take(300)]


def test_a_literal_unk_is_one_unknown_token_and_never_a_target(tmp_path):
    """Real corpora hold literal `<unk>` words (WikiText: tens of thousands). They are the
    unknown word: never split into `<`, `unk`, `>` pieces, never learned as pieces, never
    masked (so never in the loss or the accuracy)."""
    rng = np.random.default_rng(0)
    nouns = ["cat", "dog", "lobster", "species", "river", "stone"]
    lines = [" ".join(["the", rng.choice(nouns), "<unk>", "of", rng.choice(nouns),
                       "x<unk>y" if i % 7 == 0 else "<unk>"]) for i in range(400)]
    corpus = tmp_path / "train.txt"
    corpus.write_text("\n".join(lines) + "\n", encoding="utf-8")
    path = str(tmp_path / "vocabulary.txt")
    vocab = data.learn_bert_vocabulary(str(corpus), 60, path)
    # 800+ literal <unk>: split, `<`, `unk` and `>` would be the most frequent words.
    assert not {"<", ">", "unk", "##unk"} & set(vocab.words), vocab.words
    ids = mlm.bert_tokenizer(path).tokenize(tf.constant(["a x<unk>y <unk>"])).merge_dims(
        1, 2).to_list()[0]
    assert ids.count(mlm.UNK_ID) == 2 + ("a" not in vocab.words)  # one id per <unk>
    n, p = 24, 8
    seen = 0
    for batch in data.mlm_dataset(str(corpus), path, batch_size=16, max_sequence_length=n,
                                  max_predictions_per_seq=p).take(5):
        original = _unmasked(batch)
        w = batch["masked_weights"].numpy() > 0
        assert (original == mlm.UNK_ID).sum() > 16  # a third of the tokens are <unk>
        assert not (batch["masked_ids"].numpy()[w] == mlm.UNK_ID).any()
        real = ((original > 0) & (original != mlm.CLS_ID) & (original != mlm.SEP_ID)
                & (original != mlm.UNK_ID))
        np.testing.assert_array_equal(w.sum(1), np.minimum(np.ceil(real.sum(1) * 0.15), p))
        seen += w.sum()
    assert seen > 0
