"""The `train` section every family shares: optimization, schedule, checkpoints, precision."""

import dataclasses
from typing import Union

from tfeff.config.base import ConfigError
from tfeff.config.base import join
from tfeff.config.base import one_of
from tfeff.config.base import checking_requests
from tfeff.config.base import only_with
from tfeff.config.base import positive
from tfeff.config.base import positive_keys
from tfeff.config.base import seed_range
from tfeff.config.base import shown

PRECISIONS = ("float32", "mixed_bfloat16", "mixed_float16")
OPTIMIZERS = ("adam", "adagrad")
DECAYS = ("cosine", "linear", "exponential", "constant", "rnmt")
# Keys that apply to one choice of another key only (`tfeff.config.base.only_with`).
ONLY_WITH = {
    "decay_rate": ("decay", ("exponential",), "the exponential decay's"),
    "decay_steps": ("decay", ("exponential",), "the exponential decay's"),
    "decay_start_step": ("decay", ("rnmt",), "the rnmt decay's"),
    "decay_end_step": ("decay", ("rnmt",), "the rnmt decay's"),
    "final_learning_rate_fraction": ("decay", ("cosine", "linear", "exponential"),
                                     "the cosine, linear and exponential decays'"),
    "adagrad_initial_accumulator": ("optimizer", ("adagrad",), "Adagrad's"),
    "weight_decay": ("optimizer", ("adam",), "Adam's"),
    "adam_epsilon": ("optimizer", ("adam",), "Adam's"),
}


