"""CoRe's two phases against standard BERT training, from NumPy arrays, without TensorFlow.

`benchmarks/core_study.py` measures CoRe's claim with `tfeff-pretrain`, which needs
TensorFlow for its data pipeline. This module trains the same two schedules
with Keras `fit` on NumPy batches, on whichever backend Keras runs (JAX on a
GPU machine), from the arrays `tools/mlm_arrays.py` writes:

    standard    tfeff `Bert` for `steps` steps
    two-phase   the relaxed `Bert` (anchor attention, factorized FFNs) for
                `switch` steps, merged into a standard `Bert` with
                `merge_relaxed_bert` (its float32 output check included), then
                the standard model to `steps`, with a fresh optimizer whose
                schedule goes on from `switch` (as `tfeff-pretrain` switches)

Both see the same batches in the same order (windows shuffled per epoch from
the seed, a new 80/10/10 mask per step, drawn from the seed and the step), the
same AdamW schedule (linear warmup, cosine decay to a tenth) and the same
held-out set (the arrays' fixed masks). Every `every` steps the held-out
masked-LM loss is evaluated (the relaxed model's with exact attention, as
the standard model it merges into, as `benchmarks/core_study.py` does); the
evaluation's time is left out of the wall
time, which counts from the first step (its compilation included), and so
includes the switch's merge and the second compilation. A run also stops at
its first evaluation past `budget_s` seconds of training, so that it ends
inside a job's time limit; the two-phase run is then given the standard run's
steps.
"""

import json
import math
import statistics
import time

import numpy as np

from benchmarks import harness


def load_arrays(path):
    """The arrays file as a dict: `train` `(windows, n)`, `heldout` (a dict of the
    masked held-out batch arrays), `vocabulary_size`, `max_predictions_per_seq`,
    `special_ids` and `source`."""
    with np.load(path) as f:
        data = {k: f[k] for k in f.files}
    return {"train": data["train"].astype(np.int32),
            "heldout": {k[len("heldout_"):]: v for k, v in data.items()
                        if k.startswith("heldout_")},
            "vocabulary_size": int(data["vocabulary_size"]),
            "max_predictions_per_seq": int(data["max_predictions_per_seq"]),
            "special_ids": json.loads(str(data["special_ids"])),
            "source": json.loads(str(data["source"]))}


def mask_windows(ids, rng, max_predictions_per_seq, vocabulary_size, special_ids,
                 mask_rate=0.15, mask_token_rate=0.8, random_token_rate=0.1):
    """BERT's masking of a batch of right-padded windows, as `tfeff.data.mlm_dataset`
    does it: `ceil(mask_rate * m)` of a window's m ordinary tokens (at most
    `max_predictions_per_seq`), each replaced by `[MASK]` (80%), a random id of
    `[0, vocabulary_size)` (10%) or kept (10%).

    Returns the dict `tfeff.models.Bert` trains on: int32 `token_ids`,
    `segment_ids` (zeros), `padding_mask`, `masked_positions`, `masked_ids` and
    float32 `masked_weights` (0 at the unused prediction slots).
    """
    ids = np.asarray(ids, np.int32)
    batch, n = ids.shape
    p = max_predictions_per_seq
    ordinary = ((ids != special_ids["pad"]) & (ids != special_ids["cls"])
                & (ids != special_ids["sep"]))
    counts = np.minimum(p, np.ceil(mask_rate * ordinary.sum(1) - 1e-9).astype(np.int64))
    keys = np.where(ordinary, rng.random((batch, n)), 2.0)  # specials sort last
    positions = np.argsort(keys, axis=1, kind="stable")[:, :p]
    valid = np.arange(p)[None, :] < counts[:, None]
    targets = np.take_along_axis(ids, positions, 1)
    draw = rng.random((batch, p))
    replaced = np.where(draw < mask_token_rate, special_ids["mask"],
                        np.where(draw < mask_token_rate + random_token_rate,
                                 rng.integers(0, vocabulary_size, (batch, p)), targets))
    inputs = ids.copy()
    np.put_along_axis(inputs, positions, np.where(valid, replaced, targets), 1)
    return {"token_ids": inputs, "segment_ids": np.zeros_like(ids),
            "padding_mask": (ids != special_ids["pad"]).astype(np.int32),
            "masked_positions": np.where(valid, positions, 0).astype(np.int32),
            "masked_ids": np.where(valid, targets, 0).astype(np.int32),
            "masked_weights": valid.astype(np.float32)}


