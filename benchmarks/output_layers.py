"""Output-layer speed and memory table (the structure of Li et al. 2019, Tables 4 and 5).

Every output layer of tfeff is put on the same encoder and trained side by side
in one process on synthetic Zipfian data:

    NONE      the encoder alone (loss = mean square of its states): the floor
    CONT      ContinuousOutput (cosine) against the fixed table (ELMo-C)
    FIXED     sampled softmax against the frozen fixed table
    SUBWORD   trainable WordPiece embedding tied to a full softmax over subwords
              (`--subword_vocabulary_size`, `--pieces_per_word` tokens per word)
    ADAPTIVE  AdaptiveSoftmax, cutoffs [V/40, V/8, V/2], div_value 4
    SAMPLED   SampledSoftmax, `--num_sampled` log-uniform negatives
    FULL      the exact softmax (only to show that ADAPTIVE is adaptive)

Per run (`--runs`: `encoder:vocabulary_size` pairs; the encoders are the ELMo
biLSTM with projection, a 2-layer LSTM biLM, and tfeff's `TransformerLM`: a
bidirectional transformer LM, two causal stacks of 2 layers), it reports:

* params: trainable parameters (the fixed tables are not parameters);
* memory: bytes of one training step (the model's variables plus the
  allocator's peak during the step; the fixed tables are host constants and
  stay in host memory on an accelerator, so they do not count) and the largest batch that
  fits `--memory_budget_gib`, found by doubling then bisecting on measured
  steps (`≥N` when every batch up to `--max_search_batch` fit);
* S1: median seconds per step at batch 1;
* S2: median seconds per million words at the largest batch (capped by
  `--s2_max_batch` to bound the run time; the batch used is printed);
* every time as a ratio to CONT measured in the same run.

A step is forward, loss, gradients and a sparse-aware SGD update (rows of
gathered matrices are updated with scatter, as TF1's Adagrad/SGD did for
bilm-tf), so optimizer cost does not hide the output layer's.

Results go to `--output_dir`: `output_layers.md` (the table) and
`output_layers.png` (bar chart of S2 ratios, with matplotlib from the
`bench` extra). The table is printed last.

    python -m benchmarks.output_layers --preset cpu       # make bench
    python -m benchmarks.output_layers --preset paper     # docs/papers/elmo-c.md's table
"""

import os

# The CPU allocator only reports peak memory when it is a BFC allocator.
os.environ.setdefault("TF_CPU_ALLOCATOR_USE_BFC", "true")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import math  # noqa: E402
import platform  # noqa: E402
import time  # noqa: E402

from absl import app  # noqa: E402
from absl import flags  # noqa: E402
import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from benchmarks import harness  # noqa: E402
from tfeff.models import ElmoBackbone  # noqa: E402
from tfeff.models import ElmoLM  # noqa: E402
from tfeff.models import TransformerLM  # noqa: E402
from tfeff.models import TransformerLMBackbone  # noqa: E402

HEADS = ("NONE", "CONT", "FIXED", "SUBWORD", "ADAPTIVE", "SAMPLED", "FULL")
ENCODERS = ("elmo", "lstm2", "transformer")
PRESETS = {
    # make bench: a few minutes on 2 CPU cores.
    "cpu": dict(runs=["elmo:40000", "elmo:800000", "lstm2:800000", "transformer:800000"],
                units=256, projection_dim=64, embedding_dim=64, sequence_length=20,
                num_sampled=1024, subword_vocabulary_size=8000, memory_budget_gib=2.0,
                s2_max_batch=64, max_search_batch=4096, repeats=7),
    # The docs table: the paper's vocabularies (to 2M words), num_sampled and memory
    # budget, with a smaller encoder than ELMo's 4096 cells (an hour on 2 CPU cores).
    "paper": dict(runs=["elmo:40000", "elmo:800000", "elmo:2000000", "lstm2:800000",
                        "transformer:800000"],
                  units=1024, projection_dim=256, embedding_dim=300, sequence_length=20,
                  num_sampled=8192, subword_vocabulary_size=30000, memory_budget_gib=8.0,
                  s2_max_batch=128, max_search_batch=4096, repeats=5),
}

FLAGS = flags.FLAGS


