"""The `train` section every family shares: optimization, schedule, checkpoints, precision."""

import dataclasses
from typing import Union

from tfeff.config.base import ConfigError
from tfeff.config.base import join
from tfeff.config.base import one_of
from tfeff.config.base import checking_requests
from tfeff.config.base import only_with
from tfeff.config.base import positive
from tfeff.config.base import seed_range
from tfeff.config.base import shown

# Keras dtype policies a run may train under (`train.precision`).
PRECISIONS = ("float32", "mixed_bfloat16", "mixed_float16")
# The optimizers a run may train with (`train.optimizer`).
OPTIMIZERS = ("adam", "adagrad")
# The learning-rate schedules (`train.decay`).
DECAYS = ("cosine", "linear", "exponential", "constant", "rnmt")
# Keys that apply to one choice of another key only: under any other choice they must
# keep their default (`tfeff.config.base.only_with`), or they would be silently ignored.
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

    `optimizer` is `adam` (the default; `weight_decay` > 0 selects AdamW:
    decoupled decay, not applied to biases, layer norms or embeddings'
    bias-like vectors; BERT uses 0.01) or `adagrad` (Duchi et al.'s, as ELMo
    trains: Peters et al.'s bilm-tf uses a rate of 0.2 and accumulators
    starting at 1.0).

    `precision` is the Keras dtype policy of the model: `float32`,
    `mixed_bfloat16` or `mixed_float16` (with dynamic loss scaling). Weights
    stay float32 either way; losses, softmax normalizers and layer norms are
    computed in float32. It is part of the run: a directory with a checkpoint
    refuses another precision. `jit_compile` compiles the training step with
    XLA: `true` (an error at startup naming the layer when a layer of the
    model cannot be compiled), `auto` (compile unless a layer cannot) or
    `false`; it may change on resume.

    A key that applies to one choice of another only (`decay_rate` and
    `decay_steps` to `decay: exponential`; `decay_start_step` and
    `decay_end_step` to `rnmt`; `final_learning_rate_fraction` to `cosine`,
    `linear` and `exponential`; `adagrad_initial_accumulator` to `adagrad`;
    `weight_decay` and `adam_epsilon` to `adam`; `tfeff.config.train.ONLY_WITH`)
    keeps its default under the other choices: a value there would have no
    effect and is refused, naming the key. So is an `rnmt` decay that starts
    at or after `steps`.

    Args:
        steps: the step training ends at (unless `epochs` is set).
        epochs: the training budget in passes over the training corpus (ELMo,
            transformer LM and Masked ELMo families): > 0 sets `steps` from
            the windows of one pass (ELMo and transformer LMs: counted once,
            kept in the model directory; Masked ELMo: its documents' windows,
            `tfeff.data.masked_elmo_dataset.epoch_windows`) in batches of
            `data.batch_size`, rounded up, and the progress lines show the
            epoch; 0 keeps `steps`.
        learning_rate: the peak learning rate at `base_batch_size` (scaled
            linearly with `data.batch_size`).
        base_batch_size: the batch size `learning_rate` is given for.
        warmup_steps: steps of linear warmup (0 for none).
        decay: `cosine`, `linear`, `exponential`, `constant` or `rnmt`
            (Chen et al.'s RNMT+ schedule as Li et al. train ELMo-C: from
            `learning_rate` up to the peak over the warmup, held until
            `decay_start_step`, then exponential decay to half of
            `learning_rate` at `decay_end_step`; see
            `tfeff.training.WarmupDecay`).
        final_learning_rate_fraction: the rate at `steps` is the peak times
            this, in [0, 1] (`exponential`: the floor).
        decay_rate: `exponential`: the factor, in (0, 1], applied every
            `decay_steps` steps.
        decay_steps: `exponential`: the steps per `decay_rate` factor.
        decay_start_step: `rnmt`: the step its decay starts at, before
            `steps` (with `epochs`, checked once the steps are counted).
        decay_end_step: `rnmt`: the step its decay ends at (> the start).
        clipnorm: global-norm gradient clipping; 0 disables it.
        optimizer: `adam` or `adagrad` (see above).
        adagrad_initial_accumulator: `adagrad`: the value its accumulators of
            squared gradients start at, > 0 (Keras' and TensorFlow's 0.1;
            ELMo's bilm-tf 1.0).
        weight_decay: AdamW's decoupled weight decay; 0 selects Adam
            (`optimizer: adam` only).
        adam_epsilon: Adam's epsilon; 0: Keras' 1e-7 for Adam, BERT's 1e-6 for
            AdamW (`optimizer: adam` only).
        checkpoint_every: steps between checkpoints (also Keras' epoch length,
            the validation interval).
        keep_checkpoints: checkpoints kept.
        log_every: steps between log lines and TensorBoard scalars.
        validation_steps: held-out batches per validation during training,
            at every checkpoint (runs with held-out files); 0 disables it.
        steps_per_execution: steps run per call of the compiled train
            function (Keras' `steps_per_execution`).
        seed: the run's seed (initializers, dropout, shuffling, masks), in
            [0, 2**32 - 1].
        on_nan: a step with NaN/Inf loss or gradients: `stop` (raise, naming
            the step; nothing applied or saved) or `skip` (drop the update,
            log it and go on).
        deterministic: TensorFlow's op determinism: bit-identical reruns and
            resumes on CPU (some GPU kernels are slower or refused).
        precision: `float32`, `mixed_bfloat16` or `mixed_float16` (see above).
        jit_compile: `true`, `false` or `auto` (see above); `true` is refused
            with `deterministic`.
    """

    steps: int = 10000
    epochs: float = 0.0
    learning_rate: float = 1e-3
    base_batch_size: int = 128
    warmup_steps: int = 200
    decay: str = "cosine"
    final_learning_rate_fraction: float = 0.1
    # decay: exponential multiplies the rate by decay_rate every decay_steps steps.
    decay_rate: float = 0.95
    decay_steps: int = 1000
    # decay: rnmt decays exponentially from decay_start_step to decay_end_step.
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
    # A step whose loss or gradients are NaN/Inf: "stop" (raise, naming the step;
    # the update is not applied and no checkpoint is written) or "skip" (drop the
    # update, log it and go on). Either way the weights stay finite.
    on_nan: str = "stop"
    # tf.config.experimental.enable_op_determinism(): bit-identical reruns and
    # resumes on CPU (some GPU kernels are slower or refused when it is on).
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
        for name in ("steps", "learning_rate", "base_batch_size", "checkpoint_every",
                     "keep_checkpoints", "log_every", "steps_per_execution"):
            positive(getattr(self, name), join(prefix, name))
        positive(self.warmup_steps, join(prefix, "warmup_steps"), allow_zero=True)
        positive(self.epochs, join(prefix, "epochs"), allow_zero=True)
        positive(self.validation_steps, join(prefix, "validation_steps"), allow_zero=True)
        positive(self.clipnorm, join(prefix, "clipnorm"), allow_zero=True)
        positive(self.weight_decay, join(prefix, "weight_decay"), allow_zero=True)
        positive(self.adam_epsilon, join(prefix, "adam_epsilon"), allow_zero=True)
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
            raise ConfigError(f"`{join(prefix, 'final_learning_rate_fraction')}` must be in [0, 1]")
        if not self.epochs and checking_requests():  # else `steps` comes from the epochs
            self.validate_steps(prefix)

    def validate_steps(self, prefix):
        """Checks the keys that depend on `steps`: at load, or once `train.epochs` has
        set `steps` (`tfeff.training.families.base.steps_from_epochs`)."""
        if self.decay == "rnmt" and self.decay_start_step >= self.steps:
            budget = (f"the {self.steps:,} steps that `{join(prefix, 'epochs')}: "
                      f"{self.epochs:g}` comes to" if self.epochs
                      else f"`{join(prefix, 'steps')}` ({self.steps:,})")
            raise ConfigError(
                f"`{join(prefix, 'decay_start_step')}` ({self.decay_start_step:,}) is not "
                f"before {budget}: the rnmt decay would never start")


def check_rnmt_batch(train, data, prefix):
    """`train.decay: rnmt` rises from `learning_rate` to its peak, `learning_rate *
    batch_size / base_batch_size`: a batch below `base_batch_size` would fall instead."""
    if train.decay == "rnmt" and data.batch_size < train.base_batch_size:
        raise ConfigError(
            f"`{join(prefix, 'train.decay')}: rnmt` needs `data.batch_size` >= "
            f"`train.base_batch_size` (its warmup rises from learning_rate to learning_rate x "
            f"batch_size / base_batch_size), got {data.batch_size} < {train.base_batch_size}: "
            "lower train.base_batch_size with the batch")