def batches(arrays, batch_size, seed=0, start_step=0):
    """Training batches forever from step `start_step`, each as Keras takes a
    generator's `(inputs,)`: batch t of epoch e takes the windows of the permutation
    drawn from `(seed, e)`, masked by `(seed, 1, t)`."""
    train = arrays["train"]
    per_epoch = len(train) // batch_size
    if per_epoch == 0:
        raise ValueError(f"{len(train)} training windows make no batch of {batch_size}")
    step = start_step
    while True:
        epoch, index = divmod(step, per_epoch)
        order = np.random.default_rng([seed, epoch]).permutation(len(train))
        rows = order[index * batch_size:(index + 1) * batch_size]
        yield (mask_windows(train[rows], np.random.default_rng([seed, 1, step]),
                            arrays["max_predictions_per_seq"], arrays["vocabulary_size"],
                            arrays["special_ids"]),)
        step += 1


def first_reach(points, target):
    """Seconds at which the curve `[{seconds, loss}]` first reaches `target` (linear
    between points), or None."""
    for a, b in zip(points, points[1:]):
        if b["loss"] <= target:
            if a["loss"] <= target:
                return a["seconds"]
            frac = (a["loss"] - target) / (a["loss"] - b["loss"])
            return a["seconds"] + frac * (b["seconds"] - a["seconds"])
    return points[0]["seconds"] if points and points[0]["loss"] <= target else None


def plot(path, curves, switch_seconds, target, title):
    """Both held-out curves against wall time in one PNG (False without matplotlib)."""
    plt = harness.pyplot()
    if plt is None:
        return False
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for label, points in curves.items():
        ax.plot([p["seconds"] for p in points], [p["loss"] for p in points], marker="o",
                markersize=3, label=label)
    ax.axhline(target, color="gray", linewidth=0.8, label="standard's final loss")
    if switch_seconds is not None:
        ax.axvline(switch_seconds, color="gray", linestyle=":", label="switch")
    ax.set_xlabel("wall time of training (s)")
    ax.set_ylabel("held-out masked-LM loss")
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


class _Clock:
    """Training seconds: wall time since `start()`, less the time spent paused."""

    def __init__(self):
        self.began, self.paused, self.pause_began = None, 0.0, None

    def start(self):
        self.began = time.perf_counter()

    def pause(self):
        self.pause_began = time.perf_counter()
        return self.pause_began - self.began - self.paused

    def resume(self):
        self.paused += time.perf_counter() - self.pause_began

    def seconds(self):
        return time.perf_counter() - self.began - self.paused


def _model(sizes, arrays, relaxed):
    return harness.tfeff_bert(int(arrays["vocabulary_size"]), arrays["train"].shape[1], sizes,
                              sizes["relaxed"] if relaxed else None)


def heldout_evaluator(model, heldout, batch_size, exact_attention=False):
    """A function of no argument: the mean masked-LM cross-entropy of `model`'s current
    weights over every held-out prediction (the relaxed model with `exact_attention`: as
    the standard model it merges into scores). On JAX one compiled forward pass, made
    once per evaluator and batch shape; eager elsewhere."""
    import keras

    exact = True if exact_attention else None

    def sums(trainable, non_trainable, x):
        outputs, _ = model.stateless_call(trainable, non_trainable, x, training=False,
                                          exact_attention=exact)
        return model.losses_and_counts(x, outputs)["mlm"]

    if keras.backend.backend() == "jax":
        import jax

        sums = jax.jit(sums)

    def evaluate():
        trainable = [v.value for v in model.trainable_variables]
        non_trainable = [v.value for v in model.non_trainable_variables]
        total = count = 0.0
        for start in range(0, len(heldout["token_ids"]), batch_size):
            x = {k: v[start:start + batch_size] for k, v in heldout.items()}
            loss_sum, weight = sums(trainable, non_trainable, x)
            total += float(keras.ops.convert_to_numpy(loss_sum))
            count += float(keras.ops.convert_to_numpy(weight))
        return total / count

    return evaluate


