"""ALONE reconstruction experiment (Takase & Kobayashi, NeurIPS 2020, §3.1, Figure 3).

Fits `tfeff.layers.AloneEmbedding` to mimic a pre-trained embedding table
the way §3.1 does, then compares the word similarities of the fitted ALONE
with human judgements. The protocol (preset `paper`; the other presets
shrink its sizes, never its procedure):

* objective: Eq. 4, `sum_w || e_w - FFN(m_w * o) ||^2`, summed over the
  words of each minibatch;
* optimizer: Adam with PyTorch's default hyper-parameters (learning rate
  1e-3, betas 0.9 and 0.999, epsilon 1e-8, no weight decay, no schedule),
  with PyTorch's update (`TorchAdam`: Keras' Adam adds its epsilon to the
  uncorrected `sqrt(v)`, PyTorch to the bias-corrected one);
* minibatches of 256 words drawn uniformly (with replacement) from the
  vocabulary; an epoch is `ceil(|V| / 256)` minibatches (20 for 5,000
  words: at least |V| words, "training on the whole vocabulary"), and the
  paper trains 1,000 epochs (20,000 steps);
* D_o = D_e = the table's dimension (300 for GloVe), D_inter in
  {600, 1200, 1800, 2400}: 0.4M, 0.7M, 1.1M and 1.4M parameters,
  `D_o + D_inter (D_o + D_e)` (the FFN has no biases);
* filters: binary (c = 64, M = 8, p_o = 0.5) and real-number, each with
  the base embedding o trained and fixed ("Fix o" in Figure 3);
* the 5,000 most frequent words; five seeds (the filters, the
  initialization and the minibatches), their mean reported with the
  standard deviation over the seeds;
* metric: for each `--similarity` file (SimLex-999, WordSim-353, RG-65;
  `word1 word2 score` per line, whitespace-, tab- or comma-separated, an
  optional header line), Spearman's rank correlation between the human
  scores and the cosines of the fitted embeddings, next to the original
  table's own figure (the dashed line of Figure 3). Pairs with a word
  outside the table are skipped and counted. Without similarity files
  (none is bundled) the Spearman correlation between the original and the
  fitted cosines over `--num_pairs` fixed random word pairs says how much
  of the table's geometry is kept; it is always reported.

The table: `--vectors` takes GloVe's own text format (`word v1 ... vD` per
line, no header line, as glove.6B.300d.txt), a word2vec/fastText `.vec`
(header `count dim`), a fastText `.bin` (its vocabulary's vectors) or an
`.npy` with `--vocabulary` (one word per line, tab-separated count
allowed). The words kept are the table's first `--max_words` (GloVe and
fastText files list words by frequency) or, with `--counts` (`word count`
per line, such as Wikipedia word frequencies), the `--max_words` words
with the highest counts that have a vector. GloVe cannot be downloaded at
run time; without `--vectors` the table is the preset's stand-in:

* `english` (preset `paper`): 300-d fastText skipgram vectors (no
  subwords) trained here on English text available offline, the glosses
  and example sentences of WordNet 3.0 (`tools/english_corpus.py`, Debian's
  `wordnet-base`: 1.46M tokens), its 5,000 most frequent alphabetic words.
  Trained once (about 2 minutes) into `--output_dir/alone_english/`;
* `demo` (presets `tiny`, `cpu`): the demo's 64-d fastText vectors of its
  synthetic language (`runs/demo`, created by the first stage of `make
  demo` if missing).

Writes `alone_reconstruct.md` (the protocol and the table), `.json` (every
seed's figures) and `.png` (with matplotlib from the `bench` extra) to
`--output_dir`.

    python -m benchmarks.alone_reconstruct --preset tiny     # seconds: the tests
    python -m benchmarks.alone_reconstruct --preset cpu      # make bench
    python -m benchmarks.alone_reconstruct --preset paper \\
        --vectors glove.6B.300d.txt --similarity SimLex-999.txt,wordsim353.csv,rg65.txt
"""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import collections  # noqa: E402
import math  # noqa: E402
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
WORDNET_DIR = "/usr/share/wordnet"
FILTER_TYPES = ("binary", "real")
BASE_MODES = ("trained", "fixed")  # the base embedding o; "fixed" is Figure 3's "Fix o"

