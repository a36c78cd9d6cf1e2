"""ALONE reconstruction experiment (Takase & Kobayashi, NeurIPS 2020, section 3.1, Figure 3).

Fits `tfeff.layers.AloneEmbedding` to mimic a given embedding table with the
L2 objective of Eq. 4,

    min  sum_w || FFN(m_w * o) - e_w ||^2,

by Adam (cosine-decayed learning rate) on minibatches of words drawn uniformly
from the vocabulary, for each
filter type (`--filter_types`) and FFN size D_inter (`--intermediate_dims`);
D_o = D_e = the table's dimension unless `--base_dim` is set. Every fit is
run at each of `--learning_rates` and the one with the lower final L2 loss
(the training objective, not the evaluation) is kept: no single rate suits
all sizes (3e-3 leaves binary filters with D_inter = 4096 oscillating, 1e-3
is slow for small FFNs). Each fitted
ALONE is then judged by how well it keeps the geometry of the original:

* pairs: the Spearman correlation between the original and the
  reconstructed cosine similarities over a fixed sample of `--num_pairs`
  word pairs (the same pairs for every run);
* for each `--similarity` file (WordSim-353 / SimLex-999 layout: `word1
  word2 score` per line, whitespace-, tab- or comma-separated, an optional
  header line): the Spearman correlation between the human scores and the
  reconstructed cosines, next to the original table's own figure (the
  horizontal line of the paper's Figure 3). Pairs with unknown words are
  skipped and counted.

The table is the demo's fastText vectors by default (`runs/demo`, created by
the first stage of `make demo` if missing); `--vectors` takes any `.vec` /
`.txt` (word2vec text format), fastText `.bin` (its vocabulary's vectors) or
`.npy` (with `--vocabulary`, one word per line, tab-separated count allowed).

Writes `alone_reconstruct.md` (the table), `.json` and `.png` (with
matplotlib from the `bench` extra) to `--output_dir`.

    python -m benchmarks.alone_reconstruct --preset tiny     # the tests: 1,000 words (seconds)
    python -m benchmarks.alone_reconstruct --preset cpu      # make bench
"""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import platform  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

from absl import app  # noqa: E402
from absl import flags  # noqa: E402
import numpy as np  # noqa: E402

from benchmarks import harness  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEMO_DIR = os.path.join(REPO, "runs", "demo")
DEMO_CONFIG = os.path.join(REPO, "configs", "demo_elmo_c.yaml")

PRESETS = {
    "tiny": {"intermediate_dims": [16, 512], "steps": 1500, "num_pairs": 2000,
              "max_words": 1000},
    "cpu": {"intermediate_dims": [64, 128, 256, 512, 1024, 2048, 4096], "steps": 6000,
             "num_pairs": 20000, "max_words": 0},
}

FLAGS = flags.FLAGS


def define_flags():
    """The command line's flags, defined when the module runs as the program."""
    harness.define_flags(PRESETS, "cpu")
    flags.DEFINE_string("vectors", "", "Embedding table (.vec/.txt, fastText .bin, or .npy with "
                        "--vocabulary). Default: the demo's fastText vectors in runs/demo.")
    flags.DEFINE_string("vocabulary", "", "Words of an .npy table, one per line "
                        "(word[<tab>count]).")
    flags.DEFINE_list("similarity", [], "Word-similarity files: `word1 word2 score` per line.")
    flags.DEFINE_list("filter_types", ["binary", "real"], "ALONE filter types to fit.")
    flags.DEFINE_list("intermediate_dims", None, "D_inter values (default: the preset's).")
    flags.DEFINE_integer("base_dim", 0, "D_o (0: the table's dimension).")
    flags.DEFINE_integer("steps", None, "Adam steps per fit (default: the preset's).")
    flags.DEFINE_integer("batch_size", 256, "Words per minibatch (uniform over the vocabulary).")
    flags.DEFINE_list("learning_rates", ["0.001", "0.003"], "Peak Adam learning rates (cosine "
                      "decay to 0) tried per fit; the one with the lower final L2 loss is kept.")
    flags.DEFINE_integer("num_pairs", None, "Word pairs of the cosine comparison "
                         "(default: the preset's).")
    flags.DEFINE_integer("max_words", None, "Use only the first N words of the table (0: all; "
                         "default: the preset's).")
    flags.DEFINE_integer("seed", 0, "Seed of the filters, the initialization, batches and pairs.")


# ---------------------------------------------------------------------------
# Inputs


