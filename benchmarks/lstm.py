"""MaskedBiLSTM speed: portable path vs a straightforward RNN cell vs plain LSTM vs cuDNN.

Every variant is the same Masked ELMo stack (num_layers bidirectional layers,
layer norms outside the cell, skip connections) and is timed side by side in
one process: one training step (forward + backward, gradients of every
weight) on the same random batch. Reported: median milliseconds over
`--repeats` steps after warm-up, and the ratio to the portable path (on
torch also to `torch_peer`).

Runs on the Keras backend that `KERAS_BACKEND` names: TensorFlow (the
default; steps in `tf.function`) or torch (eager, `torch.autograd`; CUDA when
torch sees it). Variants:

* `portable`: `MaskedBiLSTM(use_cudnn=False)`: input products hoisted out of
  the loop, both directions in one scan step (`tf.scan`; on torch
  `keras.ops.scan`, a Python loop).
* `rnn_cell`: `keras.layers.RNN` over a custom ELMo LSTMP cell (with ELMo's
  in-cell clipping of c_t and of the projection), one RNN per direction: what
  one writes without care for speed.
* `keras_lstm`: `MaskedBiLSTM(projection_dim=None)`, i.e. `keras.layers.LSTM`
  of the same cell size without projection (Keras picks cuDNN on a
  TensorFlow GPU).
* `cudnn` (TensorFlow, GPU only): `MaskedBiLSTM(use_cudnn=True)`, one
  `CudnnRNNV3` call per layer.
* `torch_lstm` (torch only): MaskedBiLSTM's torch path, one
  `torch.nn.LSTM(proj_size=...)` call per layer on packed sequences: cuDNN on
  CUDA (what `use_cudnn="auto"` runs there), torch's native loop on the CPU
  (taken for every call here; `"auto"` there leaves training steps on padded
  rows to the portable path, the faster one).
* `torch_peer` (torch only): the same stack written directly in PyTorch
  (`torch.nn.LSTM(proj_size=...)` modules with their own contiguous weights,
  `torch.nn.LayerNorm`), no Keras: what `torch_lstm` costs over plain torch.

Targets: portable >= 1.3x faster than rnn_cell on CPU; cudnn >= 3x
faster than portable on GPU.

    python -m benchmarks.lstm [--preset tiny|cpu|paper] [--output_dir runs/bench]
    KERAS_BACKEND=torch python -m benchmarks.lstm [--preset tiny|cpu|paper] [--threads 1]
        [--step train|forward] [--lengths random|full]

Writes `lstm_<backend>.md` and `.json` to `--output_dir`.

`--step forward` times the forward pass alone (no gradients recorded);
`--lengths full` gives every row the full length (random lengths from
time / 2 to time by default).

`--threads N` sets the CPU threads of TensorFlow's or torch's ops (default:
the library's choice, one per core). On a CPU that other processes share,
torch's thread pool waits for busy cores at every small op, and a step can
take ten times as long with two threads as with one: there, pass 1.
"""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from absl import app  # noqa: E402
from absl import flags  # noqa: E402
import keras  # noqa: E402
import numpy as np  # noqa: E402
from keras import ops  # noqa: E402

from benchmarks import harness  # noqa: E402
from tfeff.layers import MaskedBiLSTM  # noqa: E402

