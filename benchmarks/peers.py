"""tfeff against what a user would pick instead, layer for layer, in one process.

Each section times a tfeff variant and its peer at equal architecture and
numerics, side by side in one process (interleaved rounds: every round runs
each variant once, so a busy moment of a shared machine slows all of them),
and reports median step times and the median of the per-round ratios
(tfeff / peer: above 1 is slower):

    bert_jax   tfeff `Bert` vs keras-hub `BertMaskedLM`; JAX, XLA, AdamW
               (the tanh GELU of keras-hub in both)
    bert_torch tfeff `Bert` vs Hugging Face `BertForMaskedLM` (eager, erf GELU
               in both; its head scores the masked positions only, as tfeff's
               and keras-hub's do) and vs keras-hub `BertMaskedLM`; PyTorch, AdamW
    core       tfeff's relaxed `Bert` (CoRe) vs the standard one; JAX, XLA
               (the ratio is the relaxed model's speed-up, not a peer gap)
    adaptive   `AdaptiveSoftmax` vs `torch.nn.AdaptiveLogSoftmaxWithLoss`
               (same cutoffs, div_value and weights, no head bias: the same
               loss, checked); forward, backward, Adam update; at 50,000 and
               800,000 words and at a small size
    lstm       `MaskedBiLSTM`'s PyTorch path vs the same stack of
               `torch.nn.LSTM(proj_size)` and `torch.nn.LayerNorm`; and
               `MaskedBiLSTM(projection_dim=None)` vs the same stack of
               `keras.layers.Bidirectional(keras.layers.LSTM)`; PyTorch
    continuous `ContinuousOutput` (cosine, fixed target table) vs a
               `keras.layers.Dense` with the same cosine distance; JAX
    alone      `AloneEmbedding` (one vector, fixed filters, an FFN once per
               distinct id) vs a `keras.layers.Embedding` table of the same
               width; TensorFlow, whose `tf.unique` runs the FFN once per
               distinct id (the ratio is what ALONE's parameter saving costs
               in time; JAX's static shapes run it once per token)
    overhead   what a Keras layer pays per call in eager PyTorch, where no
               compiler hides it: `Layer.__call__` vs the layer's `call`,
               `keras.ops.matmul` vs `torch.matmul`, and tfeff's eager id
               check (a host copy of the ids) vs none; the prices of the
               small-size rows above

Every step is float32. The sections of one backend run in one subprocess
(`KERAS_BACKEND` is read at Keras' first import); the table gathers them.
Presets: `cpu` (sizes where compute dominates, minutes on 2 cores) and
`tiny` (seconds; where per-call overhead dominates).

    python -m benchmarks.peers                       # every section, cpu preset
    python -m benchmarks.peers --preset tiny --sections adaptive,lstm
    python -m benchmarks.peers --output_dir runs/bench --rounds 9

Writes `peers.md` and `peers.json` to `--output_dir`.
"""

import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile

from absl import app
from absl import flags
import numpy as np

from benchmarks import harness

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

PRESETS = {
    "cpu": dict(rounds=5,
                bert=dict(vocabulary=8000, layers=4, hidden=256, heads=4, intermediate=1024,
                          length=128, batch=16, anchors=32, ffn_rank=64),
                adaptive=[dict(vocabulary=50_000, cutoffs=[2000, 10000], dim=512, rows=640),
                          dict(vocabulary=800_000, cutoffs=[60_000, 100_000, 640_000],
                               dim=512, rows=640),
                          dict(vocabulary=5000, cutoffs=[200, 1000], dim=64, rows=64)],
                lstm=dict(batch=32, time=32, units=512, projection_dim=128, num_layers=1,
                          plain_units=128),
                continuous=dict(vocabulary=50_000, hidden=512, dim=300, rows=2560),
                alone=dict(vocabulary=37_000, dim=512, intermediate=4096, batch=64,
                           length=128)),
    "tiny": dict(rounds=3,
                 bert=dict(vocabulary=500, layers=1, hidden=32, heads=2, intermediate=64,
                           length=16, batch=2, anchors=4, ffn_rank=8),
                 adaptive=[dict(vocabulary=5000, cutoffs=[200, 1000], dim=64, rows=64)],
                 lstm=dict(batch=4, time=8, units=16, projection_dim=4, num_layers=1,
                           plain_units=8),
                 continuous=dict(vocabulary=500, hidden=32, dim=16, rows=64),
                 alone=dict(vocabulary=500, dim=16, intermediate=32, batch=2, length=16)),
}
SECTIONS = {"bert_jax": "jax", "bert_torch": "torch", "core": "jax", "adaptive": "torch",
            "lstm": "torch", "continuous": "jax", "alone": "tensorflow", "overhead": "torch"}