# The paper's protocol (§3.1). `tiny` and `cpu` shrink the sizes, not the procedure.
PRESETS = {
    "tiny": {"table": "demo", "max_words": 1000, "intermediate_dims": [16, 512],
             "epochs": 375, "seeds": 1, "filter_types": ["binary", "real"],
             "base_modes": ["trained"], "num_pairs": 2000},
    "cpu": {"table": "demo", "max_words": 5000, "intermediate_dims": [600, 1200, 1800, 2400],
            "epochs": 200, "seeds": 3, "filter_types": ["binary", "real"],
            "base_modes": ["trained", "fixed"], "num_pairs": 20000},
    "paper": {"table": "english", "max_words": 5000,
              "intermediate_dims": [600, 1200, 1800, 2400], "epochs": 1000, "seeds": 5,
              "filter_types": ["binary", "real"], "base_modes": ["trained", "fixed"],
              "num_pairs": 20000},
}
# §3.1: mini-batches of 256 words; Adam with PyTorch's defaults.
BATCH_SIZE = 256
LEARNING_RATE = 1e-3
# The paper's parameter counts for D_o = D_e = 300 (§3.1), in millions.
PAPER_PARAMETERS = {600: 0.4, 1200: 0.7, 1800: 1.1, 2400: 1.4}
# The English stand-in's fastText settings: skipgram, 300-d (GloVe's), no subwords.
ENGLISH_FASTTEXT = {"dim": 300, "epoch": 10, "min_count": 5, "minn": 0, "maxn": 0,
                    "bucket": 0, "threads": 1}

FLAGS = flags.FLAGS


def define_flags():
    """The command line's flags, defined when the module runs as the program."""
    harness.define_flags(PRESETS, "cpu")
    flags.DEFINE_string("vectors", "", "Embedding table: GloVe text (no header), .vec, "
                        "fastText .bin, or .npy with --vocabulary. Default: the preset's "
                        "stand-in (--table).")
    flags.DEFINE_string("vocabulary", "", "Words of an .npy table, one per line "
                        "(word[<tab>count]).")
    flags.DEFINE_string("counts", "", "Word frequencies, `word count` per line: keep the "
                        "--max_words words with the highest counts that have a vector "
                        "(default: the table's first rows).")
    flags.DEFINE_enum("table", None, ["english", "demo"], "Stand-in table without --vectors: "
                      "fastText on WordNet's English glosses, or the demo's synthetic "
                      "vectors (default: the preset's).")
    flags.DEFINE_string("wordnet_dir", WORDNET_DIR, "WordNet's dict folder (wordnet-base), "
                        "for --table english.")
    flags.DEFINE_list("similarity", [], "Word-similarity files: `word1 word2 score` per line.")
    flags.DEFINE_list("filter_types", None, "ALONE filter types, of binary, real (default: "
                      "the preset's).")
    flags.DEFINE_list("base_modes", None, "The base embedding o: trained, fixed (Figure 3's "
                      "Fix o) (default: the preset's).")
    flags.DEFINE_list("intermediate_dims", None, "D_inter values (default: the preset's).")
    flags.DEFINE_integer("base_dim", 0, "D_o (0: the table's dimension).")
    flags.DEFINE_integer("epochs", None, "Epochs of ceil(words / batch) minibatches "
                         "(default: the preset's).")
    flags.DEFINE_integer("seeds", None, "Seeds per setting, averaged (default: the preset's).")
    flags.DEFINE_integer("first_seed", 0, "The seeds are first_seed, first_seed + 1, ...")
    flags.DEFINE_integer("num_pairs", None, "Word pairs of the cosine comparison "
                         "(default: the preset's).")
    flags.DEFINE_integer("max_words", None, "Words of the table kept (0: all; default: the "
                         "preset's).")


# ---------------------------------------------------------------------------
# Tables


class TableError(ValueError):
    """An embedding table or word list that cannot be used (the message says why)."""


