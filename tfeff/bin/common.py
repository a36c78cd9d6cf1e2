"""Shared helpers of the binaries: the error boundary, stop signals, `--help` and their flags.

Importing it imports neither TensorFlow nor Keras: a binary's `--help` answers at once. A
binary stopped by Ctrl-C (SIGINT) or SIGTERM unwinds like an error (every `finally` runs),
prints one `stopped by ...` line and exits with 128 plus the signal's number, as a shell
reports it (`run_app`; tfeff-pretrain exits 42). An ignored signal stays ignored.
"""

import errno
import math
import signal
import sys

from absl import app
from absl import flags

_HELP = ("-h", "-?", "--help", "--helpshort")


def user_errors():
    """Bad input (FormatError is a ValueError) or a resumable training fault: exit status 1."""
    from tfeff.config import ConfigError
    from tfeff.data import CorpusError
    from tfeff.training.errors import TrainingError

    return (ConfigError, CorpusError, FileNotFoundError, FileExistsError, ValueError,
            TrainingError)


def _module_name(name):
    """absl's name for a module's flags (`python -m` runs it as `__main__`: `sys.argv[0]`)."""
    return sys.argv[0] if name == "__main__" else name


class Stopped(BaseException):
    """SIGTERM, raised as Ctrl-C raises KeyboardInterrupt: no `except Exception` takes it."""

    def __init__(self, signum):
        super().__init__(signum)
        self.signum = signum


def _raise_stopped(signum, frame):
    del frame
    raise Stopped(signum)


_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
STOPPED = "stopped by {signal}: nothing half-written is left; rerun the same command"


def catch_stop_signals():
    """Makes SIGTERM raise `Stopped` in the main thread, unless it is ignored."""
    if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _raise_stopped)


def stop_signal(error):
    """The signal whose KeyboardInterrupt or `Stopped` is `error` or in its `__context__`s."""
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, KeyboardInterrupt):
            return signal.SIGINT
        if isinstance(error, Stopped):
            return error.signum
        error = error.__context__
    return None


def report_stop(signum, stopped=STOPPED, status=None):
    """Prints `stopped` (`{signal}`: its name) and exits with `status` (default 128 + `signum`)."""
    for other in _STOP_SIGNALS:
        signal.signal(other, signal.SIG_IGN)
    name = "Ctrl-C (SIGINT)" if signum == signal.SIGINT else signal.Signals(signum).name
    print(stopped.format(signal=name), file=sys.stderr)
    sys.exit(128 + signum if status is None else status)


def run_app(main, stopped=STOPPED, stop_status=None):
    """`absl.app.run(main)`, but `--help` prints the binary's docstring and own flags at once,
    stderr is filtered (`tfeff.bin.quiet`), and a stop signal is reported by `report_stop`."""
    if any(arg in _HELP for arg in sys.argv[1:]):
        print(f"{(sys.modules[main.__module__].__doc__ or '').strip()}\n\nFlags:\n"
              f"{flags.FLAGS.module_help(_module_name(main.__module__))}\n\n"
              "--helpfull lists absl's and the libraries' flags too.")
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


# TensorFlow's errors of the user's environment; the others may be bugs (with a traceback).
_ENVIRONMENT_OP_ERRORS = ("NotFoundError", "PermissionDeniedError", "FailedPreconditionError",
                          "ResourceExhaustedError", "DataLossError", "UnavailableError",
                          "AlreadyExistsError")


def DEFINE_path(name, default, help, required=False):  # noqa: N802 (absl's naming)
    """An absl string flag naming a path: a blank value (an unset shell variable) is refused."""
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


# OSErrors about the user's files and disks, not the binary.
_ENVIRONMENT_ERRNOS = {errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOSPC, errno.EDQUOT,
                       errno.EISDIR, errno.ENOTDIR, errno.ENOENT, errno.EEXIST, errno.EBUSY,
                       errno.EIO, errno.EFBIG, errno.ENAMETOOLONG}


def _environment_error(error):
    """Whether `error` is the environment's (a permission, a full disk, memory), not a bug."""
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
    """Runs `fn()`; reports user errors in one line and exits 1 (a stop is `run_app`'s)."""
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