def read_table(vectors, vocabulary=""):
    """`(words, float32 matrix)` of an embedding file; errors name the file and line."""
    from tfeff.data import fasttext_files

    if vectors.endswith(".npy"):
        if not vocabulary:
            raise ValueError(f"{vectors}: an .npy table needs --vocabulary (its words)")
        matrix = np.load(vectors)
        with open(vocabulary, encoding="utf-8") as f:
            words = [line.rstrip("\n").split("\t")[0] for line in f]
        if matrix.ndim != 2 or len(words) != matrix.shape[0]:
            raise ValueError(f"{vectors} has shape {matrix.shape} but {vocabulary} lists "
                             f"{len(words)} words")
        return words, matrix.astype(np.float32)
    table = fasttext_files.WordVectors(vectors)
    if table.has_subwords:  # a fastText .bin: the vectors of its own vocabulary
        words = table._fasttext.get_words()
        return words, np.stack([table.vector(w) for w in words]).astype(np.float32)
    words, matrix = table.words_and_matrix()
    return words, matrix.astype(np.float32)


def demo_table():
    """The demo's vocabulary vectors without the special tokens (built if missing)."""
    from tfeff.data import SPECIALS

    vectors = os.path.join(DEMO_DIR, "vocabulary_vectors.npy")
    vocabulary = os.path.join(DEMO_DIR, "vocabulary.txt")
    if not (os.path.exists(vectors) and os.path.exists(vocabulary)):
        from tfeff.config import load_config
        from tfeff.training import prepare_data

        print(f"{vectors} is missing: generating the demo corpus and training its fastText "
              "vectors (the first stage of `make demo`)", flush=True)
        prepare_data(load_config(DEMO_CONFIG), DEMO_DIR)
    words, matrix = read_table(vectors, vocabulary)
    return words[len(SPECIALS):], matrix[len(SPECIALS):]


def read_similarity(path):
    """`[(word1, word2, score)]` of a word-similarity file (header line allowed)."""
    pairs = []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, start=1):
            fields = line.replace(",", " ").split()
            if not fields or fields[0].startswith("#"):
                continue
            if len(fields) < 3:
                raise ValueError(f"{path}:{number}: expected `word1 word2 score`, got {line!r}")
            try:
                score = float(fields[2])
            except ValueError as e:
                if number == 1 and not pairs:
                    continue  # a header such as `Word 1,Word 2,Human (mean)`
                raise ValueError(f"{path}:{number}: the score {fields[2]!r} is not a number") from e
            pairs.append((fields[0], fields[1], score))
    if not pairs:
        raise ValueError(f"{path}: no word pairs")
    return pairs


# ---------------------------------------------------------------------------
# Statistics


def rank(values):
    """Ranks from 1 with ties averaged (as scipy.stats.rankdata)."""
    values = np.asarray(values, np.float64)
    order = np.argsort(values, kind="mergesort")
    ranks = np.empty(len(values), np.float64)
    sorted_values = values[order]
    start = 0
    for end in range(1, len(values) + 1):
        if end == len(values) or sorted_values[end] != sorted_values[start]:
            ranks[order[start:end]] = (start + end + 1) / 2.0
            start = end
    return ranks


def spearman(a, b):
    """Spearman's rank correlation of two equal-length sequences."""
    if len(a) != len(b) or len(a) < 2:
        raise ValueError(f"spearman needs two sequences of equal length >= 2, got {len(a)}, {len(b)}")
    ra, rb = rank(a), rank(b)
    ra, rb = ra - ra.mean(), rb - rb.mean()
    denominator = np.sqrt((ra * ra).sum() * (rb * rb).sum())
    return float((ra * rb).sum() / denominator) if denominator > 0 else float("nan")


def pair_cosines(matrix, left, right):
    a, b = matrix[left].astype(np.float64), matrix[right].astype(np.float64)
    norms = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
    return (a * b).sum(axis=1) / np.maximum(norms, 1e-12)


def sample_pairs(num_words, num_pairs, seed):
    rng = np.random.default_rng(seed)
    left = rng.integers(0, num_words, size=num_pairs)
    right = (left + rng.integers(1, num_words, size=num_pairs)) % num_words  # never equal
    return left, right


def similarity_ids(pairs, index):
    """Ids and human scores of the pairs whose two words are in `index`."""
    kept = [(index[a], index[b], s) for a, b, s in pairs if a in index and b in index]
    if len(kept) < 2:
        return None
    left, right, scores = (np.array(column) for column in zip(*kept))
    return left, right, scores


