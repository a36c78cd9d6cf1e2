"""Input-pipeline throughput of every model family vs what training consumes.

For each shipped demo config (every registered family's) the training input of `tfeff-pretrain` (the same functions
and config values: read, tokenize, vocabulary lookup, fixed-vector gather,
masking, batching, prefetch) runs alone on this machine and is timed in
tokens per second (non-padding tokens of the batches). It is compared with

* the **demo model's** consumption on this machine: the median step time of
  its `train_step` on cached batches (no input work), measured side by side;
  target: pipeline >= 10x the demo model's consumption;
* the **paper-size model** on one accelerator, computed from FLOPs: a step
  costs ~6 FLOPs per dense parameter per token (forward + backward), plus
  the softmax over the vocabulary at predicted positions for MLM families;
  the accelerator delivers `--accelerator_tflops` (default 200: an H100 in
  bf16 at ~20% of its dense peak; LSTMs reach less, which only lowers what
  they consume).

    python -m benchmarks.pipeline [--output_dir runs/bench] \
        [--configs demo_elmo_c.yaml,demo_bert.yaml]
"""

import glob
import os
import statistics

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from absl import app  # noqa: E402
from absl import flags  # noqa: E402
import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from benchmarks import harness  # noqa: E402
from tfeff import data as data_lib  # noqa: E402
from tfeff.config import load_config  # noqa: E402
from tfeff.training import build_model  # noqa: E402
from tfeff.training import get_family  # noqa: E402
from tfeff.training.optimizers import make_optimizer  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def demo_configs():
    """`{demo config: paper config}` of every registered family's shipped demos: the
    paper config `X.yaml` of `demo_X.yaml`, else the family's first paper-size config."""
    configs = sorted(os.path.basename(p) for p in glob.glob(os.path.join(REPO, "configs",
                                                                         "*.yaml")))
    family = {name: _config(name).family for name in configs}
    pairs = {}
    for demo in (n for n in configs if n.startswith("demo_")):
        paper = demo[len("demo_"):]
        if paper not in family:
            paper = next(n for n in configs
                         if not n.startswith("demo_") and family[n] == family[demo])
        pairs[demo] = paper
    return pairs


def _config(name, overrides=()):
    return load_config(os.path.join(REPO, "configs", name), list(overrides))


def _tokens(batch):
    if isinstance(batch, tuple):
        batch = batch[0]
    if isinstance(batch, dict):
        return int(tf.reduce_sum(tf.cast(batch["padding_mask"], tf.int64)))
    return int(tf.math.count_nonzero(batch))


def _family_setup(config, model_dir):
    """`(input, batches, build_model)`: the timed input, the model's batches and its factory."""
    family = get_family(config)
    artifacts = family.prepare_data(config, model_dir)
    ds = family.train_dataset(config, artifacts)
    timed = ds
    if artifacts.vectors_path:
        # The model gathers the batch's fixed vectors from the host table: time it too.
        table = tf.constant(data_lib.load_vocabulary_vectors(artifacts.vectors_path))
        timed = ds.map(lambda ids: (ids, tf.gather(table, ids)),
                       num_parallel_calls=tf.data.AUTOTUNE)
    return timed, ds, lambda: family.build_model(config, artifacts.vocabulary_size,
                                                 artifacts.vectors_path)


def pipeline_tokens_per_second(ds, batches, repeats):
    """Median tokens per second of `repeats` rounds of `batches` batches each."""
    iterator = iter(ds)
    for _ in range(3):
        next(iterator)  # warm-up: tables, tracing, prefetch
    tokens = []

    def run():
        tokens.append(sum(_tokens(next(iterator)) for _ in range(batches)))

    seconds = harness.interleaved_times({"pipeline": run}, repeats, warmup=0)
    return statistics.median(n / t for n, t in zip(tokens, seconds["pipeline"]))


def model_tokens_per_second(config, build, ds, steps):
    cached = list(ds.take(4))
    tokens = statistics.mean(_tokens(b) for b in cached)
    model = build()
    model.build()
    optimizer = make_optimizer(config.train, config.data.batch_size)
    optimizer.build(model.trainable_variables)
    model.compile(optimizer=optimizer, jit_compile=False)
    x = tf.data.Dataset.from_tensor_slices(
        tf.nest.map_structure(lambda *t: tf.stack(t), *cached)).repeat()
    timer = harness.training_clock()
    model.fit(x, steps_per_epoch=steps + 3, epochs=1, verbose=0, callbacks=[timer])
    return tokens / statistics.median(timer.step_seconds[3:])


