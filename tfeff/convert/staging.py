"""The converters' output directories: written to a temporary sibling under a lock.

`staged_directory(path, what)` is what `convert_model_dir`,
`write_keras_hub_preset` and `write_hf_bert` write into: `<path>.tmp-XXXXXXXX`,
renamed into place once complete, while `<path>.lock` is held. It is made as any
directory is (`os.mkdir`: its mode follows the umask), and what a library writes
there with a mode of its own gets the umask's (`follow_umask`). Stopped by an
error, Ctrl-C or SIGTERM, a writer removes its temporary on the way out; killed
(SIGKILL, a power cut), it leaves it, and the next writer of the same `path`
removes it: the name says whose it is, and the lock that it is no one's now.
"""

import contextlib
import os
import shutil
import stat

from tfeff.data import files


@contextlib.contextmanager
def staged_directory(path, what):
    """Yields a new, empty temporary directory beside `path` to write `path` into.

    The block renames it into place when complete (`os.rename`, or
    `tfeff.data.files.move_directory_into_place` over an earlier output); if it
    raises instead, or is stopped (KeyboardInterrupt, SIGTERM as the binaries raise
    it), the temporary is removed. Meanwhile `<path>.lock` is held
    (`tfeff.data.files.exclusive_output`), which on entry removes the temporaries a
    killed writer of `path` left (`<path>.tmp-XXXXXXXX`, `<path>.tmp-XXXXXXXX.old`).

    Args:
        path: the local output directory.
        what: who writes it, for the lock file (e.g. "tfeff.convert.write_hf_bert").

    Yields:
        The temporary directory, `<path>.tmp-XXXXXXXX`.

    Raises:
        FileExistsError: another process writes `path`; the message names it.
    """
    path = os.path.normpath(os.fspath(path))
    with files.exclusive_output(path, what):
        tmp = files.temporary_sibling(path)
        os.mkdir(tmp)
        try:
            yield tmp
        finally:
            if os.path.isdir(tmp) and not os.path.islink(tmp):
                shutil.rmtree(tmp, ignore_errors=True)


def follow_umask(path, directory):
    """Gives the file `path` the mode a new file gets under the process' umask.

    For files a library creates with a mode of its own (the `safetensors` package
    writes 0600), so that an output reads like any other the process writes (0644
    under a umask of 022). The umask is read off `directory`, which `os.mkdir`
    made (mode 0o777 less the umask; `staged_directory`'s): a file gets its read
    and write bits (0o666 less the umask), without changing the umask of a
    process that may have other threads.
    """
    os.chmod(path, stat.S_IMODE(os.stat(directory).st_mode) & 0o666)