# ---------------------------------------------------------------------------
# Fitting


def fit_alone(matrix, filter_type, intermediate_dim, base_dim, steps, batch_size,
              learning_rate, seed):
    """Fits ALONE to `matrix` (Eq. 4). Returns `(reconstruction, final_loss, params, seconds)`."""
    import keras
    import tensorflow as tf

    from tfeff.layers import AloneEmbedding

    num_words, dim = matrix.shape
    layer = AloneEmbedding(num_words, dim, base_dim or dim, intermediate_dim,
                           filter_type=filter_type, seed=seed, name="alone")
    layer.build()
    # Cosine decay to 0: a constant rate leaves the large binary FFNs oscillating.
    schedule = keras.optimizers.schedules.CosineDecay(learning_rate, decay_steps=steps)
    optimizer = keras.optimizers.Adam(schedule)
    optimizer.build(layer.trainable_variables)
    target = tf.constant(matrix)

    @tf.function
    def step(ids):
        with tf.GradientTape() as tape:
            error = layer(ids, training=True) - tf.gather(target, ids)  # (batch, dim)
            loss = tf.reduce_mean(tf.reduce_sum(tf.square(error), axis=-1))
        grads = tape.gradient(loss, layer.trainable_variables)
        optimizer.apply_gradients(zip(grads, layer.trainable_variables))
        return loss

    rng = np.random.default_rng(seed)
    start = time.perf_counter()
    for _ in range(steps):
        step(rng.integers(0, num_words, size=batch_size))
    seconds = time.perf_counter() - start
    reconstruction = layer.embedding_table().numpy()
    final_loss = float(np.mean(np.sum((reconstruction - matrix) ** 2, axis=1)))
    return reconstruction, final_loss, layer.count_params(), seconds


# ---------------------------------------------------------------------------
# Reporting


def markdown(result):
    sims = result["similarity"]
    head = ["filter", "D_inter", "parameters", "learning rate", "L2 loss (mean over words)",
            "Spearman, pairs"]
    head += [f"Spearman, {name}" for name in sims]
    lines = [
        f"ALONE reconstruction of {result['table']} ({result['num_words']} words x "
        f"{result['dim']}), D_o = {result['base_dim']}, {result['steps']} Adam steps of "
        f"{result['batch_size']} words (cosine decay; the better of the learning rates "
        f"{', '.join(f'{lr:g}' for lr in result['learning_rates'])} by final L2 loss); "
        f"{result['num_pairs']} fixed word pairs.",
        "",
        "| " + " | ".join(head) + " |",
        "|" + "---|" * len(head),
    ]
    original = ["original table", "", f"{result['num_words'] * result['dim']:,}", "", "0",
                "1.000"]
    original += [f"{s['original']:.3f} ({s['covered']}/{s['pairs']} pairs)" for s in sims.values()]
    lines.append("| " + " | ".join(original) + " |")
    for run in result["runs"]:
        row = [run["filter_type"], str(run["intermediate_dim"]), f"{run['parameters']:,}",
               f"{run['learning_rate']:g}", f"{run['l2_loss']:.4f}",
               f"{run['spearman_pairs']:.3f}"]
        row += [f"{run['spearman_similarity'][name]:.3f}" for name in sims]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n"


def plot(result, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed (pip install -e '.[bench]'): no plot written")
        return None
    panels = ["pairs"] + list(result["similarity"])
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.4), squeeze=False)
    for ax, panel in zip(axes[0], panels):
        for filter_type in sorted({r["filter_type"] for r in result["runs"]}):
            runs = [r for r in result["runs"] if r["filter_type"] == filter_type]
            y = [r["spearman_pairs"] if panel == "pairs" else r["spearman_similarity"][panel]
                 for r in runs]
            ax.plot([r["intermediate_dim"] for r in runs], y, marker="o", label=filter_type)
        reference = 1.0 if panel == "pairs" else result["similarity"][panel]["original"]
        ax.axhline(reference, color="gray", linestyle="--", label="original")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("D_inter")
        ax.set_ylabel("Spearman")
        ax.set_title("cosines of word pairs" if panel == "pairs" else panel)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


# ---------------------------------------------------------------------------


