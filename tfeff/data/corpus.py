"""Corpus readers: globs of text files, one sentence per line, via `tf.io.gfile`.

The One Billion Word Benchmark format (docs/guides/pretraining.md#the-corpus); blank
lines are skipped. Lines that are not UTF-8 follow `on_invalid_utf8`: `"error"` raises
`CorpusError` naming file and line, `"skip"` drops them, `"replace"` decodes with U+FFFD.
"""

import errno
import logging
import os
import re
import stat as stat_lib

import tensorflow as tf

from tfeff.data import files as files_lib

INVALID_UTF8_POLICIES = ("error", "skip", "replace")


class CorpusError(ValueError):
    """A corpus problem, with the file (and line) it was found in."""


class ResolvedFiles(str):
    """Corpus patterns resolved once: the pattern string as given (what logs and saved
    state show), carrying the files it named, which `resolve_files` returns without
    looking at the file system again.

    Args:
        patterns: the patterns as given (a str; a list is joined with commas).
        files: the files they resolved to (`resolve_files`).
    """

    def __new__(cls, patterns, files):
        del files  # kept by __init__
        return super().__new__(cls, patterns if isinstance(patterns, str)
                               else ",".join(patterns))

    def __init__(self, patterns, files):
        super().__init__()
        self.files = tuple(files)

    def __reduce__(self):
        return (ResolvedFiles, (str(self), self.files))


def resolve_files(patterns):
    """Resolves corpus patterns into a sorted, de-duplicated list of regular files.

    A pattern naming an existing path is that path, never a glob; a string is first
    taken whole, then split at commas. See docs/guides/pretraining.md#the-corpus.

    Args:
        patterns: a pattern, comma-separated patterns, a list, or a `ResolvedFiles`.

    Returns:
        List of file paths.

    Raises:
        CorpusError: no pattern, one matching no file, or one naming a non-file.
    """
    if isinstance(patterns, ResolvedFiles):
        return list(patterns.files)
    if isinstance(patterns, str):
        whole = patterns.strip()
        patterns = [whole] if whole and _exists(whole) else [
            p.strip() for p in patterns.split(",")]
    patterns = [os.fspath(p) for p in (patterns or []) if p]
    if not patterns:
        raise CorpusError("No corpus files given (empty file pattern).")
    files = {}  # identity -> the first name of each file
    for pattern in patterns:
        for path in _resolve_pattern(pattern):
            files.setdefault(_identity(path), path)
    return sorted(files.values())


def training_and_heldout_files(train_patterns, heldout_patterns):
    """Resolves the training and held-out patterns once; refuses held-out training text.

    Args:
        train_patterns: the training patterns (`data.train_files`).
        heldout_patterns: the held-out patterns (`data.heldout_files`), or empty.

    Returns:
        `(train, heldout)`: `ResolvedFiles` for every reader (`heldout` may be `""`).

    Raises:
        CorpusError: as `resolve_files`, or a held-out file is (a copy of) a training file.
    """
    train = ResolvedFiles(train_patterns, resolve_files(train_patterns))
    if not heldout_patterns:
        return train, ""
    heldout = ResolvedFiles(heldout_patterns, resolve_files(heldout_patterns))
    by_identity = {_identity(path): path for path in train.files}
    by_size = {}
    for path in train.files:
        by_size.setdefault(tf.io.gfile.stat(path).length, []).append(path)
    for path in heldout.files:
        same = by_identity.get(_identity(path))
        relation = "is the training file"
        if same is None:
            relation = "has the same bytes as the training file"
            size = tf.io.gfile.stat(path).length
            same = next((t for t in by_size.get(size, []) if _same_bytes(path, t)), None)
        if same is not None:
            raise CorpusError(
                f"The held-out file {path} (data.heldout_files `{_shown(heldout)}`) "
                f"{relation} {same} (data.train_files `{_shown(train)}`): held-out results "
                "would be measured on training text. Give held-out files that are not "
                "training files.")
    return train, heldout


def _exists(path):
    """Whether `path` names something (a broken or looping link included)."""
    return tf.io.gfile.exists(path) if "://" in path else os.path.lexists(path)


def _identity(path):
    """What two names of one file share: device and inode locally, else the URL."""
    if "://" in path:
        return path.rstrip("/")
    stat = os.stat(path)
    return (stat.st_dev, stat.st_ino)


def _same_bytes(a, b, block=1 << 22):
    """Whether files `a` and `b` (of equal size) hold the same bytes."""
    with tf.io.gfile.GFile(a, "rb") as fa, tf.io.gfile.GFile(b, "rb") as fb:
        while True:
            chunk = fa.read(block)
            if chunk != fb.read(block):
                return False
            if not chunk:
                return True


_GLOB_CHARACTERS = re.compile(r"[*?[]")


def _shown(pattern, limit=300):
    """`pattern` for a message: whole, or its start and its length when it is long."""
    long = f"{pattern[:limit]}... ({len(pattern):,} characters)"
    return pattern if len(pattern) <= limit else long


