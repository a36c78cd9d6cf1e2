"""tfeff against what users would use instead, on one GPU, in one resumable run.

    python -m benchmarks.gpu_suite --output_dir runs/gpu --preset paper  # BERT-base, one GPU
    python -m benchmarks.gpu_suite --output_dir /tmp/gpu --preset cpu    # minutes on a CPU

The measurement is a list of parts in priority order (the first tables come
first, so that a shorter slot still yields them). Each part runs in a process
of its own, because Keras reads `KERAS_BACKEND` once, under a time limit
(`--part_limit_s`, default the preset's); its rows go to `OUT/parts/PART.json`,
and a part whose file exists is not run again, so rerunning the same command
resumes where a run stopped. `--deadline_s` ends a run in time (for a job
limit): no part starts within a minute of it, a part running past it is cut
(and not written), and the run exits 3 so that a rerun resumes it. After
every part, `OUT/results.md` and `OUT/results.json` are written again from
all the parts' files: the date, the
command, the device and its driver, the backends' and peers' versions, and one
table per section. Nothing imports TensorFlow: the GPU machines this is made
for have JAX, PyTorch and Hugging Face `transformers`, and no TensorFlow.

Sections so far:

* **BERT MLM training step, peers.** tfeff `Bert` on JAX (XLA) and on PyTorch
  (eager), keras-hub's `BertMaskedLM` on JAX (XLA) and on PyTorch (eager: what
  Keras itself costs there), Hugging Face's
  `BertForMaskedLM` on PyTorch (SDPA attention, bf16 autocast, AdamW), eager and
  under `torch.compile`. Equal model sizes, sequence length, batch and number of
  masked positions (15%, rounded); bf16 compute with float32 weights everywhere
  (Keras' `mixed_bfloat16`, PyTorch's autocast); AdamW everywhere. Tokens/s,
  peak device memory, and MFU from one FLOP count per token shared by every
  row of a length (the
  model's work, whatever an implementation adds: Hugging Face's head scores
  every position, not only the masked ones): 6 x the dense encoder weights
  (4h^2 + 2hI per layer) + 12 x layers x n x h (attention) + 6 x (h^2 + V h)
  x masked / n (the masked-LM head).
* **CoRe's relaxed model vs the standard one** (tfeff `Bert`, JAX, bf16): the
  standard row is the peers table's; the ratio is standard / relaxed step time.
* **Output layers at the paper's vocabulary** (`configs/elmo_c.yaml`,
  `elmo_a.yaml`, `elmo_sampled.yaml` at 800K words, Li et al.'s Table 4 S2; the
  CPU preset: the demo configs at 5K): ELMo-C, ELMo-A and SAMPLED training
  steps on JAX in bf16, timed by `benchmarks/gpu.py`'s `measure`, the
  step-time ratios beside the paper's, and ELMo-C's words/s beside the target
  of 200,000 on one H100 (the paper: about 37,000 on four GTX 1080 Ti). Then
  ELMo-A's `AdaptiveSoftmax` against PyTorch's `AdaptiveLogSoftmaxWithLoss` (same
  cutoffs and div_value) on the same encoder and weights, torch backend, one
  hand-written training step each (the encoder under bf16 autocast, the output
  layers in float32, Adam), timed in interleaved rounds.
* **Masked ELMo's encoder** (2 x 4096 cells, 384 projection; the CPU preset:
  `benchmarks/lstm.py --preset tiny`): `benchmarks/lstm.py` on the
  torch backend (MaskedBiLSTM's torch LSTM path, i.e. cuDNN on CUDA, vs its
  portable path vs `torch.nn.LSTM(proj_size)` driven directly), and the parity
  of the torch LSTM path with the portable path on the device
  (`python -m tfeff.testing.torch_lstm_parity`: outputs, states, gradients).
* **What limits ELMo-C's step**: `profile_steps` more ELMo-C steps traced with
  `jax.profiler` and read by `benchmarks/xla_profile.py` (the device's busy time
  against the step, its ops per step, the longest ops).
* **CoRe's claim** (`benchmarks/core_training.py`): standard vs two-phase training
  (the relaxed model to half the steps, merged with `merge_relaxed_bert`, then
  standard) of tfeff `Bert` at the preset's size, JAX, bf16, Keras `fit` on
  NumPy batches of the arrays file `--core_data` (made with TensorFlow by
  `tools/mlm_arrays.py`; the paper preset's: WordNet English, n = 128): held-out
  masked-LM loss against wall time, both curves in `OUT/core_training.png`
  (where matplotlib is installed), the time each run first reaches the
  standard run's final loss and their ratio.
* **The papers' speed tables** (`benchmarks/paper_speed.py`, after every other
  part): Li et al.'s Table 4 (S1 and S2 at 800K and 2,000K words), Table 2's
  models at their configs' settings and per-card batches, Table 5's GPT row,
  and Masked ELMo with 1 and 4 mask sets on the cuDNN and the portable path,
  each row labelled with the shapes it ran and printed beside the paper's
  figure.

The runner (resume, time limits, the deadline, the archive) is
`benchmarks/runner.py`, the parts' measurements `benchmarks/gpu_parts.py`, the
tables `benchmarks/gpu_report.py`; this module holds the presets, the list of
parts and the command line.

The machine is recorded once, by the first run into a folder
(`OUT/environment.json`), and each part records when it finished, so that
rerunning a finished command elsewhere (say, where matplotlib draws the PNG)
rewrites the results without claiming that machine measured them.
"""

