"""Training fastText word vectors on a corpus, in a child process (`train_fasttext`)."""

import errno
import json
import logging
import os
import shutil
import subprocess
import sys

from tfeff.data import corpus
from tfeff.data import files
from tfeff.data import words as words_lib
from tfeff.data.fasttext_files import WordVectorsError
from tfeff.data.fasttext_files import _remember_checked
from tfeff.data.fasttext_files import check_fasttext_model

MAX_WORD_CHARS = 1000  # longer words are left out of the text fastText trains on


def train_fasttext(
    corpus_patterns,
    output_path,
    dim=300,
    minn=3,
    maxn=6,
    bucket=2000000,
    epoch=5,
    min_count=1,
    threads=1,
    lr=0.05,
    on_invalid_utf8="error",
):
    """Trains skipgram vectors with subwords on the corpus; saves a `.bin` atomically.

    fastText reads a temporary copy of the corpus as its words (`tfeff.data.words.split`)
    joined by single spaces, without words longer than `MAX_WORD_CHARS` or holding a
    NUL (one of two million characters made training four times slower on the demo
    corpus). Training runs in a child process that imports only fastText: where
    TensorFlow has trained a model, fastText's training returns NaN every time (TF
    2.21, fasttext-numpy2 0.10.4). A model that fails `check_fasttext_model` raises
    `WordVectorsError` and is not kept; a corpus without a word raises `CorpusError`.

    Args:
        corpus_patterns: glob(s) of the corpus, as for `tfeff.data.resolve_files`.
        output_path: local path of the `.bin` model to write.
        dim: vector size (fastText's `-dim`).
        minn: shortest character n-gram (`-minn`).
        maxn: longest character n-gram (`-maxn`).
        bucket: number of n-gram hash buckets (`-bucket`).
        epoch: training epochs (`-epoch`).
        min_count: minimal number of occurrences of a word (`-minCount`).
        threads: training threads (`-thread`); 1 is deterministic.
        lr: learning rate (`-lr`).
        on_invalid_utf8: `"error"`, `"skip"` or `"replace"` (see `tfeff.data.corpus`).

    Returns:
        `output_path`.

    Raises:
        ValueError: `dim`, `epoch` or `threads` is not positive, or training fails.
    """
    for arg, value in (("dim", dim), ("epoch", epoch), ("threads", threads)):
        if value <= 0:
            raise ValueError(f"fastText `{arg}` must be positive. Received: {arg}={value}")
    text_path = files.temporary_sibling(output_path) + ".txt"
    os.makedirs(os.path.dirname(os.path.abspath(output_path)), exist_ok=True)
    try:
        _write_fasttext_text(corpus_patterns, on_invalid_utf8, text_path)
        with files.atomic_local_path(output_path) as tmp_model:
            _train_in_child_process(
                text_path, tmp_model,
                dict(model="skipgram", dim=dim, minn=minn, maxn=maxn, bucket=bucket,
                     epoch=epoch, lr=lr, minCount=min_count, thread=threads, verbose=0),
                corpus_patterns)
            header = _check_trained_model(tmp_model, corpus_patterns)
        _remember_checked(output_path, header)
    finally:
        if os.path.exists(text_path):
            os.remove(text_path)
    logging.info("Trained fastText (%d-d) into %s", dim, output_path)
    return output_path


def _write_fasttext_text(corpus_patterns, on_invalid_utf8, path):
    """Writes the text fastText trains on (see `train_fasttext`) to the local `path`."""
    left_out, first, written = 0, None, 0
    with open(path, "w", encoding="utf-8") as f:
        for source, number, line in corpus.text_lines(corpus_patterns, on_invalid_utf8,
                                                      with_location=True):
            words = words_lib.split(line)
            if len(line) > MAX_WORD_CHARS or "\0" in line:  # else no word can be too long
                dropped = [w for w in words if len(w) > MAX_WORD_CHARS or "\0" in w]
                if dropped and first is None:
                    first = f"{source}:{number} ({max(map(len, dropped)):,} characters)"
                left_out += len(dropped)
                words = [w for w in words if len(w) <= MAX_WORD_CHARS and "\0" not in w]
            if words:
                f.write(" ".join(words) + "\n")
                written += 1
    if left_out:
        logging.warning(
            "%d word(s) longer than %d characters or holding a NUL character are left out "
            "of the text fastText trains on; the first is at %s. Such words are usually "
            "text without spaces, markup or encoded data; they still get vectors from "
            "their character n-grams.", left_out, MAX_WORD_CHARS, first)
    if not written:
        raise corpus.CorpusError(
            f"{corpus_patterns}: no word to train fastText on (every word is longer than "
            f"{MAX_WORD_CHARS} characters or holds a NUL character; the first at {first}). "
            "Is the text split into words with spaces?")


_FULL_DISK_BYTES = 64 << 20  # free bytes under which a truncated model means a full disk


def _check_trained_model(path, corpus_patterns):
    """`check_fasttext_model` of a model fastText has just trained."""
    try:
        return check_fasttext_model(path)
    except WordVectorsError as e:
        # fastText writes its model without checking the writes: a full disk leaves a
        # file shorter than its header says, which is the disk's fault, not the corpus'.
        free = shutil.disk_usage(os.path.dirname(os.path.abspath(path))).free
        cut = ("shorter than", "(truncated)", "inside its header", "inside the dictionary")
        if any(c in e.problem for c in cut) and free < _FULL_DISK_BYTES:
            raise OSError(errno.ENOSPC, f"fastText could not write its whole model ({e.problem}); "
                          f"{free:,} bytes are free on that disk: free space, then rerun",
                          path) from e
        raise WordVectorsError(
            f"fastText training on {corpus_patterns} gave an unusable model: {e.problem}. "
            "It was not kept. fastText updates nothing on a corpus too small or too "
            "repetitive (it skips most occurrences of frequent words): use more text; "
            "non-finite values mean that it diverged: lower fasttext.lr.",
            problem=e.problem) from e


_TRAIN_SCRIPT = """
import json, os, signal, sys
text_path, model_path, kwargs = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
parent = int(sys.argv[4])
try:  # Linux: killed with its parent, however the parent ends
    import ctypes
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
except (OSError, AttributeError):
    pass
if os.getppid() != parent:  # the parent ended before the line above
    sys.exit(4)
import fasttext
try:
    model = fasttext.train_unsupervised(text_path, **kwargs)
except RuntimeError as e:
    print(e, file=sys.stderr)
    sys.exit(3)
model.save_model(model_path)
"""


def _train_in_child_process(text_path, model_path, kwargs, corpus_patterns):
    done = subprocess.run(
        [sys.executable, "-c", _TRAIN_SCRIPT, text_path, model_path, json.dumps(kwargs),
         str(os.getpid())],
        capture_output=True, text=True, check=False)
    if done.returncode != 0:
        message = done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "no output"
        hint = (" On small corpora this is usually divergence: lower fasttext.lr or raise "
                "fasttext.dim." if "NaN" in message else "")
        raise ValueError(f"fastText training on {corpus_patterns} failed ({message}).{hint}")
