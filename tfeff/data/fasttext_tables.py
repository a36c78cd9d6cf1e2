"""fastText tables: train or load word vectors, and the fixed vocabulary table.

The vectors of every vocabulary word are computed once (out-of-vocabulary
words of the fastText model through their subwords), saved as a `.npy` file
and read back with `mmap_mode="r"`. They are ELMo-C's fixed input layer and
its fixed output targets.
"""

import json
import logging
import os
import subprocess
import sys

import numpy as np
import tensorflow as tf

from tfeff.data import corpus
from tfeff.data import files
from tfeff.data import vocabulary as vocabulary_lib

_CHUNK = 65536


class WordVectors:
    """A word-vector model: a fastText `.bin` (with subwords) or a `.vec` text file.

    `.bin` models give every string a vector (through character n-grams).
    `.vec` files only know their own words; any other word gets the zero
    vector, which the training pipeline then masks out.
    """

    def __init__(self, path):
        self.path = path
        if not tf.io.gfile.exists(path):
            raise FileNotFoundError(f"Word-vector file not found: {path}")
        if path.endswith(".vec") or path.endswith(".txt"):
            self._fasttext = None
            self._vectors = _read_vec(path)
            self.dim = len(next(iter(self._vectors.values())))
        else:
            import fasttext  # The library is needed only for .bin models.

            try:
                self._fasttext = fasttext.load_model(path)
            except ValueError as e:
                raise ValueError(f"{path}: not a fastText .bin model ({e})") from e
            self.dim = self._fasttext.get_dimension()

    @property
    def has_subwords(self):
        return self._fasttext is not None

    def words_and_matrix(self):
        """For `.vec` files: `(words, (len(words), dim) array)` in file order."""
        if self._fasttext is not None:
            raise ValueError(f"{self.path} is a .bin model; use FastTextEmbedding.from_fasttext")
        words = list(self._vectors)
        return words, np.stack([self._vectors[w] for w in words])

    def vector(self, word):
        if self._fasttext is not None:
            return self._fasttext.get_word_vector(word)
        return self._vectors.get(word, np.zeros(self.dim, np.float32))


def _read_vec(path):
    vectors = {}
    with tf.io.gfile.GFile(path, "rb") as f:
        header = f.readline().decode("utf-8", errors="replace").split()
        if len(header) != 2 or not all(h.isdigit() for h in header):
            raise ValueError(f"{path}:1: expected the `.vec` header `count dim`")
        dim = int(header[1])
        for number, raw in enumerate(f, start=2):
            parts = raw.decode("utf-8", errors="replace").rstrip().split(" ")
            if len(parts) != dim + 1:
                raise ValueError(
                    f"{path}:{number}: expected a word and {dim} numbers, got "
                    f"{len(parts) - 1} numbers"
                )
            try:
                vectors[parts[0]] = np.asarray(parts[1:], dtype=np.float32)
            except ValueError as e:
                raise ValueError(f"{path}:{number}: {e}") from e
    if not vectors:
        raise ValueError(f"{path}: no vectors")
    return vectors


def train_fasttext(
    corpus_patterns,
    output_path,
    dim=300,
    minn=3,
    maxn=6,
    bucket=2000000,
    epoch=5,
    min_count=1,
    threads=1,
    lr=0.05,
    on_invalid_utf8="error",
):
    """Trains skipgram vectors with subwords on the corpus; saves a `.bin` atomically.

    fastText reads one local file: the corpus lines (validated and stripped)
    are first written to a temporary file next to `output_path`. Training
    runs in a child Python process that imports only fastText: in a process
    where TensorFlow has already trained a model, fastText's training
    returns NaN every time (seen with TF 2.21 and fasttext-numpy2 0.10.4).
    With `threads=1` training is deterministic (fastText seeds each thread
    with its index; the Python wrapper exposes no seed).
    """
    for arg, value in (("dim", dim), ("epoch", epoch), ("threads", threads)):
        if value <= 0:
            raise ValueError(f"fastText `{arg}` must be positive. Received: {arg}={value}")
    text_path = files.temporary_sibling(output_path) + ".txt"
    os.makedirs(os.path.dirname(os.path.abspath(output_path)), exist_ok=True)
    try:
        with open(text_path, "w", encoding="utf-8") as f:
            for line in corpus.text_lines(corpus_patterns, on_invalid_utf8):
                f.write(line + "\n")
        with files.atomic_local_path(output_path) as tmp_model:
            _train_in_child_process(
                text_path, tmp_model,
                dict(model="skipgram", dim=dim, minn=minn, maxn=maxn, bucket=bucket,
                     epoch=epoch, lr=lr, minCount=min_count, thread=threads, verbose=0),
                corpus_patterns,
            )
    finally:
        if os.path.exists(text_path):
            os.remove(text_path)
    logging.info("Trained fastText (%d-d) into %s", dim, output_path)
    return output_path


