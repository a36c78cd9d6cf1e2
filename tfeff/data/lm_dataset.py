"""tf.data pipeline for bidirectional language modelling (TensorFlow; tensorflow-text for WordPiece).

Each non-blank line is a sentence: its word (or WordPiece) ids, wrapped in `<s> ... </s>`,
are cut into windows of at most `max_sequence_length` tokens (a pathological 1 MB line
becomes many ordinary windows), shuffled and right-padded (id 0) per batch.
"""

import tensorflow as tf

from tfeff.data import corpus
from tfeff.data import vocabulary as vocabulary_lib
from tfeff.data import wordpiece as wordpiece_lib
from tfeff.data import words as words_lib
from tfeff.data.pipeline import line_dataset
from tfeff.data.pipeline import lookup_table
from tfeff.data.pipeline import shuffle_and_repeat
from tfeff.data.pipeline import unknown_for_padding

_LINES_PER_CHUNK = 256


def line_token_ids(lines, table, tokenizer=None):
    """The int32 ragged ids `(lines, tokens)` of a batch of lines, without boundaries;
    words are looked up in `table` (or split by `tokenizer`); a literal `<pad>` is `<unk>`."""
    words = words_lib.split_tf(lines)  # ragged (lines, words)
    if tokenizer is None:
        ids = tf.ragged.map_flat_values(table.lookup, words)
    else:
        ids = tokenizer.tokenize(words).merge_dims(1, 2)  # (lines, pieces)
    return unknown_for_padding(tf.cast(ids, tf.int32))


def lines_to_windows(lines, table, max_sequence_length, tokenizer=None):
    """Tokenizes a batch of lines into ragged id windows `(num_windows, None)`.

    Args:
        lines: 1-D `tf.string` of sentences.
        table: a `tf.lookup` table from word to id (unused with `tokenizer`).
        max_sequence_length: the longest window, in tokens (boundaries included).
        tokenizer: optional tensorflow-text `WordpieceTokenizer` applied to the words.

    Returns:
        int32 `RaggedTensor`; windows shorter than 2 tokens (nothing to predict) dropped.
    """
    ids = line_token_ids(lines, table, tokenizer)
    n = ids.nrows()
    bos = tf.RaggedTensor.from_tensor(tf.fill([n, 1], vocabulary_lib.BOS_ID))
    eos = tf.RaggedTensor.from_tensor(tf.fill([n, 1], vocabulary_lib.EOS_ID))
    tokens = tf.concat([bos, ids, eos], axis=1)
    ids = tokens.flat_values
    row = tokens.value_rowids()
    position = tf.range(tf.size(ids, out_type=tf.int64)) - tf.gather(tokens.row_starts(), row)
    windows_per_row = (tokens.row_lengths() + max_sequence_length - 1) // max_sequence_length
    first_window = tf.cumsum(windows_per_row, exclusive=True)
    window = tf.gather(first_window, row) + position // max_sequence_length
    windows = tf.RaggedTensor.from_value_rowids(ids, window,
                                                nrows=tf.reduce_sum(windows_per_row))
    return tf.ragged.boolean_mask(windows, windows.row_lengths() >= 2)


def lm_dataset(
    patterns,
    vocabulary_path,
    batch_size,
    max_sequence_length,
    shuffle_buffer=0,
    seed=None,
    repeat=False,
    on_invalid_utf8="error",
    drop_remainder=False,
    wordpiece=False,
):
    """Builds the LM dataset of right-padded id windows.

    Args:
        patterns: glob(s) of text files (see `tfeff.data.resolve_files`).
        vocabulary_path: a file written by `Vocabulary.save`.
        batch_size: windows per batch (the global batch under tf.distribute).
        max_sequence_length: int >= 2.
        shuffle_buffer: windows held for shuffling; 0 disables shuffling.
        seed: shuffle seed (epoch e's order depends on (seed, e) only).
        repeat: repeat forever (training).
        on_invalid_utf8: `"error"` (after the vocabulary pass's check), `"skip"`, `"replace"`.
        drop_remainder: drop a final smaller batch.
        wordpiece: `vocabulary_path` is a WordPiece vocabulary: words become subword ids.

    Returns:
        `tf.data.Dataset` of int32 `(batch, time)` with `time <= max_sequence_length`.

    Raises:
        ValueError: `batch_size` < 1, `max_sequence_length` < 2, or unknown `on_invalid_utf8`.
    """
    if batch_size <= 0:
        raise ValueError(f"`batch_size` must be positive. Received: batch_size={batch_size}")
    if max_sequence_length < 2:
        raise ValueError(
            "`max_sequence_length` must be >= 2 (a token and its target). "
            f"Received: max_sequence_length={max_sequence_length}")
    ds = _window_chunks(patterns, vocabulary_path, max_sequence_length, on_invalid_utf8,
                        wordpiece).unbatch()
    ds = shuffle_and_repeat(ds, shuffle_buffer, seed, repeat)
    ds = ds.ragged_batch(batch_size, drop_remainder=drop_remainder)
    ds = ds.map(lambda windows: windows.to_tensor(default_value=vocabulary_lib.PAD_ID))
    return ds.prefetch(tf.data.AUTOTUNE)


def _window_chunks(patterns, vocabulary_path, max_sequence_length, on_invalid_utf8,
                   wordpiece):
    """The files' windows in file order, as ragged `(windows, None)` chunks of lines."""
    if on_invalid_utf8 not in corpus.INVALID_UTF8_POLICIES:
        raise ValueError(f"Invalid on_invalid_utf8={on_invalid_utf8!r}")
    file_list = corpus.resolve_files(patterns)
    table = lookup_table(vocabulary_path, -1 if wordpiece else vocabulary_lib.UNK_ID)
    tokenizer = wordpiece_lib.wordpiece_tokenizer(table) if wordpiece else None
    ds = line_dataset(file_list, on_invalid_utf8)
    ds = ds.batch(_LINES_PER_CHUNK)
    return ds.map(
        lambda lines: lines_to_windows(lines, table, max_sequence_length, tokenizer),
        num_parallel_calls=tf.data.AUTOTUNE)


def count_windows(patterns, vocabulary_path, max_sequence_length, on_invalid_utf8="error",
                  wordpiece=False):
    """The windows (what `train.epochs` counts) and tokens of one epoch of `lm_dataset`.

    Args:
        patterns: glob(s) of text files (see `tfeff.data.resolve_files`).
        vocabulary_path: a file written by `Vocabulary.save` (WordPiece with `wordpiece`).
        max_sequence_length: int >= 2, the longest window.
        on_invalid_utf8: `"error"`, `"skip"` or `"replace"` (as `lm_dataset`).
        wordpiece: split words into WordPiece ids.

    Returns:
        `(windows, tokens)`: Python ints; the tokens include the sentence boundaries.

    Raises:
        ValueError: `max_sequence_length` is below 2, or `on_invalid_utf8` is unknown.
    """
    if max_sequence_length < 2:
        raise ValueError(
            "`max_sequence_length` must be >= 2 (a token and its target). "
            f"Received: max_sequence_length={max_sequence_length}")
    lengths = _window_chunks(patterns, vocabulary_path, max_sequence_length, on_invalid_utf8,
                             wordpiece).map(lambda windows: windows.row_lengths())
    windows, tokens = lengths.reduce(
        (tf.constant(0, tf.int64), tf.constant(0, tf.int64)),
        lambda total, n: (total[0] + tf.size(n, out_type=tf.int64),
                          total[1] + tf.reduce_sum(n)))
    return int(windows), int(tokens)
