"""Corpus readers: globs of text files, one sentence per line, via `tf.io.gfile`.

The One Billion Word Benchmark format: UTF-8 text, one whitespace-tokenized
sentence per line. Blank lines are skipped. Lines that are not valid UTF-8
are handled by `on_invalid_utf8`:

* `"error"` (default): raise `CorpusError` naming the file and line;
* `"skip"`: drop the line (and count it);
* `"replace"`: decode with U+FFFD replacement characters.
"""

import logging

import tensorflow as tf

from tfeff.data import files as files_lib

INVALID_UTF8_POLICIES = ("error", "skip", "replace")


class CorpusError(ValueError):
    """A corpus problem, with the file (and line) it was found in."""


def resolve_files(patterns):
    """Expands glob patterns into a sorted, de-duplicated list of files.

    Args:
        patterns: one glob string, a comma-separated string of globs, or a list.

    Returns:
        List of file paths.

    Raises:
        CorpusError: when no pattern is given, or a pattern matches nothing.
    """
    if isinstance(patterns, str):
        patterns = [p.strip() for p in patterns.split(",")]
    patterns = [p for p in (patterns or []) if p]
    if not patterns:
        raise CorpusError("No corpus files given (empty file pattern).")
    files = []
    for pattern in patterns:
        matched = sorted(
            f for f in tf.io.gfile.glob(pattern) if not tf.io.gfile.isdir(f)
        )
        if not matched:
            raise CorpusError(f"No file matches the corpus pattern `{pattern}`.")
        files.extend(matched)
    return sorted(set(files))


def text_lines(patterns, on_invalid_utf8="error", with_location=False):
    """Yields the non-blank lines of every file matching `patterns`.

    Reads through `tf.io.gfile`, so `gs://`, `hdfs://` and other TensorFlow
    file systems work. Lines are stripped of surrounding whitespace.

    Args:
        patterns: glob(s), as for `resolve_files`.
        on_invalid_utf8: `"error"`, `"skip"` or `"replace"`.
        with_location: if True, yield `(path, line_number, line)` (1-based).

    Yields:
        str lines, or tuples with their location.

    Raises:
        CorpusError: no file matches, a line is not UTF-8 (policy `"error"`),
            or no file holds a single non-blank line.
    """
    yielded = 0
    for path, number, line in _decoded_lines(patterns, on_invalid_utf8):
        if not line:
            continue
        yielded += 1
        yield (path, number, line) if with_location else line
    if yielded == 0:
        raise CorpusError(
            "The corpus is empty: no non-blank line in " + ", ".join(resolve_files(patterns))
        )


def paragraphs(patterns, on_invalid_utf8="error"):
    """Yields the paragraphs of every file matching `patterns`, as lists of lines.

    A paragraph (a document, for Masked ELMo) is a run of non-blank lines;
    blank lines and the end of a file separate paragraphs. A file without
    blank lines is one paragraph. Lines are stripped, UTF-8 is handled as in
    `text_lines`.

    Args:
        patterns: glob(s), as for `resolve_files`.
        on_invalid_utf8: `"error"`, `"skip"` or `"replace"`.

    Yields:
        Lists of str lines, one per paragraph.

    Raises:
        CorpusError: as `text_lines`: no file matches, a line is not UTF-8
            (policy `"error"`), or no file holds a single non-blank line.
    """
    current, previous_path, yielded = [], None, 0
    for path, _, line in _decoded_lines(patterns, on_invalid_utf8):
        if (not line or path != previous_path) and current:
            yield current
            yielded += 1
            current = []
        previous_path = path
        if line:
            current.append(line)
    if current:
        yield current
        yielded += 1
    if yielded == 0:
        raise CorpusError(
            "The corpus is empty: no non-blank line in " + ", ".join(resolve_files(patterns))
        )


def _decoded_lines(patterns, on_invalid_utf8):
    """`(path, line_number, stripped line)` of every line, blank ones included."""
    if on_invalid_utf8 not in INVALID_UTF8_POLICIES:
        raise ValueError(
            "Received an invalid value for `on_invalid_utf8`, expected one of "
            f"{INVALID_UTF8_POLICIES}. Received: on_invalid_utf8={on_invalid_utf8!r}"
        )
    files = resolve_files(patterns)
    skipped = 0
    for path in files:
        with tf.io.gfile.GFile(path, "rb") as f:
            for number, raw in enumerate(files_lib.raw_lines(f), start=1):
                try:
                    line = raw.decode("utf-8")
                except UnicodeDecodeError as e:
                    if on_invalid_utf8 == "error":
                        raise CorpusError(
                            f"{path}:{number}: the line is not valid UTF-8 ({e.reason} "
                            f"at byte {e.start}). Fix the file, or set "
                            "data.on_invalid_utf8 to 'skip' or 'replace'."
                        ) from e
                    if on_invalid_utf8 == "skip":
                        skipped += 1
                        continue
                    line = raw.decode("utf-8", errors="replace")
                yield path, number, line.strip()
    if skipped:
        logging.warning("Skipped %d line(s) that are not valid UTF-8.", skipped)
