"""Training-step speed of the paper-size models, on whatever Keras backend is available.

Runs where users pretrain: on a GPU machine with JAX (or PyTorch, or
TensorFlow), on synthetic batches, without TensorFlow when the backend is not
TensorFlow (the models come from `tfeff.models.from_config`, the configs from
`configs/*.yaml`). For every model and precision (fp32; bf16 = Keras'
`mixed_bfloat16`) it compiles one training step (`model.compile(jit_compile=True)`,
Adam) and reports the median step time of `--steps` timed steps after
`--warmup`, tokens (words) per second, peak device memory, parameters, and
model FLOP utilisation (MFU) against the device's dense bf16 peak.

FLOPs per token are the usual estimate: 6 x the dense (non-embedding)
trainable parameters (forward + backward, each weight used once per token and
direction), plus for BERT and the transformer LMs the attention matmuls (12 x
layers x length x width, per direction; causal masks are not discounted) and the tied masked-LM decoder at the masked positions (6 x V x width x
predictions / length; Masked ELMo's tied softmax alike); Masked ELMo runs
each token once per mask set (x `mask_accumulation`); an adaptive softmax's
tails are counted on every token (an upper bound). Tokens per step are the
batch's tokens, whatever the number of mask sets. Off TensorFlow, SAMPLED
draws its negatives with replacement (`tfeff.layers.sampled_softmax`), at
the cost of TensorFlow's distinct draws.

    KERAS_BACKEND=jax python -m benchmarks.gpu --preset paper --output_dir runs/bench
    python -m benchmarks.gpu --preset cpu     # demo sizes: minutes on a CPU

Presets: `paper` (configs/elmo_c.yaml etc.; word models at an 800K vocabulary,
the setting of Li et al.'s Table 4) and `cpu` (configs/demo_*.yaml at a 5K
vocabulary, a few steps).
"""

import os
import platform

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

from absl import app  # noqa: E402
from absl import flags  # noqa: E402
import keras  # noqa: E402

from benchmarks import harness  # noqa: E402
from tfeff.config import load_config  # noqa: E402
from tfeff.models import from_config  # noqa: E402

# name -> (paper config, demo config, what the model is)
MODELS = {
    "elmo_c": ("elmo_c", "demo_elmo_c", "ELMo-C: fixed fastText in, continuous cosine out"),
    "elmo_a": ("elmo_a", "demo_elmo_a", "ELMo-A: adaptive softmax"),
    "elmo_sampled": ("elmo_sampled", "demo_elmo_sampled", "SAMPLED: sampled softmax"),
    "elmo_sub": ("elmo_sub", "demo_elmo_sub", "ELMo-Sub: WordPiece, tied full softmax"),
    "bert_base": ("bert_base", "demo_bert", "BERT-base, standard"),
    "bert_relaxed": ("bert_base_core_n128", "demo_bert_core",
                     "BERT-base, CoRe relaxed phase (n = 128)"),
    "masked_elmo": ("masked_elmo", "demo_masked_elmo", "Masked ELMo"),
    "transformer_lm_gpt": ("transformer_lm_gpt", "demo_transformer_lm",
                           "GPT-size causal transformer LM (n = 512), continuous out"),
}
# The paper preset times each step at fixed shapes, whatever a config's training batch
# (elmo_c.yaml trains 3,072 windows a step, four cards' worth): the ELMo models as the
# published figures were measured (docs/benchmarks.md), at 128 windows of 20 words,
# without the cell clipping and averaged directions the configs have since, and ELMo-A
# with the adaptive divisor 4.
_AS_PUBLISHED = ["data.batch_size=128", "model.cell_clip=0", "model.proj_clip=0",
                 "model.direction_loss=sum"]
