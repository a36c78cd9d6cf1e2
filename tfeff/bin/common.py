"""Shared helpers of the binaries: the error boundary and logging set-up."""

import sys

from absl import logging

from tfeff.config import ConfigError
from tfeff.data import CorpusError
from tfeff.training.errors import TrainingError

# Errors that mean "bad input" or a training fault that leaves the model
# directory resumable: reported in one line, exit status 1.
USER_ERRORS = (ConfigError, CorpusError, FileNotFoundError, FileExistsError, ValueError,
               TrainingError)


def run_main(fn):
    """Runs `fn()`; reports user errors without a traceback and exits non-zero."""
    try:
        fn()
    except USER_ERRORS as e:
        logging.error("%s: %s", type(e).__name__, e)
        print(f"error: {e}", file=sys.stderr)
        sys.exit(1)
