"""The training faults tfeff reports to the user (every one names the way back)."""

import re


class TrainingError(RuntimeError):
    """A training fault reported to the user; the model directory stays resumable."""


class CheckpointError(TrainingError):
    """A checkpoint that cannot be read (truncated, corrupted, missing files); `prefix` is
    the checkpoint's, where one checkpoint is at fault (else None)."""

    def __init__(self, message, prefix=None):
        super().__init__(message)
        self.prefix = prefix


class NonFiniteLossError(TrainingError):
    """The loss or its gradients were NaN/Inf at a step (`train.on_nan: stop`)."""


class NonFiniteOutputError(TrainingError):
    """A model's outputs hold NaN/Inf where a score is computed from them (evaluation)."""


def error_message(error):
    return getattr(error, "message", None) or str(error)


_DETAIL = re.compile(r"No such file|not found|NotFound|OOM|out of memory|No space|File too large",
                     re.IGNORECASE)


def error_detail(error):
    """The line of a (graph execution) error that says what happened, without
    TensorFlow's op-name decorations (`{{function_node ...}}`, `[Op:...]`)."""
    lines = [line.strip() for line in error_message(error).splitlines() if line.strip()]
    line = next((line for line in lines if _DETAIL.search(line)),
                lines[-1] if lines else type(error).__name__)
    return re.sub(r"\{\{[^}]*\}\}\s*|\s*\[Op:[^\]]*\]\s*(name:\s*\S*)?$", "", line)