PAPER_OVERRIDES = {
    "elmo_c": _AS_PUBLISHED,
    "elmo_a": _AS_PUBLISHED + ["model.adaptive_div_value=4.0"],
    "elmo_sampled": _AS_PUBLISHED,
    "elmo_sub": _AS_PUBLISHED,
}
# The language models of word (or WordPiece) id windows, by config family: their builder.
LM_BUILDERS = {"elmo": from_config.elmo_lm, "transformer_lm": from_config.transformer_lm}
PRESETS = {
    "paper": dict(word_vocabulary=800_000, steps=20, warmup=3, config=0),
    "cpu": dict(word_vocabulary=5_000, steps=3, warmup=1, config=1),
}
# Dense bf16 peak FLOP/s (without sparsity) by device-name fragment.
PEAK_BF16 = {"H200": 989e12, "H100": 989e12, "A100": 312e12, "L4": 121e12}


def model_config(name, preset):
    """The config a preset times `name` with: its paper config at `PAPER_OVERRIDES`'
    shapes (`paper`), or its demo config (`cpu`)."""
    paper, demo, _ = MODELS[name]
    if preset == "paper":
        return load_config(os.path.join(REPO, "configs", paper + ".yaml"),
                           PAPER_OVERRIDES.get(name, []))
    return load_config(os.path.join(REPO, "configs", demo + ".yaml"))


def device_info():
    """`(name, peak bf16 FLOP/s or None)` of the first accelerator, else the CPU."""
    backend = keras.backend.backend()
    name = None
    if backend == "jax":
        import jax

        device = jax.devices()[0]
        name = device.device_kind if device.platform != "cpu" else None
    elif backend == "torch":
        import torch

        name = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    elif backend == "tensorflow":
        import tensorflow as tf

        gpus = tf.config.list_physical_devices("GPU")
        if gpus:
            name = tf.config.experimental.get_device_details(gpus[0]).get("device_name")
    if name is None:
        return f"CPU ({platform.processor() or platform.machine()}, {os.cpu_count()} cores)", None
    peak = next((v for k, v in PEAK_BF16.items() if k in name), None)
    return name, peak


def reset_peak_memory():
    if keras.backend.backend() == "torch":
        import torch

        if torch.cuda.is_available():
            torch.cuda.reset_peak_memory_stats()


def peak_memory_bytes():
    """Peak device memory in use since the process (JAX) or the last reset; None on CPU."""
    backend = keras.backend.backend()
    if backend == "jax":
        import jax

        stats = jax.devices()[0].memory_stats() or {}
        return stats.get("peak_bytes_in_use")
    if backend == "torch":
        import torch

        return torch.cuda.max_memory_allocated() if torch.cuda.is_available() else None
    import tensorflow as tf

    if tf.config.list_physical_devices("GPU"):
        return tf.config.experimental.get_memory_info("GPU:0")["peak"]
    return None


def build(name, config, vocabulary, rng, work_dir):
    """`(model, batch, tokens per step)` of one model at its config's batch shape."""
    d = config.data
    if config.family in LM_BUILDERS:
        vectors = None
        if d.tokenization == "word":
            path = os.path.join(work_dir, f"{name}_{vocabulary}_table.npy")
            if not os.path.exists(path):
                table = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32,
                                                  shape=(vocabulary, config.fasttext.dim))
                for start in range(0, vocabulary, 100_000):
                    stop = min(vocabulary, start + 100_000)
                    table[start:stop] = rng.normal(size=(stop - start, config.fasttext.dim))
                table[0] = 0.0
                del table
            vectors = path
        else:
            vocabulary = d.wordpiece_vocabulary_size
        model = LM_BUILDERS[config.family](config, vocabulary, vectors)
        batch = harness.zipf_ids(rng, (d.batch_size, d.max_sequence_length), vocabulary, low=2)
        batch[:, 0] = 2  # <s>
        return model, batch, batch.size
    if config.family == "bert":
        vocabulary = d.wordpiece_vocabulary_size
        model = from_config.bert(config, vocabulary, relaxed=config.model.relaxed is not None)
        b, n, p = d.batch_size, d.max_sequence_length, d.max_predictions_per_seq
        batch = harness.mlm_batch(rng, b, n, vocabulary, p)
        if config.model.use_nsp:
            batch["nsp_labels"] = rng.integers(0, 2, size=(b,)).astype("int32")
        return model, batch, b * n
    vocabulary = d.wordpiece_vocabulary_size
    model = from_config.masked_elmo(config, vocabulary)
    b, n, p = d.batch_size, d.max_sequence_length, d.max_predictions_per_seq
    k = config.model.mask_accumulation
    positions = np.sort(np.stack([rng.choice(n, p * k, replace=False) for _ in range(b)]),
                        -1).reshape(b, p, k).transpose(0, 2, 1).astype("int32")  # disjoint sets
    ids = harness.zipf_ids(rng, (b, n), vocabulary, low=5)
    masked = np.repeat(ids[:, None, :], k, axis=1)
    np.put_along_axis(masked, positions, 4, axis=2)  # [MASK]
    batch = {"masked_token_ids": masked, "masked_positions": positions,
             "masked_ids": np.take_along_axis(ids[:, None, :].repeat(k, 1), positions, 2),
             "masked_weights": np.ones((b, k, p), "float32"),
             "padding_mask": np.ones((b, n), "int32"), "reset": np.ones((b,), "int32")}
    return model, batch, b * n