def table_format(path):
    """`"npy"`, `"bin"` (fastText), `"vec"` (a `count dim` header) or `"glove"` (none)."""
    if path.endswith(".npy"):
        return "npy"
    if path.endswith(".bin"):
        return "bin"
    if not os.path.exists(path):
        raise FileNotFoundError(f"Word-vector file not found: {path}")
    with open(path, "rb") as f:
        first = f.readline().split()
    if len(first) == 2 and all(field.isdigit() for field in first):
        return "vec"
    return "glove"


def _glove_lines(path):
    """Yields `(line number, word, numbers as strings)` of a GloVe text file.

    The dimension is the first line's count of numbers. A word is whatever
    precedes the last `dim` fields (a few words of glove.840B hold spaces)."""
    dim = None
    with open(path, "rb") as f:
        for number, raw in enumerate(f, start=1):
            fields = raw.decode("utf-8", errors="replace").rstrip().split(" ")
            if dim is None:
                dim = len(fields) - 1
                if dim < 1:
                    raise TableError(f"{path}:1: expected `word v1 ... vD`, got {raw[:80]!r}")
            if len(fields) < dim + 1:
                raise TableError(f"{path}:{number}: expected a word and {dim} numbers, got "
                                 f"{len(fields) - 1} fields")
            yield number, " ".join(fields[:-dim]), fields[-dim:]


def read_glove(path, max_words=0, keep=None):
    """`(words, float32 matrix)` of a GloVe text file, in file order.

    GloVe's format is `word v1 ... vD` per line with no header line (tfeff's
    `WordVectors` reads `.vec` files, whose first line is `count dim`).
    Only the first `max_words` rows are read (0: all), or, with a set
    `keep`, only the rows of its words (the first occurrence of a repeated
    word). Errors name the file and the line."""
    words, rows, seen = [], [], set()
    for number, word, numbers in _glove_lines(path):
        if (keep is not None and word not in keep) or word in seen:
            continue
        try:
            vector = np.asarray(numbers, dtype=np.float32)
        except ValueError as e:
            raise TableError(f"{path}:{number}: {e}") from e
        if not np.isfinite(vector).all():
            raise TableError(f"{path}:{number}: the vector of {word!r} is not finite")
        words.append(word)
        rows.append(vector)
        seen.add(word)
        if max_words and len(words) == max_words:
            break
    if not words:
        raise TableError(f"{path}: no vectors" + (" of the --counts words" if keep else ""))
    return words, np.stack(rows)


def glove_words(path):
    """The words of a GloVe text file, in file order (its numbers are not parsed)."""
    return [word for _, word, _ in _glove_lines(path)]


def read_counts(path):
    """The words of a `word count` file, highest count first (ties: file order)."""
    entries = []
    with open(path, encoding="utf-8", errors="replace") as f:
        for number, line in enumerate(f, start=1):
            fields = line.split()
            if not fields:
                continue
            try:
                count = float(fields[1]) if len(fields) == 2 else None
            except ValueError:
                count = None
            if count is None:
                raise TableError(f"{path}:{number}: expected `word count`, got {line[:80]!r}")
            entries.append((-count, number, fields[0]))
    if not entries:
        raise TableError(f"{path}: no `word count` lines")
    return [word for _, _, word in sorted(entries)]


def top_words(ranked, available, max_words):
    """`(words, skipped)`: the first `max_words` of `ranked` found in `available`, and
    how many higher-ranked words were passed over for having no vector."""
    chosen, skipped = [], 0
    for word in ranked:
        if word in available:
            chosen.append(word)
            if len(chosen) == max_words:
                break
        else:
            skipped += 1
    return chosen, skipped