FLAGS = flags.FLAGS


def define_flags():
    """The command line's flags, defined when the module runs as the program."""
    harness.define_flags(PRESETS, "cpu")
    flags.DEFINE_list("sections", list(SECTIONS), "Sections to run, in this order.")
    flags.DEFINE_integer("rounds", None, "Timed rounds (default: the preset's).")
    flags.DEFINE_string("rows_json", None, "Internal: run the sections in this process (their "
                        "backend already chosen) and write their rows to this file.")


def _row(section, case, times, tfeff, peer, note=""):
    """One table row from `interleaved_times`' result: tfeff's and the peer's medians and
    the median per-round ratio."""
    medians = harness.medians(times)
    return {"section": section, "case": case, "tfeff": tfeff, "peer": peer,
            "tfeff_ms": medians[tfeff] * 1e3, "peer_ms": medians[peer] * 1e3,
            "ratio": harness.median_ratios(times, peer)[tfeff], "note": note}


def mlm_batch(sizes, seed=0):
    """The section's BERT MLM batch: 15% of the positions masked."""
    return harness.mlm_batch(np.random.default_rng(seed), sizes["batch"],
                                   sizes["length"], sizes["vocabulary"],
                                   max(1, round(0.15 * sizes["length"])))


def _tfeff_bert(sizes, activation, relaxed=False):
    from tfeff.models import Bert
    from tfeff.models import BertBackbone

    return Bert(BertBackbone(
        sizes["vocabulary"], num_layers=sizes["layers"], hidden_dim=sizes["hidden"],
        num_heads=sizes["heads"], intermediate_dim=sizes["intermediate"],
        max_sequence_length=sizes["length"], dropout_rate=0.1, activation=activation,
        relaxed={"num_anchors": sizes["anchors"], "ffn_rank": sizes["ffn_rank"]}
        if relaxed else None))


def _keras_steps(models, data, jit):
    """`{name: step}`: each Keras model's `train_on_batch` on `data` (AdamW)."""
    import keras

    steps = {}
    for name, model in models.items():
        optimizer = keras.optimizers.AdamW(1e-4, weight_decay=0.01)
        if name.startswith("keras-hub"):
            model.compile(optimizer=optimizer, weighted_metrics=[], jit_compile=jit,
                          loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
            x = {"token_ids": data["token_ids"], "segment_ids": data["segment_ids"],
                 "padding_mask": data["padding_mask"],
                 "mask_positions": data["masked_positions"]}
            steps[name] = (lambda model=model, x=x: model.train_on_batch(
                x, data["masked_ids"], sample_weight=data["masked_weights"]))
        else:
            model.build()
            model.compile(optimizer=optimizer, jit_compile=jit)
            steps[name] = lambda model=model: model.train_on_batch(data)
    return steps


def _keras_hub_bert(sizes):
    import keras_hub

    backbone = keras_hub.models.BertBackbone(
        vocabulary_size=sizes["vocabulary"], num_layers=sizes["layers"],
        num_heads=sizes["heads"], hidden_dim=sizes["hidden"],
        intermediate_dim=sizes["intermediate"], dropout=0.1,
        max_sequence_length=sizes["length"])
    return keras_hub.models.BertMaskedLM(backbone=backbone, preprocessor=None)


def section_bert_jax(preset, rounds):
    sizes = PRESETS[preset]["bert"]
    models = {"tfeff": _tfeff_bert(sizes, "gelu_approximate"),
              "keras-hub": _keras_hub_bert(sizes)}
    times = harness.interleaved_times(_keras_steps(models, mlm_batch(sizes), True),
                                            rounds, warmup=2)
    return [_row("bert_jax", _bert_case(sizes), times, "tfeff", "keras-hub")]


def _bert_case(sizes):
    return (f"{sizes['layers']} x {sizes['hidden']}, {sizes['heads']} heads, FFN "
            f"{sizes['intermediate']}, V {sizes['vocabulary']:,}, n {sizes['length']}, "
            f"batch {sizes['batch']}")


def section_bert_torch(preset, rounds):
    import torch
    from transformers import BertConfig
    from transformers import BertForMaskedLM

    sizes = PRESETS[preset]["bert"]
    data = mlm_batch(sizes)
    steps = _keras_steps({"tfeff": _tfeff_bert(sizes, "gelu"),
                          "keras-hub": _keras_hub_bert(sizes)}, data, False)
    torch.manual_seed(0)
    config = BertConfig(vocab_size=sizes["vocabulary"], hidden_size=sizes["hidden"],
                        num_hidden_layers=sizes["layers"], num_attention_heads=sizes["heads"],
                        intermediate_size=sizes["intermediate"],
                        max_position_embeddings=sizes["length"], type_vocab_size=2,
                        hidden_act="gelu", attn_implementation="sdpa")
    model = BertForMaskedLM(config).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01)
    inputs = {"input_ids": torch.tensor(data["token_ids"], dtype=torch.long),
              "token_type_ids": torch.tensor(data["segment_ids"], dtype=torch.long),
              "attention_mask": torch.tensor(data["padding_mask"], dtype=torch.long)}
    positions = torch.tensor(data["masked_positions"], dtype=torch.long)
    rows = torch.arange(positions.shape[0])[:, None]
    masked_ids = torch.tensor(data["masked_ids"], dtype=torch.long).reshape(-1)

    def hugging_face():
        # `BertForMaskedLM(labels=...)` would score the vocabulary at every position; the
        # encoder, then its MLM head at the masked positions only, is tfeff's work.
        hidden = model.bert(**inputs).last_hidden_state[rows, positions]
        logits = model.cls(hidden)
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                                 masked_ids)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss.item()

    steps["Hugging Face"] = hugging_face
    times = harness.interleaved_times(steps, rounds, warmup=2)
    case = _bert_case(sizes)
    return [_row("bert_torch", case, times, "tfeff", "Hugging Face"),
            _row("bert_torch", case, times, "tfeff", "keras-hub",
                 "keras-hub's tanh GELU")]


