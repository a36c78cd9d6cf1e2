"""The fixed vocabulary table: one fastText vector per vocabulary word, in id order.

Computed once (words unknown to a `.bin` model through their subwords), saved as
a `.npy` file and memory-mapped back: ELMo-C's fixed inputs and output targets.
"""

import logging
import unicodedata

import numpy as np

from tfeff.data import files
from tfeff.data import vocabulary as vocabulary_lib
from tfeff.data.fasttext_files import WordVectorsError

_CHUNK = 65536


def compute_vocabulary_vectors(word_vectors, vocabulary, output_path, expected_dim=None,
                               center=False):
    """Writes the `(len(vocabulary), dim)` float32 table of vocabulary vectors.

    Rows of `<pad>`, `<unk>` and words the vectors do not know are zero (a warning
    counts them); written through a memory map in chunks. With `center=True` the mean
    word row is subtracted and saved to `mean_path(output_path)`: fastText vectors of a
    small corpus share one dominant direction, which makes a cosine target space
    degenerate ("all-but-the-top", Mu & Viswanath, ICLR 2018).

    Args:
        word_vectors: the `WordVectors` to read each word's vector from.
        vocabulary: the `Vocabulary` whose words give the rows, in id order.
        output_path: local path of the `.npy` table to write.
        expected_dim: None, or the vector size the config asks for.
        center: subtract the mean word row.

    Returns:
        `output_path`.

    Raises:
        ValueError: `expected_dim` is given and differs from the vectors' size.
        WordVectorsError: no corpus word of the vocabulary has a vector (nothing written).
    """
    if expected_dim is not None and word_vectors.dim != expected_dim:
        raise ValueError(
            f"The word vectors in {word_vectors.path} have dimension {word_vectors.dim}, "
            f"but the config asks for {expected_dim} (fasttext.dim).")
    first = vocabulary_lib.BOS_ID
    with files.atomic_local_path(output_path) as tmp:
        table = np.lib.format.open_memmap(
            tmp, mode="w+", dtype=np.float32, shape=(len(vocabulary), word_vectors.dim))
        table[:first] = 0.0
        missing = []
        for i in range(first, len(vocabulary)):
            row = word_vectors.vector(vocabulary.words[i])
            table[i] = row
            if not np.any(row):
                missing.append(vocabulary.words[i])
        if missing and (refusal := _report_missing(word_vectors, vocabulary, missing)):
            raise WordVectorsError(refusal)
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


def _report_missing(word_vectors, vocabulary, missing):
    """Warns how many vocabulary words got a zero row; returns the refusal when no corpus
    word has a vector, else None."""
    words = len(vocabulary) - vocabulary_lib.BOS_ID
    corpus_words = len(vocabulary) - len(vocabulary_lib.SPECIALS)
    missing_corpus = [w for w in missing if w not in vocabulary_lib.SPECIALS]
    boundaries = [w for w in (vocabulary_lib.BOS, vocabulary_lib.EOS) if w in missing]
    other_form = _in_another_normal_form(word_vectors, missing)
    hint = (f" {other_form} of them {'is' if other_form == 1 else 'are'} in it spelled in "
            "another Unicode normalization form (NFC or NFD): words are compared byte for "
            "byte, so normalize the corpus and the vectors the same way." if other_form else "")
    if corpus_words and len(missing_corpus) == corpus_words:
        return (f"{word_vectors.path}: none of the {corpus_words:,} words of the vocabulary "
                "has a vector in it (all would be zeros): vectors of another language, "
                f"tokenization or casing?{hint}")
    shown = ", ".join(repr(w) for w in missing[:5]) + (", ..." if len(missing) > 5 else "")
    logging.warning(
        "%s: %s of %s vocabulary words have no vector in it and get zeros (%s)%s: as inputs "
        "they carry nothing, as targets nothing can be learned for them.%s",
        word_vectors.path, f"{len(missing):,}", f"{words:,}", shown,
        (", among them the sentence boundar" + ("ies " if len(boundaries) > 1 else "y ")
         + " and ".join(boundaries)) if boundaries else "", hint)
    return None


def _in_another_normal_form(word_vectors, words):
    """How many of `words` a `.vec` file holds in another Unicode normalization form."""
    if word_vectors.has_subwords:
        return 0
    return sum(any(form in word_vectors
                   for form in {unicodedata.normalize(f, w) for f in ("NFC", "NFD")} - {w})
               for w in words if not w.isascii())


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
        ValueError: the file is not a 2-D `.npy` array of `vocabulary_size` rows.
    """
    try:
        table = np.load(path, mmap_mode="r")
    except (OSError, ValueError) as e:
        raise ValueError(f"Could not read the vocabulary vectors {path}: {e}") from e
    if table.ndim != 2:
        raise ValueError(f"{path}: expected a 2-D table, got shape {table.shape}")
    if vocabulary_size is not None and table.shape[0] != vocabulary_size:
        raise ValueError(
            f"{path} has {table.shape[0]} rows but the vocabulary has {vocabulary_size} words")
    return table