def read_table(vectors, vocabulary="", max_words=0, counts=""):
    """`(words, float32 matrix, description)` of an embedding file (see the module
    docstring); `description` says which words were kept and how."""
    name = os.path.basename(vectors)
    kind = table_format(vectors)
    if kind == "glove" and not counts:
        words, matrix = read_glove(vectors, max_words)
        return words, matrix, (f"{name} (GloVe text format): its first {len(words):,} rows "
                               "(GloVe lists words by frequency)")
    if kind == "glove":
        ranked = read_counts(counts)
        chosen, skipped = top_words(ranked, set(glove_words(vectors)), max_words or len(ranked))
        words, matrix = read_glove(vectors, keep=set(chosen))
        order = {w: i for i, w in enumerate(words)}
        matrix = matrix[[order[w] for w in chosen]]
        return chosen, matrix, _by_counts(name, "GloVe text format", chosen, counts, skipped)
    if kind == "npy":
        if not vocabulary:
            raise TableError(f"{vectors}: an .npy table needs --vocabulary (its words)")
        matrix = np.load(vectors)
        with open(vocabulary, encoding="utf-8") as f:
            words = [line.rstrip("\n").split("\t")[0] for line in f]
        if matrix.ndim != 2 or len(words) != matrix.shape[0]:
            raise TableError(f"{vectors} has shape {matrix.shape} but {vocabulary} lists "
                             f"{len(words)} words")
    else:
        from tfeff.data import fasttext_files

        table = fasttext_files.WordVectors(vectors)
        if table.has_subwords:  # a fastText .bin: the vectors of its own vocabulary
            words = table._fasttext.get_words()
            matrix = np.stack([table.vector(w) for w in words])
        else:
            words, matrix = table.words_and_matrix()
    matrix = matrix.astype(np.float32)
    if counts:
        index = {w: i for i, w in enumerate(words)}
        chosen, skipped = top_words(read_counts(counts), index, max_words or len(words))
        label = {"npy": ".npy", "bin": "fastText .bin", "vec": ".vec text format"}[kind]
        return chosen, matrix[[index[w] for w in chosen]], _by_counts(
            name, label, chosen, counts, skipped)
    if max_words:
        words, matrix = words[:max_words], matrix[:max_words]
    return words, matrix, f"{name}: its first {len(words):,} words"


def _by_counts(name, kind, chosen, counts, skipped):
    return (f"{name} ({kind}): the {len(chosen):,} words of {os.path.basename(counts)} with "
            f"the highest counts that have a vector ({skipped:,} higher-ranked words without "
            "one passed over)")


def demo_table(max_words=0):
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
    words, matrix, _ = read_table(vectors, vocabulary)
    words, matrix = words[len(SPECIALS):], matrix[len(SPECIALS):]
    if max_words:
        words, matrix = words[:max_words], matrix[:max_words]
    return words, matrix, (f"the demo's {matrix.shape[1]}-d fastText vectors of its synthetic "
                           f"language, its first {len(words):,} words (by frequency)")


def english_table(work_dir, wordnet_dir=WORDNET_DIR, max_words=5000, log=print):
    """The stand-in for GloVe: fastText skipgram vectors (`ENGLISH_FASTTEXT`) trained on
    WordNet's glosses and examples, the `max_words` most frequent alphabetic words.

    Trained once into `work_dir` (the corpus, the model and the chosen rows are
    kept there). A missing WordNet raises `tools.english_corpus.CorpusError`
    saying how to install it."""
    from tfeff.data.fasttext_training import train_fasttext
    from tools import english_corpus

    os.makedirs(work_dir, exist_ok=True)
    text = os.path.join(work_dir, "wordnet_glosses.txt")
    model = os.path.join(work_dir, "fasttext_300d.bin")
    if not os.path.exists(text):
        train, heldout = english_corpus.build(wordnet_dir)
        harness.write_text_atomic(text, "".join(
            line + "\n" for line in train + heldout if line))
    with open(text, encoding="utf-8") as f:
        counts = collections.Counter(word for line in f for word in line.split())
    if not os.path.exists(model):
        log(f"training 300-d fastText vectors on WordNet's glosses ({sum(counts.values()):,} "
            f"tokens) into {model} (about 2 minutes, once)")
        train_fasttext(text, model, **ENGLISH_FASTTEXT)
    import fasttext

    vectors = fasttext.load_model(model)
    known = set(vectors.get_words())
    ranked = [w for w, _ in counts.most_common() if w.isalpha() and w in known]
    words = ranked[:max_words] if max_words else ranked
    matrix = np.stack([vectors.get_word_vector(w) for w in words]).astype(np.float32)
    return words, matrix, (
        f"stand-in for GloVe: 300-d fastText skipgram vectors (no subwords, "
        f"{ENGLISH_FASTTEXT['epoch']} epochs) trained on WordNet 3.0's glosses and examples "
        f"({sum(counts.values()):,} tokens), its {len(words):,} most frequent alphabetic words")


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
        raise ValueError("spearman needs two sequences of equal length >= 2, got "
                         f"{len(a)}, {len(b)}")
    ra, rb = rank(a), rank(b)
    ra, rb = ra - ra.mean(), rb - rb.mean()
    denominator = np.sqrt((ra * ra).sum() * (rb * rb).sum())
    return float((ra * rb).sum() / denominator) if denominator > 0 else float("nan")


