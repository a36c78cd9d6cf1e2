"""AloneEmbedding lookup cost: per distinct id, per token, or the whole table.

One training step of the embedding alone (lookup, a scalar loss, gradients of
o and the FFN) on a `--batch` x `--length` batch of Zipfian ids, for the three
`lookup` modes of `tfeff.layers.AloneEmbedding`, measured side by side in one
process (interleaved rounds, median seconds):

    unique  the FFN runs once per distinct id of the batch, then a gather
    token   the FFN runs once per token (the naive path)
    table   the FFN runs on all V ids (what a tied softmax computes anyway)

and, for reference, a conventional `keras.layers.Embedding` of the same
vocabulary. Defaults: the paper's WMT sizes (V = 37000, D_e = D_o = 512,
D_inter = 4096) and a 128 x 128 batch.

    python -m benchmarks.alone                   # make bench
    python -m benchmarks.alone --intermediate_dim 1024 --rounds 3
"""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import platform  # noqa: E402

from absl import app  # noqa: E402
from absl import flags  # noqa: E402
import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from benchmarks import harness  # noqa: E402

from tfeff.layers import AloneEmbedding  # noqa: E402

FLAGS = flags.FLAGS


def define_flags():
    """The command line's flags, defined when the module runs as the program."""
    harness.define_flags()
    flags.DEFINE_integer("vocabulary_size", 37000, "V.")
    flags.DEFINE_integer("output_dim", 512, "D_e.")
    flags.DEFINE_integer("base_dim", 512, "D_o.")
    flags.DEFINE_integer("intermediate_dim", 4096, "D_inter.")
    flags.DEFINE_integer("batch", 128, "Sequences per batch.")
    flags.DEFINE_integer("length", 128, "Tokens per sequence.")
    flags.DEFINE_float("zipf", 1.2, "Zipf exponent of the ids.")
    flags.DEFINE_integer("rounds", 5, "Timed rounds (each runs every mode once, interleaved).")


def make_step(layer):
    @tf.function
    def step(ids):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(layer(ids, training=True)))
        return loss, tape.gradient(loss, layer.trainable_variables)
    return step


def main(argv):
    del argv
    v = FLAGS.vocabulary_size
    rng = np.random.default_rng(0)
    ranks = harness.zipf_ids(rng, (FLAGS.batch, FLAGS.length), v, low=1, exponent=FLAGS.zipf)
    ids = tf.constant(ranks, tf.int32)
    distinct = len(np.unique(ranks))
    steps = {}
    for lookup in ("unique", "token", "table"):
        layer = AloneEmbedding(v, FLAGS.output_dim, FLAGS.base_dim, FLAGS.intermediate_dim,
                               seed=0, lookup=lookup, name=f"alone_{lookup}")
        layer.build()
        steps[lookup] = make_step(layer)
    table = keras.layers.Embedding(v, FLAGS.output_dim, name="table")
    table.build((None, None))
    steps["Embedding"] = make_step(table)
    params = {"ALONE": layer.count_params(), "Embedding": table.count_params()}
    def run(step):
        loss, grads = step(ids)
        float(loss)
        [g.numpy() if not isinstance(g, tf.IndexedSlices) else g.values.numpy() for g in grads]

    median = harness.medians(harness.interleaved_times(
        {name: lambda step=step: run(step) for name, step in steps.items()}, FLAGS.rounds))
    ffn_rows = {"unique": distinct, "token": ids.shape[0] * ids.shape[1], "table": v,
                "Embedding": 0}
    lines = [
        f"AloneEmbedding lookup step (forward + gradients), V={v:,}, D_e={FLAGS.output_dim}, "
        f"D_o={FLAGS.base_dim}, D_inter={FLAGS.intermediate_dim}; batch {FLAGS.batch} x "
        f"{FLAGS.length} Zipf({FLAGS.zipf}) ids, {distinct:,} distinct; median of "
        f"{FLAGS.rounds} interleaved rounds on {platform.machine()}, {os.cpu_count()} CPUs.",
        "",
        "| lookup | FFN rows | parameters | median s/step | vs unique |",
        "|---|---|---|---|---|",
    ]
    for name in steps:
        p = params["Embedding" if name == "Embedding" else "ALONE"]
        lines.append(f"| {name} | {ffn_rows[name]:,} | {p:,} | {median[name]:.4f} | "
                     f"{median[name] / median['unique']:.2f} |")
    text = "\n".join(lines) + "\n"
    print(text)
    harness.write_results(FLAGS.output_dir, "alone_lookup", text, {
        "vocabulary_size": v, "output_dim": FLAGS.output_dim, "base_dim": FLAGS.base_dim,
        "intermediate_dim": FLAGS.intermediate_dim, "batch": FLAGS.batch,
        "length": FLAGS.length, "zipf": FLAGS.zipf, "distinct_ids": distinct,
        "rounds": FLAGS.rounds, "parameters": params, "median_s": median})


if __name__ == "__main__":
    define_flags()
    app.run(main)
