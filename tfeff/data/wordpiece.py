"""WordPiece vocabularies for the subword LM (tensorflow-text's learner and tokenizer).

Learned from the corpus' word counts and stored as a `tfeff.data.Vocabulary` file:
reserved tokens, then subwords by decreasing corpus frequency (what adaptive softmax
and log-uniform sampling need), continuation pieces with BERT's `##` prefix.
"""

import collections
import logging

import numpy as np
import tensorflow as tf
import tensorflow_text as text
from tensorflow_text.python.ops import bert_tokenizer as text_bert
from tensorflow_text.tools.wordpiece_vocab import wordpiece_tokenizer_learner_lib as learner

from tfeff.data import vocabulary as vocabulary_lib
from tfeff.data import words as words_lib

SUFFIX_INDICATOR = "##"
MAX_BYTES_PER_WORD = 100
# What a literal `<unk>` stands as while the basic tokenizer runs: a private-use code point,
# kept whole; with its two spaces as many UTF-8 bytes as `<unk>`, so offsets do not move.
_UNK_STANDIN = "\ue000"


class BasicTokenizer(text_bert.BasicTokenizer):
    """BERT's basic tokenizer on text whose whitespace is normalized first
    (`tfeff.data.words`: tensorflow-text's splits at ASCII whitespace only), keeping a
    literal `<unk>`, even inside a word (`a<unk>b` is `a`, `<unk>`, `b`), whole (so is
    U+E000, its stand-in). Offsets refer to the normalized text."""

    def tokenize_with_offsets(self, text_input):
        text_input = tf.strings.regex_replace(words_lib.normalize_whitespace(text_input),
                                              vocabulary_lib.UNK, f" {_UNK_STANDIN} ")
        tokens, starts, ends = super().tokenize_with_offsets(text_input)
        unknown = tokens.flat_values == _UNK_STANDIN  # offsets: those of `<unk>`
        return (tokens.with_flat_values(
                    tf.where(unknown, vocabulary_lib.UNK, tokens.flat_values)),
                starts.with_flat_values(starts.flat_values - tf.cast(unknown, starts.dtype)),
                ends.with_flat_values(ends.flat_values + tf.cast(unknown, ends.dtype)))


def wordpiece_tokenizer(table):
    """A `text.WordpieceTokenizer` over a `tf.lookup` table (token -> id, default -1)."""
    return text.WordpieceTokenizer(
        table,
        suffix_indicator=SUFFIX_INDICATOR,
        max_bytes_per_word=MAX_BYTES_PER_WORD,
        token_out_type=tf.int64,
        unknown_token=vocabulary_lib.UNK,
    )


def _table(tokens):
    init = tf.lookup.KeyValueTensorInitializer(
        tf.constant(tokens), tf.range(len(tokens), dtype=tf.int64))
    return tf.lookup.StaticHashTable(init, default_value=-1)


def learn_wordpiece_vocabulary(word_vocabulary, vocabulary_size, path, batch_size=4096,
                               extra_reserved=()):
    """Learns a WordPiece vocabulary from word counts and saves it (token<TAB>count).

    Args:
        word_vocabulary: a `Vocabulary` of corpus words with counts.
        vocabulary_size: the target number of tokens (reserved ones included), roughly.
        path: output file.
        batch_size: words tokenized at once when counting tokens.
        extra_reserved: reserved tokens after `SPECIALS` (BERT's `[MASK]`).

    Returns:
        The WordPiece `Vocabulary`, its counts those of the tokenized corpus.

    Raises:
        ValueError: `word_vocabulary` holds no word with a positive count.
    """
    reserved = list(vocabulary_lib.SPECIALS) + list(extra_reserved)
    specials = len(reserved)
    first_word = len(vocabulary_lib.SPECIALS)
    word_counts = [(w, c) for w, c in zip(word_vocabulary.words[first_word:],
                                          word_vocabulary.counts[first_word:]) if c > 0]
    if not word_counts:
        raise ValueError("Cannot learn a WordPiece vocabulary from an empty corpus.")
    tokens = learner.learn(word_counts, vocabulary_size, reserved, lower_thresh=1,
                           joiner=SUFFIX_INDICATOR)
    tokenizer = wordpiece_tokenizer(_table(tokens))
    counts = collections.Counter()
    for start in range(0, len(word_counts), batch_size):
        chunk = word_counts[start:start + batch_size]
        pieces = tokenizer.tokenize(tf.constant([w for w, _ in chunk]))
        for (_, count), ids in zip(chunk, pieces.to_list()):
            for i in ids:
                counts[int(i)] += count
    sentences = word_vocabulary.counts[vocabulary_lib.BOS_ID]
    ordered = sorted(range(specials, len(tokens)), key=lambda i: (-counts[i], tokens[i]))
    words = reserved + [tokens[i] for i in ordered]
    token_counts = [0, counts[vocabulary_lib.UNK_ID], sentences, sentences]
    token_counts += [0] * len(extra_reserved) + [counts[i] for i in ordered]
    vocab = vocabulary_lib.Vocabulary(words, token_counts)
    vocab.save(path)
    logging.info("WordPiece vocabulary: %d tokens, %.2f pieces per word -> %s", len(vocab),
                 sum(token_counts[specials:]) / max(1, sum(c for _, c in word_counts)), path)
    return vocab


def pieces_per_word(vocabulary_path, words):
    """Number of WordPiece tokens of each word (for tests and statistics)."""
    vocab = vocabulary_lib.Vocabulary.load(vocabulary_path)
    tokenizer = wordpiece_tokenizer(_table(vocab.words))
    return np.asarray(tokenizer.tokenize(tf.constant(words)).row_lengths())