def mean_and_spread(values):
    """`{"mean", "sd"}` of per-seed figures: the sample standard deviation (n - 1), 0 for
    one seed."""
    values = np.asarray(values, np.float64)
    return {"mean": float(values.mean()),
            "sd": float(values.std(ddof=1)) if len(values) > 1 else 0.0}


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


def steps_per_epoch(num_words, batch_size=BATCH_SIZE):
    """Minibatches of an epoch: `ceil(num_words / batch_size)`, so that an epoch draws at
    least |V| words (§3.1 counts "training on the whole vocabulary" as one epoch)."""
    return math.ceil(num_words / batch_size)


def paper_parameters(base_dim, intermediate_dim, output_dim, train_base=True):
    """Trainable parameters of ALONE (Table 1's `D_o + D_inter (D_o + D_e)`; the FFN of
    Eq. 3 has no biases); without o when it is fixed."""
    return (base_dim if train_base else 0) + intermediate_dim * (base_dim + output_dim)


def torch_adam():
    """`TorchAdam`, Adam with PyTorch's update and defaults (imports Keras on first use)."""
    import keras

    class TorchAdam(keras.optimizers.Adam):
        """Adam as `torch.optim.Adam` computes it, with its defaults (lr 1e-3, betas
        0.9 and 0.999, eps 1e-8).

        PyTorch: `p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)`.
        Keras' Adam: `p -= lr sqrt(1 - b2^t) / (1 - b1^t) * m / (sqrt(v) + eps)`, with
        eps 1e-7 by default: Kingma & Ba's "epsilon hat", added to the uncorrected
        `sqrt(v)`, i.e. PyTorch's eps divided by `sqrt(1 - b2^t)` (31.6 times
        larger at step 1, the same in the limit).
        """

        def __init__(self, learning_rate=1e-3, beta_1=0.9, beta_2=0.999, epsilon=1e-8,
                     **kwargs):
            super().__init__(learning_rate=learning_rate, beta_1=beta_1, beta_2=beta_2,
                             epsilon=epsilon, **kwargs)

        def update_step(self, gradient, variable, learning_rate):
            from keras import ops

            lr = ops.cast(learning_rate, variable.dtype)
            gradient = ops.cast(gradient, variable.dtype)
            step = ops.cast(self.iterations + 1, variable.dtype)
            correction1 = 1 - ops.power(ops.cast(self.beta_1, variable.dtype), step)
            correction2 = 1 - ops.power(ops.cast(self.beta_2, variable.dtype), step)
            m = self._momentums[self._get_variable_index(variable)]
            v = self._velocities[self._get_variable_index(variable)]
            self.assign_add(m, ops.multiply(ops.subtract(gradient, m), 1 - self.beta_1))
            self.assign_add(v, ops.multiply(ops.subtract(ops.square(gradient), v),
                                            1 - self.beta_2))
            denominator = ops.add(ops.divide(ops.sqrt(v), ops.sqrt(correction2)), self.epsilon)
            self.assign_sub(variable, ops.divide(ops.multiply(m, lr / correction1), denominator))

    return TorchAdam


Fit = collections.namedtuple("Fit", "reconstruction l2_loss parameters steps seconds layer")


