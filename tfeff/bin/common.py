"""Shared helpers of the binaries: the error boundary, `--help` and their flags.

Importing it (and so a binary's module) imports neither TensorFlow nor Keras: a
binary's `--help` answers at once, and the heavy imports happen in `main`.
"""

import errno
import math
import sys

from absl import app
from absl import flags

_HELP = ("-h", "-?", "--help", "--helpshort")


def user_errors():
    """Errors that mean "bad input" or a training fault that leaves the model
    directory resumable: reported in one line, exit status 1."""
    from tfeff.config import ConfigError
    from tfeff.data import CorpusError
    from tfeff.training.errors import TrainingError

    # tfeff.evaluation's FormatError (tfeff-evaluate) is a ValueError.
    return (ConfigError, CorpusError, FileNotFoundError, FileExistsError, ValueError,
            TrainingError)


def _module_name(name):
    """absl's name for a module's flags: `python -m` runs it as `__main__`, which absl
    files under `sys.argv[0]`."""
    return sys.argv[0] if name == "__main__" else name


def run_app(main):
    """`absl.app.run(main)`, but `--help` (`-h`, `--helpshort`) prints the binary's
    docstring (its usage and examples) and its own flags only, and exits 0 before
    anything heavy is imported; `--helpfull` is absl's, every library's flags. The
    libraries' chatter on stderr is filtered out (`tfeff.bin.quiet`) unless
    `--verbosity` is 1 or more."""
    if any(arg in _HELP for arg in sys.argv[1:]):
        module = sys.modules[main.__module__]
        print((module.__doc__ or "").strip())
        print("\nFlags:")
        print(flags.FLAGS.module_help(_module_name(main.__module__)))
        print("\n--helpfull lists absl's and the libraries' flags too.")
        sys.exit(0)
    from tfeff.bin import quiet

    quiet.install(sys.argv[1:])
    app.run(main)


# TensorFlow's errors about files, devices and memory: the user's environment. The
# others (InvalidArgument, Internal, ...) may be bugs and keep their traceback.
_ENVIRONMENT_OP_ERRORS = ("NotFoundError", "PermissionDeniedError", "FailedPreconditionError",
                          "ResourceExhaustedError", "DataLossError", "UnavailableError",
                          "AlreadyExistsError")


def DEFINE_path(name, default, help, required=False):  # noqa: N802 (absl's naming)
    """An absl string flag that names a file or directory: an empty or blank value (an
    unset shell variable, `--model_dir=`) is refused before anything runs, instead of
    meaning the current directory."""
    # The binary's own flag (its --help, the reference), not this module's.
    caller = _module_name(sys._getframe(1).f_globals["__name__"])
    holder = flags.DEFINE_string(name, default, help, required=required, module_name=caller)
    flags.register_validator(
        name, lambda value: value is None or bool(value.strip()),
        message=f"--{name} is empty: give a path (is a shell variable unset?)")
    return holder


def DEFINE_positive_float(name, default, help):  # noqa: N802 (absl's naming)
    """An absl float flag that must be finite and positive when given."""
    caller = _module_name(sys._getframe(1).f_globals["__name__"])
    holder = flags.DEFINE_float(name, default, help, module_name=caller)
    flags.register_validator(
        name, lambda value: value is None or (math.isfinite(value) and value > 0),
        message=f"--{name} must be a finite number above 0")
    return holder


# OSErrors about the user's files and disks, not the binary: a permission, a read-only
# or full file system, a directory where a file was expected and the like.
_ENVIRONMENT_ERRNOS = {errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOSPC, errno.EDQUOT,
                       errno.EISDIR, errno.ENOTDIR, errno.ENOENT, errno.EEXIST, errno.EBUSY,
                       errno.EIO, errno.EFBIG, errno.ENAMETOOLONG}


def _environment_error(error):
    """Whether `error` is the environment's (a directory given as a file, a permission,
    a full or read-only disk, a device or the process out of memory), not a bug of the
    binary."""
    if isinstance(error, MemoryError):
        return True
    if isinstance(error, OSError) and error.errno in _ENVIRONMENT_ERRNOS:
        return True
    tf = sys.modules.get("tensorflow")
    return tf is not None and isinstance(
        error, tuple(getattr(tf.errors, name) for name in _ENVIRONMENT_OP_ERRORS))


def _one_line(error):
    text = getattr(error, "message", None) or str(error) or type(error).__name__
    return text.strip().splitlines()[0] if text.strip() else type(error).__name__


def run_main(fn):
    """Runs `fn()`; reports user errors without a traceback and exits non-zero."""
    try:
        fn()
    except user_errors() as e:  # printed once (a log line would repeat it on stderr)
        print(f"error: {e}", file=sys.stderr)
        sys.exit(1)
    except Exception as e:  # noqa: BLE001  (re-raised unless it is the environment's)
        if not _environment_error(e):
            raise
        what = "out of memory" if isinstance(e, MemoryError) else type(e).__name__
        print(f"error: {what}: {_one_line(e)}", file=sys.stderr)
        sys.exit(1)