def paper_flops_per_token(config, work_dir):
    """~6 x dense parameters (+ the MLM softmax at masked positions), per input token."""
    d, m = config.data, config.model
    vocabulary = d.wordpiece_vocabulary_size
    vectors, rows = None, vocabulary
    if get_family(config).uses_vectors(config):
        # Word models need a table; its rows do not count (embeddings are excluded).
        vectors, rows = os.path.join(work_dir, "paper_table.npy"), 16
        np.save(vectors, np.zeros((rows, config.fasttext.dim), np.float32))
    model = build_model(config, rows, vectors)
    model.build()
    dense = sum(int(np.prod(v.shape)) for v in model.trainable_variables
                if "embedding" not in v.path and "embeddings" not in v.path
                and v.shape and np.prod(v.shape) and max(v.shape) != vocabulary)
    flops = 6.0 * dense
    if hasattr(d, "mask_rate"):  # a masked LM
        width = getattr(m, "hidden_dim", None) or 2 * m.projection_dim
        flops += 6.0 * width * vocabulary * d.mask_rate
    elif m.output_layer not in ("continuous",):
        # Softmax-like outputs over the vocabulary, both directions (adaptive: the head only).
        width = m.projection_dim
        flops += 2 * 6.0 * width * (m.adaptive_cutoffs[0] if m.adaptive_cutoffs else vocabulary)
    return flops, dense


def define_flags():
    """The command line's flags, defined when the module runs as the program."""
    harness.define_flags()
    flags.DEFINE_integer("batches", 20, "Batches per pipeline measurement.")
    flags.DEFINE_integer("repeats", 5, "Pipeline measurements (median).")
    flags.DEFINE_integer("steps", 15, "Timed training steps of each demo model.")
    flags.DEFINE_float("accelerator_tflops", 200.0, "Effective TFLOP/s of the paper models' "
                       "accelerator.")
    flags.DEFINE_list("configs", None, "Demo configs (default: every demo_*.yaml).")


def main(argv):
    del argv
    args = flags.FLAGS
    work_dir = os.path.join(args.output_dir, "pipeline")  # the demo runs' data, reused
    keras.utils.set_random_seed(0)
    rows = []
    pairs = demo_configs()
    for demo_name in (args.configs or pairs):
        paper_name = pairs[demo_name]
        config = _config(demo_name)
        label = f"{get_family(config).label} ({demo_name[:-len('.yaml')]})"
        model_dir = os.path.join(work_dir, demo_name.replace(".yaml", ""))
        os.makedirs(model_dir, exist_ok=True)
        timed, ds, build = _family_setup(config, model_dir)
        pipe = pipeline_tokens_per_second(timed, args.batches, args.repeats)
        demo = model_tokens_per_second(config, build, ds, args.steps)
        flops, dense = paper_flops_per_token(_config(paper_name), work_dir)
        paper = args.accelerator_tflops * 1e12 / flops
        rows.append((label, pipe, demo, pipe / demo, dense, paper, pipe / paper))
        print(f"{label}: pipeline {pipe:,.0f} tok/s, demo model {demo:,.0f} tok/s "
              f"({pipe / demo:.1f}x); paper model {paper:,.0f} tok/s ({pipe / paper:.2f}x)",
              flush=True)
    lines = [
        f"Input pipeline vs training consumption ({os.cpu_count()} CPU cores for the "
        f"pipeline; paper models at {args.accelerator_tflops:g} effective TFLOP/s)",
        "",
        "| family | pipeline tok/s | demo model tok/s (this CPU) | headroom | paper dense "
        "params | paper model tok/s (1 accelerator) | headroom |",
        "|---|---|---|---|---|---|---|",
    ]
    for label, pipe, demo, h1, dense, paper, h2 in rows:
        lines.append(f"| {label} | {pipe:,.0f} | {demo:,.0f} | {h1:.1f}x | {dense / 1e6:.1f}M "
                     f"| {paper:,.0f} | {h2:.2f}x |")
    table = "\n".join(lines)
    print(table)
    harness.write_results(args.output_dir, "pipeline", table + "\n", {
        "accelerator_tflops": args.accelerator_tflops, "rows": [dict(zip(
            ("family", "pipeline_tokens_per_s", "demo_tokens_per_s", "demo_headroom",
             "paper_dense_parameters", "paper_tokens_per_s", "paper_headroom"), row))
            for row in rows]})


if __name__ == "__main__":
    define_flags()
    app.run(main)