def define_flags():
    """The command line's flags, defined when the module runs as the program."""
    harness.define_flags(PRESETS, "cpu")
    flags.DEFINE_list("runs", None, f"encoder:vocabulary_size pairs; encoders are {ENCODERS}.")
    flags.DEFINE_integer("full_max_vocabulary_size", 800000, "FULL is skipped above this "
                         "vocabulary size (its steps take minutes on CPU).")
    flags.DEFINE_list("heads", list(HEADS), "Output layers to measure.")
    flags.DEFINE_integer("units", None, "LSTM cells (ELMo: 4096).")
    flags.DEFINE_integer("projection_dim", None, "LSTM projection / model width (ELMo: 512).")
    flags.DEFINE_integer("embedding_dim", None, "Fixed (fastText) vector size (paper: 300).")
    flags.DEFINE_integer("sequence_length", None, "Words per sequence (ELMo: 20).")
    flags.DEFINE_integer("num_sampled", None, "Negatives of SAMPLED and FIXED.")
    flags.DEFINE_integer("subword_vocabulary_size", None, "WordPiece vocabulary of SUBWORD.")
    flags.DEFINE_float("pieces_per_word", 1.3, "WordPiece tokens per word for SUBWORD.")
    flags.DEFINE_float("memory_budget_gib", None, "Memory budget of the largest-batch search.")
    flags.DEFINE_integer("s2_max_batch", None, "Largest batch at which S2 is timed.")
    flags.DEFINE_integer("max_search_batch", None, "The memory search stops at this batch.")
    flags.DEFINE_integer("repeats", None, "Timed steps per measurement (median).")
    flags.DEFINE_float("zipf", 1.2, "Exponent of the Zipfian word distribution (1.2: the top "
                       "10K of 800K words cover ~91% of tokens, about English news text).")
    flags.DEFINE_float("learning_rate", 0.01, "SGD learning rate of the timed steps.")


def _settings():
    s = dict(PRESETS[FLAGS.preset])
    for key in s:
        value = getattr(FLAGS, key, None)
        if value is not None:
            s[key] = value
    runs = []
    for run in s["runs"]:
        encoder, _, size = run.partition(":")
        if encoder not in ENCODERS or not size.isdigit():
            raise app.UsageError(f"--runs: expected encoder:vocabulary_size with an encoder "
                                 f"in {ENCODERS}, got {run!r}")
        runs.append((encoder, int(size)))
    s["runs"] = runs
    for h in FLAGS.heads:
        if h not in HEADS:
            raise app.UsageError(f"--heads: unknown output layer {h!r}, expected {HEADS}")
    return s


class ZipfSampler:
    """Ids 4..V-1 with p(rank r) ~ 1/r^s (ids are frequency-ordered, 0-3 reserved)."""

    def __init__(self, vocabulary_size, exponent, seed=0):
        ranks = np.arange(1, vocabulary_size - 3, dtype=np.float64)
        self.cdf = np.cumsum(ranks ** -exponent)
        self.cdf /= self.cdf[-1]
        self.rng = np.random.default_rng(seed)

    def __call__(self, shape):
        return (np.searchsorted(self.cdf, self.rng.random(shape)) + 4).astype(np.int32)


class BenchLM(keras.Model):
    """A language model (input, heads, loss): an `ElmoLM`, optionally with another biLM
    encoder (lstm2), or a `TransformerLM` (its own encoder, the same heads)."""

    def __init__(self, lm, encoder, head):
        super().__init__()
        self.lm = lm
        self.encoder = encoder
        self.head = head
        dim = getattr(lm.backbone, "projection_dim", None)
        self.forward_layers, self.backward_layers = [], []
        if encoder == "lstm2":
            for i in range(2):
                self.forward_layers.append(keras.layers.LSTM(dim, return_sequences=True))
                self.backward_layers.append(
                    keras.layers.LSTM(dim, return_sequences=True, go_backwards=True))

    def encode(self, ids, training):
        mask = ids > 0
        if self.encoder == "transformer":
            tops = self.lm.backbone.encode(ids, mask, training=training)
            return tops["forward"], tops["backward"]
        vectors = self.lm.backbone.token_embedding(ids)
        if self.encoder == "elmo":
            _, f, b = self.lm.backbone.encode(vectors, mask, training=training)
            return f, b
        x = self.lm.backbone.token_projection(vectors)
        f, b = x, x
        for layer in self.forward_layers:
            f = layer(f)
        for layer in self.backward_layers:
            b = layer(b)
            b = tf.reverse(b, axis=[1])  # go_backwards returns reversed time
        return f, b

    def loss_fn(self, ids, training=True):
        f, b = self.encode(ids, training)
        if self.head == "NONE":
            return tf.reduce_mean(tf.square(f)) + tf.reduce_mean(tf.square(b))
        outputs = {"forward": self.lm.head_inputs(f), "backward": self.lm.head_inputs(b)}
        return self.lm.compute_loss(x=ids, y_pred=outputs, training=training)


