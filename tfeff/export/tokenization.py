"""In-graph tokenization of the SavedModel embedders (TensorFlow-only).

`Tokenization` turns sentences into words and words into model tokens inside the exported
graph, as in pre-training: word-level ELMo splits at whitespace (a literal `<unk>` or `<pad>`
is the unknown word), ELMo-Sub then applies WordPiece, Masked ELMo and BERT apply BERT's
basic tokenizer (punctuation and CJK split, optional lower-casing) and WordPiece.
"""

import tensorflow as tf

from tfeff.data import vocabulary as vocabulary_lib
from tfeff.data.pipeline import unknown_for_padding

# Whitespace words; whitespace then WordPiece (ELMo-Sub); BERT's basic tokenizer then WordPiece.
TOKENIZATIONS = ("word", "wordpiece", "bert")


class Tokenization(tf.Module):
    """Sentences -> words -> model tokens, in-graph.

    Args:
        pieces: `"strings"` (the words, for a fastText input), `"ids"` (one vocabulary id per
            word, `<unk>` for the rest) or `"wordpiece"`.
        vocabulary: list of tokens in id order (`"ids"` and `"wordpiece"`).
        basic: split with BERT's basic tokenizer instead of whitespace.
        lower_case: the basic tokenizer's lower-casing and accent stripping.
    """

    def __init__(self, pieces, vocabulary=None, basic=False, lower_case=False):
        super().__init__(name="tokenization")
        if pieces not in ("strings", "ids", "wordpiece"):
            raise ValueError(f"Unknown token kind {pieces!r}")
        if pieces != "strings" and not vocabulary:
            raise ValueError(f"A {pieces!r} tokenization needs the vocabulary.")
        self.kind = pieces
        self.vocabulary = list(vocabulary) if vocabulary else None
        self.basic = None
        self.lower_case = bool(lower_case)
        self.requires_tensorflow_text = basic or pieces == "wordpiece"
        if self.vocabulary is not None:
            init = tf.lookup.KeyValueTensorInitializer(
                tf.constant(self.vocabulary), tf.range(len(self.vocabulary), dtype=tf.int64))
            default = vocabulary_lib.UNK_ID if pieces == "ids" else -1
            self.table = tf.lookup.StaticHashTable(init, default_value=default)
        if basic:
            from tfeff.data.wordpiece import BasicTokenizer

            self.basic = BasicTokenizer(lower_case=lower_case)
        if pieces == "wordpiece":
            from tfeff.data import wordpiece as wordpiece_lib

            self.wordpiece = wordpiece_lib.wordpiece_tokenizer(self.table)
            # Piece strings, for subword_pooling="none" (word-level kinds output words).
            self.id_to_token = tf.Variable(self.vocabulary, trainable=False, name="vocabulary")

    def words(self, sentences):
        """Ragged `[batch, words]` strings of `[batch]` sentences, split as in pre-training."""
        from tfeff.data import words as words_lib

        if self.basic is not None:  # normalizes the whitespace itself
            return self.basic.tokenize(sentences)
        return words_lib.split_tf(sentences)

    def pieces(self, words):
        """Ragged `[batch, words, pieces]` model tokens of ragged `[batch, words]` words."""
        flat = words.flat_values
        if self.kind == "strings":
            values = tf.RaggedTensor.from_tensor(flat[:, None])
        elif self.kind == "ids":
            ids = unknown_for_padding(tf.cast(self.table.lookup(flat), tf.int32))
            values = tf.RaggedTensor.from_tensor(ids[:, None])
        elif self.basic is not None:  # a pre-tokenized word may still split ("don't")
            values = self.wordpiece.tokenize(self.basic.tokenize(flat)).merge_dims(1, 2)
            values = tf.cast(values, tf.int32)
        else:  # as the LM pipeline: a literal <pad> is <unk>
            values = unknown_for_padding(tf.cast(self.wordpiece.tokenize(flat), tf.int32))
        return words.with_flat_values(values)

    def token_strings(self, pieces_flat):
        """The strings of model tokens (ragged, any shape)."""
        if self.kind == "strings":
            return pieces_flat
        return tf.ragged.map_flat_values(tf.gather, self.id_to_token, pieces_flat)


def _keep_fitting_words(words, pieces, budget, subwords):
    """The leading words of each row whose tokens fit in `budget` (no row has more words)."""
    if not subwords:
        return words, pieces
    counts = pieces.row_lengths(axis=2)  # ragged [batch, words]
    total = tf.cumsum(counts.flat_values)
    before_row = tf.gather(tf.concat([[0], total], 0), counts.row_starts())
    within = total - tf.gather(before_row, counts.value_rowids())
    keep = counts.with_flat_values(within <= budget)
    return tf.ragged.boolean_mask(words, keep), tf.ragged.boolean_mask(pieces, keep)