@dataclasses.dataclass
class TrainConfig:
    """Optimization. The peak learning rate is `learning_rate * batch_size / base_batch_size`.

    A key marked "`decay: ...`" or "`optimizer: ...`" below (`ONLY_WITH`) keeps its default
    under the other choices: a value there would have no effect and is refused.

    Args:
        steps: the step training ends at (unless `epochs` is set).
        epochs: > 0: `steps` is this many passes over the corpus (ELMo, transformer LM, Masked
            ELMo; the windows of a pass are counted once) in batches of `data.batch_size`.
        learning_rate: the peak learning rate at `base_batch_size` (scaled linearly).
        base_batch_size: the batch size `learning_rate` is given for.
        warmup_steps: steps of linear warmup (0 for none).
        decay: `cosine`, `linear`, `exponential`, `constant` or `rnmt` (RNMT+ as Li et al.
            train ELMo-C: up from `learning_rate` over the warmup, held until
            `decay_start_step`, then exponential decay to `learning_rate` / 2 at `decay_end_step`).
        final_learning_rate_fraction: `decay: cosine, linear, exponential`: the rate at
            `steps` is the peak times this, in [0, 1] (`exponential`: the floor).
        decay_rate: `decay: exponential`: the factor, in (0, 1], applied every `decay_steps`.
        decay_steps: `decay: exponential`: the steps per `decay_rate` factor.
        decay_start_step: `decay: rnmt`: the step its decay starts at, before `steps`.
        decay_end_step: `decay: rnmt`: the step its decay ends at (> the start).
        clipnorm: global-norm gradient clipping; 0 disables it.
        optimizer: `adam` or `adagrad` (as ELMo's bilm-tf trains, at a rate of 0.2).
        adagrad_initial_accumulator: `optimizer: adagrad`: the value its accumulators of squared
            gradients start at, > 0 (ELMo's bilm-tf starts them at 1.0).
        weight_decay: `optimizer: adam`: > 0 selects AdamW (not applied to biases, layer norms
            or embeddings' bias-like vectors; BERT uses 0.01).
        adam_epsilon: `optimizer: adam`: 0: Keras' 1e-7 for Adam, BERT's 1e-6 for AdamW.
        checkpoint_every: steps between checkpoints (and validations: Keras' epoch length).
        keep_checkpoints: checkpoints kept.
        log_every: steps between log lines and TensorBoard scalars.
        validation_steps: held-out batches per validation (at every checkpoint); 0: none.
        steps_per_execution: steps run per call of the compiled train function (Keras').
        seed: the run's seed (initializers, dropout, shuffling, masks), in [0, 2**32 - 1].
        on_nan: a step with NaN/Inf loss or gradients: `stop` (raise, naming the step;
            nothing applied or saved) or `skip` (drop the update, log it and go on).
        deterministic: TensorFlow's op determinism: bit-identical reruns and resumes on CPU
            (some GPU kernels are slower or refused).
        precision: the Keras dtype policy: `float32`, `mixed_bfloat16` or `mixed_float16`
            (weights, losses, softmax normalizers and layer norms stay float32); fixed per run.
        jit_compile: XLA for the training step (may change on resume): `true` (an error naming
            a layer that cannot; not with `deterministic`), `auto` (unless one cannot) or `false`.
    """

    steps: int = 10000
    epochs: float = 0.0
    learning_rate: float = 1e-3
    base_batch_size: int = 128
    warmup_steps: int = 200
    decay: str = "cosine"
    final_learning_rate_fraction: float = 0.1
    decay_rate: float = 0.95
    decay_steps: int = 1000
    decay_start_step: int = 0
    decay_end_step: int = 0
    clipnorm: float = 1.0
    optimizer: str = "adam"
    adagrad_initial_accumulator: float = 0.1
    weight_decay: float = 0.0
    adam_epsilon: float = 0.0
    checkpoint_every: int = 500
    keep_checkpoints: int = 3
    log_every: int = 50
    validation_steps: int = 20
    steps_per_execution: int = 1
    seed: int = 0
    on_nan: str = "stop"
    deterministic: bool = False
    precision: str = "float32"
    jit_compile: Union[bool, str] = False

    def validate(self, prefix):
        one_of(self.precision, PRECISIONS, join(prefix, "precision"))
        if not (isinstance(self.jit_compile, bool) or self.jit_compile == "auto"):
            raise ConfigError(f"`{join(prefix, 'jit_compile')}` must be true, false or auto, "
                              f"got {shown(self.jit_compile)}")
        if self.jit_compile is True and self.deterministic:
            raise ConfigError(
                f"`{join(prefix, 'jit_compile')}: true` cannot be honoured with "
                f"`{join(prefix, 'deterministic')}: true` (XLA kernels are not covered by "
                "TensorFlow's op determinism); use jit_compile: auto or false")
        positive_keys(self, prefix, "steps", "learning_rate", "base_batch_size",
                      "checkpoint_every", "keep_checkpoints", "log_every", "steps_per_execution")
        positive_keys(self, prefix, "warmup_steps", "epochs", "validation_steps", "clipnorm",
                      "weight_decay", "adam_epsilon", allow_zero=True)
        seed_range(self.seed, join(prefix, "seed"))
        one_of(self.optimizer, OPTIMIZERS, join(prefix, "optimizer"))
        positive(self.adagrad_initial_accumulator, join(prefix, "adagrad_initial_accumulator"))
        one_of(self.decay, DECAYS, join(prefix, "decay"))
        one_of(self.on_nan, ("stop", "skip"), join(prefix, "on_nan"))
        if checking_requests():  # not when a model directory's own config is read back
            only_with(self, prefix, ONLY_WITH)
        positive(self.decay_start_step, join(prefix, "decay_start_step"), allow_zero=True)
        if self.decay == "rnmt" and self.decay_end_step <= self.decay_start_step:
            raise ConfigError(
                f"`{join(prefix, 'decay')}: rnmt` needs `{join(prefix, 'decay_end_step')}` "
                f"> decay_start_step, got {self.decay_end_step} and {self.decay_start_step}")
        positive(self.decay_steps, join(prefix, "decay_steps"))
        if not 0 < self.decay_rate <= 1:
            raise ConfigError(f"`{join(prefix, 'decay_rate')}` must be in (0, 1]")
        if not 0 <= self.final_learning_rate_fraction <= 1:
            raise ConfigError(
                f"`{join(prefix, 'final_learning_rate_fraction')}` must be in [0, 1]")
        if not self.epochs and checking_requests():  # else `steps` comes from the epochs
            self.validate_steps(prefix)

    def validate_steps(self, prefix):
        """Checks the keys that depend on `steps`, at load or once `train.epochs` has set it."""
        if self.decay == "rnmt" and self.decay_start_step >= self.steps:
            budget = (f"the {self.steps:,} steps that `{join(prefix, 'epochs')}: "
                      f"{self.epochs:g}` comes to" if self.epochs
                      else f"`{join(prefix, 'steps')}` ({self.steps:,})")
            raise ConfigError(
                f"`{join(prefix, 'decay_start_step')}` ({self.decay_start_step:,}) is not "
                f"before {budget}: the rnmt decay would never start")


def check_rnmt_batch(train, data, prefix):
    """Refuses `decay: rnmt` with a batch below `base_batch_size` (its warmup would fall)."""
    if train.decay == "rnmt" and data.batch_size < train.base_batch_size:
        raise ConfigError(
            f"`{join(prefix, 'train.decay')}: rnmt` needs `data.batch_size` >= "
            f"`train.base_batch_size` (its warmup rises from learning_rate to learning_rate x "
            f"batch_size / base_batch_size), got {data.batch_size} < {train.base_batch_size}: "
            "lower train.base_batch_size with the batch")
