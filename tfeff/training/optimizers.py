"""Optimizer and learning-rate schedule factories (Keras 3 built-ins, no tensorflow-addons)."""

import math

import keras
import tensorflow as tf
from keras import ops

from tfeff.config.train import DECAYS


@keras.saving.register_keras_serializable(package="tfeff")
class WarmupDecay(keras.optimizers.schedules.LearningRateSchedule):
    """Linear warmup to `peak_learning_rate`, then cosine, linear, exponential or no decay;
    or the RNMT+ schedule.

    Args:
        peak_learning_rate: rate reached at the end of warmup.
        warmup_steps: steps of linear warmup (the rate at step s below it is
            `peak_learning_rate * (s + 1) / warmup_steps`); 0 for none.
        total_steps: the last step; decay ends there.
        decay: `"cosine"`, `"linear"`, `"exponential"`, `"constant"` or
            `"rnmt"` (below).
        final_fraction: the rate at `total_steps` is `peak * final_fraction`
            (`"exponential"`: the rate never goes below it).
        decay_rate: `"exponential"`: the rate is multiplied by `decay_rate`
            every `decay_steps` steps after warmup, smoothly:
            `peak * decay_rate ** ((step - warmup_steps) / decay_steps)`
            (Masked ELMo: 0.95).
        decay_steps: `"exponential"`: the steps over which the rate is
            multiplied by `decay_rate` once (see `decay_rate`).
        decay_start: `"rnmt"`: s, the step its exponential decay starts at.
        decay_end: `"rnmt"`: e > s, the step the rate reaches its floor.
        replicas: `"rnmt"`: n, the factor by which the peak exceeds the base
            rate (Chen et al.: the number of replicas; tfeff:
            `batch_size / base_batch_size`).

    `"rnmt"` is the schedule of Chen et al. (2018, RNMT+) as Li et al. (2019,
    ELMo-C) train with it (their released code counts the decay in steps):
    with base = peak / n, p = `warmup_steps` and t the step,

        rate(t) = base * min(1 + t (n - 1) / p,  n,  n (2n) ** ((s - t) / (e - s)))

    up to e and base / 2 from e on: from the base rate up to the peak over the
    warmup, held until s, then decaying exponentially to half the base rate
    at e. `total_steps` and `final_fraction` do not enter it.

    Raises:
        ValueError: `decay` is unknown, or `"rnmt"` without
            0 <= decay_start < decay_end or with replicas below 1.
    """

    def __init__(self, peak_learning_rate, warmup_steps, total_steps, decay="cosine",
                 final_fraction=0.1, decay_rate=0.95, decay_steps=1000, decay_start=0,
                 decay_end=0, replicas=1.0):
        if decay not in DECAYS:
            raise ValueError(f"Unknown decay {decay!r}")
        if decay == "rnmt" and not (0 <= decay_start < decay_end and replicas >= 1):
            raise ValueError(
                "decay='rnmt' needs 0 <= decay_start < decay_end and replicas >= 1 (its "
                "warmup rises from the base rate to `replicas` times it). Received: "
                f"decay_start={decay_start}, decay_end={decay_end}, replicas={replicas}")
        self.decay_start = int(decay_start)
        self.decay_end = int(decay_end)
        self.replicas = float(replicas)
        self.decay_rate = float(decay_rate)
        self.decay_steps = int(decay_steps)
        self.peak_learning_rate = float(peak_learning_rate)
        self.warmup_steps = int(warmup_steps)
        self.total_steps = int(total_steps)
        self.decay = decay
        self.final_fraction = float(final_fraction)

    def __call__(self, step):
        step = ops.cast(step, "float32")
        if self.decay == "rnmt":
            return self._rnmt(step)
        peak = self.peak_learning_rate
        warmup = float(max(self.warmup_steps, 0))
        warm = peak * (step + 1.0) / max(warmup, 1.0)
        span = float(max(self.total_steps - self.warmup_steps, 1))
        progress = ops.clip((step - warmup) / span, 0.0, 1.0)
        floor = peak * self.final_fraction
        if self.decay == "cosine":
            decayed = floor + (peak - floor) * 0.5 * (1.0 + ops.cos(math.pi * progress))
        elif self.decay == "linear":
            decayed = peak - (peak - floor) * progress
        elif self.decay == "exponential":
            periods = ops.maximum(step - warmup, 0.0) / float(max(self.decay_steps, 1))
            decayed = ops.maximum(peak * self.decay_rate ** periods, floor)
        else:
            decayed = ops.full_like(progress, peak)
        return ops.where(step < warmup, warm, decayed)

    def _rnmt(self, step):
        n = self.replicas
        base = self.peak_learning_rate / n
        s, e = float(self.decay_start), float(self.decay_end)
        warm = 1.0 + step * (n - 1.0) / float(max(self.warmup_steps, 1))
        decayed = n * ops.exp(math.log(2.0 * n) * (s - step) / (e - s))
        rate = base * ops.minimum(ops.minimum(warm, n), decayed)
        return ops.where(step < e, rate, base / 2.0)

    def get_config(self):
        return {
            "peak_learning_rate": self.peak_learning_rate,
            "warmup_steps": self.warmup_steps,
            "total_steps": self.total_steps,
            "decay": self.decay,
            "final_fraction": self.final_fraction,
            "decay_rate": self.decay_rate,
            "decay_steps": self.decay_steps,
            "decay_start": self.decay_start,
            "decay_end": self.decay_end,
            "replicas": self.replicas,
        }


