"""What a binary shows on stderr: tfeff's lines and real warnings, not the libraries' chatter.

TensorFlow and XLA log from C++ straight to the process' stderr, before Python
can configure anything and whatever `TF_CPP_MIN_LOG_LEVEL` says: the oneDNN and
CPU-feature notices at import, `failed call to cuInit: ... UNKNOWN ERROR (303)`
on every machine without a GPU, `Error occurred when finalizing GeneratorDataset
iterator` at exit. `install` runs the binary's stderr through a small filter
process (`python -m tfeff.bin.quiet`) that drops those lines (`NOISE`) and passes
everything else through unchanged: a C++ `E` line it does not know, a Python
traceback, a crash's last words (the filter outlives the binary and writes all it
was given). It also drops two INFO messages of TensorFlow's Python logging
(`PYTHON_NOISE`) from absl's log handler. `--verbosity 1` (or more) turns all of this off.
"""

import atexit
import logging
import os
import re
import subprocess
import sys

# C++ log lines: `I1126 03:02:22.716261   20627 port.cc:153] ...` (level, date, time,
# thread, source file). Every INFO and WARNING line of a .cc file is dropped; of the
# ERROR lines, only those known to mean nothing.
NOISE = re.compile(
    r"^(?:[IW]\d{4} [\d:.]+ +\d+ [\w./-]+\.cc:\d+\] "
    r"|E\d{4} [\d:.]+ +\d+ [\w./-]+\.cc:\d+\] (?:failed call to cuInit"
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
    """Whether `argv` asks for absl's `--verbosity` (`-v`) 1 or more."""
    for i, arg in enumerate(argv):
        for name in ("--verbosity", "-v"):
            if arg == name and i + 1 < len(argv):
                value = argv[i + 1]
            elif arg.startswith(name + "="):
                value = arg[len(name) + 1:]
            else:
                continue
            try:
                return int(value) >= 1
            except ValueError:
                return True  # absl will refuse it; hide nothing meanwhile
    return False


def install(argv):
    """Unless `argv` asks for verbosity, sends this process' stderr (file descriptor 2,
    so C++ writes too) through the filter process and filters absl's log handler.
    Returns whether it did."""
    if verbose(argv):
        return False
    from absl import logging as absl_logging

    absl_logging.get_absl_handler().addFilter(_Chatter())  # what every Python logger writes
    sys.stderr.flush()
    original = os.dup(2)
    try:
        child = subprocess.Popen([sys.executable, "-m", "tfeff.bin.quiet"],
                                 stdin=subprocess.PIPE, stdout=original,
                                 start_new_session=True)  # a Ctrl-C does not stop it first
    except OSError:  # no filter, no harm: the chatter shows
        os.close(original)
        return False
    os.dup2(child.stdin.fileno(), 2)
    child.stdin.close()  # fd 2 is now the only writer: the filter ends when this process does

    def drain():  # at exit: everything written before is on the terminal before the prompt
        sys.stderr.flush()
        os.dup2(original, 2)
        try:
            child.wait(timeout=5)  # a child process of ours may still hold the pipe
        except subprocess.TimeoutExpired:
            pass

    atexit.register(drain)
    return True


def main():
    """The filter: stdin to stdout, less the `NOISE` lines, line by line."""
    out = sys.stdout.buffer
    for line in sys.stdin.buffer:
        if not NOISE.match(line.decode("utf-8", "replace")):
            out.write(line)
            out.flush()


if __name__ == "__main__":
    main()