def _resolve_pattern(pattern):
    """The regular files one pattern names (see `resolve_files`)."""
    if _exists(pattern):
        if _is_directory(pattern):
            raise CorpusError(
                f"The corpus pattern `{_shown(pattern)}` is a directory, not a file: name the "
                f"files in it (e.g. `{_shown(pattern.rstrip('/'))}/*.txt`).")
        if problem := _problem(pattern):
            raise CorpusError(f"The corpus file {pattern} {problem}.")
        return [pattern]
    matched = tf.io.gfile.glob(pattern) if _GLOB_CHARACTERS.search(pattern) else []
    found, directories = [], []
    for path in sorted(matched):
        if _is_directory(path):
            directories.append(path)
        elif problem := _problem(path):
            raise CorpusError(
                f"The corpus pattern `{_shown(pattern)}` matches {path}, which {problem}.")
        else:
            found.append(path)
    if not found and directories:
        shown = ", ".join(directories[:3]) + (", ..." if len(directories) > 3 else "")
        raise CorpusError(f"The corpus pattern `{_shown(pattern)}` matches only directories "
                          f"({shown}): name the files in them.")
    if not found:
        raise CorpusError(f"No file matches the corpus pattern `{_shown(pattern)}`.")
    return found


def _is_directory(path):
    return tf.io.gfile.isdir(path) if "://" in path else os.path.isdir(path)


def _problem(path):
    """None for a readable regular (or remote) file, else what is wrong, ending a sentence."""
    if "://" in path:
        return None
    not_regular = ("not a regular file (a corpus is read several times: vocabulary, "
                   "fastText, every epoch)")
    try:
        mode = os.stat(path).st_mode
    except OSError as e:
        if e.errno == errno.ELOOP:
            return f"is a symbolic link loop, {not_regular}"
        if e.errno == errno.ENOENT and os.path.islink(path):
            return f"is a symbolic link to nothing (to {os.readlink(path)})"
        return f"cannot be read ({e.strerror})"
    kinds = ((stat_lib.S_ISFIFO, "a named pipe (FIFO)"), (stat_lib.S_ISSOCK, "a socket"),
             (stat_lib.S_ISCHR, "a character device"), (stat_lib.S_ISBLK, "a block device"))
    kind = next((f"{what}, " for test, what in kinds if test(mode)), "")
    if kind or not stat_lib.S_ISREG(mode):
        return f"is {kind}{not_regular}"
    if not os.access(path, os.R_OK):
        return "cannot be read (permission denied)"
    return None


def text_lines(patterns, on_invalid_utf8="error", with_location=False):
    """Yields the non-blank lines of every file matching `patterns`, stripped.

    Args:
        patterns: glob(s), as for `resolve_files`.
        on_invalid_utf8: `"error"`, `"skip"` or `"replace"`.
        with_location: if True, yield `(path, line_number, line)` (1-based).

    Yields:
        str lines, or tuples with their location.

    Raises:
        CorpusError: no file matches, a line is not UTF-8 (`"error"`), or all are blank.
    """
    yielded = 0
    for path, number, line in _decoded_lines(patterns, on_invalid_utf8):
        if line:
            yielded += 1
            yield (path, number, line) if with_location else line
    if yielded == 0:
        raise CorpusError("The corpus is empty: no non-blank line in "
                          + ", ".join(resolve_files(patterns)))


def paragraphs(patterns, on_invalid_utf8="error"):
    """Yields the paragraphs (runs of non-blank lines, ended by a blank line or a file's
    end) of every file matching `patterns`, as lists of lines read as `text_lines`.

    Args:
        patterns: glob(s), as for `resolve_files`.
        on_invalid_utf8: `"error"`, `"skip"` or `"replace"`.

    Yields:
        Lists of str lines, one per paragraph.

    Raises:
        CorpusError: as `text_lines`.
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
        raise CorpusError("The corpus is empty: no non-blank line in "
                          + ", ".join(resolve_files(patterns)))


def _decoded_lines(patterns, on_invalid_utf8):
    """`(path, line_number, stripped line)` of every line, blank ones included."""
    if on_invalid_utf8 not in INVALID_UTF8_POLICIES:
        raise ValueError(
            "Received an invalid value for `on_invalid_utf8`, expected one of "
            f"{INVALID_UTF8_POLICIES}. Received: on_invalid_utf8={on_invalid_utf8!r}")
    skipped = 0
    for path in resolve_files(patterns):
        with tf.io.gfile.GFile(path, "rb") as f:
            for number, raw in enumerate(files_lib.raw_lines(f), start=1):
                try:
                    line = raw.decode("utf-8")
                except UnicodeDecodeError as e:
                    if on_invalid_utf8 == "error":
                        raise CorpusError(
                            f"{path}:{number}: the line is not valid UTF-8 ({e.reason} "
                            f"at byte {e.start}). Fix the file, or set "
                            "data.on_invalid_utf8 to 'skip' or 'replace'.") from e
                    if on_invalid_utf8 == "skip":
                        skipped += 1
                        continue
                    line = raw.decode("utf-8", errors="replace")
                yield path, number, line.strip()
    if skipped:
        logging.warning("Skipped %d line(s) that are not valid UTF-8.", skipped)
