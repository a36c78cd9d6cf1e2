"""One definition of a word: the vocabulary, the training pipelines, BERT's basic tokenizer,
fastText and the embedders split text at the same whitespace (`tfeff.data.words`)."""

import numpy as np
import tensorflow as tf

from tfeff.data import SPECIALS, Vocabulary, check_unknown_rate, lm_dataset, text_lines
from tfeff.data import train_fasttext
from tfeff.data import words
from tfeff.data.mlm_dataset import BasicTokenizer
from tfeff.data.mlm_dataset import basic_words
from tfeff.export.tokenization import Tokenization

ALL_WHITESPACE = [chr(c) for c in range(0x110000) if chr(c).isspace()]


def _strings(ragged):
    return [[w.decode("utf-8") for w in row] for row in ragged.to_list()]


def test_python_and_tensorflow_split_at_every_unicode_whitespace_alike():
    assert sorted(words.WHITESPACE) == ALL_WHITESPACE
    # Every whitespace character between words, alone and in runs, leading and trailing.
    text = "".join(f"w{i}{c}{c * (i % 3)}" for i, c in enumerate(ALL_WHITESPACE))
    lines = ([text, ALL_WHITESPACE[-1] + text, "".join(ALL_WHITESPACE), "",
              "zero\u200bwidth is no space"] + [f"a{c}b" for c in ALL_WHITESPACE])
    expected = [line.split() for line in lines]
    assert expected[0] == [f"w{i}" for i in range(len(ALL_WHITESPACE))]
    assert _strings(words.split_tf(tf.constant(lines))) == expected
    assert [words.split(line) for line in lines] == expected
    assert words.is_blank_tf(tf.constant(lines)).numpy().tolist() == [not e for e in expected]
    # The masked-LM tokenizer, its vocabulary pass and the exported embedders' split.
    plain = [text, f"a{chr(0xa0)}b{chr(0x3000)}c"]
    plain_words = [line.split() for line in plain]
    assert _strings(BasicTokenizer().tokenize(tf.constant(plain))) == plain_words
    assert list(basic_words(plain, lower_case=True)) == [" ".join(w) for w in plain_words]
    assert _strings(Tokenization("strings").words(tf.constant(lines))) == expected
    basic = Tokenization("strings", basic=True)
    assert _strings(basic.words(tf.constant(plain))) == plain_words


def test_a_corpus_split_by_no_break_spaces_trains_on_its_words(tmp_path):
    """The vocabulary holds the real words, the pipeline maps them to their ids (no
    `<unk>`), and a line of only no-break spaces is blank for both."""
    sentences = ["the cat sat", "a dog ran far", "the dog sat down"] * 10
    path = tmp_path / "nbsp.txt"
    nbsp_lines = [s.replace(" ", "\u00a0") for s in sentences]
    path.write_text("\n".join(nbsp_lines) + "\n\u00a0\u3000\n", encoding="utf-8")
    vocab = Vocabulary.build(text_lines(str(path)))
    assert sorted(vocab.words[len(SPECIALS):]) == sorted(
        {"the", "cat", "sat", "a", "dog", "ran", "far", "down"})
    assert vocab.counts[2] == len(sentences)  # sentences counted: the blank line is not one
    vocab_path = str(tmp_path / "vocabulary.txt")
    vocab.save(vocab_path)
    batches = lm_dataset(str(path), vocab_path, batch_size=7, max_sequence_length=8)
    ids = np.concatenate([row[row > 0] for b in batches for row in b.numpy()])
    expected = [w for s in sentences for w in ["<s>", *s.split(), "</s>"]]
    assert [vocab.words[i] for i in ids] == expected
    check_unknown_rate(str(path), vocab_path, max_rate=0.0)


def test_fasttext_trains_on_the_words_of_the_vocabulary(small_corpus, tmp_path):
    """fastText splits at ASCII whitespace only: it is given the words, space-joined."""
    lines = open(small_corpus[0], encoding="utf-8").read().splitlines()
    separators = ["\u00a0", "\u2009", "\u3000", "\x1f"]
    path = tmp_path / "mixed.txt"
    path.write_text("\n".join(line.replace(" ", separators[i % 4]) if i % 2 else line
                              for i, line in enumerate(lines)) + "\n", encoding="utf-8")
    model_path = str(tmp_path / "ft.bin")
    train_fasttext(str(path), model_path, dim=16, minn=2, maxn=4, bucket=5000, epoch=1)
    import fasttext

    fasttext_words = set(fasttext.load_model(model_path).words) - {"</s>"}
    vocabulary_words = set(Vocabulary.build(text_lines(str(path))).words) - set(SPECIALS)
    assert fasttext_words == vocabulary_words
    assert not [w for w in fasttext_words if any(c in w for c in separators)]
