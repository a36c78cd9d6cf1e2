"""The training faults tfeff reports to the user (every one names the way back)."""


class TrainingError(RuntimeError):
    """A training fault reported to the user; the model directory stays resumable."""


class CheckpointError(TrainingError):
    """A checkpoint that cannot be read (truncated, corrupted, missing files)."""


class NonFiniteLossError(TrainingError):
    """The loss or its gradients were NaN/Inf at a step (`train.on_nan: stop`)."""


class NonFiniteOutputError(TrainingError):
    """A model's outputs hold NaN/Inf where a score is computed from them (evaluation)."""


def error_message(error):
    return getattr(error, "message", None) or str(error)
