"""The `<unk>` rate of the training text under its vocabulary, checked before training.

When most training tokens are `<unk>` (a vocabulary of another corpus or settings,
text not split into words by spaces), the model would learn little more than to
predict `<unk>`: `check_unknown_rate` stops such a run before anything else is made.
"""

import tensorflow as tf

from tfeff.data import corpus
from tfeff.data import vocabulary as vocabulary_lib
from tfeff.data import wordpiece as wordpiece_lib
from tfeff.data.lm_dataset import line_token_ids
from tfeff.data.mlm_dataset import bert_tokenizer
from tfeff.data.pipeline import line_dataset
from tfeff.data.pipeline import lookup_table

MAX_UNKNOWN_RATE = 0.5
SAMPLE_LINES = 2000
# A file is judged on its own from this many sampled tokens (a short shard of rarer words
# counts only in the total), and at most this many files, spread over the list, are read.
MIN_FILE_TOKENS = 1000
MAX_FILES = 32
# "word": word-level ELMo; "wordpiece": ELMo-Sub; "bert": BERT and Masked ELMo.
TOKENIZATIONS = ("word", "wordpiece", "bert")
# The data setting that shapes each kind of vocabulary most (named in the error).
_SETTINGS = {"word": "data.min_count", "wordpiece": "data.wordpiece_vocabulary_size",
             "bert": "data.lower_case"}


def _token_ids(tokenization, vocabulary_path, lower_case):
    """The training pipeline's `lines -> flat token ids` for `tokenization`."""
    if tokenization not in TOKENIZATIONS:
        raise ValueError(f"Received an invalid value for `tokenization`, expected one of "
                         f"{TOKENIZATIONS}. Received: tokenization={tokenization!r}")
    if tokenization == "bert":
        tokenizer = bert_tokenizer(vocabulary_path, lower_case)
        return lambda lines: tokenizer.tokenize(lines).flat_values
    wordpiece = tokenization == "wordpiece"
    table = lookup_table(vocabulary_path, -1 if wordpiece else vocabulary_lib.UNK_ID)
    tokenizer = wordpiece_lib.wordpiece_tokenizer(table) if wordpiece else None
    return lambda lines: line_token_ids(lines, table, tokenizer).flat_values


def unknown_rate(path, vocabulary_path, tokenization="word", lower_case=False,
                 on_invalid_utf8="error", max_lines=SAMPLE_LINES):
    """`(unknown tokens, tokens, lines)` of the first `max_lines` non-blank lines of `path`,
    read and tokenized (`tokenization`: one of `TOKENIZATIONS`) as the pipeline does."""
    token_ids = _token_ids(tokenization, vocabulary_path, lower_case)
    return _counts(path, token_ids, on_invalid_utf8, max_lines)


def _counts(path, token_ids, on_invalid_utf8, max_lines):
    unknown = tokens = lines = 0
    for batch in line_dataset([path], on_invalid_utf8).take(max_lines).batch(512):
        ids = token_ids(batch)
        unknown += int(tf.math.count_nonzero(tf.equal(ids, vocabulary_lib.UNK_ID)))
        tokens += int(tf.size(ids))
        lines += int(tf.size(batch))
    return unknown, tokens, lines


def check_unknown_rate(patterns, vocabulary_path, tokenization="word", lower_case=False,
                       on_invalid_utf8="error", max_rate=MAX_UNKNOWN_RATE,
                       max_lines=SAMPLE_LINES, learned=False):
    """Stops a run whose training tokens would mostly be `<unk>`: `CorpusError` naming the
    (worst) file, the rate and the vocabulary when the rate of a file with at least
    `MIN_FILE_TOKENS` sampled tokens, or of all sampled files together, is above `max_rate`.

    Args:
        patterns: the training files (globs, as `resolve_files`).
        vocabulary_path: the vocabulary the training pipeline reads.
        tokenization: `"word"`, `"wordpiece"` (ELMo-Sub) or `"bert"` (BERT, Masked ELMo).
        lower_case: the BERT tokenizer's lower-casing.
        on_invalid_utf8: as for the pipeline.
        max_rate: the highest accepted rate of unknown tokens in a file.
        max_lines: lines read from the start of each file.
        learned: this run learned the vocabulary: a failed check removes it again.
    """
    token_ids = _token_ids(tokenization, vocabulary_path, lower_case)
    paths = corpus.resolve_files(patterns)
    if len(paths) > MAX_FILES:
        paths = [paths[i * len(paths) // MAX_FILES] for i in range(MAX_FILES)]
    counts = []
    for path in paths:
        unknown, tokens, lines = _counts(path, token_ids, on_invalid_utf8, max_lines)
        counts.append((path, unknown, tokens, lines))
        if tokens >= MIN_FILE_TOKENS and unknown / tokens > max_rate:
            _fail(path, unknown, tokens, lines, vocabulary_path, tokenization, max_rate,
                  learned)
    total, unknown = sum(c[2] for c in counts), sum(c[1] for c in counts)
    if total and unknown / total > max_rate:
        worst = max((c for c in counts if c[2]), key=lambda c: c[1] / c[2])
        _fail(*worst, vocabulary_path, tokenization, max_rate, learned)


def _fail(path, unknown, tokens, lines, vocabulary_path, tokenization, max_rate, learned):
    """Raises the `CorpusError` of `path` (removing a vocabulary this run learned)."""
    noun = "words" if tokenization == "word" else "WordPiece tokens"
    if learned:
        tf.io.gfile.remove(vocabulary_path)
        fate = (f"The vocabulary was learned from this text just now and is removed again "
                f"({vocabulary_path}).")
    else:
        fate = (f"A vocabulary kept from another corpus or other settings has to be "
                f"removed ({vocabulary_path}), or use a new model directory.")
    sample = "its only line" if lines == 1 else f"its first {lines} lines"
    raise corpus.CorpusError(
        f"{path}: {unknown / tokens:.0%} of the {noun} in {sample} are not in the "
        f"vocabulary {vocabulary_path} (at most {max_rate:.0%} is accepted), so training "
        "would mostly predict `<unk>`. Is the text split into words with spaces? Is the "
        f"vocabulary the one of this corpus and of this `{_SETTINGS[tokenization]}`? "
        f"{fate}")