def section_core(preset, rounds):
    sizes = PRESETS[preset]["bert"]
    models = {"relaxed": _tfeff_bert(sizes, "gelu", relaxed=True),
              "standard": _tfeff_bert(sizes, "gelu")}
    times = harness.interleaved_times(_keras_steps(models, mlm_batch(sizes), True),
                                            rounds, warmup=2)
    return [_row("core", f"{_bert_case(sizes)}; {sizes['anchors']} anchors, FFN rank "
                 f"{sizes['ffn_rank']}", times, "relaxed", "standard",
                 "below 1: the relaxed model is faster")]


def section_adaptive(preset, rounds):
    import torch

    from tfeff.layers import AdaptiveSoftmax

    rows = []
    for sizes in PRESETS[preset]["adaptive"]:
        v, cutoffs, d, n = (sizes[k] for k in ("vocabulary", "cutoffs", "dim", "rows"))
        torch.manual_seed(0)
        rng = np.random.default_rng(0)
        targets = torch.tensor(harness.zipf_ids(rng, n, v)).long()
        x = torch.randn(n, d)
        ours = AdaptiveSoftmax(v, cutoffs, div_value=4.0)
        ours.build((None, d))
        peer = torch.nn.AdaptiveLogSoftmaxWithLoss(d, v, cutoffs, div_value=4.0,
                                                   head_bias=False)
        _same_adaptive_weights(ours, peer)
        start = (ours.per_position_loss(x, targets.int()).mean().item(),
                 peer(x, targets).loss.item())
        # Equal weights, equal loss: each is a mean of float32 log-softmaxes of d-long dots
        # (rounding ~1e-6 of the loss's size here); 1e-4 says "the same function".
        if abs(start[0] - start[1]) > 1e-4 * abs(start[1]):
            raise AssertionError(f"AdaptiveSoftmax and PyTorch's differ at V {v}: {start}")

        def trainer(loss_of, parameters):
            """A step on a fresh copy of `x` that wants its gradient, as an encoder's output."""
            return harness.torch_adam_step(
                lambda: loss_of(x.clone().requires_grad_()), parameters)

        steps = {"tfeff": trainer(lambda inputs: ours.per_position_loss(
                     inputs, targets.int(), training=True).mean(),
                     [w.value for w in ours.trainable_weights]),
                 "PyTorch": trainer(lambda inputs: peer(inputs, targets).loss,
                                    list(peer.parameters()))}
        times = harness.interleaved_times(steps, rounds, warmup=2)
        tails = ", ".join(f"{float((targets >= c).float().mean()):.0%}" for c in cutoffs)
        rows.append(_row("adaptive", f"V {v:,}, cutoffs {cutoffs}, d {d}, {n} rows "
                         f"(targets at or past each cutoff: {tails})", times, "tfeff",
                         "PyTorch"))
    return rows


