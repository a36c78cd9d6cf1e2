"""CoRe benchmark: relaxed vs standard BERT pieces.

Side by side in one process (interleaved rounds, median seconds of a
forward+backward step, `--tokens` tokens per batch) at BERT-Base width
(d = 768, h = 12, d_f = 3072) for each sequence length n in `--lengths`:

    attention      AnchorMultiHeadAttention (m = 32)  vs keras.layers.MultiHeadAttention
    ffn            FactorizedDense pair (d_r = 64)    vs Dense pair
    encoder layer  relaxed BertLayer                  vs standard BertLayer

with parameter counts and the FLOP ratio of each pair.

Two-phase vs standard pretraining (held-out loss against wall time) is
benchmarks/core_study.py.

    python -m benchmarks.core --output_dir runs/bench     # make bench
    python -m benchmarks.core --lengths 128
"""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import platform  # noqa: E402

from absl import app  # noqa: E402
from absl import flags  # noqa: E402
import keras  # noqa: E402
import tensorflow as tf  # noqa: E402

from benchmarks import harness  # noqa: E402
from tfeff.layers import AnchorMultiHeadAttention  # noqa: E402
from tfeff.layers import FactorizedDense  # noqa: E402
from tfeff.models.bert_layer import BertLayer  # noqa: E402

FLAGS = flags.FLAGS


def define_flags():
    """The command line's flags, defined when the module runs as the program."""
    harness.define_flags()
    flags.DEFINE_list("lengths", ["128", "512"], "Sequence lengths n.")
    flags.DEFINE_integer("tokens", 4096, "Tokens per batch (batch = tokens / n).")
    flags.DEFINE_integer("hidden_dim", 768, "d.")
    flags.DEFINE_integer("num_heads", 12, "h.")
    flags.DEFINE_integer("intermediate_dim", 3072, "d_f.")
    flags.DEFINE_integer("num_anchors", 32, "m.")
    flags.DEFINE_integer("ffn_rank", 64, "d_r.")
    flags.DEFINE_integer("rounds", 5, "Timed rounds (each runs every variant once, interleaved).")


def _step(fn, variables):
    @tf.function
    def step(x, mask):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(fn(x, mask)))
        return loss, tape.gradient(loss, variables)
    return step


def _variants(n):
    d, h, f, m, r = (FLAGS.hidden_dim, FLAGS.num_heads, FLAGS.intermediate_dim,
                     FLAGS.num_anchors, FLAGS.ffn_rank)
    shape = (None, None, d)
    anchor = AnchorMultiHeadAttention(h, d // h, num_anchors=m)
    mha = keras.layers.MultiHeadAttention(h, d // h)
    for layer in (anchor, mha):
        layer.build(shape, shape)
    f1, f2 = FactorizedDense(f, r, activation="gelu"), FactorizedDense(d, r)
    d1, d2 = keras.layers.Dense(f, activation="gelu"), keras.layers.Dense(d)
    for a, b in ((f1, d1), (f2, d2)):
        a.build((None, None, d if a is f1 else f))
        b.build((None, None, d if b is d1 else f))
    relaxed = BertLayer(d, h, f, num_anchors=m, ffn_rank=r, dropout_rate=0.0)
    standard = BertLayer(d, h, f, dropout_rate=0.0)
    relaxed.build(shape)
    standard.build(shape)
    dk = d // h
    flops = {  # multiply-adds per sequence
        "attention": (4 * n * d * d + 2 * n * n * d,
                      3 * n * d * d + h * (3 * n * m * dk + m * dk * d + n * m * d)),
        "ffn": (2 * n * d * f, 2 * n * r * (d + f)),
    }
    flops["encoder layer"] = tuple(a + b for a, b in zip(flops["attention"], flops["ffn"]))
    return [
        ("attention", _step(lambda x, k: mha(x, x, value_mask=k), mha.trainable_variables),
         _step(lambda x, k: anchor(x, x, query_mask=k, value_mask=k, training=True),
               anchor.trainable_variables),
         mha.count_params(), anchor.count_params()),
        ("ffn", _step(lambda x, k: d2(d1(x)), d1.trainable_variables + d2.trainable_variables),
         _step(lambda x, k: f2(f1(x)), f1.trainable_variables + f2.trainable_variables),
         d1.count_params() + d2.count_params(), f1.count_params() + f2.count_params()),
        ("encoder layer",
         _step(lambda x, k: standard(x, padding_mask=k, training=True),
               standard.trainable_variables),
         _step(lambda x, k: relaxed(x, padding_mask=k, training=True),
               relaxed.trainable_variables),
         standard.count_params(), relaxed.count_params()),
    ], flops


def layer_table():
    rows = []
    for n in [int(x) for x in FLAGS.lengths]:
        batch = max(1, FLAGS.tokens // n)
        x = tf.random.normal((batch, n, FLAGS.hidden_dim))
        mask = tf.ones((batch, n), tf.bool)
        variants, flops = _variants(n)
        runs = {(name, kind): lambda fn=fn: float(fn(x, mask)[0])
                for name, standard, relaxed, _, _ in variants
                for kind, fn in enumerate((standard, relaxed))}
        median = harness.medians(harness.interleaved_times(
            runs, FLAGS.rounds, warmup=2))
        for name, _, _, p_std, p_rel in variants:
            t_std, t_rel = median[(name, 0)], median[(name, 1)]
            rows.append({"n": n, "batch": batch, "part": name, "standard_s": t_std,
                         "relaxed_s": t_rel, "speedup": t_std / t_rel,
                         "flop_ratio": flops[name][0] / flops[name][1],
                         "standard_params": p_std, "relaxed_params": p_rel})
            print(f"n={n:4d} {name:14s} standard {t_std * 1e3:8.1f} ms  relaxed "
                  f"{t_rel * 1e3:8.1f} ms  speedup {t_std / t_rel:5.2f}x  "
                  f"(FLOP ratio {rows[-1]['flop_ratio']:.2f}x)", flush=True)
    return rows


def main(argv):
    del argv
    os.makedirs(FLAGS.output_dir, exist_ok=True)
    machine = f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, " + (
        "GPU" if tf.config.list_physical_devices("GPU") else "no GPU")
    rows = layer_table()
    lines = [f"CoRe layers, forward+backward, d={FLAGS.hidden_dim} h={FLAGS.num_heads} "
             f"d_f={FLAGS.intermediate_dim} m={FLAGS.num_anchors} d_r={FLAGS.ffn_rank}, "
             f"{FLAGS.tokens} tokens per batch, median of {FLAGS.rounds} ({machine})", "",
             "| n | part | standard (ms) | relaxed (ms) | speedup | FLOP ratio | params std / relaxed |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['n']} | {r['part']} | {r['standard_s'] * 1e3:.1f} | "
                     f"{r['relaxed_s'] * 1e3:.1f} | {r['speedup']:.2f}x | "
                     f"{r['flop_ratio']:.2f}x | {r['standard_params']:,} / "
                     f"{r['relaxed_params']:,} |")
    out = {"layers": rows}
    text = "\n".join(lines) + "\n"
    print(text)
    harness.write_results(FLAGS.output_dir, "core", text, out)


if __name__ == "__main__":
    define_flags()
    app.run(main)
