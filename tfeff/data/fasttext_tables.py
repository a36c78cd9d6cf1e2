"""The fixed vocabulary table: one fastText vector per vocabulary word, in id order.

The vectors of every vocabulary word are computed once (out-of-vocabulary
words of the fastText model through their subwords), saved as a `.npy` file
and read back with `mmap_mode="r"`. They are ELMo-C's fixed input layer and
its fixed output targets.
"""

import numpy as np

from tfeff.data import files
from tfeff.data import vocabulary as vocabulary_lib

_CHUNK = 65536


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

    Args:
        word_vectors: the `WordVectors` to read each word's vector from.
        vocabulary: the `Vocabulary` whose words give the rows, in id order.
        output_path: local path of the `.npy` table to write.
        expected_dim: None, or the vector size the config asks for.
        center: subtract the mean of the word rows (see above).

    Returns:
        `output_path`.

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
    """Memory-maps a vocabulary table; checks its row count when given.

    Args:
        path: the `.npy` table (`compute_vocabulary_vectors`).
        vocabulary_size: None, or the number of rows the table must have.

    Returns:
        The read-only memory-mapped NumPy array `(rows, dim)`.

    Raises:
        ValueError: the file cannot be read as a `.npy` array, is not 2-D, or
            does not have `vocabulary_size` rows.
    """
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
