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
  (`python -m tests.layers.torch_lstm_parity`: outputs, states, gradients).
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

The runner (resume, time limits, the deadline, the archive) is
`benchmarks/runner.py`; this script holds the presets, the parts and the
report.

The machine is recorded once, by the first run into a folder
(`OUT/environment.json`), and each part records when it finished, so that
rerunning a finished command elsewhere (say, where matplotlib draws the PNG)
rewrites the results without claiming that machine measured them.
"""

import datetime
import importlib.metadata
import json
import os
import platform
import shlex
import subprocess
import sys

from absl import app
from absl import flags
import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
from benchmarks import harness
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
                                    budget_s=300)),
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
                                   every=10, eval_batch=64, budget_s=120)),
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
MASKING_RATE = 0.15
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
    parts += [(f"output_{name}_jax", "jax", "output", name, None) for name in OUTPUT_MODELS]
    parts.append(("output_adaptive_torch", "torch", "adaptive", "elmo_a", None))
    parts += [("lstm_speed_torch", "torch", "lstm", "speed", None),
              ("lstm_parity_torch", "torch", "lstm", "parity", None)]
    parts += [("core_train_standard_jax", "jax", "core_training", "standard", None),
              ("core_train_two_phase_jax", "jax", "core_training", "two_phase", None)]
    return parts


def _lstm_command(what, sizes, work_dir):
    """The command line of an `lstm` part (run from the repository root)."""
    if what == "speed":
        return [sys.executable, "-m", "benchmarks.lstm", "--preset",
                sizes["lstm_preset"], "--repeats", str(sizes["lstm_repeats"]), "--output_dir",
                work_dir]
    return [sys.executable, "-m", "tests.layers.torch_lstm_parity", "--device", sizes["device"]]


# name -> (what it is, the paper's step time relative to ELMo-C, Table 4)
OUTPUT_MODELS = {"elmo_c": ("ELMo-C: continuous output", None),
                 "elmo_a": ("ELMo-A: adaptive softmax", 1.47),
                 "elmo_sampled": ("SAMPLED: sampled softmax", 1.35)}
ELMO_C_TARGET_WORDS_PER_S = 200_000


LABELS = {
    "tfeff_jax": "tfeff `Bert`, JAX, XLA",
    "keras_hub_jax": "keras-hub `BertMaskedLM`, JAX, XLA",
    "hf_torch": "Hugging Face `BertForMaskedLM`, PyTorch eager, SDPA",
    "hf_torch_compile": "Hugging Face `BertForMaskedLM`, `torch.compile`, SDPA",
    "tfeff_torch": "tfeff `Bert`, PyTorch eager",
    "keras_hub_torch": "keras-hub `BertMaskedLM`, PyTorch eager",
    "tfeff_relaxed_jax": "tfeff `Bert`, CoRe relaxed, JAX, XLA",
}


def masked_per_sequence(n):
    return max(1, round(MASKING_RATE * n))


def flops_per_token(sizes, n):
    """The model FLOPs per token of one training step (module docstring)."""
    h, i, layers, v = sizes["hidden"], sizes["intermediate"], sizes["layers"], sizes["vocabulary"]
    dense = layers * (4 * h * h + 2 * h * i)
    return (6.0 * dense + 12.0 * layers * n * h
            + 6.0 * (h * h + v * h) * masked_per_sequence(n) / n)


def batch(sizes, n, seed=0):
    """One MLM batch as NumPy: ids of a Zipfian language (ids 0-4 reserved), two
    segments, no padding, sorted distinct masked positions."""

    return harness.mlm_batch(np.random.default_rng(seed), sizes["lengths"][n], n,
                                   sizes["vocabulary"], masked_per_sequence(n))


def _median_step(step, warmup, steps):
    """`harness.median_step` of a step returning its loss: `(median, last loss)`, the
    loss checked finite."""
    median, loss = harness.median_step(step, steps, warmup)
    if not np.isfinite(loss):
        raise FloatingPointError(f"loss {loss}")
    return median, float(loss)


# ------------------------------------------------------------------ Keras parts


def _on_device():
    """The device name, its dense bf16 peak FLOP/s and the peak memory of this part's
    process (`benchmarks/gpu.py`'s probes; its module imports Keras, so it is
    imported in the parts only)."""
    from benchmarks import gpu as gpu_step

    device, peak = gpu_step.device_info()
    return {"device": device, "peak_flops": peak,
            "peak_memory_bytes": gpu_step.peak_memory_bytes()}


def _tfeff_bert(sizes, n, relaxed):
    return harness.tfeff_bert(sizes["vocabulary"], n, sizes,
                              sizes["relaxed"] if relaxed else None)


def _keras_hub_bert(sizes, n):
    import keras_hub

    backbone = keras_hub.models.BertBackbone(
        vocabulary_size=sizes["vocabulary"], num_layers=sizes["layers"],
        num_heads=sizes["heads"], hidden_dim=sizes["hidden"],
        intermediate_dim=sizes["intermediate"], dropout=0.1, max_sequence_length=n)
    return keras_hub.models.BertMaskedLM(backbone=backbone, preprocessor=None)


def run_keras(implementation, sizes, n, steps, warmup, profile_dir=None):
    """One Keras model's training step, bf16 compute (`mixed_bfloat16`), AdamW (weight
    decay 0.01, as PyTorch's default). With `profile_dir` on JAX, `profile_steps` more
    steps are traced there and summarized (`benchmarks/xla_profile.py`) as `profile`."""
    import keras

    keras.config.set_dtype_policy("mixed_bfloat16")
    keras.utils.set_random_seed(0)
    data = batch(sizes, n)
    jit = keras.backend.backend() == "jax"
    if implementation.startswith("keras_hub"):
        model = _keras_hub_bert(sizes, n)
        model.compile(optimizer=keras.optimizers.AdamW(1e-4, weight_decay=0.01),
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                      weighted_metrics=[], jit_compile=jit)
        x = {"token_ids": data["token_ids"], "segment_ids": data["segment_ids"],
             "padding_mask": data["padding_mask"], "mask_positions": data["masked_positions"]}

        def step():
            return model.train_on_batch(x, data["masked_ids"],
                                        sample_weight=data["masked_weights"])
    else:
        model = _tfeff_bert(sizes, n, relaxed=implementation == "tfeff_relaxed_jax")
        model.build()
        model.compile(optimizer=keras.optimizers.AdamW(1e-4, weight_decay=0.01),
                      jit_compile=jit)

        def step():
            return model.train_on_batch(data, return_dict=True)["loss"]

    from benchmarks import gpu as gpu_step

    gpu_step.reset_peak_memory()
    median, loss = _median_step(step, warmup, steps)
    row = {"params": model.count_params(), "step_s": median, "loss": loss, **_on_device()}
    if profile_dir and jit:
        from benchmarks import xla_profile

        row.update(xla_profile.trace_steps(step, sizes["profile_steps"], profile_dir, median))
    return row


# ------------------------------------------------------------------ PyTorch parts


def run_hf(implementation, sizes, n, steps, warmup):
    """Hugging Face `BertForMaskedLM` (SDPA), bf16 autocast, AdamW; the labels are -100
    except at the masked positions."""
    import torch
    from transformers import BertConfig
    from transformers import BertForMaskedLM

    torch.manual_seed(0)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    config = BertConfig(vocab_size=sizes["vocabulary"], hidden_size=sizes["hidden"],
                        num_hidden_layers=sizes["layers"], num_attention_heads=sizes["heads"],
                        intermediate_size=sizes["intermediate"], max_position_embeddings=n,
                        type_vocab_size=2, hidden_dropout_prob=0.1,
                        attention_probs_dropout_prob=0.1, attn_implementation="sdpa")
    model = BertForMaskedLM(config).to(device).train()
    params = sum(p.numel() for p in model.parameters())
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4,
                                  fused=device == "cuda")
    data = batch(sizes, n)
    labels = np.full(data["token_ids"].shape, -100, "int64")
    np.put_along_axis(labels, data["masked_positions"], data["masked_ids"], axis=1)
    inputs = {"input_ids": torch.tensor(data["token_ids"], dtype=torch.long, device=device),
              "token_type_ids": torch.tensor(data["segment_ids"], dtype=torch.long,
                                             device=device),
              "attention_mask": torch.tensor(data["padding_mask"], dtype=torch.long,
                                             device=device),
              "labels": torch.tensor(labels, device=device)}
    forward = torch.compile(model) if implementation == "hf_torch_compile" else model

    def step():
        with torch.autocast(device_type=device, dtype=torch.bfloat16):
            loss = forward(**inputs).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss.item()  # synchronizes

    from benchmarks import gpu as gpu_step

    gpu_step.reset_peak_memory()
    median, loss = _median_step(step, warmup, steps)
    return {"params": params, "step_s": median, "loss": loss, **_on_device()}


def _backend_versions():
    import keras

    out = {"keras_backend": keras.backend.backend()}
    if out["keras_backend"] == "torch":
        import torch

        out["cuda"] = torch.version.cuda
        out["cudnn"] = torch.backends.cudnn.version() if torch.cuda.is_available() else None
    else:
        import jax

        out["jax_devices"] = [str(d) for d in jax.devices()]
    return out


def run_output_layer(name, sizes, work_dir):
    """An ELMo output-layer model's bf16 training step (benchmarks/gpu.py's)."""
    from benchmarks import gpu as gpu_step

    config = gpu_step.model_config(name, sizes["benchmark_preset"])
    device, peak = gpu_step.device_info()
    profile_dir = os.path.join(work_dir, f"profile_{name}") if name == "elmo_c" else None
    row = gpu_step.measure(name, config, sizes["word_vocabulary"], "bf16", sizes["steps"],
                                sizes["warmup"], work_dir, peak, profile_dir=profile_dir,
                                profile_steps=sizes["profile_steps"])
    row.pop("model")
    return {**row, "device": device, "peak_flops": peak,
            "word_vocabulary": sizes["word_vocabulary"]}


def run_core_training(preset, implementation, core_data, out):
    """Section 3: standard or two-phase CoRe training (benchmarks/core_training.py) on the
    arrays file; the two-phase run takes the standard run's steps."""
    from benchmarks import core_training

    sizes = PRESETS[preset]["core_training"]
    steps = None
    if implementation == "two_phase":
        path = os.path.join(out, "parts", "core_train_standard_jax.json")
        if not os.path.exists(path):
            raise SystemExit("core_train_two_phase_jax needs core_train_standard_jax's steps: "
                             "run that part first")
        with open(path, encoding="utf-8") as f:
            steps = json.load(f)["steps"]
    arrays = core_training.load_arrays(core_data)
    from benchmarks import gpu as gpu_step

    gpu_step.reset_peak_memory()
    row = core_training.train(arrays, sizes, implementation == "two_phase",
                              budget_s=sizes["budget_s"], steps=steps)
    return {**row, "core_data": core_data, "source": arrays["source"],
            "sequence_length": int(arrays["train"].shape[1]), **_on_device()}


