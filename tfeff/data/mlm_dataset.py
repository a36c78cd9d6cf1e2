"""Masked-LM data for BERT: WordPiece vocabulary, packing, 80/10/10 masking (TensorFlow, tensorflow-text).

* Vocabulary: tensorflow-text's WordPiece learner over the words of BERT's basic
  tokenizer (`tfeff.data.wordpiece.BasicTokenizer`), `[MASK]` reserved as id 4.
* Pipeline: each chunk of consecutive lines becomes one token stream cut into
  windows of `max_sequence_length - 2` tokens (`- 3` with NSP), so sequences are
  packed full; each is `[CLS] window [SEP]`, or with NSP `[CLS] A [SEP] B [SEP]`
  (the window's halves; for half the sequences B is another row's, `nsp_labels` 1).
* Masking: `ceil(mask_rate * n)` of a sequence's n non-special tokens (`<unk>`
  counts as special: an unknown word is never a target; at most `max_predictions_per_seq`),
  80/10/10 with tensorflow-text's `RandomItemSelector` and `MaskValuesChooser`
  semantics, drawn with stateless ops keyed by `(seed, batch index)`, so the masks
  of batch i are the same whenever it is produced (exact resume).
"""

import itertools
import logging

import numpy as np
import tensorflow as tf
import tensorflow_text as text

from tfeff.data import corpus
from tfeff.data import vocabulary as vocabulary_lib
from tfeff.data import wordpiece as wordpiece_lib
from tfeff.data.pipeline import line_dataset
from tfeff.data.pipeline import lookup_table
from tfeff.data.pipeline import shuffle_and_repeat
from tfeff.data.vocabulary import CLS_ID
from tfeff.data.vocabulary import MASK
from tfeff.data.vocabulary import MASK_ID
from tfeff.data.vocabulary import PAD_ID
from tfeff.data.vocabulary import SEP_ID
from tfeff.data.vocabulary import UNK_ID
from tfeff.data.wordpiece import BasicTokenizer

_LINES_PER_CHUNK = 256


def basic_words(lines, lower_case=False, batch_size=1024):
    """Yields each line's words as BERT's basic tokenizer splits them, space-joined."""
    tokenizer = BasicTokenizer(lower_case=lower_case)
    lines = iter(lines)
    while batch := list(itertools.islice(lines, batch_size)):
        for words in tokenizer.tokenize(tf.constant(batch)).to_list():
            yield " ".join(w.decode("utf-8") for w in words)


def learn_bert_vocabulary(patterns, vocabulary_size, path, lower_case=False,
                          on_invalid_utf8="error", max_words_in_memory=10_000_000):
    """Learns and saves a BERT WordPiece vocabulary from text files.

    Args:
        patterns: glob(s) of text files.
        vocabulary_size: target size (reserved tokens included).
        path: output file (a `tfeff.data.Vocabulary` file).
        lower_case: lower-case and strip accents first (uncased BERT).
        on_invalid_utf8: `"error"` (naming file and line), `"skip"`, `"replace"`.
        max_words_in_memory: bound on distinct words held while counting.

    Returns:
        The `Vocabulary`.
    """
    words = vocabulary_lib.Vocabulary.build(
        basic_words(corpus.text_lines(patterns, on_invalid_utf8), lower_case),
        max_words_in_memory=max_words_in_memory)
    logging.info("Learning a BERT WordPiece vocabulary of about %d tokens from %d words",
                 vocabulary_size, len(words))
    return wordpiece_lib.learn_wordpiece_vocabulary(
        words, vocabulary_size, path, extra_reserved=(MASK,))


def check_bert_vocabulary(vocabulary):
    """Raises ValueError unless `vocabulary` has BERT's reserved tokens in place."""
    if len(vocabulary.words) <= MASK_ID or vocabulary.words[MASK_ID] != MASK:
        raise ValueError(
            f"Not a BERT vocabulary: id {MASK_ID} must be {MASK} (learn it with "
            "tfeff.data.learn_bert_vocabulary).")