import importlib.metadata
import json
import os
import platform
import shlex
import subprocess
import sys

from absl import app
from absl import flags

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
from benchmarks import gpu_parts
from benchmarks import gpu_report
from benchmarks import harness
from benchmarks import paper_speed
from benchmarks import runner

# Model and batch sizes by preset. `lengths` maps a sequence length to its batch
# (equal tokens per batch); every row of a length uses that length and batch.
PRESETS = {
    "paper": dict(vocabulary=30522, layers=12, hidden=768, heads=12, intermediate=3072,
                 lengths={128: 128, 512: 32}, steps=20, warmup=5, part_limit_s=540,
                 relaxed={"num_anchors": 32, "ffn_rank": 64},
                 word_vocabulary=800_000, benchmark_preset="paper", lstm_preset="paper",
                 lstm_repeats=5, device="cuda", profile_steps=5,
                 core_data="runs/gpu_data/wordnet_128.npz",
                 core_training=dict(layers=12, hidden=768, heads=12, intermediate=3072,
                                    position_embedding="rotary",
                                    relaxed={"num_anchors": 32, "ffn_rank": 64}, seed=0,
                                    batch=32, steps=4000, warmup_steps=400,
                                    learning_rate=2e-4, every=200, eval_batch=64,
                                    budget_s=300),
                  speed=dict(configs="paper", vocabularies={"800K": 800_000, "2000K": 2_000_000},
                             batch_scale=1.0, common_batch=128, precision="bf16", rounds=20,
                             warmup=3, torch_precision="fp32_strict", torch_rounds=5,
                             torch_warmup=1)),
    "cpu": dict(vocabulary=2000, layers=2, hidden=64, heads=4, intermediate=256,
                lengths={32: 8, 64: 4}, steps=2, warmup=1, part_limit_s=300,
                relaxed={"num_anchors": 4, "ffn_rank": 8},
                word_vocabulary=5_000, benchmark_preset="cpu", lstm_preset="tiny",
                lstm_repeats=1, device="cpu", profile_steps=2,
                core_data="runs/gpu_data/synthetic_32.npz",
                core_training=dict(layers=2, hidden=64, heads=4, intermediate=256,
                                   position_embedding="rotary",
                                   relaxed={"num_anchors": 4, "ffn_rank": 8}, seed=0,
                                   batch=8, steps=20, warmup_steps=2, learning_rate=2e-3,
                                   every=10, eval_batch=64, budget_s=120),
                speed=dict(configs="demo", vocabularies={"800K": 5_000, "2000K": 12_000},
                           batch_scale=1 / 64, common_batch=16, precision="bf16", rounds=2,
                           warmup=1, torch_precision="fp32_strict", torch_rounds=2,
                           torch_warmup=1)),
}
# How the presets' `core_data` files are made (tools/mlm_arrays.py, with TensorFlow).
CORE_DATA_COMMANDS = {
    "paper": "python -m tools.english_corpus --output_dir runs/english && "
            "python -m tools.mlm_arrays --train_files runs/english/train.txt "
            "--heldout_files runs/english/heldout.txt --sequence_length 128 "
            "--vocabulary_size 8192 --output runs/gpu_data/wordnet_128.npz",
    "cpu": "python -m tools.mlm_arrays --synthetic 500 --sequence_length 32 "
           "--vocabulary_size 400 --output runs/gpu_data/synthetic_32.npz",
}
PACKAGES = ("keras", "jax", "jaxlib", "torch", "transformers", "keras-hub", "numpy", "tfeff")


