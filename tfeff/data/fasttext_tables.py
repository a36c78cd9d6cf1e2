"""fastText tables: train or load word vectors, and the fixed vocabulary table.

The vectors of every vocabulary word are computed once (out-of-vocabulary
words of the fastText model through their subwords), saved as a `.npy` file
and read back with `mmap_mode="r"`. They are ELMo-C's fixed input layer and
its fixed output targets.
"""

import errno
import json
import logging
import os
import shutil
import struct
import subprocess
import sys

import numpy as np
import tensorflow as tf

from tfeff.data import corpus
from tfeff.data import files
from tfeff.data import vocabulary as vocabulary_lib
from tfeff.data import words as words_lib

_CHUNK = 65536
# Longer words are left out of the text fastText trains on (`train_fasttext`).
MAX_WORD_CHARS = 1000
# fastText's .bin layout (fasttext.cc `saveModel`, args.cc, dictionary.cc, densematrix.cc).
_FASTTEXT_MAGIC = 793712314
_FASTTEXT_VERSIONS = (11, 12)
_ARGS_BYTES = 12 * 4 + 8  # twelve int32 arguments, then the double `t`
_ARG_NAMES = ("dim", "ws", "epoch", "minCount", "neg", "wordNgrams", "loss", "model",
              "bucket", "minn", "maxn", "lrUpdateRate")
_READ_BLOCK = 1 << 22
# (real path, size, mtime_ns, check_values) -> header of a model file that passed.
_CHECKED_MODELS = {}


class WordVectorsError(ValueError):
    """A word-vector file that is truncated, corrupt or degenerate (names the file).

    Args:
        message: the error message, naming the file.
        problem: what was found, without the file name (None when not
            given); kept as the `problem` attribute.
    """

    def __init__(self, message, problem=None):
        super().__init__(message)
        self.problem = problem


def check_fasttext_model(path, check_values=True):
    """Validates a fastText `.bin` model against its own header before it is used.

    The fastText library loads a truncated file without complaint (the
    missing rows read as zeros, the output matrix as `0 x 0`), so a cut
    download or a half-copied file would silently train on broken vectors.
    This reads the header and the dictionary, computes where each matrix
    must start and end, and checks:

    * the magic number and version, and header sizes that make sense;
    * the input matrix is `(nwords + bucket) x dim` and the output matrix
      non-empty with `dim` columns (quantized models: the input is not sized);
    * the file ends exactly where the output matrix ends (not truncated, no
      trailing bytes);
    * with `check_values`, every input-matrix value is finite, the word
      vectors are not all the same (all zeros, say), and the output matrix is
      finite and not all zero. Single zero word vectors are legitimate
      (fastText leaves some rows it never updated at zero) and only logged.

    The matrices are read through a memory map in blocks, never copied whole.

    A file that passed is not read again while its size and modification
    time stay the same (`tfeff-pretrain` checks `fasttext.pretrained` before
    any work, and `WordVectors` checks what it loads).

    A failed check raises `WordVectorsError`, naming the file.

    Args:
        path: local path of the `.bin` model.
        check_values: also check the matrices' values (the last point above),
            not only their sizes.

    Returns:
        dict with `nwords`, `bucket`, `dim`, `minn`, `maxn`, `quantized`.

    Raises:
        FileNotFoundError: no such file.
    """
    if not os.path.exists(path):
        raise FileNotFoundError(f"fastText model not found: {path}")
    stat = os.stat(path)
    key = (os.path.realpath(path), stat.st_size, stat.st_mtime_ns, check_values)
    if key not in _CHECKED_MODELS:
        _CHECKED_MODELS[key] = _validate_fasttext_model(path, stat.st_size, check_values)
    return dict(_CHECKED_MODELS[key])