def fit_alone(matrix, filter_type, intermediate_dim, base_dim, train_base, epochs, seed,
              batch_size=BATCH_SIZE, learning_rate=LEARNING_RATE, chunk=50):
    """Fits ALONE to `matrix` by Eq. 4 (§3.1). Returns a `Fit`: the fitted table, its
    mean squared error per word, the trainable parameters, the steps run, the
    training time in seconds and the fitted layer.

    `seed` seeds the filters, the initialization and the minibatches; `chunk`
    steps run per `tf.function` call (a loop in the graph)."""
    import tensorflow as tf

    from tfeff.layers import AloneEmbedding

    num_words, dim = matrix.shape
    # `token`: the FFN once per drawn word (256 of thousands: few repeats); no dropout.
    layer = AloneEmbedding(num_words, dim, base_dim or dim, intermediate_dim,
                           filter_type=filter_type, seed=seed, train_base=train_base,
                           lookup="token", name="alone")
    layer.build()
    variables = layer.trainable_variables
    optimizer = torch_adam()(learning_rate)
    optimizer.build(variables)
    target = tf.constant(matrix)

    @tf.function
    def train(ids):  # (steps, batch)
        def body(i, loss):
            with tf.GradientTape() as tape:
                error = layer(ids[i], training=True) - tf.gather(target, ids[i])  # (batch, dim)
                loss = tf.reduce_sum(tf.square(error))  # Eq. 4 over the minibatch
            grads = tape.gradient(loss, variables)
            optimizer.apply_gradients(zip(grads, variables))
            return i + 1, loss

        return tf.while_loop(lambda i, _: i < tf.shape(ids)[0], body,
                             (tf.constant(0), tf.constant(0.0)))[1]

    steps = epochs * steps_per_epoch(num_words, batch_size)
    rng = np.random.default_rng(seed)
    start = time.perf_counter()
    for done in range(0, steps, chunk):
        train(rng.integers(0, num_words, size=(min(chunk, steps - done), batch_size)))
    seconds = time.perf_counter() - start
    reconstruction = layer.embedding_table().numpy()
    final_loss = float(np.mean(np.sum((reconstruction.astype(np.float64) - matrix) ** 2, axis=1)))
    parameters = sum(int(np.prod(v.shape)) for v in variables)
    return Fit(reconstruction, final_loss, parameters, steps, seconds, layer)


# ---------------------------------------------------------------------------
# Reporting


def _figure(stats, digits):
    text = f"{stats['mean']:.{digits}f}"
    return text + f" ± {stats['sd']:.{digits}f}" if stats.get("n", 1) > 1 else text


def protocol_lines(result):
    """The protocol, item by item, as Markdown bullets."""
    seeds = result["seeds"]
    modes = " and ".join("trained" if m == "trained" else "fixed (Fix o)"
                         for m in result["base_modes"])
    return [
        f"* Table: {result['table']}; {result['num_words']:,} words × {result['dim']}.",
        f"* ALONE: D_o = {result['base_dim']}, D_e = {result['dim']}, D_inter in "
        f"{{{', '.join(str(r) for r in result['intermediate_dims'])}}}; filters "
        f"{', '.join(result['filter_types'])} (c = 64, M = 8, p_o = 0.5); the base embedding o "
        f"{modes}.",
        "* Objective: Eq. 4, the squared L2 distance summed over the words of a minibatch.",
        f"* Optimizer: Adam with PyTorch's defaults and update (lr {result['learning_rate']:g}, "
        "betas 0.9 and 0.999, eps 1e-8), no schedule.",
        f"* Minibatches of {result['batch_size']} words drawn uniformly from the vocabulary; an "
        f"epoch is ceil({result['num_words']:,} / {result['batch_size']}) = "
        f"{result['steps_per_epoch']} minibatches; {result['epochs']:,} epochs = "
        f"{result['steps']:,} steps per fit.",
        f"* Seeds: {len(seeds)} ({', '.join(map(str, seeds))}; the filters, the initialization "
        "and the minibatches); figures are the mean" + (" ± the standard deviation over the "
                                                         "seeds." if len(seeds) > 1 else "."),
        f"* Spearman, pairs: the fitted against the original cosines over {result['num_pairs']:,} "
        "fixed random word pairs. Spearman, <file>: the fitted cosines against the file's human "
        "scores; the original table's figure (Figure 3's dashed line) in its first row.",
    ]


