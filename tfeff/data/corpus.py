"""Corpus readers: globs of text files, one sentence per line, via `tf.io.gfile`.

The One Billion Word Benchmark format: UTF-8 text, one whitespace-tokenized
sentence per line. Blank lines are skipped. Lines that are not valid UTF-8
are handled by `on_invalid_utf8`:

* `"error"` (default): raise `CorpusError` naming the file and line;
* `"skip"`: drop the line (and count it);
* `"replace"`: decode with U+FFFD replacement characters.

Patterns are resolved to regular files once (`resolve_files`: a path that exists
is that file, not a glob), and a run passes the result (`ResolvedFiles`) to every
reader, so no file name is ever globbed a second time. Text is taken byte for
byte: no Unicode normalization, so `café` written with U+00E9 (NFC) and with
`e` + U+0301 (NFD) are two words (`Vocabulary.build` warns when a corpus holds
both spellings of a word).
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
    """Corpus patterns resolved once: the patterns as given, carrying the files they named.

    It is the pattern string itself (what logs, messages and saved state show), and
    `resolve_files` returns its `files` without looking at the file system again. A
    run resolves its training and held-out patterns once (`training_and_heldout_files`)
    and passes these along, so the vocabulary, fastText, the `<unk>` check, the epoch
    count and every pipeline read the same files, whatever appears, disappears or
    changes name meanwhile.

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

    A pattern that names an existing path is that path, never a glob: a file named
    `[x].txt` is read as itself (the glob `[x].txt` would match `x.txt`), and the
    resolved list, given back, resolves to itself. Any other pattern is a glob
    (`tf.io.gfile.glob`: `*`, `?` and `[...]`; `[[]` matches a literal `[`). A
    string is first taken whole, then split at commas. Directories a glob matches
    are left out; a file named twice (a link, a `..` path) is read once.

    Only regular files are accepted (local paths; remote file systems are trusted):
    a directory named as a file, a named pipe (FIFO), a socket or device, a symbolic
    link loop or a link to nothing is refused, naming it. Corpora are read several
    times (vocabulary, fastText, each epoch), and a pipe without a writer would
    block the first read forever.

    Args:
        patterns: one pattern, a comma-separated string of patterns, a list of
            patterns or files, or a `ResolvedFiles` (returned as its files).

    Returns:
        List of file paths.

    Raises:
        CorpusError: no pattern is given, a pattern matches nothing (or only
            directories), or it names something that is not a regular file.
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
    files, seen = [], set()
    for pattern in patterns:
        for path in _resolve_pattern(pattern):
            key = _identity(path)
            if key not in seen:
                seen.add(key)
                files.append(path)
    return sorted(files)


def training_and_heldout_files(train_patterns, heldout_patterns):
    """Resolves the training and held-out patterns once, and refuses held-out text that
    is training text.

    Args:
        train_patterns: the training patterns (`data.train_files`).
        heldout_patterns: the held-out patterns (`data.heldout_files`), or empty.

    Returns:
        `(train, heldout)`: `ResolvedFiles` to pass to every reader; `heldout` is
        `""` when no held-out pattern is given.

    Raises:
        CorpusError: as `resolve_files`, or a held-out file is a training file
            (the same file by another path, a link, an overlapping glob) or has
            the same bytes as one: held-out results would be training results.
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
    if "://" in path:
        return tf.io.gfile.exists(path)
    return os.path.lexists(path)


def _identity(path):
    """What two names of one file share: device and inode locally (links, `..` and hard
    links included), the normalized URL on remote file systems."""
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
    if len(pattern) <= limit:
        return pattern
    return f"{pattern[:limit]}... ({len(pattern):,} characters)"


def _resolve_pattern(pattern):
    """The regular files one pattern names (see `resolve_files`)."""
    if _exists(pattern):
        if _is_directory(pattern):
            raise CorpusError(
                f"The corpus pattern `{_shown(pattern)}` is a directory, not a file: name the "
                f"files in it (e.g. `{_shown(pattern.rstrip('/'))}/*.txt`).")
        problem = _problem(pattern)
        if problem:
            raise CorpusError(f"The corpus file {pattern} {problem}.")
        return [pattern]
    matched = tf.io.gfile.glob(pattern) if _GLOB_CHARACTERS.search(pattern) else []
    found, directories = [], []
    for path in sorted(matched):
        if _is_directory(path):
            directories.append(path)
            continue
        problem = _problem(path)
        if problem:
            raise CorpusError(
                f"The corpus pattern `{_shown(pattern)}` matches {path}, which {problem}.")
        found.append(path)
    if not found and directories:
        shown = ", ".join(directories[:3]) + (", ..." if len(directories) > 3 else "")
        raise CorpusError(f"The corpus pattern `{_shown(pattern)}` matches only directories "
                          f"({shown}): name the files in them.")
    if not found:
        raise CorpusError(f"No file matches the corpus pattern `{_shown(pattern)}`.")
    return found


def _is_directory(path):
    if "://" in path:
        return tf.io.gfile.isdir(path)
    return os.path.isdir(path)


def _problem(path):
    """None for a readable regular file (or any remote file, which is trusted), else
    what is wrong with `path` (not a directory), as the end of a sentence."""
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
    for test, what in ((stat_lib.S_ISFIFO, "a named pipe (FIFO)"), (stat_lib.S_ISSOCK, "a socket"),
                       (stat_lib.S_ISCHR, "a character device"),
                       (stat_lib.S_ISBLK, "a block device")):
        if test(mode):
            return f"is {what}, {not_regular}"
    if not stat_lib.S_ISREG(mode):
        return f"is {not_regular}"
    if not os.access(path, os.R_OK):
        return "cannot be read (permission denied)"
    return None


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
