"""Atomic file writes through `tf.io.gfile`: write a temporary sibling, then rename.

A killed writer leaves at most a `*.tmp-*` sibling. tfeff never writes through a
name it does not own: a link where it writes is replaced (its target untouched), a
non-file there is refused, and removing never follows a link.
"""

import contextlib
import datetime
import errno
import fcntl
import functools
import os
import re
import shutil
import socket
import stat
import sys
import uuid

import tensorflow as tf


def temporary_sibling(path):
    """A unique temporary path next to `path` (same file system, so rename is atomic)."""
    return f"{path}.tmp-{uuid.uuid4().hex[:8]}"


def _is_local(path):
    return "://" not in os.fspath(path)


def _what(mode):
    kinds = ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISDIR, "a directory"),
             (stat.S_ISFIFO, "a named pipe"), (stat.S_ISSOCK, "a socket"),
             (stat.S_ISCHR, "a device"), (stat.S_ISBLK, "a device"))
    return next((words for test, words in kinds if test(mode)), "not a regular file")


def check_replaceable(path):
    """FileExistsError when the local `path` is neither a file nor a symbolic link (which
    the rename replaces, its target untouched)."""
    if not _is_local(path):
        return
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if not (stat.S_ISREG(mode) or stat.S_ISLNK(mode)):
        raise FileExistsError(
            f"{path} is {_what(mode)}, where tfeff writes a file: nothing was written there. "
            "Remove it or choose another path.")


def open_new(path, mode="w"):
    """Opens the local `path` as a new file (`mode` "w" or "wb"; text as UTF-8): `O_EXCL`
    fails on any entry there, a dangling link included."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                 0o666)
    if "b" in mode:
        return os.fdopen(fd, mode)
    return os.fdopen(fd, mode, encoding="utf-8", newline="")


def remove_path(path):
    """Removes the file, link or directory tree at `path`; a link itself, never its target
    (TensorFlow's `rmtree` empties a linked directory)."""
    if not _is_local(path):
        (tf.io.gfile.rmtree if tf.io.gfile.isdir(path) else tf.io.gfile.remove)(path)
    elif os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path)  # does not follow the links inside either
    else:
        os.remove(path)


def write_text_atomic(path, text):
    """Writes `text` (str) to `path` atomically, creating parent directories: a failed
    write leaves `path` as it was, a link there is replaced (`check_replaceable`)."""
    if parent := os.path.dirname(path):
        tf.io.gfile.makedirs(parent)
    check_replaceable(path)
    tmp = temporary_sibling(path)
    try:
        with open_new(tmp) if _is_local(path) else tf.io.gfile.GFile(tmp, "w") as f:
            f.write(text)
        if _is_local(path):
            os.replace(tmp, path)
        else:
            tf.io.gfile.rename(tmp, path, overwrite=True)
    except BaseException:
        _discard(tmp)
        raise


def _discard(path):
    with contextlib.suppress(OSError, tf.errors.OpError):
        if (os.path.lexists(path) if _is_local(path) else tf.io.gfile.exists(path)):
            (os.remove if _is_local(path) else tf.io.gfile.remove)(path)


def _comparable(path):
    """`path` resolved for comparison: the real path locally, else the normalized URL."""
    path = os.fspath(path)
    return path.rstrip("/") if "://" in path else os.path.realpath(path)


def _inside(inner, outer):
    """Whether comparable path `inner` lies strictly inside comparable path `outer`."""
    sep = "/" if "://" in outer else os.sep
    return inner.startswith(outer.rstrip(sep) + sep)


def check_output(output, inputs, *, overwrite, kind, foreign, containers=()):
    """Refuses, before any work, an output path whose writing would destroy an input
    (`check_not_an_input`), or anything but an empty directory or `kind` written by
    tfeff (`foreign(output)` is None), or anything at all without `overwrite`.

    Args:
        output: the path to write.
        inputs: `{description: path}` of everything the job reads; `None` paths skipped.
        overwrite: whether an existing `output` may be replaced.
        kind: what the job writes, for the messages (e.g. `"an export"`).
        foreign: `foreign(path)` -> None when `path` is `kind`, else what it is instead.
        containers: descriptions (keys of `inputs`) of the inputs that may hold `output`.

    Returns:
        The same check as a function of no arguments (`move_directory_into_place`).

    Raises:
        ValueError: `output` is, contains or lies inside an input (naming both).
        FileExistsError: `output` exists and `overwrite` is off, or it is not `kind`.
    """
    again = functools.partial(check_output, output, inputs, overwrite=overwrite, kind=kind,
                              foreign=foreign, containers=containers)
    check_not_an_input(output, inputs, containers)
    if not tf.io.gfile.exists(output):
        return again
    if not overwrite:
        raise FileExistsError(f"{output} exists; pass overwrite=True (--overwrite) to replace it")
    if tf.io.gfile.isdir(output) and not tf.io.gfile.listdir(output):
        return again
    if (reason := foreign(output)) is not None:
        raise FileExistsError(
            f"{output} exists and is not {kind} written by tfeff ({reason}); overwrite replaces "
            f"only {kind}, so nothing was written. Choose another output path.")
    return again


