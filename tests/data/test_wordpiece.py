import numpy as np
import tensorflow as tf

from tfeff.data import Vocabulary, learn_wordpiece_vocabulary, lm_dataset, synthetic_corpus
from tfeff.data.wordpiece import pieces_per_word


def _pieces(vocab, ids):
    return [vocab.words[i] for i in ids]


def _join(pieces):
    return "".join(p[2:] if p.startswith("##") else p for p in pieces)


def test_learned_vocabulary_is_frequency_sorted_and_reconstructs_words(tmp_path):
    lines = list(synthetic_corpus(3000, seed=3, lexicon_size=400))
    words = Vocabulary.build(lines)
    path = str(tmp_path / "wp.txt")
    vocab = learn_wordpiece_vocabulary(words, 300, path)
    assert vocab.words[:4] == ["<pad>", "<unk>", "<s>", "</s>"]
    assert vocab.counts[4:] == sorted(vocab.counts[4:], reverse=True)
    assert 100 < len(vocab) <= 400
    reloaded = Vocabulary.load(path)
    assert reloaded.words == vocab.words and reloaded.counts == vocab.counts
    # Counts are the token frequencies of the tokenized corpus.
    lengths = pieces_per_word(path, words.words[4:])
    assert sum(vocab.counts[4:]) + vocab.counts[1] == int(np.dot(lengths, words.counts[4:]))

    # The tf.data pipeline tokenizes into pieces that spell each word back.
    (tmp_path / "c.txt").write_text("\n".join(lines[:50]) + "\n")
    ds = lm_dataset(str(tmp_path / "c.txt"), path, batch_size=50, max_sequence_length=1000,
                    wordpiece=True)
    batch = next(iter(ds)).numpy()
    for line, row in zip(lines[:50], batch):
        row = row[row > 0]
        assert row[0] == 2 and row[-1] == 3
        pieces = _pieces(vocab, row[1:-1])
        rebuilt, current = [], ""
        for p in pieces:
            if not p.startswith("##") and current:
                rebuilt.append(current)
                current = ""
            current += p[2:] if p.startswith("##") else p
        rebuilt.append(current)
        assert rebuilt == line.split()


def test_unknown_characters_map_to_unk(tmp_path):
    words = Vocabulary.build(["aa ab ba bb"] * 5)
    path = str(tmp_path / "wp.txt")
    vocab = learn_wordpiece_vocabulary(words, 20, path)
    (tmp_path / "c.txt").write_text("ab zz\n")
    ds = lm_dataset(str(tmp_path / "c.txt"), path, batch_size=1, max_sequence_length=10,
                    wordpiece=True)
    row = next(iter(ds)).numpy()[0]
    assert _join(_pieces(vocab, row[1:-2])) == "ab"
    assert row[-2] == 1  # "zz": no piece covers z -> <unk>
    assert isinstance(ds.element_spec, tf.TensorSpec)