def markdown(result):
    sims = result["similarity"]
    head = ["filter", "o", "D_inter", "parameters", "L2 loss (mean over words)",
            "Spearman, pairs"] + [f"Spearman, {name}" for name in sims]
    lines = [f"ALONE reconstruction (Takase & Kobayashi, §3.1), preset `{result['preset']}`:",
             "", *protocol_lines(result), "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    original = ["original table", "", "", f"{result['num_words'] * result['dim']:,}", "0",
                "1.000"]
    original += [f"{s['original']:.3f} ({s['covered']}/{s['pairs']} pairs)" for s in sims.values()]
    lines.append("| " + " | ".join(original) + " |")
    for run in result["runs"]:
        row = [run["filter_type"], "trained" if run["base_mode"] == "trained" else "fixed",
               str(run["intermediate_dim"]), f"{run['parameters']:,}",
               _figure(run["l2_loss"], 4), _figure(run["spearman_pairs"], 3)]
        row += [_figure(run["spearman_similarity"][name], 3) for name in sims]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n"


def plot(result, path):
    plt = harness.pyplot()
    if plt is None:
        return None
    panels = list(result["similarity"]) or ["pairs"]
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.4), squeeze=False)
    for ax, panel in zip(axes[0], panels):
        for filter_type in result["filter_types"]:
            for mode in result["base_modes"]:
                runs = [r for r in result["runs"]
                        if r["filter_type"] == filter_type and r["base_mode"] == mode]
                stats = [r["spearman_pairs"] if panel == "pairs"
                         else r["spearman_similarity"][panel] for r in runs]
                ax.errorbar([r["intermediate_dim"] for r in runs], [s["mean"] for s in stats],
                            yerr=[s["sd"] for s in stats], marker="o", capsize=3,
                            linestyle="-" if mode == "trained" else ":",
                            label=filter_type + ("" if mode == "trained" else " (Fix o)"))
        reference = 1.0 if panel == "pairs" else result["similarity"][panel]["original"]
        ax.axhline(reference, color="gray", linestyle="--", label="original")
        ax.set_xlabel("D_inter")
        ax.set_ylabel("Spearman")
        ax.set_title("cosines of word pairs" if panel == "pairs" else panel)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


# ---------------------------------------------------------------------------


def load_table(vectors="", vocabulary="", counts="", table="demo", max_words=0,
               wordnet_dir=WORDNET_DIR, work_dir="runs/bench", log=print):
    """`(words, matrix, description)`: `--vectors`, else the stand-in `table`."""
    if vectors:
        return read_table(vectors, vocabulary, max_words, counts)
    if counts:
        raise TableError("--counts needs --vectors (the stand-ins choose their own words)")
    if table == "english":
        return english_table(os.path.join(work_dir, "alone_english"), wordnet_dir, max_words,
                             log)
    if table == "demo":
        return demo_table(max_words)
    raise TableError(f"unknown stand-in table {table!r} (english, demo)")


