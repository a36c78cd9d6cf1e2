"""The converters' output directories: written to a temporary sibling under a lock.

`convert_model_dir`, `write_keras_hub_preset` and `write_hf_bert` write into
`staged_directory(path, what)`. Stopped by an error, Ctrl-C or SIGTERM, a writer removes its
temporary; killed (SIGKILL, a power cut), it leaves it, and the next writer of the same
`path` removes it: the name says whose it is, and the lock that it is no one's now.
"""

import contextlib
import os
import shutil
import stat

from tfeff.data import files


@contextlib.contextmanager
def staged_directory(path, what):
    """Yields `<path>.tmp-XXXXXXXX`, new and empty, to write the local `path` into, holding
    `<path>.lock` for `what` (`files.exclusive_output`: FileExistsError while another process
    writes `path`). The block renames it into place; else it is removed."""
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
    """Gives the file `path` (`safetensors` writes 0600) the mode a new file gets under the
    umask, read off `directory` that `os.mkdir` made: setting the umask to read it would
    race with other threads."""
    os.chmod(path, stat.S_IMODE(os.stat(directory).st_mode) & 0o666)
