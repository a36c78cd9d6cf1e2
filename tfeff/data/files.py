"""Atomic file writes through `tf.io.gfile`: write a temporary sibling, then rename.

A reader never sees a half-written file, and a killed writer leaves at most a
`*.tmp-*` sibling that the next run overwrites.

tfeff never writes through a name it does not own. Where it writes a file of
its own (a config, a mark, a table), a symbolic link at that name is replaced
by the new file, the file it pointed to left as it was (a rename replaces the
link itself); a directory, named pipe or other non-file there is refused. A
file that is written in place (a lock) must be a regular file: a link is
refused. Removing never follows a link (`remove_path`). Temporary files are
created new (`open_new`): never an existing file, never through a link.
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
    """What the `st_mode` `mode` names, in words."""
    for test, words in ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISDIR, "a directory"),
                        (stat.S_ISFIFO, "a named pipe"), (stat.S_ISSOCK, "a socket"),
                        (stat.S_ISCHR, "a device"), (stat.S_ISBLK, "a device")):
        if test(mode):
            return words
    return "not a regular file"


def check_replaceable(path):
    """Refuses to write a file at the local `path` where something other than a file or a
    symbolic link is (a directory, a named pipe, a socket, a device): FileExistsError
    naming it. A symbolic link is replaced by the rename (its target is not touched)."""
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
    """Opens the local `path` for writing as a new file (`mode` "w" or "wb"; text as UTF-8):
    never an existing file and never through a symbolic link (`O_EXCL`, which fails on any
    entry there, a dangling link included)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                 0o666)
    if "b" in mode:
        return os.fdopen(fd, mode)
    return os.fdopen(fd, mode, encoding="utf-8", newline="")


def remove_path(path):
    """Removes the file, symbolic link or directory tree at `path`. A link is removed
    itself, never what it points to (TensorFlow's `rmtree` empties a linked directory)."""
    if not _is_local(path):
        if tf.io.gfile.isdir(path):
            tf.io.gfile.rmtree(path)
        else:
            tf.io.gfile.remove(path)
        return
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path)  # does not follow the links inside either
    else:
        os.remove(path)


def write_text_atomic(path, text):
    """Writes `text` (str) to `path` atomically, creating parent directories.

    The text goes to a new temporary sibling (`open_new`), renamed over `path` once
    complete: a failed write (a full disk) leaves `path` as it was and no temporary.
    A symbolic link at `path` is replaced, not written through; a directory or other
    non-file there is refused (`check_replaceable`).
    """
    parent = os.path.dirname(path)
    if parent:
        tf.io.gfile.makedirs(parent)
    check_replaceable(path)
    tmp = temporary_sibling(path)
    try:
        if _is_local(path):
            with open_new(tmp) as f:
                f.write(text)
            os.replace(tmp, path)
        else:
            with tf.io.gfile.GFile(tmp, "w") as f:
                f.write(text)
            tf.io.gfile.rename(tmp, path, overwrite=True)
    except BaseException:
        _discard(tmp)
        raise


def _discard(path):
    """Removes the temporary file `path` if it is there."""
    with contextlib.suppress(OSError, tf.errors.OpError):
        if not _is_local(path):
            if tf.io.gfile.exists(path):
                tf.io.gfile.remove(path)
        elif os.path.lexists(path):
            os.remove(path)


def _comparable(path):
    """`path` resolved for comparison: the real path locally (links and `..` resolved),
    the normalized URL for remote file systems (`gs://...`)."""
    path = os.fspath(path)
    if "://" in path:
        return path.rstrip("/")
    return os.path.realpath(path)


def _inside(inner, outer):
    """Whether comparable path `inner` lies strictly inside comparable path `outer`."""
    sep = "/" if "://" in outer else os.sep
    return inner.startswith(outer.rstrip(sep) + sep)