def _same_adaptive_weights(ours, peer):
    """Copies `AdaptiveSoftmax` `ours`' kernels into PyTorch's layer `peer` (whose
    `Linear` weights are `(out, in)`, the transpose of Keras kernels)."""
    import torch

    with torch.no_grad():
        peer.head.weight.copy_(ours.head_kernel.value.T)
        for i, tail in enumerate(peer.tail):
            tail[0].weight.copy_(ours.tail_projections[i].value.T)
            tail[1].weight.copy_(ours.tail_kernels[i].value.T)


def section_lstm(preset, rounds):
    import keras
    import torch

    from benchmarks import lstm as lstm_bench
    from tfeff.layers import MaskedBiLSTM

    sizes = PRESETS[preset]["lstm"]
    b, t, u, p, layers, plain = (sizes[k] for k in ("batch", "time", "units", "projection_dim",
                                                    "num_layers", "plain_units"))
    rng = np.random.default_rng(0)
    lengths = rng.integers(t // 2, t + 1, size=b)
    mask = torch.as_tensor(np.arange(t)[None, :] < lengths[:, None])
    x = torch.as_tensor(rng.normal(size=(b, t, 2 * p)).astype("float32"))
    x_plain = torch.as_tensor(rng.normal(size=(b, t, 2 * plain)).astype("float32"))

    def keras_step(layer, inputs):
        layer(inputs, mask=mask)  # build
        params = [w.value for w in layer.trainable_weights]
        return lstm_bench._torch_step_fn(lambda: layer(inputs, mask=mask), params,
                                             lambda: None, True, warmup=0)

    keras.utils.set_random_seed(0)
    steps = {"tfeff": keras_step(lstm_bench.TorchLSTMPath(u, p, num_layers=layers), x)}
    torch.manual_seed(0)
    forward, params = lstm_bench._torch_peer(u, p, layers, "cpu")
    steps["PyTorch"] = lstm_bench._torch_step_fn(lambda: forward(x, mask.sum(1)), params,
                                                     lambda: None, True, warmup=0)
    steps["tfeff, no projection"] = keras_step(MaskedBiLSTM(plain, None, num_layers=layers),
                                               x_plain)
    steps["Keras"] = keras_step(_keras_bilstm_stack_class()(plain, layers), x_plain)
    times = harness.interleaved_times(steps, rounds, warmup=2)
    case = f"batch {b}, time {t} (lengths from {t // 2}), {layers} layer(s)"
    return [_row("lstm", f"{case}, {u} cells, projection {p}", times, "tfeff", "PyTorch"),
            _row("lstm", f"{case}, {plain} cells, no projection", times,
                 "tfeff, no projection", "Keras")]


def _keras_bilstm_stack_class():
    import keras

    class KerasBiLSTMStack(keras.layers.Layer):
        """MaskedBiLSTM's stack without projection in stock Keras layers: per layer a
        `Bidirectional(LSTM)`, a layer norm per direction and the skip connection."""

        def __init__(self, units, num_layers, **kwargs):
            super().__init__(**kwargs)
            self.supports_masking = True
            self.units = units
            self.lstms = [keras.layers.Bidirectional(keras.layers.LSTM(
                units, return_sequences=True)) for _ in range(num_layers)]
            self.norms = [[keras.layers.LayerNormalization() for _ in range(2)]
                          for _ in range(num_layers)]

        def call(self, x, mask=None):
            keep = keras.ops.cast(mask, x.dtype)[..., None]
            for lstm, (forward, backward) in zip(self.lstms, self.norms):
                y = lstm(x, mask=mask)
                y = keras.ops.concatenate([forward(y[..., :self.units]),
                                           backward(y[..., self.units:])], axis=-1)
                x = (x + y) * keep
            return x

    return KerasBiLSTMStack


def section_continuous(preset, rounds):
    import keras

    from tfeff.layers import ContinuousOutput
    from tfeff.layers import FixedEmbedding
    from tfeff.losses import CosineDistance

    sizes = PRESETS[preset]["continuous"]
    v, h, d, n = (sizes[k] for k in ("vocabulary", "hidden", "dim", "rows"))
    rng = np.random.default_rng(0)
    table = rng.normal(size=(v, d)).astype("float32")
    x = rng.normal(size=(n, h)).astype("float32")
    targets = harness.zipf_ids(rng, n, v)
    ours = ContinuousOutput(d, loss="cosine", target_embedding=FixedEmbedding(table))
    dense = keras.layers.Dense(d)
    ours.build((None, h))
    dense.build((None, h))
    dense.set_weights(ours.projection.get_weights())
    vectors = keras.ops.convert_to_tensor(table)
    cosine = CosineDistance(reduction=None)
    steps = {"tfeff": _jax_grad_step(
                 ours, lambda inputs: keras.ops.mean(ours.per_position_loss(
                     ours.features(inputs), targets)), x),
             "Keras": _jax_grad_step(
                 dense, lambda inputs: keras.ops.mean(cosine.call(
                     keras.ops.take(vectors, targets, axis=0), dense(inputs))), x)}
    times = harness.interleaved_times(steps, rounds, warmup=2)
    return [_row("continuous", f"V {v:,}, hidden {h}, vectors {d}, {n} rows", times,
                 "tfeff", "Keras")]


def section_alone(preset, rounds):
    import keras

    from tfeff.layers import AloneEmbedding

    sizes = PRESETS[preset]["alone"]
    v, d, inter = sizes["vocabulary"], sizes["dim"], sizes["intermediate"]
    rng = np.random.default_rng(0)
    ids = harness.zipf_ids(rng, (sizes["batch"], sizes["length"]), v)
    ours = AloneEmbedding(v, output_dim=d, base_dim=d, intermediate_dim=inter, seed=0)
    table = keras.layers.Embedding(v, d)
    ours.build()
    table.build()
    steps = {"tfeff": _tf_grad_step(ours, lambda i: keras.ops.mean(keras.ops.square(
                 ours(i))), ids),
             "Keras": _tf_grad_step(table, lambda i: keras.ops.mean(keras.ops.square(
                 table(i))), ids)}
    times = harness.interleaved_times(steps, rounds, warmup=2)
    return [_row("alone", f"V {v:,}, width {d}, FFN {inter}, {ids.size:,} ids "
                 f"({len(np.unique(ids)):,} distinct); {ours.count_params():,} against "
                 f"{table.count_params():,} parameters", times, "tfeff", "Keras",
                 "the FFN once per distinct id: the price of the parameters")]


def _tf_grad_step(layer, loss_of, inputs):
    """A `tf.function` step: the gradients of `loss_of(inputs)` with respect to `layer`'s
    trainable weights, fetched to the host."""
    import tensorflow as tf

    inputs = tf.constant(inputs)
    weights = layer.trainable_variables

    @tf.function
    def grad():
        with tf.GradientTape() as tape:
            loss = loss_of(inputs)
        return tape.gradient(loss, weights)

    # An embedding's gradient is IndexedSlices (the looked-up rows): fetch what was computed.
    return lambda: [(g.values if isinstance(g, tf.IndexedSlices) else g).numpy()
                    for g in grad()]


def _jax_grad_step(layer, loss_of, inputs):
    """A jitted JAX step: the gradients of `loss_of(inputs)` with respect to `layer`'s
    trainable weights (through `stateless_scope`), blocking until they are ready."""
    import jax
    import keras

    trainable = layer.trainable_variables
    others = [v for v in layer.variables if all(v is not w for w in trainable)]

    def loss(values, other_values, inputs):
        mapping = list(zip(trainable, values)) + list(zip(others, other_values))
        with keras.StatelessScope(state_mapping=mapping):
            return loss_of(inputs)

    grad = jax.jit(jax.grad(loss))
    values = [v.value for v in trainable]
    other_values = [v.value for v in others]
    return lambda: jax.block_until_ready(grad(values, other_values, inputs))


def section_overhead(preset, rounds):
    """Per-call costs in eager PyTorch, each timed over 1,000 calls per round."""
    import keras
    import torch

    from tfeff.backend.checks import check_ids
    from tfeff.layers import AdaptiveSoftmax

    sizes = PRESETS[preset]["adaptive"][-1]
    v, n = sizes["vocabulary"], sizes["rows"]
    x, w = torch.randn(n, sizes["dim"]), torch.randn(sizes["dim"], sizes["dim"])
    rng = np.random.default_rng(0)
    ids = torch.tensor(harness.zipf_ids(rng, n, v))
    layer = AdaptiveSoftmax(v, sizes["cutoffs"], div_value=4.0)
    layer(x, ids)  # build

    def repeated(call):
        def run():
            for _ in range(1000):
                call()
        return run

    steps = {"Layer.__call__": repeated(lambda: layer(x, ids, return_loss=True)),
             "call()": repeated(lambda: layer.call(x, ids, return_loss=True)),
             "keras.ops.matmul": repeated(lambda: keras.ops.matmul(x, w)),
             "torch.matmul": repeated(lambda: torch.matmul(x, w)),
             "eager id check": repeated(lambda: check_ids(layer, ids)),
             "none": repeated(lambda: ids)}
    times = harness.interleaved_times(steps, rounds, warmup=2)
    note = "ms per 1,000 calls"
    return [_row("overhead", "the forward of the smallest adaptive case above", times,
                 "Layer.__call__", "call()", note),
            _row("overhead", f"({n}, {sizes['dim']}) @ ({sizes['dim']}, {sizes['dim']})",
                 times, "keras.ops.matmul", "torch.matmul", note),
            _row("overhead", f"{n} int32 ids", times, "eager id check", "none", note)]


RUNNERS = {"bert_jax": section_bert_jax, "bert_torch": section_bert_torch,
           "core": section_core, "adaptive": section_adaptive, "lstm": section_lstm,
           "continuous": section_continuous, "alone": section_alone,
           "overhead": section_overhead}


def machine():
    """The CPU model, its core count and the Python, as one phrase."""
    model = platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            model = next(line.split(":", 1)[1].strip() for line in f
                         if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return f"{model}, {os.cpu_count()} cores, Python {platform.python_version()}"


def versions():
    import importlib.metadata

    out = {}
    for name in ("keras", "tensorflow", "jax", "torch", "keras-hub", "transformers"):
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    return out


def _ms(value):
    return f"{value:.1f}" if value >= 1 else f"{value:.3f}"


def table(rows, preset, rounds, command, when):
    lines = [f"tfeff against its peers ({preset} preset), {when}, {machine()}; "
             f"{', '.join(f'{k} {v}' for k, v in versions().items() if v)}; float32; "
             f"{rounds} interleaved rounds after 2 warm-up steps, medians; `{command}`", "",
             "| section | case | tfeff variant | ms | peer | ms | tfeff / peer | note |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['section']} | {r['case']} | {r['tfeff']} | {_ms(r['tfeff_ms'])} | "
                     f"{r['peer']} | {_ms(r['peer_ms'])} | {r['ratio']:.2f} | {r['note']} |")
    return "\n".join(lines) + "\n"


def main(argv):
    del argv
    rounds = FLAGS.rounds or PRESETS[FLAGS.preset]["rounds"]
    unknown = sorted(set(FLAGS.sections) - set(SECTIONS))
    if unknown:
        raise app.UsageError(f"--sections: unknown {', '.join(unknown)}; known: "
                             f"{', '.join(SECTIONS)}")
    if FLAGS.rows_json:  # a backend's subprocess
        rows = [row for name in FLAGS.sections
                for row in RUNNERS[name](FLAGS.preset, rounds)]
        with open(FLAGS.rows_json, "w", encoding="utf-8") as f:
            json.dump(rows, f)
        return 0
    command = "python -m benchmarks.peers " + " ".join(sys.argv[1:])
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    rows = []
    for backend in dict.fromkeys(SECTIONS[s] for s in FLAGS.sections):
        chosen = [s for s in FLAGS.sections if SECTIONS[s] == backend]
        with tempfile.TemporaryDirectory() as folder:
            path = os.path.join(folder, "rows.json")
            env = {**os.environ, "KERAS_BACKEND": backend}
            done = subprocess.run(
                [sys.executable, "-m", "benchmarks.peers", "--preset", FLAGS.preset,
                 "--sections", ",".join(chosen), "--rounds", str(rounds),
                 "--rows_json", path], env=env, cwd=REPO)
            if done.returncode:
                print(f"error: the {backend} sections ({', '.join(chosen)}) "
                      f"failed with exit code {done.returncode}", file=sys.stderr)
                return 1
            with open(path, encoding="utf-8") as f:
                rows += json.load(f)
        print(f"{backend}: {', '.join(chosen)} done", flush=True)
    order = {name: i for i, name in enumerate(FLAGS.sections)}
    rows.sort(key=lambda r: order[r["section"]])
    text = table(rows, FLAGS.preset, rounds, command, when)
    print(text)
    harness.write_results(FLAGS.output_dir, "peers", text,
                                {"preset": FLAGS.preset, "rounds": rounds, "date": when,
                                 "machine": machine(), "versions": versions(),
                                 "command": command, "rows": rows})
    return 0


if __name__ == "__main__":
    define_flags()
    app.run(main)
