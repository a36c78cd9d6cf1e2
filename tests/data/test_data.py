import collections

import numpy as np
import pytest

from tfeff.data import (CorpusError, Vocabulary, count_windows, lm_dataset, resolve_files,
                        synthetic_corpus, text_lines)
from tfeff.data import vocabulary as vocab_lib


def test_synthetic_corpus_is_seeded_and_has_agreement():
    a = list(synthetic_corpus(300, seed=3))
    assert a == list(synthetic_corpus(300, seed=3))
    assert a != list(synthetic_corpus(300, seed=4))
    held = list(synthetic_corpus(300, seed=3, split="heldout"))
    assert held != a
    # Plural determiners are followed (eventually) by plural nouns ending in s.
    words = [w for s in a for w in s.split()]
    after_these = [words[i + 1] for i, w in enumerate(words[:-1]) if w == "these"]
    assert after_these and all(w.endswith("s") or w.endswith(("ful", "ous", "ish", "al", "ic", "y"))
                               for w in after_these)
    counts = collections.Counter(words)
    assert sum(1 for c in counts.values() if c == 1) > 10  # a rare-word tail


def test_vocabulary_build_save_load(tmp_path):
    v = Vocabulary.build(["b a b", "c b a", "b"])
    assert v.words == list(vocab_lib.SPECIALS) + ["b", "a", "c"]
    assert v.counts[4:] == [4, 2, 1] and v.counts[2] == 3
    v.save(str(tmp_path / "v.txt"))
    assert Vocabulary.load(str(tmp_path / "v.txt")).words == v.words
    assert v.id("zzz") == vocab_lib.UNK_ID
    (tmp_path / "bad.txt").write_text("<pad>\t0\nno-tab-here\n")
    with pytest.raises(ValueError, match="bad.txt:2"):
        Vocabulary.load(str(tmp_path / "bad.txt"))


def test_vocabulary_memory_bound_keeps_frequent_words():
    lines = ["common"] * 50 + [f"rare{i}" for i in range(100)]
    v = Vocabulary.build(lines, max_words_in_memory=20)
    assert "common" in v and len(v) <= 4 + 20


def test_glob_matching_nothing_and_empty_corpus(tmp_path):
    with pytest.raises(CorpusError, match="No file matches .*nothing-\\*"):
        resolve_files(str(tmp_path / "nothing-*"))
    (tmp_path / "empty.txt").write_text("\n   \n\n")
    with pytest.raises(CorpusError, match="empty.*empty.txt"):
        list(text_lines(str(tmp_path / "empty.txt")))


def test_blank_lines_are_skipped_and_invalid_utf8_is_located(tmp_path):
    p = tmp_path / "c.txt"
    p.write_bytes(b"a b\n\n  \nc d\n\xff\xfe bad\ne f\n")
    with pytest.raises(CorpusError, match=r"c.txt:5: .*not valid UTF-8"):
        list(text_lines(str(p)))
    assert list(text_lines(str(p), on_invalid_utf8="skip")) == ["a b", "c d", "e f"]
    assert list(text_lines(str(p), on_invalid_utf8="replace"))[2] == "\ufffd\ufffd bad"


def test_long_line_becomes_windows(tmp_path):
    words = [f"w{i % 50}" for i in range(200_000)]  # a ~1 MB single line
    p = tmp_path / "long.txt"
    p.write_text(" ".join(words) + "\nshort one\n")
    v = Vocabulary.build(text_lines(str(p)))
    v.save(str(tmp_path / "v.txt"))
    batches = list(lm_dataset(str(p), str(tmp_path / "v.txt"), batch_size=512,
                              max_sequence_length=20))
    windows = np.concatenate([b.numpy() for b in batches])
    assert windows.shape[1] == 20
    lengths = (windows > 0).sum(1)
    assert lengths.sum() == 200_000 + 2 + 4  # every token once, boundaries included
    flat = np.concatenate([w[w > 0] for w in windows])
    assert flat[0] == vocab_lib.BOS_ID and v.words[flat[1]] == "w0"


def test_count_windows_is_one_epoch_of_lm_dataset(tmp_path):
    """`train.epochs`' unit: what `lm_dataset` yields in one pass, and by the windows'
    closed form: ceil((words + 2) / n) windows a sentence, every token once."""
    rng = np.random.default_rng(0)
    lengths = [int(k) for k in rng.integers(0, 60, size=300)]
    lines = [" ".join(f"w{rng.integers(40)}" for _ in range(k)) for k in lengths]
    p = tmp_path / "c.txt"
    p.write_text("\n".join(lines) + "\n\n")  # blank lines are no sentences
    Vocabulary.build(text_lines(str(p))).save(str(tmp_path / "v.txt"))
    sentences = [k for k in lengths if k]
    for n in (2, 7, 20):
        windows, tokens = count_windows(str(p), str(tmp_path / "v.txt"), n)
        assert windows == sum(-(-(k + 2) // n) for k in sentences) - sum(
            (k + 2) % n == 1 for k in sentences)  # a last window of 1 token is dropped
        assert tokens == sum(k + 2 for k in sentences) - sum((k + 2) % n == 1 for k in sentences)
        epoch = np.concatenate([b.numpy() for b in lm_dataset(
            str(p), str(tmp_path / "v.txt"), batch_size=32, max_sequence_length=n)])
        assert (len(epoch), int((epoch > 0).sum())) == (windows, tokens)
    with pytest.raises(ValueError, match="max_sequence_length"):
        count_windows(str(p), str(tmp_path / "v.txt"), 1)


def test_lm_dataset_rejects_bad_sizes(tmp_path):
    p = tmp_path / "c.txt"
    p.write_text("a b\n")
    with pytest.raises(ValueError, match="batch_size"):
        lm_dataset(str(p), "v", batch_size=0, max_sequence_length=5)
    with pytest.raises(ValueError, match="max_sequence_length"):
        lm_dataset(str(p), "v", batch_size=2, max_sequence_length=1)


def test_literal_specials_in_text_are_unknown_words(tmp_path):
    """`<unk>` and `<pad>` in a corpus are the unknown word (never padding, id 0);
    `<s>` and `</s>` stay the boundaries."""
    import tensorflow as tf

    from tfeff.data import lines_to_windows, vocabulary
    from tfeff.data.pipeline import lookup_table

    vocab = Vocabulary.build(["a <unk> b <pad> a"])
    assert vocab.words == list(vocabulary.SPECIALS) + ["a", "b"]  # no second <unk>/<pad>
    path = str(tmp_path / "v.txt")
    vocab.save(path)
    ids = lines_to_windows(tf.constant(["a <unk> b <pad> a"]), lookup_table(path), 20)
    unk = vocabulary.UNK_ID
    assert ids.to_list() == [[vocabulary.BOS_ID, 4, unk, 5, unk, 4, vocabulary.EOS_ID]]