def sum_duplicate_indices(slices):
    """`tf.IndexedSlices` with each index once, its rows summed.

    The gradient of a gather (an embedding lookup, a sampled softmax's rows) lists a
    row once per occurrence. Keras' updates square the gradient before adding it to
    a dense slot, so a row met k times would add the sum of its parts' squares where
    the gradient's square is the square of their sum: Adam's and Adagrad's second
    moments would be wrong (TensorFlow's own v1 optimizers sum duplicates first,
    as this does), and a global norm for clipping taken over the parts would not be
    the gradient's.
    """
    unique, positions = tf.unique(slices.indices)
    values = tf.math.unsorted_segment_sum(slices.values, positions, tf.shape(unique)[0])
    return tf.IndexedSlices(values, unique, slices.dense_shape)


class SkipNonFiniteUpdates:
    """Optimizer mixin: an update whose gradients are not all finite is not applied.

    The check runs after the loss and gradients are computed and before any
    variable changes; under `tf.distribute` the replicas agree (one non-finite
    replica skips the update everywhere), so their weights never diverge. A
    skipped update leaves the weights, the moments and `iterations` unchanged
    and increments `non_finite_steps`; `last_non_finite_step` is the step
    (`iterations + 1`) the update would have been. Both are optimizer variables,
    so they are checkpointed. `tfeff.training.callbacks.NonFiniteCallback`
    reads them to stop training or report the skip (`train.on_nan`).

    The condition sits inside each variable's update (and weight decay), not
    around `apply`: strategies that synchronize through `merge_call`
    (MultiWorkerMirroredStrategy) cannot run one inside a `tf.cond`.

    A sparse gradient (`tf.IndexedSlices`) is clipped and applied as its dense
    equivalent: duplicate indices are summed first (`sum_duplicate_indices`).

    Under `tf.distribute` the gradients are summed over replicas *before*
    clipping (`global_clipnorm` then sees the global batch's gradient, as on
    one device; Keras alone clips each replica's share by its own norm).
    """

    _skip_update = None
    _reduced = False

    def build(self, variables):
        super().build(variables)
        self.non_finite_steps = self.add_variable(
            (), initializer="zeros", dtype="int64", aggregation="only_first_replica",
            name="non_finite_steps")
        self.last_non_finite_step = self.add_variable(
            (), initializer="zeros", dtype="int64", aggregation="only_first_replica",
            name="last_non_finite_step")

    def apply(self, grads, trainable_variables=None):
        grads = list(grads)
        ctx = tf.distribute.get_replica_context()
        reduce_here = ctx is not None and ctx.num_replicas_in_sync > 1
        if reduce_here:
            # Sum the replicas' gradients first (Keras would clip each replica's
            # own gradients by their own norm before summing: not the global
            # batch's clipping), and check the sums: every replica sees the same.
            present = [i for i, g in enumerate(grads) if g is not None]
            for i, g in zip(present, ctx.all_reduce(tf.distribute.ReduceOp.SUM,
                                                    [grads[i] for i in present])):
                grads[i] = g
        # Before clipping: the global norm of a gradient with repeated rows is that of
        # their sums, not of their parts.
        grads = [sum_duplicate_indices(g) if isinstance(g, tf.IndexedSlices) else g
                 for g in grads]
        checks = [tf.reduce_all(tf.math.is_finite(
            g.values if isinstance(g, tf.IndexedSlices) else g)) for g in grads if g is not None]
        skip = tf.logical_not(tf.reduce_all(tf.stack(checks))) if checks else tf.constant(False)
        self._skip_update, self._reduced = skip, reduce_here
        try:
            super().apply(grads, trainable_variables)
        finally:
            self._skip_update, self._reduced = None, False
        skipped = tf.cast(skip, tf.int64)
        self._iterations.assign_sub(skipped)  # apply counted it
        self.last_non_finite_step.assign(tf.where(
            skip, tf.cast(self._iterations, tf.int64) + 1, self.last_non_finite_step))
        self.non_finite_steps.assign_add(skipped)

    def _all_reduce_sum_gradients(self, grads_and_vars):
        if self._reduced:
            return list(grads_and_vars)
        return super()._all_reduce_sum_gradients(grads_and_vars)

    def update_step(self, gradient, variable, learning_rate):
        skip = self._skip_update
        if skip is None:
            return super().update_step(gradient, variable, learning_rate)

        def update():
            super(SkipNonFiniteUpdates, self).update_step(gradient, variable, learning_rate)

        tf.cond(skip, lambda: None, update)

    def _apply_weight_decay(self, variables):
        skip = self._skip_update
        if skip is None or self.weight_decay is None:
            return super()._apply_weight_decay(variables)

        def decay(variable):
            if self._use_weight_decay(variable):
                lr = tf.cast(self.learning_rate, variable.dtype)
                wd = tf.cast(self.weight_decay, variable.dtype)
                tf.cond(skip, lambda: None,
                        lambda: [variable.assign_sub(variable * wd * lr)] and None)

        def distributed(distribution, variables):
            for variable in variables:
                if isinstance(variable, keras.Variable):
                    variable = variable.value
                distribution.extended.update(variable, decay, group=False)

        tf.__internal__.distribute.interim.maybe_merge_call(
            distributed, self._distribution_strategy, variables)


