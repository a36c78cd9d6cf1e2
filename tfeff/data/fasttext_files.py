"""Reading and validating fastText word-vector files: `.bin` models and `.vec` text files.

`check_fasttext_model` checks a `.bin` model against its own header,
`check_word_vectors_file` runs before a file is used, `WordVectors` loads either
kind; a bad file raises `WordVectorsError`, naming it.
"""

import logging
import os
import struct

import numpy as np
import tensorflow as tf

# fastText's .bin layout (fasttext.cc `saveModel`, args.cc, dictionary.cc, densematrix.cc).
_FASTTEXT_MAGIC = 793712314
_FASTTEXT_VERSIONS = (11, 12)
_ARG_NAMES = ("dim", "ws", "epoch", "minCount", "neg", "wordNgrams", "loss", "model",
              "bucket", "minn", "maxn", "lrUpdateRate")
_READ_BLOCK = 1 << 22
# (real path, size, mtime_ns, check_values) -> header of a model file that passed.
_CHECKED_MODELS = {}


class WordVectorsError(ValueError):
    """A word-vector file that is truncated, corrupt or degenerate (names the file).

    Args:
        message: the error message, naming the file.
        problem: what was found, without the file name; the `problem` attribute.
    """

    def __init__(self, message, problem=None):
        super().__init__(message)
        self.problem = problem


def check_fasttext_model(path, check_values=True):
    """Validates a fastText `.bin` model against its own header before it is used.

    The fastText library loads a truncated file without complaint, so this checks
    the magic number, version and matrix sizes against the file's size; with
    `check_values`, the matrices (memory-mapped, in blocks) must be finite, the word
    vectors not all identical and the output matrix not all zero. A failed check
    raises `WordVectorsError`, naming the file; one that passed is not read again
    while its size and modification time stay the same.

    Args:
        path: local path of the `.bin` model.
        check_values: also check the matrices' values, not only their sizes.

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
        read("<d")  # the twelve int32 arguments are followed by the double `t`
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
        f.seek(position + start + 8 * max(pruned, 0))
        quantized = read("<?")[0]
        header = dict(nwords=nwords, bucket=bucket, dim=dim, minn=args["minn"],
                      maxn=args["maxn"], quantized=quantized)
        rows, cols = read("<qq")
        if quantized:
            return header  # product-quantized input (.ftz): its codes are not sized
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
    return header


def _remember_checked(path, header):
    """Records that the model renamed to `path` passed `check_fasttext_model`."""
    stat = os.stat(path)
    _CHECKED_MODELS[(os.path.realpath(path), stat.st_size, stat.st_mtime_ns, True)] = header


def check_word_vectors_file(path):
    """The checks that can run before a word-vector file is used: a `.bin` model in full
    (`check_fasttext_model`), a `.vec` (or `.txt`) file's header only.

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

    `.bin` models give every string a vector (through character n-grams); `.vec`
    files only know their own words, any other word gets the zero vector. How a
    `.vec` file is read: docs/guides/pretraining.md#fasttext-vectors.

    Args:
        path: a fastText `.bin` model, or a `.vec` / `.txt` text file (read whole).

    Raises:
        FileNotFoundError: no such file.
        WordVectorsError: the `fasttext` library cannot load the `.bin` model.
    """

    def __init__(self, path):
        self.path = path
        if not tf.io.gfile.exists(path):
            raise FileNotFoundError(f"Word-vector file not found: {path}")
        if path.endswith((".vec", ".txt")):
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
        return list(self._vectors), np.stack(list(self._vectors.values()))

    def __contains__(self, word):
        """Whether `word` has a vector of its own (`.bin`: any word, by its subwords)."""
        return self._fasttext is not None or word in self._vectors

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
    """A `.vec` file as `{word: vector}`, checked line by line. A word given two vectors
    is refused: fastText keeps the last, gensim the first; the file does not say which."""
    vectors, lines, number = {}, {}, 1
    with tf.io.gfile.GFile(path, "rb") as f:
        count, dim = _vec_header(f, path)
        for number, raw in enumerate(f, start=2):
            parts = raw.split()  # ASCII whitespace, as fastText's `>>` reads it
            if len(parts) != dim + 1:
                got = "a blank line" if not parts else f"{len(parts) - 1} numbers"
                raise WordVectorsError(
                    f"{path}:{number}: expected a word and {dim} numbers, got {got}")
            word = parts[0].decode("utf-8", errors="replace")
            try:
                vector = np.asarray([float(p) for p in parts[1:]], dtype=np.float32)
            except ValueError as e:
                bad = next(p for p in parts[1:] if not _is_number(p))
                raise WordVectorsError(
                    f"{path}:{number}: {bad.decode('utf-8', errors='replace')[:40]!r} in the "
                    f"vector of {word!r} is not a number") from e
            if not np.isfinite(vector).all():
                raise WordVectorsError(f"{path}:{number}: the vector of {word!r} is not "
                                       "finite (NaN/Inf)")
            if word in lines:
                raise WordVectorsError(
                    f"{path}:{number}: the word {word!r} has a vector already, on line "
                    f"{lines[word]}: a .vec file gives each word one vector, and which of the "
                    "two is meant is not known. Remove one of the lines (and lower the "
                    "header's count).")
            lines[word] = number
            vectors[word] = vector
    if not vectors:
        raise WordVectorsError(f"{path}: no vectors")
    if number - 1 != count:
        raise WordVectorsError(f"{path}: the header says {count} vectors, the file holds "
                               f"{number - 1} (truncated?)")
    return vectors


def _is_number(field):
    try:
        float(field)
    except ValueError:
        return False
    return True