def run_adaptive_peer(sizes, work_dir):
    """ELMo-A's encoder with tfeff's `AdaptiveSoftmax`, and with PyTorch's
    `AdaptiveLogSoftmaxWithLoss` of the same cutoffs and div_value (no head bias, as
    ELMo-A's), one training step each: the encoder under bf16 autocast, the output
    layers in float32 (PyTorch's refuses autocast's bf16); both score the same
    predictable targets (not padding, not `<unk>`) of both directions, mean per
    direction, summed."""
    import torch

    from benchmarks import gpu as gpu_step

    config = gpu_step.model_config("elmo_a", sizes["benchmark_preset"])
    vocabulary = sizes["word_vocabulary"]
    model, ids, tokens = gpu_step.build("elmo_a", config, vocabulary,
                                             np.random.default_rng(0), work_dir)
    model.build()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    head = model.output_head
    peer = torch.nn.AdaptiveLogSoftmaxWithLoss(
        model.pre_output.units if model.pre_output is not None else model.projection_dim,
        vocabulary, list(config.model.adaptive_cutoffs),
        div_value=config.model.adaptive_div_value, head_bias=False).to(device)
    encoder = [v.value for v in model.trainable_variables if not v.path.startswith(head.path)]
    ours = [v.value for v in head.trainable_variables]
    ids = torch.tensor(ids, dtype=torch.long, device=device)

    def loss_of(score):
        with torch.autocast(device_type=device, dtype=torch.bfloat16):
            outputs = model(ids, training=True)
        total = 0.0  # the output layers in float32 (PyTorch's refuses autocast's bf16)
        for _, features, targets, valid in model.prediction_pairs(outputs, ids):
            total = total + score(features[valid].float(), targets[valid]) / valid.sum()
        return total

    def tfeff_loss(features, targets):
        return head.per_position_loss(features, targets, training=True).sum()

    def torch_loss(features, targets):
        return peer(features, targets).loss * targets.shape[0]

    runs = {"tfeff": harness.torch_adam_step(lambda: loss_of(tfeff_loss), encoder + ours),
            "torch": harness.torch_adam_step(lambda: loss_of(torch_loss),
                                                   encoder + list(peer.parameters()))}
    losses = {name: run() for name, run in runs.items()}  # the first step: untrained
    times = harness.interleaved_times(runs, sizes["steps"], warmup=sizes["warmup"])
    medians = harness.medians(times)
    ratio = harness.median_ratios(times, "torch")["tfeff"]
    return {"word_vocabulary": vocabulary, "tokens_per_step": tokens,
            "cutoffs": list(config.model.adaptive_cutoffs),
            "tfeff_params": sum(int(np.prod(v.shape)) for v in ours),
            "torch_params": sum(p.numel() for p in peer.parameters()),
            "tfeff_step_s": medians["tfeff"], "torch_step_s": medians["torch"],
            "tfeff_over_torch": ratio, "first_losses": losses,
            "device": gpu_step.device_info()[0]}