PRESETS = {
    # CPU-sized: minutes on 2 cores.
    "cpu": dict(batch=32, time=64, units=512, projection_dim=64, num_layers=2),
    # Seconds: checks that every variant runs (benchmarks/gpu_suite.py's CPU preset).
    "tiny": dict(batch=4, time=8, units=16, projection_dim=4, num_layers=1),
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
        z = ops.matmul(inputs, self.kernel) + ops.matmul(h, self.recurrent_kernel) + self.bias
        i, f, g, o = ops.split(z, 4, axis=-1)
        c = ops.sigmoid(f) * c + ops.sigmoid(i) * ops.tanh(g)
        c = ops.clip(c, -self.cell_clip, self.cell_clip)
        h = ops.matmul(ops.sigmoid(o) * ops.tanh(c), self.projection_kernel)
        h = ops.clip(h, -self.proj_clip, self.proj_clip)
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
            b = nb(ops.flip(bw(x, mask=mask), axis=1))
            x = x + ops.concatenate([f, b], axis=-1)
        return x


class TorchLSTMPath(MaskedBiLSTM):
    """MaskedBiLSTM on its torch LSTM path for every call."""

    def _choose_path(self, x, lengths=None):
        from tfeff.layers.masked_bi_lstm import TORCH_LSTM

        return TORCH_LSTM


def _torch_peer(units, projection_dim, num_layers, device):
    """The stack in plain PyTorch: a forward function of `(x, lengths)` and its parameters."""
    import torch

    lstms = [torch.nn.LSTM(2 * projection_dim, units, batch_first=True, bidirectional=True,
                           proj_size=projection_dim, device=device) for _ in range(num_layers)]
    norms = [[torch.nn.LayerNorm(projection_dim, device=device) for _ in range(2)]
             for _ in range(num_layers)]
    pack = torch.nn.utils.rnn.pack_padded_sequence
    unpack = torch.nn.utils.rnn.pad_packed_sequence

    def forward(x, lengths):
        time = x.shape[1]
        keep = (torch.arange(time, device=x.device)[None, :]
                < lengths.to(x.device)[:, None])[..., None].to(x.dtype)
        for lstm, (nf, nb) in zip(lstms, norms):
            packed = pack(x, lengths.cpu(), batch_first=True, enforce_sorted=False)
            out, _ = unpack(lstm(packed)[0], batch_first=True, total_length=time)
            y = torch.cat([nf(out[..., :projection_dim]), nb(out[..., projection_dim:])], -1)
            x = (x + y) * keep
        return x

    params = [p for module in lstms + [n for pair in norms for n in pair]
              for p in module.parameters()]
    return forward, params


def _tf_step_fn(layer, x, mask, train, warmup=2):
    """A compiled TensorFlow step of `layer` (built and warmed up): a training step, or
    the forward pass alone."""
    import tensorflow as tf

    layer(x, mask=mask)  # build
    weights = layer.trainable_weights

    @tf.function
    def step():
        if not train:
            return [layer(x, mask=mask)]
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(tf.square(layer(x, mask=mask)))
        return tape.gradient(loss, weights)

    def run():
        [g.numpy() for g in step() if g is not None]

    for _ in range(warmup):
        run()
    return run


def _torch_step_fn(forward, params, sync, train, warmup=2):
    """An eager torch step: gradients of `forward()`'s squared sum with respect to
    `params`, or `forward()` alone without gradients."""
    import torch

    def run():
        if train:
            loss = torch.sum(torch.square(forward()))
            torch.autograd.grad(loss, params, allow_unused=True)
        else:
            with torch.no_grad():
                forward()
        sync()

    for _ in range(warmup):
        run()
    return run


def _tensorflow_runs(cfg, x, x_plain, mask, train):
    import tensorflow as tf

    u, p, n = (cfg[k] for k in ("units", "projection_dim", "num_layers"))
    gpu = bool(tf.config.list_logical_devices("GPU"))
    variants = [
        ("portable", lambda: MaskedBiLSTM(u, p, num_layers=n, use_cudnn=False), x),
        ("rnn_cell", lambda: RnnCellStack(u, p, n), x),
        ("keras_lstm", lambda: MaskedBiLSTM(u, None, num_layers=n), x_plain),
    ]
    if gpu:
        variants.append(("cudnn", lambda: MaskedBiLSTM(u, p, num_layers=n, use_cudnn=True), x))
    mask = tf.constant(mask)
    runs = {}
    for name, make, inputs in variants:
        keras.utils.set_random_seed(0)
        runs[name] = _tf_step_fn(make(), tf.constant(inputs), mask, train)
    return runs, "GPU" if gpu else "CPU"


def _torch_runs(cfg, x, x_plain, mask, train):
    import torch

    u, p, n = (cfg[k] for k in ("units", "projection_dim", "num_layers"))
    device = "cuda" if torch.cuda.is_available() else "cpu"
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    mask = torch.as_tensor(mask, device=device)
    lengths = mask.sum(1)
    variants = [
        ("portable", lambda: MaskedBiLSTM(u, p, num_layers=n, use_cudnn=False), x),
        ("rnn_cell", lambda: RnnCellStack(u, p, n), x),
        ("keras_lstm", lambda: MaskedBiLSTM(u, None, num_layers=n), x_plain),
        ("torch_lstm", lambda: TorchLSTMPath(u, p, num_layers=n), x),
    ]
    runs = {}
    for name, make, inputs in variants:
        keras.utils.set_random_seed(0)
        layer = make()
        inputs = torch.as_tensor(inputs, device=device)
        layer(inputs, mask=mask)  # build
        params = [w.value for w in layer.trainable_weights]
        runs[name] = _torch_step_fn(lambda layer=layer, inputs=inputs: layer(inputs, mask=mask),
                                    params, sync, train)
    torch.manual_seed(0)
    forward, params = _torch_peer(u, p, n, device)
    inputs = torch.as_tensor(x, device=device)
    runs["torch_peer"] = _torch_step_fn(lambda: forward(inputs, lengths), params, sync, train)
    name = torch.cuda.get_device_name() if device == "cuda" else "CPU"
    return runs, f"{name} (torch {torch.__version__})"


def _set_threads(backend, threads):
    if backend == "tensorflow":
        import tensorflow as tf

        tf.config.threading.set_intra_op_parallelism_threads(threads)
    elif backend == "torch":
        import torch

        torch.set_num_threads(threads)


def define_flags():
    """The command line's flags, defined when the module runs as the program."""
    harness.define_flags(PRESETS, "cpu")
    flags.DEFINE_integer("repeats", 11, "Timed rounds (each runs every variant once).")
    flags.DEFINE_enum("step", "train", ["train", "forward"], "A training step or a forward pass.")
    flags.DEFINE_enum("lengths", "random", ["random", "full"],
                      "Row lengths: from time / 2 up (random) or every row full.")
    flags.DEFINE_integer("threads", 0, "CPU threads per op (0: the library's default).")


def main(argv):
    del argv
    args = flags.FLAGS
    cfg = PRESETS[args.preset]
    b, t, u, p, n = (cfg[k] for k in ("batch", "time", "units", "projection_dim", "num_layers"))
    rng = np.random.default_rng(0)
    lengths = rng.integers(t // 2, t + 1, size=b)
    if args.lengths == "full":
        lengths[:] = t
    mask = np.arange(t)[None, :] < lengths[:, None]
    x = rng.normal(size=(b, t, 2 * p)).astype("float32")
    x_plain = rng.normal(size=(b, t, 2 * u)).astype("float32")
    backend = keras.backend.backend()
    if args.threads:
        _set_threads(backend, args.threads)
    if backend == "tensorflow":
        runs, device = _tensorflow_runs(cfg, x, x_plain, mask, args.step == "train")
    elif backend == "torch":
        runs, device = _torch_runs(cfg, x, x_plain, mask, args.step == "train")
    else:
        raise SystemExit(f"benchmarks/lstm.py runs on KERAS_BACKEND=tensorflow or torch, "
                         f"not {backend!r}")
    step = ("training step (forward + backward)" if args.step == "train"
            else "forward pass (no gradients)")
    times = harness.interleaved_times(runs, args.repeats, warmup=0)  # warmed up above
    ratios = harness.median_ratios(times, "portable")
    peer = harness.median_ratios(times, "torch_peer") if "torch_peer" in runs else None
    lines = [
        f"MaskedBiLSTM {step} on {device}, Keras backend {backend}: batch {b}, time {t} "
        f"({'every row full' if args.lengths == 'full' else 'lengths from time / 2'}), "
        f"units {u}, projection {p}, {n} layers; "
        f"{args.repeats} rounds, variants timed round-robin; medians"
        + (f"; {args.threads} CPU thread(s) per op." if args.threads else "."),
        "",
        "| variant | ms/step | time / portable (median of per-round ratios) |"
        + (" time / torch_peer |" if peer else ""),
        "|---|---|---|" + ("---|" if peer else ""),
    ]
    for name, seconds in harness.medians(times).items():
        lines.append(f"| {name} | {seconds * 1000:.1f} | {ratios[name]:.2f} |"
                     + (f" {peer[name]:.2f} |" if peer else ""))
    lines.append("")
    lines.append(f"portable vs rnn_cell: {ratios['rnn_cell']:.2f}x faster (target >= 1.3x on CPU)")
    if "cudnn" in runs:
        lines.append(f"cudnn vs portable: {1 / ratios['cudnn']:.2f}x faster (target >= 3x on GPU)")
    if "torch_lstm" in runs:
        lines.append(f"torch_lstm vs portable: {1 / ratios['torch_lstm']:.2f}x faster; "
                     f"torch_lstm / torch_peer: {peer['torch_lstm']:.2f}")
    table = "\n".join(lines)
    print(table)
    harness.write_results(args.output_dir, f"lstm_{backend}", table + "\n", {
        "preset": args.preset, "sizes": cfg, "backend": backend, "device": device,
        "step": args.step, "lengths": args.lengths, "threads": args.threads,
        "rounds": args.repeats, "median_s": harness.medians(times), "ratios": ratios,
        "ratios_to_torch_peer": peer})


if __name__ == "__main__":
    define_flags()
    app.run(main)
