"""What a binary shows on stderr: tfeff's lines and real warnings, not the libraries' chatter.

TensorFlow and XLA log from C++ straight to the process' stderr, before Python
can configure anything and whatever `TF_CPP_MIN_LOG_LEVEL` says: the oneDNN and
CPU-feature notices at import, `failed call to cuInit: ... UNKNOWN ERROR (303)`
on every machine without a GPU, `Error occurred when finalizing GeneratorDataset
iterator` at exit. `install` runs the binary's stderr through a small filter
process (`python -m tfeff.bin.quiet`) that drops those lines (`NOISE`: every C++
INFO line, and the known WARNING and ERROR ones) and passes everything else
through unchanged: a C++ warning or error it does not know, a Python traceback,
a crash's last words (the filter outlives the binary and writes all it was
given). It also drops two INFO messages of TensorFlow's Python logging
(`PYTHON_NOISE`) from absl's log handler, and sets `TF_CPP_MIN_LOG_LEVEL=1`
(unless it is set) before TensorFlow is imported, so that the C++ INFO lines
written after TensorFlow's libraries have loaded (the CPU-feature notice) are not
written at all. `--verbosity 1` (or more) turns all of this off.

No environment variable silences what TensorFlow 2.21 writes while its libraries
load, before absl's logging is initialized (`WARNING: All log messages before
absl::InitializeLog() ...`, the oneDNN and `Could not find cuda drivers` lines):
`TF_CPP_MIN_LOG_LEVEL` (even 3), `TF_CPP_MAX_VLOG_LEVEL`, `ABSL_MIN_LOG_LEVEL` and
`GRPC_VERBOSITY` leave them, and a variable set after `import tensorflow` changes
nothing. Only a filter on file descriptor 2 removes them, and

    python -m tfeff.bin.quiet COMMAND [ARGS...]

runs any command (a user's script, `examples/demo_embed.py` in `make demo`) with
this filter on its stderr, as the binaries have it.
"""

import logging
import os
import re
import signal
import subprocess
import sys

# C++ log lines: `I1126 03:02:22.716261   20627 port.cc:153] ...` (level, date, time,
# thread, source file). Every INFO line of a .cc file is dropped; of the WARNING and
# ERROR lines (a device's missing libraries, an allocator out of memory), only those
# known to mean nothing.
NOISE = re.compile(
    r"^(?:I\d{4} [\d:.]+ +\d+ [\w./-]+\.cc:\d+\] "
    r"|[WE]\d{4} [\d:.]+ +\d+ [\w./-]+\.cc:\d+\] (?:failed call to cuInit"
    r"|oneDNN supports DT_INT64 only|Error occurred when finalizing GeneratorDataset iterator)"
    r"|WARNING: All log messages before absl::InitializeLog\(\) is called"
    r"|To enable the following instructions: .*rebuild TensorFlow)")
# TensorFlow's Python logging: a checkpoint's "Sharding callback duration: 46
# microseconds"; a SavedModel's signature inputs renamed to legal names, and its
# assets and fingerprint written (to a temporary directory the export renames).
PYTHON_NOISE = ("Sharding callback duration", "with unsupported characters which will be renamed",
                "Assets written to: ", "Writing fingerprint to ")


class _Chatter(logging.Filter):
    def filter(self, record):
        message = record.getMessage()
        return not any(text in message for text in PYTHON_NOISE)


def verbose(argv):
    """Whether `argv` asks for absl's `--verbosity` (`-v`, one dash or two) 1 or more, or
    reads flags from a `--flagfile` (which may: nothing is hidden then)."""
    for i, arg in enumerate(argv):
        if not arg.startswith("-"):
            continue
        name, equals, value = arg.lstrip("-").partition("=")
        if name == "flagfile":
            return True
        if name not in ("v", "verbosity"):
            continue
        if not equals:
            if i + 1 >= len(argv):
                continue
            value = argv[i + 1]
        try:
            return int(value) >= 1
        except ValueError:
            return True  # absl will refuse it; hide nothing meanwhile
    return False


# TensorFlow's C++ log level when the filter is on: INFO lines are not written (the
# filter would drop them all), warnings and errors are, for the filter to judge.
QUIET_ENV = {"TF_CPP_MIN_LOG_LEVEL": "1"}


def install(argv):
    """Unless `argv` asks for verbosity, sets `QUIET_ENV` where the environment does not
    say otherwise, sends this process' stderr (file descriptor 2, so C++ writes too)
    through the filter process and filters absl's log handler. Returns whether the
    filter process was started. Call it before TensorFlow is imported."""
    if verbose(argv):
        return False
    for name, value in QUIET_ENV.items():
        os.environ.setdefault(name, value)
    from absl import logging as absl_logging

    absl_logging.get_absl_handler().addFilter(_Chatter())  # what every Python logger writes
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
    # fd 2 is now the only writer: the filter ends when this process (and the children it
    # started) have ended, after the interpreter's last words, which it filters too.
    os.dup2(child.stdin.fileno(), 2)
    child.stdin.close()
    return True


def run(command):
    """Replaces this process with `command` (a list: the program and its arguments),
    its stderr through the filter process and `QUIET_ENV` set where the environment does
    not say otherwise. The command keeps this process' id, so its signals and exit status
    are its own. Returns only if the command cannot be started (status 127, as a shell's)."""
    for name, value in QUIET_ENV.items():
        os.environ.setdefault(name, value)
    _filter_stderr()
    try:
        os.execvp(command[0], command)
    except OSError as e:
        print(f"error: cannot run {command[0]}: {e.strerror}", file=sys.stderr)
        return 127


def main(argv=None):
    """`python -m tfeff.bin.quiet COMMAND [ARGS...]` runs the command with its stderr
    filtered (`run`). Without arguments it is the filter: stdin to stdout, less the
    `NOISE` lines, line by line, until the binary's end (a signal sent to the whole job,
    a scheduler's SIGTERM, does not stop it before the binary's last words)."""
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