def flops_per_token(model, config):
    """The estimate of the module docstring."""
    dense = sum(int(np.prod(v.shape)) for v in model.trainable_variables
                if "embedding" not in v.path)
    flops = 6.0 * dense
    m, d = config.model, config.data
    if config.family == "bert":
        flops += 12.0 * m.num_layers * d.max_sequence_length * m.hidden_dim
        flops += (6.0 * d.wordpiece_vocabulary_size * m.hidden_dim
                  * d.max_predictions_per_seq / d.max_sequence_length)
    if config.family == "transformer_lm":
        directions = 2 if m.bidirectional else 1
        flops += 12.0 * m.num_layers * d.max_sequence_length * m.hidden_dim * directions
    if config.family == "masked_elmo":
        if m.output_layer == "full":  # tied to the (excluded) input embedding
            flops += (6.0 * d.wordpiece_vocabulary_size * 2 * m.projection_dim
                      * d.max_predictions_per_seq / d.max_sequence_length)
        flops *= m.mask_accumulation
    return flops


def measure(name, config, vocabulary, precision, steps, warmup, work_dir, peak_flops,
            profile_dir=None, profile_steps=3):
    """The timed training step of one model (see `table` for the fields); with
    `profile_dir` on JAX, `profile_steps` more steps are traced there and
    summarized as `profile` (`benchmarks/xla_profile.py`'s `trace_steps`)."""
    keras.config.set_dtype_policy("mixed_bfloat16" if precision == "bf16" else "float32")
    keras.utils.set_random_seed(0)
    try:
        rng = np.random.default_rng(0)
        model, batch, tokens = build(name, config, vocabulary, rng, work_dir)
        model.build()
        model.compile(optimizer=keras.optimizers.Adam(1e-4), jit_compile=True)
        reset_peak_memory()
        median, logs = harness.median_step(  # train_on_batch's floats: synchronized
            lambda: model.train_on_batch(batch, return_dict=True), steps, warmup)
        if not np.isfinite(logs["loss"]):
            raise FloatingPointError(f"{name} {precision}: loss {logs['loss']}")
        profile = {}
        if profile_dir and keras.backend.backend() == "jax":
            from benchmarks import xla_profile

            profile = xla_profile.trace_steps(
                lambda: model.train_on_batch(batch, return_dict=True), profile_steps,
                profile_dir, median)
        flops = flops_per_token(model, config) * tokens / median
        return {"model": name, "precision": precision, "params": model.count_params(),
                "tokens_per_step": tokens, "step_s": median, "tokens_per_s": tokens / median,
                "peak_memory_bytes": peak_memory_bytes(), "model_tflops": flops / 1e12,
                "mfu": flops / peak_flops if peak_flops else None, "loss": float(logs["loss"]),
                **profile}
    finally:
        keras.config.set_dtype_policy("float32")


