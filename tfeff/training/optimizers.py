"""Optimizer and learning-rate schedule factories (Keras 3 built-ins, no tensorflow-addons)."""

import math

import keras
import tensorflow as tf
from keras import ops

from tfeff.config.train import DECAYS


@keras.saving.register_keras_serializable(package="tfeff")
class WarmupDecay(keras.optimizers.schedules.LearningRateSchedule):
    """Linear warmup, then cosine, linear, exponential or no decay; or the RNMT+ schedule.

    Args:
        peak_learning_rate: rate reached at the end of warmup.
        warmup_steps: steps of linear warmup (step s: `peak * (s + 1) / warmup_steps`); 0: none.
        total_steps: the last step; decay ends there.
        decay: `"cosine"`, `"linear"`, `"exponential"`, `"constant"` or `"rnmt"`.
        final_fraction: the rate at `total_steps` is `peak * final_fraction` (exponential: floor).
        decay_rate: `"exponential"`: the rate after warmup is
            `peak * decay_rate ** ((step - warmup_steps) / decay_steps)` (Masked ELMo: 0.95).
        decay_steps: `"exponential"`: see `decay_rate`.
        decay_start: `"rnmt"`: s, the step its exponential decay starts at.
        decay_end: `"rnmt"`: e > s, the step the rate reaches its floor.
        replicas: `"rnmt"`: n, the peak over the base rate (Chen et al.: the number of
            replicas; tfeff: `batch_size / base_batch_size`).

    `"rnmt"` is the schedule of Chen et al. (2018, RNMT+) as Li et al. (2019, ELMo-C)
    train with it (their code counts the decay in steps): with base = peak / n,
    p = `warmup_steps` and t the step, up to e (and base / 2 from e on),

        rate(t) = base * min(1 + t (n - 1) / p,  n,  n (2n) ** ((s - t) / (e - s)))

    Raises:
        ValueError: `decay` is unknown, or `"rnmt"` without 0 <= decay_start < decay_end
            and replicas >= 1.
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
        return {name: getattr(self, name) for name in (
            "peak_learning_rate", "warmup_steps", "total_steps", "decay", "final_fraction",
            "decay_rate", "decay_steps", "decay_start", "decay_end", "replicas")}


def sum_duplicate_indices(slices):
    """`tf.IndexedSlices` with each index once, its rows summed.

    A gather's gradient lists a row once per occurrence, and Keras' updates square the
    gradient: without the sum, Adam's and Adagrad's second moments (and a clipping
    norm) would add the parts' squares, not the square of their sum (TensorFlow's v1
    optimizers sum duplicates first too).
    """
    unique, positions = tf.unique(slices.indices)
    values = tf.math.unsorted_segment_sum(slices.values, positions, tf.shape(unique)[0])
    return tf.IndexedSlices(values, unique, slices.dense_shape)


class SkipNonFiniteUpdates:
    """Optimizer mixin: an update whose gradients are not all finite is not applied.

    The replicas agree (one non-finite replica skips the update everywhere). A skipped
    update changes nothing but the checkpointed `non_finite_steps` (incremented) and
    `last_non_finite_step` (the step it would have been), which `train.on_nan` reads.
    The condition sits inside each variable's update (and weight decay), not around
    `apply`: MultiWorkerMirroredStrategy's `merge_call` cannot run inside a `tf.cond`.
    Gradients are summed over replicas (and duplicate sparse indices summed) *before*
    clipping, so that `global_clipnorm` sees the global batch's gradient.
    """

    _skip_update = None
    _reduced = False

    def build(self, variables):
        super().build(variables)
        for name in ("non_finite_steps", "last_non_finite_step"):
            setattr(self, name, self.add_variable(
                (), initializer="zeros", dtype="int64", aggregation="only_first_replica",
                name=name))

    def apply(self, grads, trainable_variables=None):
        grads = list(grads)
        ctx = tf.distribute.get_replica_context()
        reduce_here = ctx is not None and ctx.num_replicas_in_sync > 1
        if reduce_here:  # every replica then checks (and clips) the same sums
            present = [i for i, g in enumerate(grads) if g is not None]
            for i, g in zip(present, ctx.all_reduce(tf.distribute.ReduceOp.SUM,
                                                    [grads[i] for i in present])):
                grads[i] = g
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

    Keras divides by `sqrt(a + epsilon)`, bilm-tf's `tf.compat.v1.train.AdagradOptimizer`
    by `sqrt(a)`: a relative difference below `epsilon / (2 a)` (5e-8 at its initial 1.0).
    """


class LossScaleOptimizer(keras.optimizers.LossScaleOptimizer):
    """Keras' dynamic loss scaling (`mixed_float16`) around a `SkipNonFiniteUpdates` optimizer.

    A non-finite gradient halves the scale and skips the update, as in Keras, but the
    scale stops at 1, where a non-finite gradient goes to the inner optimizer, which
    counts it for `train.on_nan`: a diverging run stops after about 15 skipped batches
    (from 2**15) instead of skipping forever.
    """

    def check_finite(self, grads):
        finite = super().check_finite(grads)
        return ops.logical_or(finite, ops.less_equal(self.dynamic_scale, 1.0))

    def _stateful_handle_non_finite_grads(self):
        self.step_counter.assign(0)
        self.dynamic_scale.assign(ops.maximum(ops.multiply(self.dynamic_scale, 0.5), 1.0))

    non_finite_steps = property(lambda self: self.inner_optimizer.non_finite_steps)
    last_non_finite_step = property(lambda self: self.inner_optimizer.last_non_finite_step)


def make_optimizer(train_config, global_batch_size):
    """The optimizer of a run's `train` section.

    Adam (AdamW with `train.weight_decay`) or Adagrad (`train.optimizer`), with
    `WarmupDecay`, the rate scaled linearly with the batch size, global-norm clipping
    (`train.clipnorm`, 0 disables) and `SkipNonFiniteUpdates`; `LossScaleOptimizer`
    around it with `train.precision: mixed_float16`.

    Args:
        train_config: the `train` section (`tfeff.config.TrainConfig`).
        global_batch_size: the batch of one step over all replicas; the peak rate is
            `learning_rate * global_batch_size / base_batch_size`.

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
        peak, train_config.warmup_steps, train_config.steps, decay=train_config.decay,
        final_fraction=train_config.final_learning_rate_fraction,
        decay_rate=train_config.decay_rate, decay_steps=train_config.decay_steps,
        decay_start=train_config.decay_start_step, decay_end=train_config.decay_end_step,
        replicas=global_batch_size / train_config.base_batch_size)
    # Fixed names: the checkpoint keys must not depend on how many optimizers were made.
    common = dict(learning_rate=schedule, global_clipnorm=train_config.clipnorm or None)
    if getattr(train_config, "optimizer", "adam") == "adagrad":
        return Adagrad(initial_accumulator_value=train_config.adagrad_initial_accumulator,
                       name="adagrad", **common)
    weight_decay = getattr(train_config, "weight_decay", 0.0)
    epsilon = getattr(train_config, "adam_epsilon", 0.0)
    if weight_decay:
        optimizer = AdamW(weight_decay=weight_decay, epsilon=epsilon or 1e-6, name="adamw",
                          **common)
        # As BERT: no decay of biases and layer-norm parameters.
        optimizer.exclude_from_weight_decay(var_names=["bias", "gamma", "beta"])
        return optimizer
    return Adam(epsilon=epsilon or 1e-7, name="adam", **common)
