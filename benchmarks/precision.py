"""Training-step time of the demo configs under float32, XLA, mixed_bfloat16 and bf16 + XLA.

The speed levers of `train.precision` and `train.jit_compile`, timed side by
side in one process on this machine (TensorFlow backend): for every demo
model (`configs/demo_*.yaml`, built through `tfeff.models.from_config` under
`tfeff.training.precision.dtype_policy`, synthetic Zipfian batches at the
config's batch shape) each variant's `train_on_batch` (Adam) is timed in
interleaved rounds after a warm-up that compiles it, and the table gives the
median step time and the median per-round ratio to float32. A model with a
layer XLA cannot compile (SAMPLED and FIXED: TensorFlow's candidate sampler)
shows `n/a` for the XLA variants, naming the layer, as `train.jit_compile:
true` would refuse it.

These are CPU figures. A CPU has no bfloat16 arithmetic units worth the name
(TensorFlow emulates most bf16 ops in float32 and pays for the casts), and XLA
on a CPU mostly fuses small ops: neither ratio says what a GPU gains (bf16
tensor cores, XLA's fused kernels). Measure there with
`benchmarks/gpu.py` (which compiles every step with XLA).

    python -m benchmarks.precision [--preset cpu|tiny] [--models elmo_c,bert]
        [--variants fp32,xla,bf16,bf16_xla] [--rounds 5] [--output_dir runs/bench]
"""

import datetime
import os
import sys

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

from absl import app  # noqa: E402
from absl import flags  # noqa: E402
import keras  # noqa: E402

from benchmarks import harness  # noqa: E402
from benchmarks import gpu as gpu_step  # noqa: E402
from tfeff.config import load_config  # noqa: E402
from tfeff.training import precision  # noqa: E402

# name -> demo config (every demo model; CoRe's is its relaxed phase).
MODELS = {name: demo for name, (_, demo, _) in gpu_step.MODELS.items()}
MODELS.update({"elmo_fixed": "demo_elmo_fixed", "elmo_alone": "demo_elmo_alone"})
# name -> (train.precision, XLA)
VARIANTS = {"fp32": ("float32", False), "xla": ("float32", True),
            "bf16": ("mixed_bfloat16", False), "bf16_xla": ("mixed_bfloat16", True)}
PRESETS = {
    "cpu": dict(vocabulary=5000, rounds=5, warmup=2, overrides=()),
    # A smoke run: tiny models, seconds.
    "tiny": dict(vocabulary=3000, rounds=2, warmup=1, overrides=(
        "data.batch_size=4", "data.max_sequence_length=8", "model.num_layers=1")),
}
# The tiny preset's sizes of each family's model.
TINY_SIZES = {"elmo": ("model.units=16",), "masked_elmo": ("model.units=16",),
              "bert": ("model.hidden_dim=16", "model.intermediate_dim=32",
                       "data.max_predictions_per_seq=2")}


def build(name, config, variant, vocabulary, work_dir):
    """`(model, batch)` of `name` under `variant`, compiled; or `(None, reason)` when
    XLA cannot compile one of its layers."""
    policy, jit = VARIANTS[variant]
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    with precision.dtype_policy(policy):
        model, batch, _ = gpu_step.build(name, config, vocabulary, rng, work_dir)
        model.build()
    blockers = precision.jit_blockers(model)
    if jit and blockers:
        return None, precision.describe_blockers(blockers)
    model.compile(optimizer=keras.optimizers.Adam(1e-4), jit_compile=jit)
    return model, batch


def measure(name, config, variants, vocabulary, rounds, warmup, work_dir):
    """`{variant: [seconds per round]}` and `{variant: reason}` of the variants not run."""
    runs, skipped = {}, {}
    for variant in variants:
        model, batch = build(name, config, variant, vocabulary, work_dir)
        if model is None:
            skipped[variant] = batch
            continue

        def step(model=model, batch=batch):
            loss = model.train_on_batch(batch)  # a float: the step has finished
            if not np.isfinite(loss):
                raise FloatingPointError(f"{name}: loss {loss}")

        runs[variant] = step
    times = harness.interleaved_times(runs, rounds, warmup=warmup) if runs else {}
    return times, skipped