def table(rows, device, backend, preset):
    lines = [
        f"Training step on {device} ({backend} backend, preset {preset}): median of the timed "
        "steps after warm-up, synthetic batches.",
        "",
        "| model | precision | parameters | tokens/step | step ms | tokens/s | peak memory | "
        "model TFLOP/s | MFU |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        memory = (f"{r['peak_memory_bytes'] / 2**30:.1f} GiB"
                  if r["peak_memory_bytes"] else "n/a")
        mfu = f"{100 * r['mfu']:.1f}%" if r["mfu"] is not None else "n/a"
        lines.append(
            f"| {r['model']} | {r['precision']} | {r['params'] / 1e6:.1f}M | "
            f"{r['tokens_per_step']:,} | {1000 * r['step_s']:.1f} | "
            f"{r['tokens_per_s']:,.0f} | {memory} | {r['model_tflops']:.3g} | {mfu} |")
    timed = {(r["model"], r["precision"]): r["step_s"] for r in rows}
    ratios = []
    for a, b, label, paper in (("elmo_a", "elmo_c", "ELMo-A / ELMo-C", "1.47x"),
                               ("elmo_sampled", "elmo_c", "SAMPLED / ELMo-C", "1.35x"),
                               ("bert_base", "bert_relaxed", "standard / relaxed BERT", "-")):
        for precision in ("fp32", "bf16"):
            if (a, precision) in timed and (b, precision) in timed:
                ratios.append(f"| {label} | {precision} | "
                              f"{timed[(a, precision)] / timed[(b, precision)]:.2f}x | {paper} |")
    if ratios:
        lines += ["", "| step-time ratio | precision | measured | paper (Table 4) |",
                  "|---|---|---|---|", *ratios]
    return "\n".join(lines) + "\n"


def define_flags():
    """The command line's flags, defined when the module runs as the program."""
    harness.define_flags(PRESETS, "paper")
    flags.DEFINE_list("models", list(MODELS), "Models to time (`MODELS`' names).")
    flags.DEFINE_list("precisions", ["fp32", "bf16"], "fp32 and/or bf16 (mixed_bfloat16).")
    flags.DEFINE_integer("steps", None, "Timed steps (default: the preset's).")
    flags.DEFINE_integer("warmup", None, "Untimed steps first (default: the preset's).")
    flags.DEFINE_integer("word_vocabulary", None, "Words of the word-level models "
                         "(default: the preset's).")


def main(argv):
    del argv
    FLAGS = flags.FLAGS
    unknown = [name for name in FLAGS.models if name not in MODELS]
    if unknown:
        raise app.UsageError(f"unknown model {unknown[0]!r}; one of {', '.join(MODELS)}")
    preset = PRESETS[FLAGS.preset]
    steps = FLAGS.steps or preset["steps"]
    warmup = FLAGS.warmup if FLAGS.warmup is not None else preset["warmup"]
    vocabulary = FLAGS.word_vocabulary or preset["word_vocabulary"]
    work_dir = os.path.join(FLAGS.output_dir, "gpu_tables")  # the random vector tables, reused
    os.makedirs(work_dir, exist_ok=True)
    backend = keras.backend.backend()
    device, peak = device_info()
    print(f"{device}, {backend} backend, dense bf16 peak "
          f"{peak / 1e12 if peak else 'unknown'} TFLOP/s", flush=True)
    rows = []
    for name in FLAGS.models:
        config = model_config(name, FLAGS.preset)
        for precision in FLAGS.precisions:
            row = measure(name, config, vocabulary, precision, steps, warmup, work_dir, peak)
            rows.append(row)
            print(f"{name} {precision}: {1000 * row['step_s']:.1f} ms/step, "
                  f"{row['tokens_per_s']:,.0f} tokens/s, loss {row['loss']:.3f}", flush=True)
    text = table(rows, device, backend, FLAGS.preset)
    print(text)
    harness.write_results(FLAGS.output_dir, "gpu", text, {
        "device": device, "backend": backend, "preset": FLAGS.preset,
        "keras": keras.__version__, "rows": rows})


if __name__ == "__main__":
    define_flags()
    app.run(main)
