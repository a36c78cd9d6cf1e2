"""Masked-LM data for BERT: WordPiece vocabulary, packing, 80/10/10 masking (TensorFlow, tensorflow-text).

* Vocabulary: text is split with BERT's basic tokenizer (whitespace as
  `tfeff.data.words` defines it, punctuation, CJK characters; optional
  lower-casing; a literal `<unk>` kept whole: `tfeff.data.wordpiece.BasicTokenizer`),
  the words are counted
  and `tensorflow_text`'s WordPiece learner builds the vocabulary (the tool
  behind BERT's). Reserved ids: `<pad>` 0 (BERT's [PAD]), `<unk>` 1 ([UNK]),
  `<s>` 2 ([CLS]), `</s>` 3 ([SEP]) and `[MASK]` 4.
* Pipeline: `text.BertTokenizer` in `tf.data`; each chunk of consecutive
  lines becomes one token stream cut into windows of
  `max_sequence_length - 2` tokens (`- 3` with NSP), so sequences are packed
  full and sentences continue across window boundaries; the last window of
  a chunk may be shorter. Windows are shuffled and batched; each sequence is
  `[CLS] window [SEP]`, or with NSP `[CLS] A [SEP] B [SEP]` where A and B are
  the two halves of a window and, for half of the sequences, B is replaced
  by the second half of another sequence of the batch (`nsp_labels` 1).
* Masking: `ceil(mask_rate * n)` of a sequence's n non-special tokens (`<unk>`
  is special here: an unknown word is never a target; at
  most `max_predictions_per_seq`), each 80% `[MASK]`, 10% a random token,
  10% unchanged by default (tensorflow-text's `RandomItemSelector` and
  `MaskValuesChooser` semantics), drawn with stateless random ops keyed by
  `(seed, batch index)`: the masks of batch i are the same whenever it is
  produced, which exact resume needs.
"""

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
    batch = []

    def flush():
        for words in tokenizer.tokenize(tf.constant(batch)).to_list():
            yield " ".join(w.decode("utf-8") for w in words)

    for line in lines:
        batch.append(line)
        if len(batch) == batch_size:
            yield from flush()
            batch = []
    if batch:
        yield from flush()


def learn_bert_vocabulary(patterns, vocabulary_size, path, lower_case=False,
                          on_invalid_utf8="error", max_words_in_memory=10_000_000):
    """Learns and saves a BERT WordPiece vocabulary from text files.

    Args:
        patterns: glob(s) of text files.
        vocabulary_size: target size (reserved tokens included).
        path: output file (`token<TAB>count`, see `tfeff.data.Vocabulary`).
        lower_case: lower-case and strip accents first (uncased BERT).
        on_invalid_utf8: `"error"` (naming file and line), `"skip"`, `"replace"`.
        max_words_in_memory: bound on distinct words held while counting.

    Returns:
        The `Vocabulary`.
    """
    words = vocabulary_lib.Vocabulary.build(
        basic_words(corpus.text_lines(patterns, on_invalid_utf8), lower_case),
        max_words_in_memory=max_words_in_memory,
    )
    logging.info("Learning a BERT WordPiece vocabulary of about %d tokens from %d words",
                 vocabulary_size, len(words))
    return wordpiece_lib.learn_wordpiece_vocabulary(
        words, vocabulary_size, path, extra_reserved=(MASK,))


def check_bert_vocabulary(vocabulary):
    """Raises ValueError unless `vocabulary` has BERT's reserved tokens in place."""
    if len(vocabulary.words) <= MASK_ID or vocabulary.words[MASK_ID] != MASK:
        raise ValueError(
            f"Not a BERT vocabulary: id {MASK_ID} must be {MASK} (learn it with "
            "tfeff.data.learn_bert_vocabulary)."
        )