def run_part(preset, part, work_dir, core_data=None):
    """Runs one part in this process (its backend already chosen); returns its file's dict."""
    sizes = PRESETS[preset]
    (_, backend, section, implementation, n), = [p for p in _parts(preset) if p[0] == part]
    import keras

    if keras.backend.backend() != backend:
        raise SystemExit(f"part {part} needs KERAS_BACKEND={backend}, "
                         f"not {keras.backend.backend()}")
    if section == "lstm":
        done = subprocess.run(_lstm_command(implementation, sizes, work_dir), cwd=REPO,
                              capture_output=True, text=True)
        row = {"returncode": done.returncode, "output": (done.stdout + done.stderr)[-3000:]}
        if implementation == "speed" and done.returncode == 0:
            with open(os.path.join(work_dir, "lstm_torch.md"), encoding="utf-8") as f:
                row["table"] = f.read()
        return {"part": part, "section": section, "implementation": implementation, **row,
                "versions": _backend_versions()}
    if section == "core_training":
        return {"part": part, "section": section, "implementation": implementation,
                **run_core_training(preset, implementation, core_data,
                                    os.path.dirname(work_dir)),
                "versions": _backend_versions()}
    if section == "adaptive":
        return {"part": part, "section": section, "implementation": implementation,
                **run_adaptive_peer(sizes, work_dir), "versions": _backend_versions()}
    if section == "output":
        return {"part": part, "section": section, "implementation": implementation,
                **run_output_layer(implementation, sizes, work_dir),
                "versions": _backend_versions()}
    try:
        if implementation.startswith("hf_"):
            row = run_hf(implementation, sizes, n, sizes["steps"], sizes["warmup"])
        else:
            row = run_keras(implementation, sizes, n, sizes["steps"], sizes["warmup"],
                            profile_dir=os.path.join(work_dir, f"profile_{part}"))
    except ImportError as e:  # a peer that is not installed: the table says so
        row = {"error": f"not installed: {e.name or e}"}
    tokens = sizes["lengths"][n] * n
    if "step_s" in row:
        row["tokens_per_s"] = tokens / row["step_s"]
        row["model_tflops"] = flops_per_token(sizes, n) * row["tokens_per_s"] / 1e12
    return {"part": part, "section": section, "implementation": implementation, "n": n,
            "batch": sizes["lengths"][n], "tokens_per_step": tokens,
            "masked_per_sequence": masked_per_sequence(n), "precision": "bf16",
            "steps": sizes["steps"], "warmup": sizes["warmup"], **row,
            "versions": _backend_versions()}