def check_output(output, inputs, *, overwrite, kind, foreign, containers=()):
    """Refuses an output path whose writing would destroy an input, or data that tfeff
    did not write as this kind of output. Every writer that replaces a directory calls
    it before any work (`tfeff-export`, `tfeff-embed`, `write_hf_bert`;
    `tfeff-convert-core`, which replaces nothing, checks its inputs alone).

    * `output` must not be, contain or lie inside an input (real paths are compared,
      so a link or `..` does not hide it). The inputs named in `containers` may hold
      the output (a model directory holds its export: `runs/demo/export`).
    * An existing `output` is replaced only with `overwrite`, and only when it is
      recognisably `kind` written by tfeff (`foreign(output)` is None) or an empty
      directory: never a model directory, an input, or anything else.

    Args:
        output: the path to write.
        inputs: `{description: path}` of everything the job reads, e.g.
            `{"model directory (model_dir)": "runs/demo"}`; `None` paths are skipped.
        overwrite: whether an existing `output` may be replaced.
        kind: what the job writes, for the messages (e.g. `"an export"`).
        foreign: `foreign(path)` -> None when the existing `path` is `kind`
            written by tfeff, else a few words saying what it is instead.
        containers: descriptions (keys of `inputs`) of the inputs that may hold
            `output`.

    Returns:
        The same check as a function of no arguments, for the writer to run again
        when it replaces `output` (`move_directory_into_place`): something may have
        appeared there while it worked.

    Raises:
        ValueError: `output` is, contains or lies inside an input; the message
            names both paths.
        FileExistsError: `output` exists and `overwrite` is off, or it is not
            `kind`.
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
    reason = foreign(output)
    if reason is not None:
        raise FileExistsError(
            f"{output} exists and is not {kind} written by tfeff ({reason}); overwrite replaces "
            f"only {kind}, so nothing was written. Choose another output path.")
    return again


def check_not_an_input(output, inputs, containers=()):
    """Refuses an `output` that is, contains or lies inside one of `inputs`
    (`{description: path}`; `None` paths skipped), except that the inputs named in
    `containers` may hold it. ValueError naming both paths; see `check_output`."""
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
    """Renames the finished directory `source` to `path`, replacing what is there.

    Callers check `path` first (`check_output`) and pass that check as `check`,
    which runs again here when `path` exists now (it may have appeared while the
    job ran): it is replaced only when it is an earlier output of the same kind.
    An existing `path` is first renamed aside and removed only after the new
    directory is in place, so `path` is never a half-written directory. A
    symbolic link at `path` is replaced by the new directory: the link is
    removed, what it pointed to is left as it was.
    """
    exists = os.path.lexists(path) if _is_local(path) else tf.io.gfile.exists(path)
    if exists:
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
    """Yields a temporary local path; renames it to `path` if the block succeeds.

    For writers that need a real file name (numpy, fastText). On error the
    temporary file is removed and `path` is untouched.
    """
    parent = os.path.dirname(path)
    if parent:
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
    """The lock file `path` opened for reading and writing (created if missing): a regular
    file, never through a symbolic link (FileExistsError naming what is there instead)."""
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
    """An exclusive lock on the local file `path` (created if missing), for `what`
    (e.g. "tfeff-pretrain"): the open file, which holds the lock until it is closed or the
    process ends, however it ends (the kernel's `flock`: a killed process holds nothing).
    The file then says who holds it.

    Raises:
        LockHeldError: another process holds it; the message names that process.
        FileExistsError: `path` is a symbolic link (dangling or not), a directory or
            anything else than a regular file: tfeff writes only a lock file it made.
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
        try:
            same = os.lstat(path).st_ino == os.fstat(handle.fileno()).st_ino
        except FileNotFoundError:
            same = False
        if same:
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
    """The lines of the binary file object `f` without their ends, whichever convention
    ends them: `\\n` (Unix), `\\r\\n` (Windows) or a lone `\\r` (classic Mac OS). Streams
    in blocks, so a file of one convention or another costs the same memory."""
    pending = b""
    while True:
        data = f.read(block)
        if not data:
            if pending.endswith(b"\r"):
                pending = pending[:-1]
            if pending:
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
    """Holds `<path>.lock` (`lock`) while a `what` (e.g. "tfeff-embed") writes `path`, then
    removes it; on entry removes what a killed writer of `path` left (its temporary
    siblings, `<path>.tmp-XXXXXXXX[.old]`). Remote paths are not locked.

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