def bert_tokenizer(vocabulary_path, lower_case=False):
    """`text.BertTokenizer` over a tfeff vocabulary file (ids as int64)."""
    table = lookup_table(vocabulary_path, default_value=-1)
    return text.BertTokenizer(
        table, suffix_indicator=wordpiece_lib.SUFFIX_INDICATOR,
        max_bytes_per_word=wordpiece_lib.MAX_BYTES_PER_WORD, token_out_type=tf.int64,
        unknown_token=vocabulary_lib.UNK, lower_case=lower_case,
        basic_tokenizer_class=BasicTokenizer,
    )


def _windows(lines, tokenizer, window):
    """One chunk of lines -> ragged token windows `(num_windows, <= window)`."""
    tokens = tokenizer.tokenize(lines).merge_dims(1, 2)  # (lines, pieces)
    stream = tokens.flat_values  # the chunk as one stream
    position = tf.range(tf.size(stream, out_type=tf.int64))
    windows = tf.RaggedTensor.from_value_rowids(stream, position // window)
    return tf.ragged.boolean_mask(windows, windows.row_lengths() >= 2)


def token_counts(patterns, vocabulary_path, lower_case=False, on_invalid_utf8="error",
                 max_tokens=None):
    """How often each token id occurs in the tokenized text: the masked-LM targets' source.

    The text is tokenized exactly as `mlm_dataset` does (the same tokenizer,
    no `[CLS]`/`[SEP]`), in file order; with `max_tokens`, counting stops
    after the chunk that reaches it.

    Args:
        patterns: glob(s) of text files (see `tfeff.data.resolve_files`).
        vocabulary_path: a vocabulary from `learn_bert_vocabulary`.
        lower_case: as when the vocabulary was learned.
        on_invalid_utf8: `"error"`, `"skip"` or `"replace"`.
        max_tokens: None (count everything), or the number of tokens after
            which counting stops.

    Returns:
        `(counts, lines_read)`: int64 NumPy `(vocabulary_size,)` and the
        number of lines counted.
    """
    size = len(vocabulary_lib.Vocabulary.load(vocabulary_path))
    tokenizer = bert_tokenizer(vocabulary_path, lower_case)

    def count(lines):
        ids = tf.cast(tokenizer.tokenize(lines).flat_values, tf.int32)
        return tf.math.bincount(ids, minlength=size, maxlength=size, dtype=tf.int64), \
            tf.size(lines, out_type=tf.int64)

    ds = line_dataset(corpus.resolve_files(patterns), on_invalid_utf8).batch(_LINES_PER_CHUNK)
    ds = ds.map(count, num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)
    counts = np.zeros(size, np.int64)
    lines_read = 0
    for chunk, lines in ds:
        counts += chunk.numpy()
        lines_read += int(lines)
        if max_tokens is not None and counts.sum() >= max_tokens:
            break
    return counts, lines_read


def _nsp_segments(windows, seed):
    """Splits windows in halves; replaces half of the second halves by another row's.

    `seed`: shape-[2] int seed of a stateless draw.
    """
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
    """BERT's masking with stateless draws: a function of `ids` and `seed` only.

    Per row, `ceil(mask_rate * n)` (at most `max_predictions_per_seq`) of its n
    maskable tokens (not `[PAD]`, `[CLS]`, `[SEP]`, nor `<unk>`: an unknown word is
    never a target, as for the word-level models) are drawn without
    replacement; each becomes `[MASK]`, a random id of `[0, vocabulary_size)` or
    stays, with the given rates (tensorflow-text's `RandomItemSelector` and
    `MaskValuesChooser` semantics, whose stateful draws a restored `tf.data`
    iterator could not reproduce).

    Returns:
        `(masked_ids, positions, targets)`: dense `(batch, n)` ids, `(batch, p)`
        sorted positions and their original ids, and the `(batch, p)` validity mask.
    """
    dense = ids.to_tensor(default_value=PAD_ID)
    maskable = ((dense != PAD_ID) & (dense != CLS_ID) & (dense != SEP_ID)
                & (dense != UNK_ID))
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
        mask_rate: fraction of a sequence's non-special tokens selected for
            prediction (`ceil(mask_rate * n)`, at most `max_predictions_per_seq`).
        mask_token_rate: fraction of the selected tokens replaced by `[MASK]`.
        random_token_rate: fraction replaced by a random id of
            `[0, vocabulary_size)` (the rest keep their token).
        seed: shape-[2] int seed; the masks are a function of it and the ids.

    Returns:
        dict of int32 `token_ids`, `segment_ids`, `padding_mask` `(batch, n)`,
        `masked_positions`, `masked_ids` `(batch, p)` and float32
        `masked_weights` `(batch, p)` (0 at padding predictions).
    """
    ids, segment_ids = text.combine_segments(
        segments, start_of_sequence_id=CLS_ID, end_of_segment_id=SEP_ID)
    masked, positions, targets, valid = _select_and_mask(
        ids, seed, max_predictions_per_seq, vocabulary_size, mask_rate, mask_token_rate,
        random_token_rate)
    n = max_sequence_length
    zero = tf.zeros_like(positions)
    masked = tf.RaggedTensor.from_tensor(masked, lengths=ids.row_lengths())
    return {
        "token_ids": tf.cast(masked.to_tensor(shape=[None, n]), tf.int32),
        "segment_ids": tf.cast(segment_ids.to_tensor(shape=[None, n]), tf.int32),
        "padding_mask": tf.cast(tf.ones_like(ids).to_tensor(shape=[None, n]), tf.int32),
        "masked_positions": tf.cast(tf.where(valid, positions, zero), tf.int32),
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
        mask_rate: fraction of a sequence's non-special tokens selected for
            prediction (`ceil(mask_rate * n)`, at most `max_predictions_per_seq`).
        mask_token_rate: fraction of the selected tokens replaced by `[MASK]`.
        random_token_rate: fraction replaced by a random id of
            `[0, vocabulary_size)` (the rest keep their token).
        lower_case: as when the vocabulary was learned.
        use_nsp: build sentence pairs and `nsp_labels`.
        shuffle_buffer: windows held for shuffling; 0 disables it.
        seed: shuffle, NSP and masking seed (None: 0).
        repeat: repeat forever (training).
        on_invalid_utf8: `"error"`, `"skip"` or `"replace"`.
        drop_remainder: drop a final smaller batch.

    Returns:
        `tf.data.Dataset` of dicts (see `mask_and_pack`), plus `nsp_labels`
        `(batch,)` with `use_nsp`.

    Raises:
        ValueError: `batch_size` is not positive, `max_sequence_length` is
            below 8, `max_predictions_per_seq` is not in
            `[1, max_sequence_length]`, or `on_invalid_utf8` is unknown (a
            vocabulary without BERT's reserved tokens raises it too).
    """
    if batch_size <= 0:
        raise ValueError(f"`batch_size` must be positive. Received: batch_size={batch_size}")
    if max_sequence_length < 8:
        raise ValueError(
            f"`max_sequence_length` must be >= 8. Received: "
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
    ds = ds.unbatch()
    ds = shuffle_and_repeat(ds, shuffle_buffer, seed, repeat)
    ds = ds.ragged_batch(batch_size, drop_remainder=drop_remainder)

    base_seed = 0 if seed is None else seed

    def finish(index, windows):
        # Stateless draws keyed by (seed, batch index): a restored iterator, or a
        # pipeline rebuilt and skipped to a position, masks exactly as before.
        keys = tf.random.experimental.stateless_split(
            tf.stack([tf.cast(base_seed, tf.int64), index]), 2)
        segments, labels = (_nsp_segments(windows, keys[0]) if use_nsp else ([windows], None))
        features = mask_and_pack(
            segments, max_sequence_length, max_predictions_per_seq, len(vocabulary),
            mask_rate, mask_token_rate, random_token_rate, seed=keys[1],
        )
        if use_nsp:
            features["nsp_labels"] = labels
        return features

    ds = ds.enumerate()
    ds = ds.map(finish, num_parallel_calls=tf.data.AUTOTUNE)
    return ds.prefetch(tf.data.AUTOTUNE)