def table(results, variants, machine, command):
    lines = [
        f"Training step of the demo models on {machine}, TensorFlow "
        f"{_tf_version()}, Keras {keras.__version__}, {datetime.date.today().isoformat()} "
        f"(`{command}`): median ms over interleaved rounds after compilation, and the median "
        "per-round ratio to float32 (below 1: faster). CPU ratios are not GPU ratios.",
        "",
        "| model | " + " | ".join(variants) + " |",
        "|---|" + "---|" * len(variants),
    ]
    notes = {}
    for name, (times, skipped) in results.items():
        medians = harness.medians(times)
        ratios = (harness.median_ratios(times, "fp32") if "fp32" in times else {})
        cells = []
        for variant in variants:
            if variant in skipped:
                notes.setdefault(skipped[variant], len(notes) + 1)
                cells.append(f"n/a ({notes[skipped[variant]]})")
            elif variant in ratios and variant != "fp32":
                cells.append(f"{1000 * medians[variant]:.1f} ({ratios[variant]:.2f}x)")
            else:
                cells.append(f"{1000 * medians[variant]:.1f}")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    if notes:
        lines.append("")
        lines += [f"({i}) not compilable with XLA: {reason}" for reason, i in notes.items()]
    return "\n".join(lines) + "\n"


def _tf_version():
    import tensorflow as tf

    return tf.__version__


def machine_name():
    """The CPU model and core count (`gpu_step.device_info` names an accelerator)."""
    name, _ = gpu_step.device_info()
    if name.startswith("CPU"):
        try:
            with open("/proc/cpuinfo", encoding="utf-8") as f:
                model = next(line.split(":", 1)[1].strip() for line in f
                             if line.startswith("model name"))
            return f"CPU ({model}, {os.cpu_count()} cores)"
        except (OSError, StopIteration):
            pass
    return name


def run(preset_name, names, variants, rounds, output_dir, command):
    """Times `variants` of the models `names` at a preset's sizes and writes
    `precision.md` and `precision.json` to `output_dir`; returns `{name: (times,
    not compilable)}`. Raises ValueError for an unknown model or variant."""
    preset = PRESETS[preset_name]
    for variant in variants:
        if variant not in VARIANTS:
            raise ValueError(f"unknown variant {variant!r}; one of {', '.join(VARIANTS)}")
    for name in names:
        if name not in MODELS:
            raise ValueError(f"unknown model {name!r}; one of {', '.join(MODELS)}")
    if "fp32" not in variants:
        variants = ["fp32", *variants]  # the reference of the ratios
    work_dir = os.path.join(output_dir, "precision")  # fastText models and tables, reused
    os.makedirs(work_dir, exist_ok=True)
    machine = machine_name()
    print(machine, flush=True)
    results = {}
    for name in names:
        path = os.path.join(REPO, "configs", MODELS[name] + ".yaml")
        overrides = list(preset["overrides"])
        if preset_name == "tiny":
            overrides += TINY_SIZES[load_config(path).family]
        config = load_config(path, overrides)
        results[name] = measure(name, config, variants, preset["vocabulary"],
                                rounds or preset["rounds"], preset["warmup"], work_dir)
        print(name, {v: f"{1000 * m:.1f} ms" for v, m in
                     harness.medians(results[name][0]).items()}, flush=True)
    text = table(results, variants, machine, command)
    print(text)
    harness.write_results(output_dir, "precision", text, {
        "machine": machine, "keras": keras.__version__, "preset": preset_name,
        "times": {name: times for name, (times, _) in results.items()},
        "not_compilable": {name: skipped for name, (_, skipped) in results.items()}})
    return results


def define_flags():
    """The command line's flags, defined when the module runs as the program."""
    harness.define_flags(PRESETS, "cpu")
    flags.DEFINE_list("models", list(MODELS), "Models to time (`MODELS`' names).")
    flags.DEFINE_list("variants", list(VARIANTS), "Variants to time (fp32 is always timed).")
    flags.DEFINE_integer("rounds", None, "Timed rounds (default: the preset's).")


def main(argv):
    del argv
    args = flags.FLAGS
    try:
        run(args.preset, args.models, args.variants, args.rounds, args.output_dir,
            "python -m benchmarks.precision " + " ".join(sys.argv[1:]))
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    define_flags()
    app.run(main)
