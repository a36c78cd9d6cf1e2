"""The GPU suite's parts: what each one measures, in its own process.

`benchmarks/gpu_suite.py` lists the parts of a preset and runs each with
`--run_part`, which calls `run_part` here; its module docstring says what the
sections measure. Keras, JAX, PyTorch and the peers are imported inside the
parts, so that the suite's own process imports none of them.
"""

import json
import os
import subprocess
import sys

import numpy as np

from benchmarks import harness

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MASKING_RATE = 0.15


def _lstm_command(what, sizes, work_dir):
    """The command line of an `lstm` part (run from the repository root)."""
    if what == "speed":
        return [sys.executable, "-m", "benchmarks.lstm", "--preset",
                sizes["lstm_preset"], "--repeats", str(sizes["lstm_repeats"]), "--output_dir",
                work_dir]
    return [sys.executable, "-m", "tfeff.testing.torch_lstm_parity", "--device", sizes["device"]]


# name -> (what it is, the paper's step time relative to ELMo-C, Table 4)
OUTPUT_MODELS = {"elmo_c": ("ELMo-C: continuous output", None),
                 "elmo_a": ("ELMo-A: adaptive softmax", 1.47),
                 "elmo_sampled": ("SAMPLED: sampled softmax", 1.35)}
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


def run_core_training(sizes, implementation, core_data, out):
    """Section 3: standard or two-phase CoRe training (benchmarks/core_training.py) on the
    arrays file; the two-phase run takes the standard run's steps."""
    from benchmarks import core_training

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
    width = (model.pre_output.units if model.pre_output is not None
             else model.backbone.width)
    peer = torch.nn.AdaptiveLogSoftmaxWithLoss(
        width, vocabulary, list(config.model.adaptive_cutoffs),
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


def run_part(sizes, spec, work_dir, core_data=None):
    """Runs one part in this process (its backend already chosen): `spec` is
    `(part, backend, section, implementation, n)` (`gpu_suite`'s list), `sizes` its
    preset's. Returns the dict of the part's file."""
    part, backend, section, implementation, n = spec
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
                **run_core_training(sizes["core_training"], implementation, core_data,
                                    os.path.dirname(work_dir)),
                "versions": _backend_versions()}
    if section == "adaptive":
        return {"part": part, "section": section, "implementation": implementation,
                **run_adaptive_peer(sizes, work_dir), "versions": _backend_versions()}
    if section == "output":
        return {"part": part, "section": section, "implementation": implementation,
                **run_output_layer(implementation, sizes, work_dir),
                "versions": _backend_versions()}
    if section == "speed":
        from benchmarks import paper_speed

        return {"part": part, "section": section, "implementation": implementation,
                **paper_speed.run(implementation, sizes, work_dir),
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