# ------------------------------------------------------------------ the runner


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


def _fmt_memory(row):
    b = row.get("peak_memory_bytes")
    return f"{b / 2**30:.1f} GiB" if b else "n/a"


def tables(preset, rows):
    """The Markdown tables of the parts done so far."""
    sizes = PRESETS[preset]
    by_part = {r["part"]: r for r in rows}
    lines = []
    if any(r["section"] == "peers" for r in rows):
        lines += [f"### BERT MLM training step (bf16; {sizes['layers']} layers, width "
                  f"{sizes['hidden']}, {sizes['heads']} heads, FFN {sizes['intermediate']}, "
                  f"vocabulary {sizes['vocabulary']:,}; median of {sizes['steps']} steps "
                  f"after {sizes['warmup']})", ""]
    for n in sizes["lengths"]:
        if not any(f"bert_{i}_{n}" in by_part for i in ("tfeff_jax", "keras_hub_jax", "hf_torch",
                                                         "hf_torch_compile", "tfeff_torch",
                                                         "keras_hub_torch")):
            continue
        lines += [f"n = {n}, batch {sizes['lengths'][n]}, {masked_per_sequence(n)} masked "
                  "per sequence:", "",
                  "| implementation | parameters | step ms | tokens/s | vs Hugging Face "
                  "eager | peak memory | MFU |", "|---|---|---|---|---|---|---|"]
        reference = by_part.get(f"bert_hf_torch_{n}", {}).get("step_s")
        for part, _, section, implementation, length in _parts(preset):
            if section != "peers" or length != n or part not in by_part:
                continue
            r = by_part[part]
            if "step_s" not in r:
                lines.append(f"| {LABELS[implementation]} | {r['error']} | | | | | |")
                continue
            peak = r.get("peak_flops")
            mfu = (f"{100 * r['model_tflops'] * 1e12 / peak:.1f}%" if peak else "n/a")
            ratio = f"{reference / r['step_s']:.2f}x" if reference else "n/a"
            lines.append(f"| {LABELS[implementation]} | {r['params'] / 1e6:.1f}M | "
                         f"{1000 * r['step_s']:.1f} | {r['tokens_per_s']:,.0f} | {ratio} | "
                         f"{_fmt_memory(r)} | {mfu} |")
        lines.append("")
    core = []
    for n in sizes["lengths"]:
        standard = by_part.get(f"bert_tfeff_jax_{n}", {})
        relaxed = by_part.get(f"core_relaxed_jax_{n}", {})
        if "step_s" in standard and "step_s" in relaxed:
            core.append(f"| {n} | {1000 * standard['step_s']:.1f} | "
                        f"{1000 * relaxed['step_s']:.1f} | "
                        f"{standard['step_s'] / relaxed['step_s']:.2f}x | "
                        f"{_fmt_memory(standard)} | {_fmt_memory(relaxed)} |")
    if core:
        lines += ["### CoRe: relaxed vs standard BERT training step (tfeff, JAX, bf16)", "",
                  "| n | standard ms | relaxed ms | standard / relaxed | standard memory | "
                  "relaxed memory |", "|---|---|---|---|---|---|", *core, ""]
    profiled = [(part, implementation, length) for part, _, section, implementation, length
                in _parts(preset) if section in ("peers", "core")
                and ("profile" in by_part.get(part, {})
                     or "profile_error" in by_part.get(part, {}))]
    if profiled:
        from benchmarks import xla_profile

        lines += ["### Where the JAX steps' time goes (`benchmarks/xla_profile.py`)", ""]
        for part, implementation, length in profiled:
            r = by_part[part]
            lines += [f"{LABELS[implementation]}, n={length}:", ""]
            lines += ([f"No profile: {r['profile_error']}"] if "profile_error" in r else
                      [xla_profile.table(r["profile"], r["step_s"])])
            lines.append("")
    output = {name: by_part[f"output_{name}_jax"] for name in OUTPUT_MODELS
              if f"output_{name}_jax" in by_part}
    if output:
        lines += [f"### Output layers at a {sizes['word_vocabulary']:,}-word vocabulary "
                  "(ELMo encoder, JAX, bf16)", "",
                  "| model | parameters | step ms | words/s | / ELMo-C step | paper | "
                  "peak memory | MFU |", "|---|---|---|---|---|---|---|---|"]
        base = output.get("elmo_c", {}).get("step_s")
        for name, r in output.items():
            label, paper = OUTPUT_MODELS[name]
            ratio = f"{r['step_s'] / base:.2f}x" if base else "n/a"
            mfu = f"{100 * r['mfu']:.1f}%" if r.get("mfu") else "n/a"
            lines.append(f"| {label} | {r['params'] / 1e6:.1f}M | {1000 * r['step_s']:.1f} | "
                         f"{r['tokens_per_s']:,.0f} | {ratio} | "
                         f"{f'{paper:.2f}x' if paper else '1'} | {_fmt_memory(r)} | {mfu} |")
        if "elmo_c" in output:
            words = output["elmo_c"]["tokens_per_s"]
            lines += ["", f"ELMo-C: {words:,.0f} words/s against the target of "
                      f"{ELMO_C_TARGET_WORDS_PER_S:,} on one H100 "
                      f"({words / ELMO_C_TARGET_WORDS_PER_S:.2f} of it)."]
            if output["elmo_c"].get("profile_error"):
                lines += ["", f"No profile of ELMo-C's step: {output['elmo_c']['profile_error']}"]
            elif output["elmo_c"].get("profile"):
                from benchmarks import xla_profile

                lines += ["", f"What limits ELMo-C's step (a trace of "
                          f"{output['elmo_c']['profile']['steps']} steps, "
                          "`benchmarks/xla_profile.py`):", "",
                          xla_profile.table(output["elmo_c"]["profile"],
                                            output["elmo_c"]["step_s"])]
        lines.append("")
    peer = by_part.get("output_adaptive_torch")
    if peer:
        lines += ["### ELMo-A's adaptive softmax against PyTorch's `AdaptiveLogSoftmaxWithLoss` "
                  f"({peer['word_vocabulary']:,} words, cutoffs {peer['cutoffs']}; same "
                  "encoder under bf16 autocast, torch backend; output layers in float32)",
                  "",
                  "| output layer | parameters | step ms | words/s | / PyTorch's |",
                  "|---|---|---|---|---|"]
        for name, label in (("tfeff", "tfeff `AdaptiveSoftmax`"),
                            ("torch", "`torch.nn.AdaptiveLogSoftmaxWithLoss`")):
            step = peer[f"{name}_step_s"]
            ratio = f"{peer['tfeff_over_torch']:.2f}x" if name == "tfeff" else "1"
            lines.append(f"| {label} | {peer[f'{name}_params'] / 1e6:.1f}M | "
                         f"{1000 * step:.1f} | {peer['tokens_per_step'] / step:,.0f} | "
                         f"{ratio} |")
        lines.append("")
    speed, parity = by_part.get("lstm_speed_torch"), by_part.get("lstm_parity_torch")
    if speed or parity:
        lines += ["### Masked ELMo's encoder (`MaskedBiLSTM`, torch backend)", ""]
        if speed:
            lines += [speed.get("table") or f"`benchmarks/lstm.py` exited "
                      f"{speed['returncode']}:\n\n```text\n{speed['output']}\n```", ""]
        if parity:
            verdict = ("equal to the portable path (outputs, states, gradients)"
                       if parity["returncode"] == 0 else
                       f"FAILED (exit {parity['returncode']}):\n\n```text\n"
                       f"{parity['output']}\n```")
            lines += [f"Parity of the torch LSTM path on {sizes['device']}: {verdict}", ""]
    lines += core_training_table(by_part)
    return "\n".join(lines)