class Adam(SkipNonFiniteUpdates, keras.optimizers.Adam):
    """`keras.optimizers.Adam` that skips non-finite updates (`SkipNonFiniteUpdates`)."""


class AdamW(SkipNonFiniteUpdates, keras.optimizers.AdamW):
    """`keras.optimizers.AdamW` that skips non-finite updates (`SkipNonFiniteUpdates`)."""


class Adagrad(SkipNonFiniteUpdates, keras.optimizers.Adagrad):
    """`keras.optimizers.Adagrad` that skips non-finite updates (`SkipNonFiniteUpdates`).

    Keras' update is Duchi et al.'s, `a += g**2; w -= lr * g / sqrt(a + epsilon)`,
    with the accumulator `a` starting at `initial_accumulator_value`; TensorFlow's
    `tf.compat.v1.train.AdagradOptimizer` (which ELMo's bilm-tf uses) divides by
    `sqrt(a)`, a relative difference below `epsilon / (2 a)` (5e-8 at bilm-tf's
    initial 1.0).
    """


class LossScaleOptimizer(keras.optimizers.LossScaleOptimizer):
    """Keras' dynamic loss scaling (`mixed_float16`) around a `SkipNonFiniteUpdates` optimizer.

    A non-finite gradient first means the loss scale overflowed float16: the
    update is skipped and the scale halved, as in Keras. The scale never goes
    below 1, and at 1 a non-finite gradient is not an overflow: it is passed to
    the inner optimizer, which skips and counts it (`non_finite_steps`,
    `last_non_finite_step`, read by `train.on_nan`). A diverging run therefore
    stops (or is reported) after the scale has come down, about 15 skipped
    batches from the initial 2**15, instead of skipping forever.
    """

    def check_finite(self, grads):
        finite = super().check_finite(grads)
        return ops.logical_or(finite, ops.less_equal(self.dynamic_scale, 1.0))

    def _stateful_handle_non_finite_grads(self):
        self.step_counter.assign(0)
        self.dynamic_scale.assign(ops.maximum(ops.multiply(self.dynamic_scale, 0.5), 1.0))

    @property
    def non_finite_steps(self):
        return self.inner_optimizer.non_finite_steps

    @property
    def last_non_finite_step(self):
        return self.inner_optimizer.last_non_finite_step