def bert_tokenizer(vocabulary_path, lower_case=False):
    """`text.BertTokenizer` over a tfeff vocabulary file (ids as int64)."""
    table = lookup_table(vocabulary_path, default_value=-1)
    return text.BertTokenizer(
        table, suffix_indicator=wordpiece_lib.SUFFIX_INDICATOR,
        max_bytes_per_word=wordpiece_lib.MAX_BYTES_PER_WORD, token_out_type=tf.int64,
        unknown_token=vocabulary_lib.UNK, lower_case=lower_case,
        basic_tokenizer_class=BasicTokenizer)


def _windows(lines, tokenizer, window):
    """One chunk of lines -> ragged token windows `(num_windows, <= window)`."""
    stream = tokenizer.tokenize(lines).flat_values  # the chunk's pieces as one stream
    position = tf.range(tf.size(stream, out_type=tf.int64))
    windows = tf.RaggedTensor.from_value_rowids(stream, position // window)
    return tf.ragged.boolean_mask(windows, windows.row_lengths() >= 2)


def token_counts(patterns, vocabulary_path, lower_case=False, on_invalid_utf8="error",
                 max_tokens=None):
    """How often each token id occurs in the text, tokenized as `mlm_dataset` does (no
    `[CLS]`/`[SEP]`), in file order; counting stops after the chunk that reaches `max_tokens`.

    Args:
        patterns: glob(s) of text files (see `tfeff.data.resolve_files`).
        vocabulary_path: a vocabulary from `learn_bert_vocabulary`.
        lower_case: as when the vocabulary was learned.
        on_invalid_utf8: `"error"`, `"skip"` or `"replace"`.
        max_tokens: None (count everything), or when to stop.

    Returns:
        `(counts, lines_read)`: int64 NumPy `(vocabulary_size,)` and the lines counted.
    """
    size = len(vocabulary_lib.Vocabulary.load(vocabulary_path))
    tokenizer = bert_tokenizer(vocabulary_path, lower_case)

    def count(lines):
        ids = tf.cast(tokenizer.tokenize(lines).flat_values, tf.int32)
        return tf.math.bincount(ids, minlength=size, maxlength=size, dtype=tf.int64), \
            tf.size(lines, out_type=tf.int64)

    ds = line_dataset(corpus.resolve_files(patterns), on_invalid_utf8).batch(_LINES_PER_CHUNK)
    ds = ds.map(count, num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)
    counts, lines_read = np.zeros(size, np.int64), 0
    for chunk, lines in ds:
        counts += chunk.numpy()
        lines_read += int(lines)
        if max_tokens is not None and counts.sum() >= max_tokens:
            break
    return counts, lines_read


def _nsp_segments(windows, seed):
    """Splits windows in halves; replaces half of the second halves by another row's."""
    positions = tf.ragged.range(windows.row_lengths())
    half = (windows.row_lengths() // 2)[:, None]
    first = tf.ragged.boolean_mask(windows, positions < half)
    second = tf.ragged.boolean_mask(windows, positions >= half)
    rows = tf.shape(windows.row_lengths(), out_type=tf.int64)[0]
    is_random = tf.random.stateless_uniform([rows], seed=seed) < 0.5
    other = (tf.range(rows) + 1) % tf.maximum(rows, 1)
    second = tf.gather(second, tf.where(is_random, other, tf.range(rows)))
    return [first, second], tf.cast(is_random, tf.int32)


def _select_and_mask(ids, seed, max_predictions_per_seq, vocabulary_size, mask_rate,
                     mask_token_rate, random_token_rate):
    """BERT's masking (see the module docstring) with stateless draws, a function of
    `ids` and `seed` only: tensorflow-text's stateful draws a restored `tf.data`
    iterator could not reproduce.

    Returns:
        `(masked_ids, positions, targets, valid)`: dense `(batch, n)` ids, `(batch, p)`
        sorted positions and their original ids, and the `(batch, p)` validity mask.
    """
    dense = ids.to_tensor(default_value=PAD_ID)
    maskable = (dense != PAD_ID) & (dense != CLS_ID) & (dense != SEP_ID) & (dense != UNK_ID)
    maskable &= tf.sequence_mask(ids.row_lengths(), tf.shape(dense, out_type=tf.int64)[1])
    p = max_predictions_per_seq
    count = tf.reduce_sum(tf.cast(maskable, tf.float32), axis=1)
    k = tf.minimum(tf.cast(tf.math.ceil(count * mask_rate), tf.int32), p)
    seeds = tf.random.experimental.stateless_split(seed, 3)
    scores = tf.where(maskable, tf.random.stateless_uniform(tf.shape(dense), seed=seeds[0]), 2.0)
    width = tf.shape(dense)[1]
    pad = tf.maximum(p - width, 0)  # rows shorter than p: pad so there are p candidates
    scores = tf.pad(scores, [[0, 0], [0, pad]], constant_values=3.0)
    candidates = tf.argsort(scores, axis=1, stable=True)[:, :p]
    valid = tf.range(p)[None, :] < k[:, None]
    positions = tf.sort(tf.where(valid, candidates, width + pad), axis=1)
    positions = tf.where(valid, positions, 0)
    targets = tf.gather(dense, positions, batch_dims=1)
    u = tf.random.stateless_uniform(tf.shape(positions), seed=seeds[1])
    random_ids = tf.random.stateless_uniform(tf.shape(positions), seed=seeds[2], minval=0,
                                             maxval=vocabulary_size, dtype=tf.int64)
    new = tf.where(u < mask_token_rate, tf.constant(MASK_ID, dense.dtype),
                   tf.where(u < mask_token_rate + random_token_rate,
                            tf.cast(random_ids, dense.dtype), targets))
    rows = tf.broadcast_to(tf.range(tf.shape(dense)[0])[:, None], tf.shape(positions))
    index = tf.boolean_mask(tf.stack([rows, positions], -1), valid)
    masked = tf.tensor_scatter_nd_update(dense, index, tf.boolean_mask(new, valid))
    return masked, positions, targets, valid


def mask_and_pack(segments, max_sequence_length, max_predictions_per_seq, vocabulary_size,
                  mask_rate=0.15, mask_token_rate=0.8, random_token_rate=0.1, seed=(0, 0)):
    """BERT inputs from ragged segments: combine, mask 80/10/10, pad.

    Args:
        segments: list of ragged int `(batch, None)` token segments.
        max_sequence_length: padded length n (`[CLS]`/`[SEP]` included).
        max_predictions_per_seq: padded number p of masked positions.
        vocabulary_size: range of the random replacement tokens.
        mask_rate: as for `mlm_dataset`.
        mask_token_rate: as for `mlm_dataset`.
        random_token_rate: as for `mlm_dataset`.
        seed: shape-[2] int seed; the masks are a function of it and the ids.

    Returns:
        dict of int32 `token_ids`, `segment_ids`, `padding_mask` `(batch, n)`,
        `masked_positions`, `masked_ids` and float32 `masked_weights` `(batch, p)`.
    """
    ids, segment_ids = text.combine_segments(
        segments, start_of_sequence_id=CLS_ID, end_of_segment_id=SEP_ID)
    masked, positions, targets, valid = _select_and_mask(
        ids, seed, max_predictions_per_seq, vocabulary_size, mask_rate, mask_token_rate,
        random_token_rate)
    n = max_sequence_length
    masked = tf.RaggedTensor.from_tensor(masked, lengths=ids.row_lengths())
    return {
        "token_ids": tf.cast(masked.to_tensor(shape=[None, n]), tf.int32),
        "segment_ids": tf.cast(segment_ids.to_tensor(shape=[None, n]), tf.int32),
        "padding_mask": tf.cast(tf.ones_like(ids).to_tensor(shape=[None, n]), tf.int32),
        "masked_positions": tf.cast(positions, tf.int32),  # already 0 where not valid
        "masked_ids": tf.cast(tf.where(valid, targets, tf.zeros_like(targets)), tf.int32),
        "masked_weights": tf.cast(valid, tf.float32),
    }


def mlm_dataset(
    patterns,
    vocabulary_path,
    batch_size,
    max_sequence_length,
    max_predictions_per_seq,
    mask_rate=0.15,
    mask_token_rate=0.8,
    random_token_rate=0.1,
    lower_case=False,
    use_nsp=False,
    shuffle_buffer=0,
    seed=None,
    repeat=False,
    on_invalid_utf8="error",
    drop_remainder=False,
):
    """Masked-LM batches for `tfeff.models.Bert` (see the module docstring).

    Args:
        patterns: glob(s) of text files, one sentence (or paragraph) per line.
        vocabulary_path: a vocabulary from `learn_bert_vocabulary`.
        batch_size: sequences per batch (global batch under tf.distribute).
        max_sequence_length: n, at least 8.
        max_predictions_per_seq: p, the most masked positions per sequence.
        mask_rate: fraction of a sequence's n non-special tokens to predict:
            `ceil(mask_rate * n)`, at most `max_predictions_per_seq`.
        mask_token_rate: fraction of the selected tokens replaced by `[MASK]`.
        random_token_rate: fraction replaced by a random id of `[0, vocabulary_size)`
            (the rest stay).
        lower_case: as when the vocabulary was learned.
        use_nsp: build sentence pairs and `nsp_labels`.
        shuffle_buffer: windows held for shuffling; 0 disables it.
        seed: shuffle, NSP and masking seed (None: 0).
        repeat: repeat forever (training).
        on_invalid_utf8: `"error"`, `"skip"` or `"replace"`.
        drop_remainder: drop a final smaller batch.

    Returns:
        `tf.data.Dataset` of `mask_and_pack` dicts, plus `nsp_labels` with `use_nsp`.

    Raises:
        ValueError: `batch_size` is not positive, `max_sequence_length` is below 8,
            `max_predictions_per_seq` is not in `[1, max_sequence_length]`,
            `on_invalid_utf8` is unknown, or the vocabulary is not BERT's.
    """
    if batch_size <= 0:
        raise ValueError(f"`batch_size` must be positive. Received: batch_size={batch_size}")
    if max_sequence_length < 8:
        raise ValueError("`max_sequence_length` must be >= 8. Received: "
                         f"max_sequence_length={max_sequence_length}")
    if not 0 < max_predictions_per_seq <= max_sequence_length:
        raise ValueError(
            "`max_predictions_per_seq` must be in [1, max_sequence_length]. Received: "
            f"max_predictions_per_seq={max_predictions_per_seq}")
    if on_invalid_utf8 not in corpus.INVALID_UTF8_POLICIES:
        raise ValueError(f"Invalid on_invalid_utf8={on_invalid_utf8!r}")
    vocabulary = vocabulary_lib.Vocabulary.load(vocabulary_path)
    check_bert_vocabulary(vocabulary)
    tokenizer = bert_tokenizer(vocabulary_path, lower_case)
    window = max_sequence_length - (3 if use_nsp else 2)

    ds = line_dataset(corpus.resolve_files(patterns), on_invalid_utf8)
    ds = ds.batch(_LINES_PER_CHUNK)
    ds = ds.map(lambda lines: _windows(lines, tokenizer, window),
                num_parallel_calls=tf.data.AUTOTUNE)
    ds = shuffle_and_repeat(ds.unbatch(), shuffle_buffer, seed, repeat)
    ds = ds.ragged_batch(batch_size, drop_remainder=drop_remainder)
    base_seed = 0 if seed is None else seed

    def finish(index, windows):
        keys = tf.random.experimental.stateless_split(
            tf.stack([tf.cast(base_seed, tf.int64), index]), 2)
        segments, labels = (_nsp_segments(windows, keys[0]) if use_nsp else ([windows], None))
        features = mask_and_pack(
            segments, max_sequence_length, max_predictions_per_seq, len(vocabulary),
            mask_rate, mask_token_rate, random_token_rate, seed=keys[1])
        if use_nsp:
            features["nsp_labels"] = labels
        return features

    ds = ds.enumerate().map(finish, num_parallel_calls=tf.data.AUTOTUNE)
    return ds.prefetch(tf.data.AUTOTUNE)