def core_training_summary(by_part):
    """The comparison of section 3 once both runs are in, else None: the target (the
    standard run's final held-out loss), the time each run first reaches it (and the
    standard's best loss), and their ratios."""
    from benchmarks import core_training

    standard = by_part.get("core_train_standard_jax")
    two = by_part.get("core_train_two_phase_jax")
    if not standard or not two:
        return None
    final = standard["points"][-1]["loss"]
    best = min(p["loss"] for p in standard["points"])
    out = {"target": final, "best": best}
    for name, row in (("standard", standard), ("two_phase", two)):
        out[name] = {"to_final_s": core_training.first_reach(row["points"], final),
                     "to_best_s": core_training.first_reach(row["points"], best)}
    for key in ("to_final_s", "to_best_s"):
        a, b = out["two_phase"][key], out["standard"][key]
        out[f"ratio_{key}"] = a / b if a is not None and b else None
    return out


def core_training_table(by_part):
    """Section 3's Markdown lines (one table per finished run, the comparison once both are
    in)."""
    runs = [(label, by_part[part]) for label, part in (
        ("standard", "core_train_standard_jax"), ("two-phase", "core_train_two_phase_jax"))
        if part in by_part]
    if not runs:
        return []
    sizes = runs[0][1]["sizes"]
    lines = [f"### CoRe: two-phase vs standard training ({sizes['layers']} layers, width "
             f"{sizes['hidden']}, FFN {sizes['intermediate']}, {sizes['position_embedding']} "
             f"positions; relaxed: {sizes['relaxed']['num_anchors']} anchors, FFN rank "
             f"{sizes['relaxed']['ffn_rank']}; n = {runs[0][1]['sequence_length']}, batch "
             f"{sizes['batch']}, AdamW {sizes['learning_rate']:g}; "
             f"{runs[0][1]['train_windows']:,} training windows of "
             f"`{os.path.basename(runs[0][1]['core_data'])}`; JAX, bf16)", "",
             "| run | steps | switch at step | training s | ms/step relaxed | "
             "ms/step standard | final held-out loss | best |", "|---|---|---|---|---|---|---|---|"]
    for label, r in runs:
        switch = r["switch"]
        ms = {k: f"{1000 * v:.1f}" if v else "" for k, v in r["median_step_s"].items()}
        steps = (f"{r['steps']:,}" if r["steps"] == r["planned_steps"] else
                 f"{r['steps']:,} of {r['planned_steps']:,} (time budget)")
        lines.append(f"| {label} | {steps} | "
                     f"{switch['step'] if switch else ''} | {r['train_seconds']:.0f} | "
                     f"{ms['relaxed']} | {ms['standard']} | {r['points'][-1]['loss']:.3f} | "
                     f"{min(p['loss'] for p in r['points']):.3f} |")
    lines.append("")
    summary = core_training_summary(by_part)
    two = by_part.get("core_train_two_phase_jax")
    if two:
        switch = two["switch"]
        errors = ", ".join(f"{k} {v:.1e}" for k, v in switch["relative_errors"].items())
        lines += [f"The switch at step {switch['step']} ({switch['seconds']:.0f} s): "
                  f"`merge_relaxed_bert` took {switch['merge_s']:.1f} s, its float32 check "
                  f"passed (relative errors {errors}; it refuses above the float32 rounding "
                  f"bound of the model's longest path).", ""]
    if summary:
        def seconds(value):
            return f"{value:.0f} s" if value is not None else "not reached"

        def ratio(value):
            return f"{value:.2f}" if value is not None else "n/a"

        lines += [
            f"Time to the standard run's final held-out loss ({summary['target']:.3f}): "
            f"standard {seconds(summary['standard']['to_final_s'])}, two-phase "
            f"{seconds(summary['two_phase']['to_final_s'])}, ratio "
            f"{ratio(summary['ratio_to_final_s'])} (the paper: about 0.75). To the standard "
            f"run's best ({summary['best']:.3f}): standard "
            f"{seconds(summary['standard']['to_best_s'])}, two-phase "
            f"{seconds(summary['two_phase']['to_best_s'])}, ratio "
            f"{ratio(summary['ratio_to_best_s'])}.", ""]
    return lines