def _parts(preset):
    """`[(part, backend, section, implementation, n)]` in the order they run."""
    parts = []
    for n in PRESETS[preset]["lengths"]:
        parts += [(f"bert_tfeff_jax_{n}", "jax", "peers", "tfeff_jax", n),
                  (f"bert_keras_hub_jax_{n}", "jax", "peers", "keras_hub_jax", n),
                  (f"bert_hf_torch_{n}", "torch", "peers", "hf_torch", n),
                  (f"bert_hf_torch_compile_{n}", "torch", "peers", "hf_torch_compile", n),
                  (f"bert_tfeff_torch_{n}", "torch", "peers", "tfeff_torch", n),
                  (f"bert_keras_hub_torch_{n}", "torch", "peers", "keras_hub_torch", n)]
    parts += [(f"core_relaxed_jax_{n}", "jax", "core", "tfeff_relaxed_jax", n)
              for n in PRESETS[preset]["lengths"]]
    parts += [(f"output_{name}_jax", "jax", "output", name, None)
              for name in gpu_parts.OUTPUT_MODELS]
    parts.append(("output_adaptive_torch", "torch", "adaptive", "elmo_a", None))
    parts += [("lstm_speed_torch", "torch", "lstm", "speed", None),
              ("lstm_parity_torch", "torch", "lstm", "parity", None)]
    parts += [("core_train_standard_jax", "jax", "core_training", "standard", None),
              ("core_train_two_phase_jax", "jax", "core_training", "two_phase", None)]
    parts += [(part, backend, "speed", group, None)
              for part, backend, group in paper_speed.PARTS]
    return parts


def _environment():
    """Python, packages' versions and the GPU (nvidia-smi), without importing them."""
    env = {"python": platform.python_version(), "machine": platform.machine(),
           "cpu_count": os.cpu_count(), "packages": {}}
    for name in PACKAGES:
        try:
            env["packages"][name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            env["packages"][name] = None
    try:
        smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total",
                              "--format=csv,noheader"], capture_output=True, text=True,
                             timeout=60)
        env["gpus"] = [line.strip() for line in smi.stdout.splitlines() if line.strip()]
    except (OSError, subprocess.TimeoutExpired):
        env["gpus"] = []
    return env


def _part_environment(backend):
    env = {**os.environ, "KERAS_BACKEND": backend, "PYTHONPATH": os.pathsep.join(
        p for p in (REPO, os.environ.get("PYTHONPATH")) if p)}
    return env


def define_flags():
    """The command line's flags, defined when the module runs as the program."""
    harness.define_flags(PRESETS, "paper", output_dir=None)
    flags.DEFINE_list("parts", None, "Part names (default: all, in priority order).")
    flags.DEFINE_integer("part_limit_s", None, "The time limit of one part's process "
                         "(default: the preset's).")
    flags.DEFINE_integer("deadline_s", None, "Stop starting parts after this many seconds, "
                         "and cut a part that would run past it (then rerun the same command "
                         "to resume; exit 3).")
    flags.DEFINE_string("core_data", None, "The arrays file of the CoRe training parts "
                        "(python -m tools.mlm_arrays; default: the preset's, relative to the "
                        "working folder).")
    flags.DEFINE_string("archive", None, "Also write the results folder, without its `work/` "
                        "folder, as one .tar.gz here after every part (a job's output "
                        "folder), so a run cut anywhere leaves what it finished.")
    flags.DEFINE_string("resume_from", None, "First unpack an archive written by --archive "
                        "into --output_dir (the parts it holds are not run again).")
    flags.DEFINE_string("run_part", None, "Internal: run this one part in this process.")


def _usage_error(message):
    print(f"error: {message}", file=sys.stderr)
    return 2


