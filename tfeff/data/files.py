"""Atomic file writes through `tf.io.gfile`: write a temporary sibling, then rename.

A reader never sees a half-written file, and a killed writer leaves at most a
`*.tmp-*` sibling that the next run overwrites.
"""

import contextlib
import os
import uuid

import tensorflow as tf


def temporary_sibling(path):
    """A unique temporary path next to `path` (same file system, so rename is atomic)."""
    return f"{path}.tmp-{uuid.uuid4().hex[:8]}"


def write_text_atomic(path, text):
    """Writes `text` (str) to `path` atomically, creating parent directories."""
    parent = os.path.dirname(path)
    if parent:
        tf.io.gfile.makedirs(parent)
    tmp = temporary_sibling(path)
    with tf.io.gfile.GFile(tmp, "w") as f:
        f.write(text)
    tf.io.gfile.rename(tmp, path, overwrite=True)


def move_directory_into_place(source, path):
    """Renames the finished directory `source` to `path`, replacing what is there.

    An existing `path` is first renamed aside and removed only after the new
    directory is in place, so `path` is never a half-written directory.
    """
    if tf.io.gfile.exists(path):
        old = temporary_sibling(path) + ".old"
        tf.io.gfile.rename(path, old)
        tf.io.gfile.rename(source, path)
        tf.io.gfile.rmtree(old)
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
    tmp = temporary_sibling(path)
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