def _validate_fasttext_model(path, size, check_values):
    """`check_fasttext_model`'s reading of the file (every call reads it)."""

    def bad(message):
        return WordVectorsError(f"{path}: {message}; it is not a complete fastText .bin model "
                                "(re-train or re-download it)", problem=message)

    with open(path, "rb") as f:
        def read(fmt):
            n = struct.calcsize(fmt)
            raw = f.read(n)
            if len(raw) != n:
                raise bad(f"the file ends at byte {size} inside its header")
            return struct.unpack(fmt, raw)

        magic, version = read("<ii")
        if magic != _FASTTEXT_MAGIC:
            raise bad("wrong magic number (not a fastText .bin file)")
        if version not in _FASTTEXT_VERSIONS:
            raise bad(f"unsupported format version {version}")
        args = dict(zip(_ARG_NAMES, read("<12i")))
        read("<d")
        dim, bucket = args["dim"], args["bucket"]
        if dim <= 0 or bucket < 0 or args["minn"] < 0 or args["maxn"] < 0:
            raise bad(f"impossible header values (dim={dim}, bucket={bucket}, "
                      f"minn={args['minn']}, maxn={args['maxn']})")
        entries, nwords, nlabels, _, pruned = read("<iiiqq")
        if entries <= 0 or nwords < 0 or nlabels < 0 or nwords + nlabels != entries:
            raise bad(f"impossible dictionary sizes ({entries} entries, {nwords} words, "
                      f"{nlabels} labels)")
        # Entries: a NUL-terminated word, int64 count, int8 type. Scanned in blocks.
        position = f.tell()
        buffer, start, found = b"", 0, 0
        while found < entries:
            end = buffer.find(b"\0", start)
            if end < 0 or end + 10 > len(buffer):
                more = f.read(_READ_BLOCK)
                if not more:
                    raise bad(f"the file ends at byte {size} inside the dictionary "
                              f"(entry {found + 1} of {entries})")
                buffer, start = buffer[start:] + more, 0
                position = f.tell() - len(buffer)
                continue
            start, found = end + 10, found + 1
        offset = position + start + 8 * max(pruned, 0)
        f.seek(offset)
        quantized = read("<?")[0]
        rows, cols = read("<qq")
        if quantized:
            # Product-quantized input (.ftz): its codes are not sized by the header.
            return dict(nwords=nwords, bucket=bucket, dim=dim, minn=args["minn"],
                        maxn=args["maxn"], quantized=True)
        if (rows, cols) != (nwords + bucket, dim):
            raise bad(f"the input matrix is {rows} x {cols}, the header says "
                      f"(nwords + bucket) x dim = {nwords + bucket} x {dim}")
        input_offset = f.tell()
        f.seek(input_offset + 4 * rows * cols)
        if input_offset + 4 * rows * cols + 17 > size:
            raise bad(f"the file is {size} bytes, shorter than its input matrix needs "
                      f"({input_offset + 4 * rows * cols + 17} bytes before the output matrix)")
        read("<?")
        out_rows, out_cols = read("<qq")
        output_offset = f.tell()
        if out_rows <= 0 or out_cols != dim:
            raise bad(f"the output matrix is {out_rows} x {out_cols} (expected a non-empty "
                      f"matrix with {dim} columns)")
        expected = output_offset + 4 * out_rows * out_cols
        if size != expected:
            raise bad(f"the file is {size} bytes, its header says {expected}"
                      + (" (truncated)" if size < expected else " (trailing bytes)"))
    if check_values:
        matrix = np.memmap(path, dtype="<f4", mode="r", offset=input_offset,
                           shape=(rows, cols))
        step = max(1, _READ_BLOCK // (4 * cols))
        zero_words, distinct_words = 0, False
        first_word = np.asarray(matrix[0]) if nwords else None
        for lo in range(0, rows, step):
            block = np.asarray(matrix[lo:lo + step])
            if not np.isfinite(block).all():
                row = lo + int(np.flatnonzero(~np.isfinite(block).all(axis=1))[0])
                raise bad(f"row {row} of the input matrix is not finite (NaN/Inf)")
            words = block[:max(0, nwords - lo)]
            zero_words += int(np.count_nonzero(~words.any(axis=1)))
            distinct_words = distinct_words or bool((words != first_word).any())
        if nwords > 1 and not distinct_words:
            raise bad(f"all {nwords} word vectors of the input matrix are identical "
                      f"({'zeros' if not first_word.any() else 'one repeated row'})")
        if zero_words:
            # Seen in real models trained on small corpora (one epoch, threads=1): a rare
            # word that no update reached keeps a zero vector. Legitimate; worth a line.
            logging.warning("%s: %d of %d word vectors are all zero (words that fastText "
                            "never updated; more epochs or a higher min_count avoid them)",
                            path, zero_words, nwords)
        output = np.memmap(path, dtype="<f4", mode="r", offset=output_offset,
                           shape=(out_rows, out_cols))
        nonzero = False
        for lo in range(0, out_rows, step):
            block = np.asarray(output[lo:lo + step])
            if not np.isfinite(block).all():
                raise bad("the output matrix has non-finite values (NaN/Inf)")
            nonzero = nonzero or bool(block.any())
        if not nonzero:
            raise bad("the output matrix is all zeros (an untrained or blanked model)")
        del matrix, output
    return dict(nwords=nwords, bucket=bucket, dim=dim, minn=args["minn"], maxn=args["maxn"],
                quantized=False)


def check_word_vectors_file(path):
    """The checks that can run before a word-vector file is used.

    A `.bin` model is checked in full (`check_fasttext_model`), a `.vec` (or
    `.txt`) file's header only (its lines are checked as they are read). A
    failed check raises `WordVectorsError`, naming the file.

    Args:
        path: the word-vector file (any `tf.io.gfile` path).

    Raises:
        FileNotFoundError: no such file.
        ValueError: a directory.
    """
    if not tf.io.gfile.exists(path):
        raise FileNotFoundError(f"Word-vector file not found: {path}")
    if tf.io.gfile.isdir(path):
        raise ValueError(f"The word-vector file {path} is a directory: name the fastText .bin "
                         "or .vec file in it (fasttext.pretrained).")
    if path.endswith((".vec", ".txt")):
        with tf.io.gfile.GFile(path, "rb") as f:
            _vec_header(f, path)
        return
    check_fasttext_model(path)


class WordVectors:
    """A word-vector model: a fastText `.bin` (with subwords) or a `.vec` text file.

    `.bin` models give every string a vector (through character n-grams).
    `.vec` files only know their own words; any other word gets the zero
    vector, which the training pipeline then masks out.

    Args:
        path: a fastText `.bin` model (checked with `check_fasttext_model`,
            then loaded with the `fasttext` library), or a `.vec` / `.txt`
            text file of vectors (read whole).

    Raises:
        FileNotFoundError: no such file.
        WordVectorsError: the `fasttext` library cannot load the `.bin` model
            (a file that fails `check_fasttext_model` raises it as well).
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

            check_fasttext_model(path)
            try:
                self._fasttext = fasttext.load_model(path)
            except ValueError as e:
                raise WordVectorsError(f"{path}: not a fastText .bin model ({e})") from e
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


def _vec_header(f, path):
    """`(count, dim)` of the `.vec` file open as `f` (at its start)."""
    header = f.readline().decode("utf-8", errors="replace").split()
    if len(header) != 2 or not all(h.isdigit() for h in header) or int(header[1]) < 1:
        raise WordVectorsError(f"{path}:1: expected the `.vec` header `count dim`")
    return int(header[0]), int(header[1])


def _read_vec(path):
    """A `.vec` file as `{word: vector}`; its header's count and size are checked, and
    every value must be finite (errors name the file and line)."""
    vectors = {}
    with tf.io.gfile.GFile(path, "rb") as f:
        count, dim = _vec_header(f, path)
        for number, raw in enumerate(f, start=2):
            parts = raw.decode("utf-8", errors="replace").rstrip().split(" ")
            if len(parts) != dim + 1:
                raise WordVectorsError(
                    f"{path}:{number}: expected a word and {dim} numbers, got "
                    f"{len(parts) - 1} numbers"
                )
            try:
                vector = np.asarray(parts[1:], dtype=np.float32)
            except ValueError as e:
                raise WordVectorsError(f"{path}:{number}: {e}") from e
            if not np.isfinite(vector).all():
                raise WordVectorsError(f"{path}:{number}: the vector of {parts[0]!r} is not "
                                       "finite (NaN/Inf)")
            vectors[parts[0]] = vector
    if not vectors:
        raise WordVectorsError(f"{path}: no vectors")
    if number - 1 != count:
        raise WordVectorsError(f"{path}: the header says {count} vectors, the file holds "
                               f"{number - 1} (truncated?)")
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

    fastText reads one local file: the corpus is first written to a temporary
    file next to `output_path`, each non-blank line as its words
    (`tfeff.data.words.split`) joined by single spaces. fastText splits at
    ASCII whitespace and NUL only, so it then sees the words that the
    vocabulary and the training pipeline see (a no-break space would
    otherwise glue two words into one). Words longer than `MAX_WORD_CHARS`
    characters, or holding a NUL character, are left out of that text with a
    warning naming the first: such "words" are text without spaces, markup
    or encoded data, and one of two million characters made fastText's
    training four times slower on the demo corpus (40,000 sentences, 15
    epochs). Like any word fastText did not see, they still get vectors from
    their character n-grams.

    Training runs in a child Python process that imports only fastText: in a
    process where TensorFlow has already trained a model, fastText's training
    returns NaN every time (seen with TF 2.21 and fasttext-numpy2 0.10.4).
    With `threads=1` training is deterministic (fastText seeds each thread
    with its index; the Python wrapper exposes no seed).

    The trained model is checked (`check_fasttext_model`) before it is
    renamed to `output_path`: a model that fails (e.g. an all-zero output
    matrix, when the corpus is too small for fastText to train on) raises
    `WordVectorsError` and leaves nothing at `output_path`. A corpus that is
    empty, not UTF-8 (under `on_invalid_utf8="error"`) or holds no word
    fastText can take raises `CorpusError`.

    Args:
        corpus_patterns: glob(s) of the corpus, as for
            `tfeff.data.resolve_files`.
        output_path: local path of the `.bin` model to write.
        dim: vector size (fastText's `-dim`).
        minn: shortest character n-gram (`-minn`).
        maxn: longest character n-gram (`-maxn`).
        bucket: number of n-gram hash buckets (`-bucket`).
        epoch: training epochs (`-epoch`).
        min_count: minimal number of occurrences of a word (`-minCount`).
        threads: training threads (`-thread`); 1 is deterministic.
        lr: learning rate (`-lr`).
        on_invalid_utf8: `"error"`, `"skip"` or `"replace"` (see
            `tfeff.data.corpus`).

    Returns:
        `output_path`.

    Raises:
        ValueError: `dim`, `epoch` or `threads` is not positive, or fastText's
            training fails (with a hint when it diverged).
    """
    for arg, value in (("dim", dim), ("epoch", epoch), ("threads", threads)):
        if value <= 0:
            raise ValueError(f"fastText `{arg}` must be positive. Received: {arg}={value}")
    text_path = files.temporary_sibling(output_path) + ".txt"
    os.makedirs(os.path.dirname(os.path.abspath(output_path)), exist_ok=True)
    try:
        _write_fasttext_text(corpus_patterns, on_invalid_utf8, text_path)
        with files.atomic_local_path(output_path) as tmp_model:
            _train_in_child_process(
                text_path, tmp_model,
                dict(model="skipgram", dim=dim, minn=minn, maxn=maxn, bucket=bucket,
                     epoch=epoch, lr=lr, minCount=min_count, thread=threads, verbose=0),
                corpus_patterns,
            )
            header = _check_trained_model(tmp_model, corpus_patterns)
        _remember_checked(output_path, header)
    finally:
        if os.path.exists(text_path):
            os.remove(text_path)
    logging.info("Trained fastText (%d-d) into %s", dim, output_path)
    return output_path


def _write_fasttext_text(corpus_patterns, on_invalid_utf8, path):
    """Writes the text fastText trains on (see `train_fasttext`) to the local `path`."""
    left_out, first, written = 0, None, 0
    with open(path, "w", encoding="utf-8") as f:
        for source, number, line in corpus.text_lines(corpus_patterns, on_invalid_utf8,
                                                      with_location=True):
            words = words_lib.split(line)
            if len(line) > MAX_WORD_CHARS or "\0" in line:  # else no word can be too long
                dropped = [w for w in words if len(w) > MAX_WORD_CHARS or "\0" in w]
                if dropped:
                    left_out += len(dropped)
                    if first is None:
                        first = f"{source}:{number} ({max(map(len, dropped)):,} characters)"
                    words = [w for w in words if len(w) <= MAX_WORD_CHARS and "\0" not in w]
            if words:
                f.write(" ".join(words) + "\n")
                written += 1
    if left_out:
        logging.warning(
            "%d word(s) longer than %d characters or holding a NUL character are left out "
            "of the text fastText trains on; the first is at %s. Such words are usually "
            "text without spaces, markup or encoded data; they still get vectors from "
            "their character n-grams.", left_out, MAX_WORD_CHARS, first)
    if not written:
        raise corpus.CorpusError(
            f"{corpus_patterns}: no word to train fastText on (every word is longer than "
            f"{MAX_WORD_CHARS} characters or holds a NUL character; the first at {first}). "
            "Is the text split into words with spaces?")


# Free bytes under which a truncated model just written is put down to a full disk.
_FULL_DISK_BYTES = 64 << 20


def _check_trained_model(path, corpus_patterns):
    """`check_fasttext_model` of a model fastText has just trained, before it is put in place."""
    try:
        return check_fasttext_model(path)
    except WordVectorsError as e:
        # fastText writes its model without checking the writes: a full disk leaves a
        # file shorter than its header says, which is the disk's fault, not the corpus'.
        free = shutil.disk_usage(os.path.dirname(os.path.abspath(path))).free
        if ("shorter than" in e.problem or "(truncated)" in e.problem
                or "inside its header" in e.problem or "inside the dictionary" in e.problem) \
                and free < _FULL_DISK_BYTES:
            raise OSError(errno.ENOSPC, f"fastText could not write its whole model ({e.problem}); "
                          f"{free:,} bytes are free on that disk: free space, then rerun",
                          path) from e
        raise WordVectorsError(
            f"fastText training on {corpus_patterns} gave an unusable model: {e.problem}. "
            "It was not kept. fastText updates nothing on a corpus too small or too "
            "repetitive (it skips most occurrences of frequent words): use more text; "
            "non-finite values mean that it diverged: lower fasttext.lr.",
            problem=e.problem) from e


def _remember_checked(path, header):
    """Records that the model now at `path` passed `check_fasttext_model` (it was
    checked under its temporary name; a rename keeps its size and time)."""
    stat = os.stat(path)
    _CHECKED_MODELS[(os.path.realpath(path), stat.st_size, stat.st_mtime_ns, True)] = header


_TRAIN_SCRIPT = """
import json, os, signal, sys
text_path, model_path, kwargs = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
parent = int(sys.argv[4])
try:  # Linux: killed with its parent, however the parent ends
    import ctypes
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
except (OSError, AttributeError):
    pass
if os.getppid() != parent:  # the parent ended before the line above
    sys.exit(4)
import fasttext
try:
    model = fasttext.train_unsupervised(text_path, **kwargs)
except RuntimeError as e:
    print(e, file=sys.stderr)
    sys.exit(3)
model.save_model(model_path)
"""


def _train_in_child_process(text_path, model_path, kwargs, corpus_patterns):
    done = subprocess.run(
        [sys.executable, "-c", _TRAIN_SCRIPT, text_path, model_path, json.dumps(kwargs),
         str(os.getpid())],
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