def write_results(out, preset, command, environment):
    """`OUT/results.json` and `OUT/results.md` from every part's file so far."""
    rows = []
    for part, *_ in _parts(preset):
        path = os.path.join(out, "parts", f"{part}.json")
        if os.path.exists(path):
            with open(path, encoding="utf-8") as f:
                rows.append(json.load(f))
    date = _utc_now()
    data = {"date": date, "command": command, "preset": preset, "environment": environment,
            "rows": rows}
    summary = core_training_summary({r["part"]: r for r in rows})
    if summary:
        from benchmarks import core_training

        data["core_training"] = summary
        by_part = {r["part"]: r for r in rows}
        two = by_part["core_train_two_phase_jax"]
        data["core_training"]["png"] = core_training.plot(
            os.path.join(out, "core_training.png"),
            {"standard": by_part["core_train_standard_jax"]["points"],
             "two-phase (relaxed, then merged)": two["points"]},
            two["switch"]["seconds"], summary["target"],
            "CoRe two-phase vs standard BERT training")
    gpus = ", ".join(environment["gpus"]) or "no NVIDIA GPU (nvidia-smi)"
    versions = ", ".join(f"{k} {v}" for k, v in environment["packages"].items() if v)
    text_png = ""
    if summary:
        text_png = ("\nBoth curves: `core_training.png`.\n" if data["core_training"]["png"]
                    else "\nNo PNG (matplotlib is not installed here): rerun the same command "
                    "on this folder where it is, to draw it.\n")
    finished = sorted(r["finished"] for r in rows if "finished" in r)
    when = (f"parts measured {finished[0]} to {finished[-1]}" if finished else "no part yet")
    text = (f"# tfeff GPU measurements ({preset} preset)\n\n"
            f"Written {date} ({when}); `{command}`\n\nDevice: {gpus}; Python "
            f"{environment['python']}, {environment['cpu_count']} CPU cores; {versions}.\n\n" + tables(preset, rows)
            + text_png)
    harness.write_text_atomic(os.path.join(out, "results.json"), json.dumps(data, indent=1))
    harness.write_text_atomic(os.path.join(out, "results.md"), text)
    return rows


def _utc_now():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


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
        result = run_part(args.preset, args.run_part, work_dir, core_data)
        result["finished"] = _utc_now()
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
        write_results(out, args.preset, command, environment)
        if args.archive:
            write_archive(out, args.archive)

    failed, left = runner.run_parts(
        [(part, _part_command(args.preset, out, core_data, part), _part_environment(backend))
         for part, backend, *_ in _parts(args.preset) if part in chosen],
        out, limit, args.deadline_s, after_each)
    write_results(out, args.preset, command, environment)
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