def run(vectors="", vocabulary="", counts="", table="demo", similarity=(),
        filter_types=("binary", "real"), base_modes=("trained",), intermediate_dims=(16, 512),
        base_dim=0, epochs=375, seeds=1, first_seed=0, num_pairs=2000, max_words=1000,
        wordnet_dir=WORDNET_DIR, preset="", results_dir=None, log=print):
    """The experiment as a function; returns the result dict (and writes files to
    `results_dir`). Raises ValueError (TableError, CorpusError) for unusable input."""
    for name in filter_types:
        if name not in FILTER_TYPES:
            raise ValueError(f"--filter_types: unknown filter type {name!r} {FILTER_TYPES}")
    for name in base_modes:
        if name not in BASE_MODES:
            raise ValueError(f"--base_modes: unknown mode {name!r} {BASE_MODES}")
    words, matrix, description = load_table(vectors, vocabulary, counts, table, max_words,
                                            wordnet_dir, results_dir or "runs/bench", log)
    if len(words) < 2:
        raise TableError(f"{vectors or 'the table'}: at least 2 words are needed")
    index = {w: i for i, w in enumerate(words)}
    pairs_seed = first_seed
    left, right = sample_pairs(len(words), num_pairs, pairs_seed)
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
    seed_list = list(range(first_seed, first_seed + seeds))
    result = {
        "preset": preset or "custom", "table": description, "num_words": len(words),
        "dim": int(matrix.shape[1]), "base_dim": base_dim or int(matrix.shape[1]),
        "intermediate_dims": [int(d) for d in intermediate_dims],
        "filter_types": list(filter_types), "base_modes": list(base_modes),
        "epochs": epochs, "batch_size": BATCH_SIZE,
        "steps_per_epoch": steps_per_epoch(len(words)),
        "steps": epochs * steps_per_epoch(len(words)), "learning_rate": LEARNING_RATE,
        "optimizer": "Adam, PyTorch's update and defaults: lr 1e-3, betas (0.9, 0.999), "
                     "eps 1e-8, no schedule",
        "objective": "Eq. 4: squared L2 error summed over the minibatch",
        "seeds": seed_list, "num_pairs": num_pairs, "pairs_seed": pairs_seed,
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
        "similarity": {n: {k: v for k, v in s.items() if k != "ids"} for n, s in sims.items()},
        "runs": [],
    }
    for filter_type in filter_types:
        for mode in base_modes:
            for intermediate_dim in intermediate_dims:
                per_seed = []
                for seed in seed_list:
                    reconstruction, loss, parameters, steps, seconds, _ = fit_alone(
                        matrix, filter_type, int(intermediate_dim), base_dim,
                        mode == "trained", epochs, seed)
                    per_seed.append({
                        "seed": seed, "l2_loss": loss, "seconds": seconds,
                        "spearman_pairs": spearman(
                            original_pairs, pair_cosines(reconstruction, left, right)),
                        "spearman_similarity": {
                            n: spearman(s["ids"][2], pair_cosines(reconstruction, s["ids"][0],
                                                                  s["ids"][1]))
                            for n, s in sims.items()},
                    })
                    log(f"{filter_type:6s} o {mode:7s} D_inter={intermediate_dim:5d} seed {seed}: "
                        f"L2 {loss:.4f}, Spearman (pairs) {per_seed[-1]['spearman_pairs']:.3f}, "
                        f"{steps} steps in {seconds:.1f}s")
                entry = {
                    "filter_type": filter_type, "base_mode": mode,
                    "intermediate_dim": int(intermediate_dim), "parameters": parameters,
                    "seconds": sum(s["seconds"] for s in per_seed),
                    "per_seed": per_seed,
                    "l2_loss": mean_and_spread([s["l2_loss"] for s in per_seed]),
                    "spearman_pairs": mean_and_spread([s["spearman_pairs"] for s in per_seed]),
                    "spearman_similarity": {
                        n: mean_and_spread([s["spearman_similarity"][n] for s in per_seed])
                        for n in sims},
                }
                for stats in [entry["l2_loss"], entry["spearman_pairs"],
                              *entry["spearman_similarity"].values()]:
                    stats["n"] = len(per_seed)
                result["runs"].append(entry)
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
    from tools.english_corpus import CorpusError

    preset = PRESETS[FLAGS.preset]

    def chosen(name):
        value = getattr(FLAGS, name)
        return preset[name] if value is None else value

    try:
        result = run(
            vectors=FLAGS.vectors, vocabulary=FLAGS.vocabulary, counts=FLAGS.counts,
            table=chosen("table"), similarity=FLAGS.similarity,
            filter_types=chosen("filter_types"), base_modes=chosen("base_modes"),
            intermediate_dims=_positive(FLAGS.intermediate_dims, "--intermediate_dims", int)
            if FLAGS.intermediate_dims else preset["intermediate_dims"],
            base_dim=FLAGS.base_dim, epochs=_positive([chosen("epochs")], "--epochs", int)[0],
            seeds=_positive([chosen("seeds")], "--seeds", int)[0], first_seed=FLAGS.first_seed,
            num_pairs=chosen("num_pairs"), max_words=chosen("max_words"),
            wordnet_dir=FLAGS.wordnet_dir, preset=FLAGS.preset, results_dir=FLAGS.output_dir,
        )
    except CorpusError as e:
        print(f"error: {e}\nWithout --vectors the table is a stand-in for GloVe trained on "
              "WordNet's English glosses (Debian's wordnet-base). Or give GloVe's 300-d "
              "vectors with --vectors (glove.6B.300d.txt, from the GloVe project's page), or "
              "use the demo's synthetic vectors with --table demo.", file=sys.stderr)
        return 1
    except (ValueError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print()
    print(markdown(result))
    return 0


if __name__ == "__main__":
    define_flags()
    app.run(main)
