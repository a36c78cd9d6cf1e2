"""tf.data primitives every family's pipeline uses: vocabulary lookup tables, the
non-blank lines of text files, and block shuffling that replays exactly on resume."""

import re

import tensorflow as tf

from tfeff.data import vocabulary as vocabulary_lib
from tfeff.data import words as words_lib


def lookup_table(vocabulary_path, default_value=vocabulary_lib.UNK_ID):
    """A `tf.lookup` table from a `Vocabulary.save` file's first column to its line number."""
    initializer = tf.lookup.TextFileInitializer(
        vocabulary_path,
        key_dtype=tf.string,
        key_index=0,
        value_dtype=tf.int64,
        value_index=tf.lookup.TextFileIndex.LINE_NUMBER,
        delimiter="\t",
    )
    return tf.lookup.StaticHashTable(initializer, default_value=default_value)


def unknown_for_padding(ids):
    """Maps the padding id to `<unk>` in (ragged) token ids of text: a literal `<pad>` is
    an unknown word, never padding. Exported embedders do the same."""
    return tf.ragged.map_flat_values(
        lambda t: tf.where(tf.equal(t, vocabulary_lib.PAD_ID),
                           tf.constant(vocabulary_lib.UNK_ID, t.dtype), t), ids)


_SNIFF_BYTES = 1 << 20  # how much of a file shows its line-end convention


def _ends_lines_with_lone_cr(path):
    """Whether `path` ends its lines with a lone `\\r` (classic Mac OS): more lone `\\r`
    than `\\n` in its first MiB (a stray `\\r` in a Unix file does not make it one)."""
    with tf.io.gfile.GFile(path, "rb") as f:
        head = f.read(_SNIFF_BYTES).removesuffix(b"\r")
    return len(re.findall(rb"\r(?!\n)", head)) > head.count(b"\n")


def _whole_file_lines(path):
    """The lines of file `path` (a tensor), read whole when iterated, split at any line end."""
    def split(name):
        text = tf.strings.regex_replace(tf.io.read_file(name), "\r\n?", "\n")
        return tf.strings.split(text, "\n")

    return tf.data.Dataset.from_tensors(path).map(split).unbatch()


def line_dataset(file_list, on_invalid_utf8="error"):
    """The non-blank lines (as `text_lines`) of `file_list` (str paths), in order, as a
    `tf.data.Dataset`. `on_invalid_utf8="skip"` drops lines that are not valid UTF-8,
    `"replace"` substitutes U+FFFD, `"error"` leaves them to fail later."""
    ds = tf.data.Dataset.from_tensor_slices(file_list)
    read = tf.data.TextLineDataset
    lone_cr = [_ends_lines_with_lone_cr(path) for path in file_list]
    if any(lone_cr):
        # TextLineDataset ends lines at "\n" and deletes every "\r": a file whose lines end
        # with a lone "\r" (classic Mac OS) is read whole and split as `files.raw_lines` does.
        def read(path, whole):
            return tf.data.Dataset.choose_from_datasets(
                [tf.data.TextLineDataset(path), _whole_file_lines(path)],
                tf.data.Dataset.from_tensors(tf.cast(whole, tf.int64)).repeat(),
                stop_on_empty_dataset=True)

        ds = tf.data.Dataset.from_tensor_slices((file_list, lone_cr))
    ds = ds.interleave(
        read,
        cycle_length=min(len(file_list), 4),
        num_parallel_calls=tf.data.AUTOTUNE,
        deterministic=True,
    )

    def replaced(line):
        return tf.strings.unicode_transcode(line, "UTF-8", "UTF-8", errors="replace")

    if on_invalid_utf8 == "skip":
        ds = ds.filter(lambda line: tf.equal(replaced(line), line))
    elif on_invalid_utf8 == "replace":
        ds = ds.map(replaced)
    return ds.filter(lambda line: tf.logical_not(words_lib.is_blank_tf(line)))


def shuffle_and_repeat(ds, shuffle_buffer, seed, repeat):
    """Block-shuffles 1-D elements (`shuffle_buffer` per block; 0: no shuffle), repeats.
    Each block is permuted by a stateless draw keyed by `(seed, epoch, block)`: unlike
    `Dataset.shuffle`, which reshuffles per iterator (Keras may open one to peek), a
    pipeline rebuilt for a resume replays exactly the same order."""
    if not shuffle_buffer:
        return ds.repeat() if repeat else ds
    base_seed = tf.constant(0 if seed is None else seed, tf.int64)

    def epoch(index):
        def permute(block_index, block):
            key = tf.stack([base_seed, index * 1_000_003 + block_index])
            order = tf.random.experimental.stateless_shuffle(
                tf.range(block.nrows()), seed=key)
            return tf.gather(block, order)

        return ds.ragged_batch(shuffle_buffer).enumerate().map(permute).unbatch()

    return tf.data.Dataset.counter().flat_map(epoch) if repeat else epoch(tf.constant(0, tf.int64))