def run(vectors="", vocabulary="", similarity=(), filter_types=("binary", "real"),
        intermediate_dims=(16, 512), base_dim=0, steps=1500, batch_size=256,
        learning_rates=(1e-3, 3e-3), num_pairs=2000, max_words=0, seed=0, results_dir=None):
    """The experiment as a function; returns the result dict (and writes files to `results_dir`)."""
    for name in filter_types:
        if name not in ("binary", "real"):
            raise ValueError(f"--filter_types: unknown filter type {name!r} (binary, real)")
    if vectors:
        words, matrix = read_table(vectors, vocabulary)
        table_name = os.path.basename(vectors)
    else:
        words, matrix = demo_table()
        table_name = "the demo's fastText vectors"
    if max_words:
        words, matrix = words[:max_words], matrix[:max_words]
    if len(words) < 2:
        raise ValueError(f"{vectors or 'the table'}: at least 2 words are needed")
    index = {w: i for i, w in enumerate(words)}
    left, right = sample_pairs(len(words), num_pairs, seed)
    original_pairs = pair_cosines(matrix, left, right)
    sims = {}
    for path in similarity:
        pairs = read_similarity(path)
        ids = similarity_ids(pairs, index)
        if ids is None:
            raise ValueError(f"{path}: fewer than 2 pairs have both words in the table")
        sims[os.path.basename(path)] = {
            "ids": ids, "pairs": len(pairs), "covered": len(ids[2]),
            "original": spearman(ids[2], pair_cosines(matrix, ids[0], ids[1])),
        }
    result = {
        "table": table_name, "num_words": len(words), "dim": int(matrix.shape[1]),
        "base_dim": base_dim or int(matrix.shape[1]), "steps": steps,
        "batch_size": batch_size, "num_pairs": num_pairs, "seed": seed,
        "learning_rates": list(learning_rates),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
        "similarity": {n: {k: v for k, v in s.items() if k != "ids"} for n, s in sims.items()},
        "runs": [],
    }
    for filter_type in filter_types:
        for intermediate_dim in intermediate_dims:
            fits = [(fit_alone(matrix, filter_type, int(intermediate_dim), base_dim, steps,
                               batch_size, lr, seed), lr) for lr in learning_rates]
            (reconstruction, loss, params, seconds), learning_rate = min(
                fits, key=lambda fit: fit[0][1])
            entry = {
                "filter_type": filter_type, "intermediate_dim": int(intermediate_dim),
                "parameters": params, "l2_loss": loss, "seconds": seconds,
                "learning_rate": learning_rate,
                "l2_loss_per_learning_rate": {str(lr): fit[1] for fit, lr in fits},
                "spearman_pairs": spearman(original_pairs,
                                           pair_cosines(reconstruction, left, right)),
                "spearman_similarity": {
                    n: spearman(s["ids"][2], pair_cosines(reconstruction, s["ids"][0], s["ids"][1]))
                    for n, s in sims.items()
                },
            }
            result["runs"].append(entry)
            print(f"{filter_type:6s} D_inter={intermediate_dim:5d}: L2 {loss:.4f} (lr "
                  f"{learning_rate:g}), Spearman (pairs) {entry['spearman_pairs']:.3f}, "
                  f"{seconds:.1f}s", flush=True)
    if results_dir:
        harness.write_results(results_dir, "alone_reconstruct", markdown(result), result)
        plot(result, os.path.join(results_dir, "alone_reconstruct.png"))
    return result


def _positive(values, flag, kind):
    """A list flag's values as positive `kind` (int or float); UsageError otherwise."""
    try:
        numbers = [kind(v) for v in values]
    except ValueError:
        numbers = []
    if not numbers or any(n <= 0 for n in numbers):
        raise app.UsageError(f"{flag}: expected positive {kind.__name__}s, got {values}")
    return numbers


def main(argv):
    del argv
    preset = PRESETS[FLAGS.preset]
    try:
        result = run(
            vectors=FLAGS.vectors, vocabulary=FLAGS.vocabulary, similarity=FLAGS.similarity,
            filter_types=FLAGS.filter_types,
            intermediate_dims=_positive(FLAGS.intermediate_dims, "--intermediate_dims", int)
            if FLAGS.intermediate_dims else preset["intermediate_dims"],
            base_dim=FLAGS.base_dim, steps=FLAGS.steps or preset["steps"],
            batch_size=FLAGS.batch_size,
            learning_rates=_positive(FLAGS.learning_rates, "--learning_rates", float),
            num_pairs=FLAGS.num_pairs or preset["num_pairs"],
            max_words=preset["max_words"] if FLAGS.max_words is None else FLAGS.max_words,
            seed=FLAGS.seed, results_dir=FLAGS.output_dir,
        )
    except (ValueError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print()
    print(markdown(result))
    return 0


if __name__ == "__main__":
    define_flags()
    app.run(main)