def check_not_an_input(output, inputs, containers=()):
    """ValueError naming both paths when `output` is, contains or lies inside an input
    (real paths compared), except inside those named in `containers` (a model
    directory holds its export)."""
    target = _comparable(output)
    for description, path in inputs.items():
        if path is None:
            continue
        source = _comparable(path)
        if target == source:
            relation, harm = "is", "writing it would destroy that input"
        elif _inside(source, target):
            relation, harm = "contains", "writing it would destroy that input"
        elif _inside(target, source) and description not in containers:
            relation, harm = "lies inside", "it would be written into that input"
        else:
            continue
        raise ValueError(
            f"The output {output} {relation} the {description} {path}, which this job reads: "
            f"{harm}. Choose an output path outside it.")


def move_directory_into_place(source, path, check=None):
    """Renames the finished directory `source` to `path`, never half-written: an existing
    `path` (a link itself) is renamed aside, `check` (what `check_output` returned) run
    again first, and removed once the new directory is in place."""
    if (os.path.lexists(path) if _is_local(path) else tf.io.gfile.exists(path)):
        if check is not None:
            check()
        old = temporary_sibling(path) + ".old"
        tf.io.gfile.rename(path, old)
        tf.io.gfile.rename(source, path)
        remove_path(old)
    else:
        tf.io.gfile.rename(source, path)


@contextlib.contextmanager
def atomic_local_path(path):
    """Yields a temporary local path, renamed to `path` if the block succeeds (else removed),
    for writers that need a real file name (numpy, fastText)."""
    if parent := os.path.dirname(path):
        os.makedirs(parent, exist_ok=True)
    check_replaceable(path)
    tmp = temporary_sibling(path)
    try:
        yield tmp
        os.replace(tmp, path)  # a link at `path` is replaced, not written through
    finally:
        if os.path.lexists(tmp):
            os.remove(tmp)


class LockHeldError(FileExistsError):
    """Another process holds the lock (`lock`); the message names it."""


def _open_lock(path):
    """The lock file `path` opened read-write (created if missing), never through a link:
    FileExistsError naming what is there instead of a regular file."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK
                     | os.O_CLOEXEC, 0o644)
    except OSError as e:
        if e.errno not in (errno.ELOOP, errno.EISDIR, errno.ENXIO):
            raise
        fd = None
    mode = os.lstat(path).st_mode if fd is None else os.fstat(fd).st_mode
    if fd is None or not stat.S_ISREG(mode):
        if fd is not None:
            os.close(fd)
        target = f" to {os.readlink(path)}" if stat.S_ISLNK(mode) else ""
        raise FileExistsError(
            f"{path} is {_what(mode)}{target}, not a lock file tfeff made: nothing was "
            "written there or through it. Remove it and rerun.")
    return os.fdopen(fd, "r+", encoding="utf-8")


def lock(path, what):
    """An exclusive `flock` on the local file `path` for `what` (e.g. "tfeff-pretrain"):
    the open file, which holds it until closed or the process ends; it says who holds it.

    Raises:
        LockHeldError: another process holds it; the message names that process.
        FileExistsError: `path` is not a regular file (`_open_lock`).
    """
    while True:
        handle = _open_lock(path)
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "another process"
            handle.close()
            raise LockHeldError(holder) from None
        # The holder before may have removed the file between this open and the lock (its
        # lock then covers a file no one else opens): lock the file the path names now.
        with contextlib.suppress(FileNotFoundError):
            if os.lstat(path).st_ino == os.fstat(handle.fileno()).st_ino:
                break
        handle.close()
    handle.seek(0)
    handle.truncate()
    handle.write(f"{what} (pid {os.getpid()} on {socket.gethostname()}, since "
                 f"{datetime.datetime.now().isoformat(timespec='seconds')}: "
                 f"{' '.join(sys.argv)[:300]})\n")
    handle.flush()
    return handle


_LINE_END = re.compile(rb"\r\n|\r|\n")


def raw_lines(f, block=1 << 20):
    """The lines of the binary file object `f` without their ends (`\\n`, `\\r\\n` or a
    lone `\\r`), streamed in blocks."""
    pending = b""
    while True:
        data = f.read(block)
        if not data:
            if pending := pending.removesuffix(b"\r"):
                yield pending
            return
        data = pending + data
        held = b""
        if data.endswith(b"\r"):  # perhaps the first half of a \r\n: wait for the next block
            data, held = data[:-1], b"\r"
        parts = _LINE_END.split(data)
        pending = parts.pop() + held
        yield from parts


@contextlib.contextmanager
def exclusive_output(path, what):
    """Holds `<path>.lock` while a `what` (e.g. "tfeff-embed") writes `path`; on entry
    removes the temporary siblings a killed writer left. Remote paths are not locked.

    Raises:
        FileExistsError: another process writes `path`; the message names it.
    """
    if "://" in path:
        yield
        return
    path = path.rstrip("/")
    lock_path = path + ".lock"
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    try:
        held = lock(lock_path, what)
    except LockHeldError as e:
        raise FileExistsError(f"{path} is being written by {e}: one run writes it at a time. "
                              "Wait for it to end or stop it (a killed run holds nothing)") \
            from None
    try:
        pattern = re.compile(re.escape(os.path.basename(path)) + r"\.tmp-[0-9a-f]{8}(\.old)?$")
        parent = os.path.dirname(path) or "."
        for name in os.listdir(parent) if os.path.isdir(parent) else []:
            if pattern.match(name):
                remove_path(os.path.join(parent, name))
        yield
    finally:
        with contextlib.suppress(OSError):
            os.remove(lock_path)
        held.close()