def _compile(model, sizes, start_step):
    """AdamW (weight decay 0.01, global norm clipped at 1) on a warmup + cosine schedule,
    its step counter at `start_step`; XLA on JAX and TensorFlow."""
    import keras

    schedule = keras.optimizers.schedules.CosineDecay(
        0.0, sizes["steps"] - sizes["warmup_steps"], alpha=0.1,
        warmup_target=sizes["learning_rate"], warmup_steps=sizes["warmup_steps"])
    optimizer = keras.optimizers.AdamW(schedule, weight_decay=0.01, global_clipnorm=1.0,
                                       epsilon=1e-6)
    optimizer.build(model.trainable_variables)
    optimizer.iterations.assign(start_step)
    model.compile(optimizer=optimizer, jit_compile=keras.backend.backend() != "torch")


def train(arrays, sizes, two_phase, budget_s=None, steps=None):
    """One run (module docstring); returns its curve and timings.

    `sizes`: `layers`, `hidden`, `heads`, `intermediate`, `position_embedding`,
    `relaxed` (the relaxed layers' settings), `seed`, `batch`, `steps`,
    `warmup_steps`, `learning_rate`, `every`, `eval_batch`. `steps` overrides
    `sizes["steps"]` (the two-phase run takes the standard run's); the switch is
    at half of it, on an evaluation step.
    """
    import keras

    from tfeff.models.relaxed_merge import merge_and_check

    sizes = {**sizes, "steps": steps or sizes["steps"]}
    every, total = sizes["every"], sizes["steps"]
    switch = (total // 2) // every * every if two_phase else None
    keras.config.set_dtype_policy(sizes.get("dtype_policy", "mixed_bfloat16"))
    keras.utils.set_random_seed(sizes["seed"])
    heldout = arrays["heldout"]
    clock = _Clock()
    points, step_times, phase = [], {"relaxed": [], "standard": []}, {}
    last_evaluated = {}

    class Curve(keras.callbacks.Callback):
        """Evaluates every epoch (`every` steps) with the clock stopped."""

        def on_train_batch_begin(self, batch, logs=None):
            phase["batch_began"] = time.perf_counter()

        def on_train_batch_end(self, batch, logs=None):
            # This callback is not marked async-safe, so Keras turns each step's logs into
            # numbers before calling it: the step has finished. (The median leaves out
            # each phase's first step, its compilation.)
            step_times[phase["name"]].append(time.perf_counter() - phase["batch_began"])

        def on_epoch_end(self, epoch, logs=None):
            # The state is on the model now; wait for its last update before reading
            # the clock (the smallest variable: a cheap synchronization).
            smallest = min(self.model.trainable_variables, key=lambda v: np.prod(v.shape))
            keras.ops.convert_to_numpy(smallest.value)
            seconds = clock.pause()
            step = (epoch + 1) * every
            loss = phase["evaluate"]()
            points.append({"step": step, "seconds": seconds, "loss": float(loss),
                           "phase": phase["name"], "train_loss": float(logs["loss"])})
            last_evaluated["step"] = step
            if not math.isfinite(loss):
                raise FloatingPointError(f"held-out loss {loss} at step {step}")
            clock.resume()
            if budget_s is not None and seconds >= budget_s and (switch is None or step > switch):
                self.model.stop_training = True

    def fit(model, start, stop, name):
        phase["name"] = name
        phase["evaluate"] = heldout_evaluator(model, heldout, sizes["eval_batch"],
                                              exact_attention=name == "relaxed")
        model.fit(batches(arrays, sizes["batch"], sizes["seed"], start), epochs=stop // every,
                  initial_epoch=start // every, steps_per_epoch=every, verbose=0,
                  callbacks=[Curve()])
        return last_evaluated["step"]

    model = _model(sizes, arrays, relaxed=two_phase)
    model.build()
    _compile(model, sizes, 0)
    start = 0
    clock.start()
    merge = None
    if two_phase:
        start = fit(model, 0, switch, "relaxed")
        began = clock.seconds()
        model, errors = merge_and_check(model)
        merge = {"step": start, "seconds": began, "merge_s": clock.seconds() - began,
                 "relative_errors": errors}
        _compile(model, sizes, start)
    done = fit(model, start, total, "standard")
    return {"two_phase": two_phase, "steps": done, "planned_steps": total,
            "switch": merge, "points": points, "train_seconds": points[-1]["seconds"],
            "median_step_s": {k: statistics.median(v[1:]) if len(v) > 1 else None
                              for k, v in step_times.items()},
            "params": model.count_params(), "sizes": sizes,
            "train_windows": int(len(arrays["train"])),
            "heldout_predictions": int(arrays["heldout"]["masked_weights"].sum())}
