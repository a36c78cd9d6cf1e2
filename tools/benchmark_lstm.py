"""MaskedBiLSTM speed: portable path vs a straightforward RNN cell vs plain LSTM (and cuDNN on GPU).

Every variant is the same Masked ELMo stack (num_layers bidirectional layers,
layer norms outside the cell, skip connections) and is timed side by side in
one process: one training step (forward + backward, gradients of every
weight) on the same random batch. Reported: median milliseconds over
`--repeats` steps after warm-up, and the ratio to the portable path.

* `portable`: `MaskedBiLSTM(use_cudnn=False)`: input products hoisted out of
  the loop, both directions in one `tf.scan` step.
* `rnn_cell`: `keras.layers.RNN` over a custom ELMo LSTMP cell (with ELMo's
  in-cell clipping of c_t and of the projection), one RNN per direction: what
  one writes without care for speed.
* `keras_lstm`: `MaskedBiLSTM(projection_dim=None)`, i.e. `keras.layers.LSTM`
  of the same cell size without projection (Keras picks cuDNN on GPU).
* `cudnn` (GPU only): `MaskedBiLSTM(use_cudnn=True)`, one `CudnnRNNV3` call per layer.

Targets (issue 6): portable >= 1.3x faster than rnn_cell on CPU; cudnn >= 3x
faster than portable on GPU.

    python tools/benchmark_lstm.py [--preset small|paper] [--results runs/bench/lstm.md]
"""

import argparse
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import bench_results  # noqa: E402
from tfeff.layers import MaskedBiLSTM  # noqa: E402

PRESETS = {
    # CPU-sized: minutes on 2 cores.
    "small": dict(batch=32, time=64, units=512, projection_dim=64, num_layers=2),
    # The paper's layer sizes (GPU).
    "paper": dict(batch=128, time=128, units=4096, projection_dim=384, num_layers=2),
}


class ElmoLSTMPCell(keras.layers.Layer):
    """ELMo's LSTMP cell as a plain Keras RNN cell, with its in-cell clipping."""

    def __init__(self, units, projection_dim, cell_clip=3.0, proj_clip=3.0, **kwargs):
        super().__init__(**kwargs)
        self.units, self.projection_dim = units, projection_dim
        self.cell_clip, self.proj_clip = cell_clip, proj_clip
        self.state_size = [projection_dim, units]
        self.output_size = projection_dim

    def build(self, input_shape):
        u, p = self.units, self.projection_dim
        self.kernel = self.add_weight(shape=(input_shape[-1], 4 * u), name="kernel")
        self.recurrent_kernel = self.add_weight(shape=(p, 4 * u), name="recurrent_kernel",
                                                initializer="orthogonal")
        self.bias = self.add_weight(shape=(4 * u,), name="bias", initializer="zeros")
        self.projection_kernel = self.add_weight(shape=(u, p), name="projection_kernel")

    def call(self, inputs, states):
        h, c = states
        z = inputs @ self.kernel + h @ self.recurrent_kernel + self.bias
        i, f, g, o = tf.split(z, 4, axis=-1)
        c = tf.sigmoid(f) * c + tf.sigmoid(i) * tf.tanh(g)
        c = tf.clip_by_value(c, -self.cell_clip, self.cell_clip)
        h = (tf.sigmoid(o) * tf.tanh(c)) @ self.projection_kernel
        h = tf.clip_by_value(h, -self.proj_clip, self.proj_clip)
        return h, [h, c]


class RnnCellStack(keras.layers.Layer):
    """The Masked ELMo stack built from `keras.layers.RNN(ElmoLSTMPCell)`."""

    def __init__(self, units, projection_dim, num_layers, **kwargs):
        super().__init__(**kwargs)
        self.supports_masking = True
        self.rnns = [[keras.layers.RNN(ElmoLSTMPCell(units, projection_dim),
                                       return_sequences=True, go_backwards=backward)
                      for backward in (False, True)] for _ in range(num_layers)]
        self.norms = [[keras.layers.LayerNormalization() for _ in range(2)]
                      for _ in range(num_layers)]

    def call(self, x, mask=None):
        for (fw, bw), (nf, nb) in zip(self.rnns, self.norms):
            f = nf(fw(x, mask=mask))
            b = nb(tf.reverse(bw(x, mask=mask), axis=[1]))
            x = x + tf.concat([f, b], axis=-1)
        return x


def _step_fn(layer, x, mask, warmup=2):
    """A compiled training step of `layer` (built and warmed up)."""
    layer(x, mask=mask)  # build
    weights = layer.trainable_weights

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(tf.square(layer(x, mask=mask)))
        return tape.gradient(loss, weights)

    def run():
        [g.numpy() for g in step() if g is not None]

    for _ in range(warmup):
        run()
    return run


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--preset", choices=sorted(PRESETS), default="small")
    parser.add_argument("--repeats", type=int, default=11)
    parser.add_argument("--results", default="")
    args = parser.parse_args()
    cfg = PRESETS[args.preset]
    b, t, u, p, n = (cfg[k] for k in ("batch", "time", "units", "projection_dim", "num_layers"))
    rng = np.random.default_rng(0)
    lengths = rng.integers(t // 2, t + 1, size=b)
    mask = tf.constant(np.arange(t)[None, :] < lengths[:, None])
    gpu = bool(tf.config.list_logical_devices("GPU"))
    device = "GPU" if gpu else "CPU"
    x = tf.constant(rng.normal(size=(b, t, 2 * p)).astype("float32"))
    x_plain = tf.constant(rng.normal(size=(b, t, 2 * u)).astype("float32"))

    variants = [
        ("portable", lambda: MaskedBiLSTM(u, p, num_layers=n, use_cudnn=False), x),
        ("rnn_cell", lambda: RnnCellStack(u, p, n), x),
        ("keras_lstm", lambda: MaskedBiLSTM(u, None, num_layers=n), x_plain),
    ]
    if gpu:
        variants.append(("cudnn", lambda: MaskedBiLSTM(u, p, num_layers=n, use_cudnn=True), x))
    runs = {}
    for name, make, inputs in variants:
        keras.utils.set_random_seed(0)
        runs[name] = _step_fn(make(), inputs, mask)
    times = bench_results.interleaved_times(runs, args.repeats, warmup=0)  # warmed in _step_fn
    ratios = bench_results.median_ratios(times, "portable")
    lines = [
        f"MaskedBiLSTM training step (forward + backward) on {device}: batch {b}, time {t}, "
        f"units {u}, projection {p}, {n} layers; {args.repeats} rounds, variants timed "
        "round-robin; medians.",
        "",
        "| variant | ms/step | time / portable (median of per-round ratios) |",
        "|---|---|---|",
    ]
    for name, seconds in bench_results.medians(times).items():
        lines.append(f"| {name} | {seconds * 1000:.1f} | {ratios[name]:.2f} |")
    lines.append("")
    lines.append(f"portable vs rnn_cell: {ratios['rnn_cell']:.2f}x faster (target >= 1.3x on CPU)")
    if gpu:
        lines.append(f"cudnn vs portable: {1 / ratios['cudnn']:.2f}x faster (target >= 3x on GPU)")
    table = "\n".join(lines)
    print(table)
    if args.results:
        os.makedirs(os.path.dirname(args.results) or ".", exist_ok=True)
        with open(args.results, "w", encoding="utf-8") as f:
            f.write(table + "\n")


if __name__ == "__main__":
    main()