def make_model(head, encoder, vocabulary_size, s, table):
    if encoder == "transformer":
        # tfeff's transformer LM family (Li et al.'s bidirectional "TRANS"): a forward and
        # a backward causal stack of 2 layers, width projection_dim, 4 heads.
        width = s["projection_dim"]
        kwargs = dict(num_layers=2, hidden_dim=width, num_heads=4, intermediate_dim=4 * width,
                      max_sequence_length=math.ceil(s["sequence_length"] * FLAGS.pieces_per_word),
                      dropout_rate=0.0, seed=0)
        backbone_class, model_class = TransformerLMBackbone, TransformerLM
    else:
        kwargs = dict(num_layers=2, units=s["units"], projection_dim=s["projection_dim"],
                      dropout_rate=0.0)
        backbone_class, model_class = ElmoBackbone, ElmoLM
    if head == "SUBWORD":
        backbone = backbone_class(s["subword_vocabulary_size"], input_embedding="trainable",
                                  token_embedding_dim=s["projection_dim"], **kwargs)
        lm = model_class(backbone, output_layer="full", tie_output=True, seed=0)
    else:
        output = {"NONE": "continuous", "CONT": "continuous", "FIXED": "fixed",
                  "ADAPTIVE": "adaptive", "SAMPLED": "sampled", "FULL": "full"}[head]
        lm = model_class(backbone_class(embedding_table=table, **kwargs), output_layer=output,
                         adaptive_cutoffs=[vocabulary_size // 40, vocabulary_size // 8,
                                           vocabulary_size // 2],
                         num_sampled=min(s["num_sampled"], vocabulary_size // 2), seed=0)
    model = BenchLM(lm, encoder, head)
    model.loss_fn(tf.constant([[2, 4, 5, 6, 3]], tf.int32))  # build every weight
    return model


def trainable_parameters(model):
    skip = set()
    if model.head == "NONE":  # the floor has no output layer
        skip = {id(v) for v in model.lm.output_head.trainable_variables}
    return int(sum(np.prod(v.shape) for v in model.trainable_variables if id(v) not in skip))


def make_step(model, learning_rate):
    variables = model.trainable_variables

    @tf.function(input_signature=[tf.TensorSpec([None, None], tf.int32)], jit_compile=False)
    def step(ids):
        with tf.GradientTape() as tape:
            loss = model.loss_fn(ids)
        grads = tape.gradient(loss, variables)
        for g, v in zip(grads, variables):
            if g is None:
                continue
            if isinstance(g, tf.IndexedSlices):
                v.value.scatter_sub(tf.IndexedSlices(learning_rate * g.values, g.indices))
            else:
                v.assign_sub(learning_rate * g)
        return loss

    return step


def _device():
    return "GPU:0" if tf.config.list_logical_devices("GPU") else "CPU:0"


def _run(step, batch):
    float(step(batch))  # the loss on the host: the step has finished


def measure_memory(step, sample, batch, length, state_bytes):
    """Device bytes of one training step at `batch`: the model's variables plus the peak
    of what the step allocates. Fixed tables are host constants, not variables, so
    they are not counted (on an accelerator they stay in host memory), and neither
    are other models alive in the process."""
    ids = tf.constant(sample((batch, length)))
    _run(step, ids)  # allocations of this shape settle
    before = tf.config.experimental.get_memory_info(_device())["current"]
    tf.config.experimental.reset_memory_stats(_device())
    _run(step, ids)
    peak = tf.config.experimental.get_memory_info(_device())["peak"]
    return state_bytes + max(0, peak - before)


def largest_batch(step, sample, length, budget, cap, state_bytes):
    """Largest batch whose step fits `budget` bytes, by measurement.

    Doubles the batch from 16 until a step exceeds the budget (or the batch
    exceeds `cap`), then bisects to within about 6%. Peak memory is not
    linear in the batch (batch-independent spikes, e.g. a dense gradient of
    the output matrix, can dominate), so nothing is extrapolated.

    Returns:
        `(batch, capped)`: `capped` means every batch up to `cap` fit, and
        the true largest batch is at least `batch`.
    """
    def fits(b):
        return measure_memory(step, sample, b, length, state_bytes) <= budget

    lo, hi = 0, 16
    while hi <= cap:
        if not fits(hi):
            break
        lo, hi = hi, hi * 2
    else:
        return lo, True
    while hi - lo > max(1, lo // 16):
        mid = (lo + hi) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid
    return lo, False


def round_robin(steps_and_inputs, repeats):
    """Median seconds per step of each `(step, ids)`, timed in interleaved rounds
    (`harness.interleaved_times`)."""
    runs = {k: lambda step=step, ids=ids: float(step(ids))
            for k, (step, ids) in enumerate(steps_and_inputs)}
    median = harness.medians(harness.interleaved_times(runs, repeats))
    return [median[k] for k in range(len(steps_and_inputs))]


def benchmark(s):
    rows = []
    budget = s["memory_budget_gib"] * 2 ** 30
    for encoder, vocabulary_size in s["runs"]:
        table = np.random.default_rng(0).normal(
            size=(vocabulary_size, s["embedding_dim"])).astype(np.float32)
        group = []
        for head in FLAGS.heads:
            if head == "FULL" and vocabulary_size > FLAGS.full_max_vocabulary_size:
                continue
            keras.utils.set_random_seed(0)
            subword = head == "SUBWORD"
            length = math.ceil(s["sequence_length"] * FLAGS.pieces_per_word) if subword \
                else s["sequence_length"]
            sample = ZipfSampler(s["subword_vocabulary_size"] if subword else vocabulary_size,
                                 FLAGS.zipf)
            t0 = time.time()
            model = make_model(head, encoder, vocabulary_size, s, table)
            step = make_step(model, FLAGS.learning_rate)
            state_bytes = sum(int(np.prod(v.shape)) * 4 for v in model.variables)
            batch, capped = largest_batch(step, sample, length, budget,
                                          s["max_search_batch"], state_bytes)
            s2_batch = max(1, min(batch, s["s2_max_batch"]))
            group.append(dict(
                vocabulary_size=vocabulary_size, encoder=encoder, head=head,
                params=trainable_parameters(model), batch=batch, capped=capped,
                s2_batch=s2_batch, step=step,
                s1_ids=tf.constant(sample((1, length))),
                s2_ids=tf.constant(sample((s2_batch, length))),
            ))
            print(f"V={vocabulary_size:>8} {encoder:<11} {head:<8} "
                  f"params={group[-1]['params']:>11,}  largest batch "
                  f"{'≥' if capped else ''}{batch}  [{time.time() - t0:.0f} s]", flush=True)
        s1 = round_robin([(r["step"], r["s1_ids"]) for r in group], s["repeats"])
        s2 = round_robin([(r["step"], r["s2_ids"]) for r in group], s["repeats"])
        for r, t1, t2 in zip(group, s1, s2):
            for key in ("step", "s1_ids", "s2_ids"):
                del r[key]
            r["s1"] = t1
            r["s2"] = t2 / (r["s2_batch"] * s["sequence_length"]) * 1e6  # per million words
            print(f"V={vocabulary_size:>8} {encoder:<11} {r['head']:<8} S1={t1 * 1e3:8.1f} ms  "
                  f"S2={r['s2']:8.2f} s/Mw (batch {r['s2_batch']})", flush=True)
        rows += group
        del group, table
        keras.backend.clear_session()
    return rows


def _ratio(value, reference):
    return f"{value / reference:.2f}" if reference else "-"


def markdown(rows, s):
    lines = [
        f"Machine: {platform.machine()}, {os.cpu_count()} CPUs, "
        f"{tf.config.list_logical_devices('GPU') and 'GPU' or 'CPU only'}; "
        f"TensorFlow {tf.__version__}. Encoder: units {s['units']}, projection "
        f"{s['projection_dim']}, fixed vectors {s['embedding_dim']}-d, {s['sequence_length']} "
        f"words per sequence; memory budget {s['memory_budget_gib']:g} GiB; medians of "
        f"{s['repeats']} steps. Times are ratios to CONT in the same run (CONT's own in "
        "seconds); S2 is per million words at the batch shown.",
        "",
        "| V | encoder | output | params | largest batch | S1 (batch 1) | S2 (per 1M words) | S2 batch |",
        "|---:|---|---|---:|---:|---:|---:|---:|",
    ]
    for (v, e), group in _groups(rows).items():
        cont = next((r for r in group if r["head"] == "CONT"), None)
        for r in group:
            if r is cont:
                s1, s2 = f"{r['s1'] * 1e3:.1f} ms", f"{r['s2']:.2f} s"
            else:
                s1 = _ratio(r["s1"], cont and cont["s1"])
                s2 = _ratio(r["s2"], cont and cont["s2"])
            batch = f"{'≥' if r['capped'] else ''}{r['batch']}"
            lines.append(f"| {v:,} | {e} | {r['head']} | {r['params']:,} | {batch} | {s1} | "
                         f"{s2} | {r['s2_batch']} |")
    lines += target_lines(rows)
    return "\n".join(lines) + "\n"


def target_lines(rows):
    """The issue's targets, checked on this run's numbers (PASS / MISS)."""
    out = ["", "Targets (S2 unless noted):"]
    for (v, e), group in _groups(rows).items():
        by = {r["head"]: r for r in group}
        cont = by.get("CONT")
        if cont is None:
            continue
        checks = []
        others = [r for h, r in by.items() if h not in ("NONE", "CONT")]
        if others:
            fastest = all(cont["s2"] <= r["s2"] for r in others)
            checks.append(("CONT fastest output layer", fastest, ""))
        if "NONE" in by:
            ratio = cont["s2"] / by["NONE"]["s2"]
            checks.append(("CONT within 5% of the encoder floor", ratio <= 1.05, f"{ratio:.3f}"))
        if v >= 800000:
            for head, goal in (("ADAPTIVE", 1.5), ("SAMPLED", 1.35)):
                if head in by:
                    ratio = by[head]["s2"] / cont["s2"]
                    checks.append((f"{head}/CONT >= {goal}", ratio >= goal, f"{ratio:.2f}"))
            if "ADAPTIVE" in by and "FULL" in by:
                ratio = by["FULL"]["s2"] / by["ADAPTIVE"]["s2"]
                checks.append(("FULL/ADAPTIVE per step >= 3", ratio >= 3, f"{ratio:.2f}"))
            if "ADAPTIVE" in by and by["ADAPTIVE"]["batch"]:
                ratio = cont["batch"] / by["ADAPTIVE"]["batch"]
                bound = "≥" if cont["capped"] else ""
                checks.append(("CONT largest batch >= 2x ADAPTIVE's", ratio >= 2,
                               f"{bound}{ratio:.2f}"))
        for name, ok, value in checks:
            out.append(f"- V={v:,} {e}: {name}: {'PASS' if ok else 'MISS'} {value}".rstrip())
    return out


def _groups(rows):
    groups = {}
    for r in rows:
        groups.setdefault((r["vocabulary_size"], r["encoder"]), []).append(r)
    return groups


def chart(rows, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed (pip install -e '.[bench]'): no chart written")
        return None
    groups = _groups(rows)
    fig, axes = plt.subplots(1, len(groups), figsize=(3.2 * len(groups), 3.6), squeeze=False)
    for ax, ((v, e), group) in zip(axes[0], groups.items()):
        cont = next((r for r in group if r["head"] == "CONT"), None)
        names = [r["head"] for r in group]
        values = [r["s2"] / cont["s2"] if cont else r["s2"] for r in group]
        ax.bar(names, values, color=["#888" if n == "NONE" else "#1f77b4" if n == "CONT"
                                      else "#ff7f0e" for n in names])
        ax.axhline(1.0, color="k", linewidth=0.5)
        ax.set_yscale("log")  # FULL is two orders of magnitude above the rest
        ax.set_title(f"{e}, V={v:,}", fontsize=9)
        ax.set_ylabel("S2 time / CONT")
        ax.tick_params(axis="x", rotation=60, labelsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return path


def main(argv):
    del argv
    s = _settings()
    rows = benchmark(s)
    table = markdown(rows, s)
    harness.write_results(FLAGS.output_dir, "output_layers", table, {"settings": s, "rows": rows})
    png = chart(rows, os.path.join(FLAGS.output_dir, "output_layers.png"))
    print(f"\nWrote {FLAGS.output_dir}/output_layers.md" + (f" and {png}" if png else ""))
    print()
    print(table)


if __name__ == "__main__":
    define_flags()
    app.run(main)
