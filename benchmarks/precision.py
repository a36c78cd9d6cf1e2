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

    python -m benchmarks.precision [--preset demo|tiny] [--models elmo_c,bert]
        [--variants fp32,xla,bf16,bf16_xla] [--rounds 5] [--results runs/bench/precision.md]
"""

import argparse
import datetime
import os
import sys

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

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
    "demo": dict(vocabulary=5000, rounds=5, warmup=2, overrides=()),
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


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--preset", choices=sorted(PRESETS), default="demo")
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--work_dir", default=os.path.join(REPO, "runs", "bench", "precision"))
    parser.add_argument("--results", default=None,
                        help="write the markdown table here (and the times as JSON beside it)")
    args = parser.parse_args(argv)
    preset = PRESETS[args.preset]
    variants = args.variants.split(",")
    for variant in variants:
        if variant not in VARIANTS:
            parser.error(f"unknown variant {variant!r}; one of {', '.join(VARIANTS)}")
    if "fp32" not in variants:
        variants.insert(0, "fp32")  # the reference of the ratios
    names = args.models.split(",")
    for name in names:
        if name not in MODELS:
            parser.error(f"unknown model {name!r}; one of {', '.join(MODELS)}")
    os.makedirs(args.work_dir, exist_ok=True)
    machine = machine_name()
    print(machine, flush=True)
    results = {}
    for name in names:
        path = os.path.join(REPO, "configs", MODELS[name] + ".yaml")
        overrides = list(preset["overrides"])
        if args.preset == "tiny":
            overrides += TINY_SIZES[load_config(path).family]
        config = load_config(path, overrides)
        results[name] = measure(name, config, variants, preset["vocabulary"],
                                args.rounds or preset["rounds"], preset["warmup"],
                                args.work_dir)
        print(name, {v: f"{1000 * m:.1f} ms" for v, m in
                     harness.medians(results[name][0]).items()}, flush=True)
    command = "python -m benchmarks.precision " + " ".join(argv if argv is not None
                                                               else sys.argv[1:])
    text = table(results, variants, machine, command.strip())
    print(text)
    if args.results:
        data = {"machine": machine, "keras": keras.__version__, "preset": args.preset,
                "times": {name: times for name, (times, _) in results.items()},
                "not_compilable": {name: skipped for name, (_, skipped) in results.items()}}
        stem = os.path.splitext(os.path.basename(args.results))[0]
        harness.write_results(os.path.dirname(os.path.abspath(args.results)), stem,
                                    text, data)
    return results


if __name__ == "__main__":
    main()