def main(argv):
    del argv
    args = flags.FLAGS
    core_data = args.core_data or PRESETS[args.preset]["core_data"]
    if not args.output_dir:
        return _usage_error("--output_dir is required: the results folder (resumed if it "
                            "holds parts already)")
    for flag in ("output_dir", "archive", "resume_from", "core_data"):
        value = getattr(args, flag)
        if value is not None and not value.strip():
            return _usage_error(f"--{flag} is empty")
    out = args.output_dir
    if args.run_part:  # a part's own process
        work_dir = os.path.join(out, "work")
        os.makedirs(work_dir, exist_ok=True)
        spec, = [p for p in _parts(args.preset) if p[0] == args.run_part]
        result = gpu_parts.run_part(PRESETS[args.preset], spec, work_dir, core_data)
        result["finished"] = gpu_report.utc_now()
        harness.write_text_atomic(runner.part_path(out, args.run_part),
                                  json.dumps(result, indent=1))
        return 0
    known = [p[0] for p in _parts(args.preset)]
    chosen = args.parts or known
    unknown = sorted(set(chosen) - set(known))
    if unknown:
        return _usage_error(f"--parts: unknown {', '.join(unknown)}; the {args.preset} preset has "
                     f"{', '.join(known)}")
    pending = [p for p, _, section, *_ in _parts(args.preset) if section == "core_training"
               and p in chosen and not os.path.exists(runner.part_path(out, p))]
    if args.resume_from:
        try:
            unpack_archive(args.resume_from, out, args.preset)
        except ValueError as e:
            return _usage_error(f"--resume_from {args.resume_from}: {e}")
        pending = [p for p in pending
                   if not os.path.exists(runner.part_path(out, p))]
    if pending and not os.path.isfile(core_data):
        return _usage_error(f"--core_data {core_data}: no such file, which the parts "
                     f"{', '.join(pending)} train on; make it where TensorFlow is installed "
                     f"with `{CORE_DATA_COMMANDS[args.preset]}`, or leave those parts out "
                     "with --parts")
    limit = args.part_limit_s or PRESETS[args.preset]["part_limit_s"]
    os.makedirs(os.path.join(out, "parts"), exist_ok=True)
    command = "python -m benchmarks.gpu_suite " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    # The machine of the first run: a rerun that only rewrites the results elsewhere
    # (say, for the PNG where matplotlib is installed) keeps it.
    environment_path = os.path.join(out, "environment.json")
    if os.path.exists(environment_path):
        with open(environment_path, encoding="utf-8") as f:
            environment = json.load(f)
    else:
        environment = _environment()
        harness.write_text_atomic(environment_path, json.dumps(environment, indent=1))
    def after_each():
        gpu_report.write_results(out, args.preset, PRESETS[args.preset], _parts(args.preset),
                                  command, environment)
        if args.archive:
            write_archive(out, args.archive)

    failed, left = runner.run_parts(
        [(part, _part_command(args.preset, out, core_data, part), _part_environment(backend))
         for part, backend, *_ in _parts(args.preset) if part in chosen],
        out, limit, args.deadline_s, after_each)
    gpu_report.write_results(out, args.preset, PRESETS[args.preset], _parts(args.preset),
                                  command, environment)
    if args.archive:
        write_archive(out, args.archive)
        print(f"archive: {args.archive} (resume with --resume_from {args.archive})", flush=True)
    with open(os.path.join(out, "results.md"), encoding="utf-8") as f:
        print(f.read())
    if failed:
        print(f"error: parts failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    if left:
        print(f"stopped at the deadline with {len(left)} parts left ({', '.join(left)}): "
              "rerun the same command to resume", file=sys.stderr)
        return 3
    return 0


# What an archive holds: the results folder without `work/` (word tables, traces).
ARCHIVED = ("environment.json", "results.json", "results.md", "core_training.png", "parts")


def write_archive(out, path):
    """The results folder `out` without `work/` as one .tar.gz at `path`, its members named
    relative to `out` (`parts/PART.json`, `results.md`, ...); written atomically."""
    runner.write_archive(out, path, ARCHIVED)


def unpack_archive(path, out, preset):
    """Unpacks an archive of `write_archive` into `out`; a part file `out` has already is
    kept. Raises ValueError (the caller names the file) for a file that is not such an
    archive, a member outside the archive's names, or another preset's results."""
    what = "benchmarks/gpu_suite.py --archive"

    def same_preset(data):
        if not isinstance(data, dict) or "preset" not in data:
            raise ValueError(f"its results.json names no preset (not a {what})")
        if data["preset"] != preset:
            raise ValueError(f"results of the {data['preset']} preset, not {preset}")

    runner.unpack_archive(path, out, ARCHIVED, same_preset, what)


def _part_command(preset, out, core_data, part):
    """The command line of one part's own process (this module, `--run_part`)."""
    return [sys.executable, "-m", "benchmarks.gpu_suite", "--output_dir", out, "--preset",
            preset, "--core_data", core_data, "--run_part", part]


if __name__ == "__main__":
    define_flags()
    app.run(main)