_TRAIN_SCRIPT = """
import json, sys
import fasttext
text_path, model_path, kwargs = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
try:
    model = fasttext.train_unsupervised(text_path, **kwargs)
except RuntimeError as e:
    print(e, file=sys.stderr)
    sys.exit(3)
model.save_model(model_path)
"""


def _train_in_child_process(text_path, model_path, kwargs, corpus_patterns):
    done = subprocess.run(
        [sys.executable, "-c", _TRAIN_SCRIPT, text_path, model_path, json.dumps(kwargs)],
        capture_output=True, text=True, check=False,
    )
    if done.returncode != 0:
        message = done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "no output"
        hint = (
            " On small corpora this is usually divergence: lower fasttext.lr or raise "
            "fasttext.dim." if "NaN" in message else ""
        )
        raise ValueError(f"fastText training on {corpus_patterns} failed ({message}).{hint}")


def compute_vocabulary_vectors(word_vectors, vocabulary, output_path, expected_dim=None,
                               center=False):
    """Writes the `(len(vocabulary), dim)` float32 table of vocabulary vectors.

    Rows of `<pad>` and `<unk>` are zero. Written through a memory map in
    chunks, then renamed, so a 2M-word table never needs two copies in memory
    and a killed run leaves no partial table.

    With `center=True` the mean of the word rows is subtracted from every
    word row and saved to `mean_path(output_path)`: fastText vectors trained
    on a small corpus share one dominant direction (pairwise cosines near 1),
    which makes a cosine target space nearly degenerate; removing the common
    mean ("all-but-the-top", Mu & Viswanath, ICLR 2018) restores it. Export
    subtracts the same mean in-graph.

    Raises:
        ValueError: `expected_dim` is given and differs from the vectors' size.
    """
    if expected_dim is not None and word_vectors.dim != expected_dim:
        raise ValueError(
            f"The word vectors in {word_vectors.path} have dimension {word_vectors.dim}, "
            f"but the config asks for {expected_dim} (fasttext.dim)."
        )
    first = vocabulary_lib.BOS_ID
    with files.atomic_local_path(output_path) as tmp:
        table = np.lib.format.open_memmap(
            tmp, mode="w+", dtype=np.float32, shape=(len(vocabulary), word_vectors.dim)
        )
        table[:first] = 0.0
        for i in range(first, len(vocabulary)):
            table[i] = word_vectors.vector(vocabulary.words[i])
        if center:
            mean = np.zeros(word_vectors.dim, np.float64)
            for start in range(first, len(vocabulary), _CHUNK):
                mean += table[start:start + _CHUNK].sum(axis=0, dtype=np.float64)
            mean = (mean / max(len(vocabulary) - first, 1)).astype(np.float32)
            for start in range(first, len(vocabulary), _CHUNK):
                table[start:start + _CHUNK] -= mean
            with files.atomic_local_path(mean_path(output_path)) as tmp_mean:
                with open(tmp_mean, "wb") as f:
                    np.save(f, mean)
        table.flush()
        del table
    return output_path


def mean_path(vectors_path):
    """Where `compute_vocabulary_vectors(center=True)` saves the subtracted mean."""
    return vectors_path[: -len(".npy")] + ".mean.npy" if vectors_path.endswith(".npy") else vectors_path + ".mean.npy"


def load_vocabulary_vectors(path, vocabulary_size=None):
    """Memory-maps a vocabulary table; checks its row count when given."""
    try:
        table = np.load(path, mmap_mode="r")
    except (OSError, ValueError) as e:
        raise ValueError(f"Could not read the vocabulary vectors {path}: {e}") from e
    if table.ndim != 2:
        raise ValueError(f"{path}: expected a 2-D table, got shape {table.shape}")
    if vocabulary_size is not None and table.shape[0] != vocabulary_size:
        raise ValueError(
            f"{path} has {table.shape[0]} rows but the vocabulary has {vocabulary_size} words"
        )
    return table
