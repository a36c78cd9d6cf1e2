"""What a binary shows on stderr: tfeff's lines and real warnings, not the libraries' chatter.

TensorFlow and XLA log from C++ straight to stderr (the oneDNN and CPU-feature notices,
`failed call to cuInit`), and no environment variable silences it all (docs/guides/install.md).
`install` runs stderr (file descriptor 2) through a filter process that drops those lines
(`NOISE`) and passes the rest, a crash's last words included; drops `PYTHON_NOISE` from
absl's log handler; and sets `QUIET_ENV`. `--verbosity 1` (or more) turns all of it off.

    python -m tfeff.bin.quiet COMMAND [ARGS...]

runs any command (a user's script, `examples/demo_embed.py`) with this filter on stderr.
"""

import os
import re
import signal
import subprocess
import sys

# C++ log lines (`I1126 03:02:22.716261   20627 port.cc:153] ...`): every INFO line; of the
# WARNING and ERROR lines, only those known to mean nothing.
NOISE = re.compile(
    r"^(?:I\d{4} [\d:.]+ +\d+ [\w./-]+\.cc:\d+\] "
    r"|[WE]\d{4} [\d:.]+ +\d+ [\w./-]+\.cc:\d+\] (?:failed call to cuInit"
    r"|oneDNN supports DT_INT64 only|Error occurred when finalizing GeneratorDataset iterator)"
    r"|WARNING: All log messages before absl::InitializeLog\(\) is called"
    r"|To enable the following instructions: .*rebuild TensorFlow)")
# TensorFlow's Python logging of a checkpoint's sharding and a SavedModel's writing.
PYTHON_NOISE = ("Sharding callback duration", "with unsupported characters which will be renamed",
                "Assets written to: ", "Writing fingerprint to ")


def verbose(argv):
    """Whether `argv` asks for absl's `--verbosity` (`-v`) 1 or more, or has a `--flagfile`."""
    for i, arg in enumerate(argv):
        name, equals, value = arg.lstrip("-").partition("=")
        if not arg.startswith("-") or name not in ("v", "verbosity", "flagfile"):
            continue
        if name == "flagfile":
            return True
        if not equals and i + 1 >= len(argv):
            continue
        try:
            return int(value if equals else argv[i + 1]) >= 1
        except ValueError:
            return True  # absl will refuse it; hide nothing meanwhile
    return False


# With the filter on, C++ INFO lines are not written; warnings and errors are, to be judged.
QUIET_ENV = {"TF_CPP_MIN_LOG_LEVEL": "1"}


def install(argv):
    """Unless `argv` is `verbose`, sets `QUIET_ENV` defaults and filters stderr and absl's log
    handler; whether the filter process started. Call it before TensorFlow is imported."""
    if verbose(argv):
        return False
    for name, value in QUIET_ENV.items():
        os.environ.setdefault(name, value)
    from absl import logging as absl_logging

    absl_logging.get_absl_handler().addFilter(  # what every Python logger writes
        lambda record: not any(text in record.getMessage() for text in PYTHON_NOISE))
    return _filter_stderr()


def _filter_stderr():
    """Sends file descriptor 2 through a filter process (`main`); whether it did."""
    if sys.stderr is None:  # stderr closed (2>&-): nothing to filter
        return False
    try:
        sys.stderr.flush()
        original = os.dup(2)
    except (OSError, ValueError):
        return False
    try:
        child = subprocess.Popen([sys.executable, "-m", "tfeff.bin.quiet"],
                                 stdin=subprocess.PIPE, stdout=original,
                                 start_new_session=True)  # a Ctrl-C does not stop it first
    except OSError:  # no filter, no harm: the chatter shows
        return False
    finally:
        os.close(original)  # the child holds it
    # The filter ends when this process and its children have, after their last words.
    os.dup2(child.stdin.fileno(), 2)
    child.stdin.close()
    return True


def run(command):
    """Replaces this process (same id) with `command`, stderr filtered; 127 if it cannot start."""
    for name, value in QUIET_ENV.items():
        os.environ.setdefault(name, value)
    _filter_stderr()
    try:
        os.execvp(command[0], command)
    except OSError as e:
        print(f"error: cannot run {command[0]}: {e.strerror}", file=sys.stderr)
        return 127


def main(argv=None):
    """`python -m tfeff.bin.quiet COMMAND...` runs `run(COMMAND)`. Without arguments it is the
    filter: stdin to stdout less `NOISE`, ignoring the job's signals until stdin ends."""
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in ("-h", "--help"):
        print(__doc__.strip())
        return 0
    if argv:
        return run(argv)
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, signal.SIG_IGN)
    out = sys.stdout.buffer
    for line in sys.stdin.buffer:
        if not NOISE.match(line.decode("utf-8", "replace")):
            out.write(line)
            out.flush()


if __name__ == "__main__":
    sys.exit(main())