def make_optimizer(train_config, global_batch_size):
    """The optimizer of a run's `train` section.

    Adam (AdamW with `train.weight_decay`), or Adagrad (`train.optimizer`),
    with warmup/decay (`WarmupDecay`), the rate scaled linearly with the batch
    size, and global-norm gradient clipping (`train.clipnorm`, 0 disables). Updates with NaN/Inf gradients
    are skipped (`SkipNonFiniteUpdates`). With `train.precision:
    mixed_float16` it is wrapped in `LossScaleOptimizer` (whose scale is
    checkpointed with it).

    Args:
        train_config: the `train` section (`tfeff.config.TrainConfig`).
        global_batch_size: the batch size of one step over all replicas; the
            peak rate is `learning_rate * global_batch_size / base_batch_size`.

    Returns:
        The Keras optimizer.
    """
    optimizer = _inner_optimizer(train_config, global_batch_size)
    if getattr(train_config, "precision", "float32") == "mixed_float16":
        return LossScaleOptimizer(optimizer, name="loss_scale_optimizer")
    return optimizer


def _inner_optimizer(train_config, global_batch_size):
    peak = train_config.learning_rate * global_batch_size / train_config.base_batch_size
    schedule = WarmupDecay(
        peak,
        train_config.warmup_steps,
        train_config.steps,
        decay=train_config.decay,
        final_fraction=train_config.final_learning_rate_fraction,
        decay_rate=train_config.decay_rate,
        decay_steps=train_config.decay_steps,
        decay_start=train_config.decay_start_step,
        decay_end=train_config.decay_end_step,
        replicas=global_batch_size / train_config.base_batch_size,
    )
    if getattr(train_config, "optimizer", "adam") == "adagrad":
        return Adagrad(
            learning_rate=schedule,
            initial_accumulator_value=train_config.adagrad_initial_accumulator,
            global_clipnorm=train_config.clipnorm or None,
            name="adagrad",
        )
    weight_decay = getattr(train_config, "weight_decay", 0.0)
    epsilon = getattr(train_config, "adam_epsilon", 0.0)
    if weight_decay:
        optimizer = AdamW(
            learning_rate=schedule, weight_decay=weight_decay, epsilon=epsilon or 1e-6,
            global_clipnorm=train_config.clipnorm or None, name="adamw",
        )
        # As BERT: no decay of biases and layer-norm parameters.
        optimizer.exclude_from_weight_decay(var_names=["bias", "gamma", "beta"])
        return optimizer
    # A fixed name: optimizer variable paths (the checkpoint keys) must not
    # depend on how many optimizers this process has created.
    return Adam(
        learning_rate=schedule,
        epsilon=epsilon or 1e-7,
        global_clipnorm=train_config.clipnorm or None,
        name="adam",
    )
