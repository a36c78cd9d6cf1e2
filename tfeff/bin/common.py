"""Shared helpers of the binaries: the error boundary, stop signals, `--help` and their flags.

Importing it (and so a binary's module) imports neither TensorFlow nor Keras: a
binary's `--help` answers at once, and the heavy imports happen in `main`.

A binary stopped by Ctrl-C (SIGINT) or SIGTERM, at any point, unwinds like an
error: every `finally` on the way out runs (temporaries removed, locks released,
child processes stopped), then one `stopped by ...` line is printed and the
binary exits with 128 plus the signal's number, as a shell reports a stopped
command: 130 for Ctrl-C, 143 for SIGTERM (`run_app`; tfeff-pretrain exits 42
instead, its resumable stop). A signal that is ignored (a background job of a
script ignores Ctrl-C) stays ignored.
"""

import errno
import math
import signal
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


class Stopped(BaseException):
    """SIGTERM, raised in the main thread as Ctrl-C raises KeyboardInterrupt:
    not an `Exception`, so no `except Exception` takes it for an error, and every
    `finally` and `except BaseException` cleanup on the way out runs."""

    def __init__(self, signum):
        super().__init__(signum)
        self.signum = signum


# SIGTERM is raised as `Stopped`; SIGINT raises KeyboardInterrupt (Python's own handler).
_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
STOPPED = "stopped by {signal}: nothing half-written is left; rerun the same command"


def _raise_stopped(signum, frame):
    del frame
    raise Stopped(signum)


def catch_stop_signals():
    """Makes SIGTERM raise `Stopped` in the main thread (Ctrl-C's SIGINT raises
    KeyboardInterrupt already, Python's own handler, which is kept). An ignored SIGTERM
    stays ignored."""
    if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _raise_stopped)


def stop_signal(error):
    """The signal that stopped the binary, when `error` is its KeyboardInterrupt or
    `Stopped`, or an error raised while one unwound (its `__context__` chain); else
    None."""
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, KeyboardInterrupt):
            return signal.SIGINT
        if isinstance(error, Stopped):
            return error.signum
        error = error.__context__
    return None


def _signal_name(signum):
    return "Ctrl-C (SIGINT)" if signum == signal.SIGINT else signal.Signals(signum).name


def report_stop(signum, stopped=STOPPED, status=None):
    """Prints the one line of a binary stopped by `signum` (`stopped`, a message with
    `{signal}` for the signal's name) and exits with `status`, by default 128 plus the
    signal's number, as a shell reports a stopped command (130 for Ctrl-C, 143 for
    SIGTERM). Further stop signals are ignored meanwhile: the line is written whole."""
    for other in _STOP_SIGNALS:
        signal.signal(other, signal.SIG_IGN)
    print(stopped.format(signal=_signal_name(signum)), file=sys.stderr)
    sys.exit(128 + signum if status is None else status)


def run_app(main, stopped=STOPPED, stop_status=None):
    """`absl.app.run(main)`, but `--help` (`-h`, `--helpshort`) prints the binary's
    docstring (its usage and examples) and its own flags only, and exits 0 before
    anything heavy is imported; `--helpfull` is absl's, every library's flags. The
    libraries' chatter on stderr is filtered out (`tfeff.bin.quiet`) unless
    `--verbosity` is 1 or more.

    Ctrl-C or SIGTERM at any point (importing, reading, writing, cleaning
    up) unwinds the binary like an error (`catch_stop_signals`), then `report_stop`
    prints `stopped` (`{signal}` is the signal's name) and exits with `stop_status`
    (default: 128 plus the signal's number)."""
    if any(arg in _HELP for arg in sys.argv[1:]):
        module = sys.modules[main.__module__]
        print((module.__doc__ or "").strip())
        print("\nFlags:")
        print(flags.FLAGS.module_help(_module_name(main.__module__)))
        print("\n--helpfull lists absl's and the libraries' flags too.")
        sys.exit(0)
    catch_stop_signals()
    try:
        from tfeff.bin import quiet

        quiet.install(sys.argv[1:])
        app.run(main)
    except BaseException as e:  # noqa: BLE001  (re-raised unless a stop signal unwound it)
        signum = None if isinstance(e, SystemExit) else stop_signal(e)
        if signum is None:
            raise
        report_stop(signum, stopped, stop_status)


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
    """Runs `fn()`; reports user errors without a traceback and exits non-zero.

    An error raised while a stop signal unwinds `fn` (`stop_signal`) is left to
    `run_app`, which reports the stop."""
    try:
        fn()
    except Exception as e:  # noqa: BLE001  (re-raised unless the user's or environment's)
        if stop_signal(e) is not None:
            raise
        if isinstance(e, user_errors()):  # printed once (a log line would repeat it)
            print(f"error: {e}", file=sys.stderr)
            sys.exit(1)
        if not _environment_error(e):
            raise
        what = "out of memory" if isinstance(e, MemoryError) else type(e).__name__
        print(f"error: {what}: {_one_line(e)}", file=sys.stderr)
        sys.exit(1)
