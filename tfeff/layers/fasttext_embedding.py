"""FastTextEmbedding: fastText word vectors computed in-graph from strings (TensorFlow-only)."""

import os

import numpy as np
import keras
import tensorflow as tf

_FNV_OFFSET = 2166136261
_FNV_PRIME = 16777619
_UINT32 = 0xFFFFFFFF
_MAX_UTF8_BYTES = 4
_WORDS_ASSET = "words.txt"


@keras.saving.register_keras_serializable(package="tfeff")
class FastTextEmbedding(keras.layers.Layer):
    """fastText vectors of arbitrary token strings, computed with TF string ops.

    Reproduces `fasttext.FastText.get_word_vector` exactly, so a SavedModel can
    embed unseen words: a word's vector is the average of the input-matrix rows
    of its subwords, which are

    * the word's own row, when the word is in the fastText dictionary;
    * one row per character n-gram of `"<" + word + ">"` for n in `[minn, maxn]`
      (UTF-8 code points; the lone `<` and `>` are not n-grams), at row
      `nwords + fnv1a32(ngram) % bucket`, each byte mixed in as a *signed* char
      (bytes >= 0x80 sign-extended), as fastText does.

    The end-of-sentence word `</s>` has no n-grams (as in fastText). A word
    with no subword (not in the dictionary and `bucket == 0`, as for a `.vec`
    file) gets the zero vector. Invalid UTF-8 is replaced by U+FFFD before the
    n-grams are taken (fastText would hash the raw bytes). Cost: per distinct
    token, one gather of at most `(maxn - minn + 1) * (len + 2) + 1` rows.

    The input matrix is a non-trainable variable (saved with the model), the
    dictionary an asset. For serving and feature extraction: training reads
    precomputed vectors with `FixedEmbedding`. Calling the layer needs the
    TensorFlow backend; `word_vectors` and `subword_ids` run on any backend.

    Args:
        words: the fastText dictionary, a list of strings in id order.
        input_matrix: float array `(len(words) + bucket, dim)`, or None for
            zeros filled later (`.keras` loading).
        minn: shortest character n-gram (fastText's `-minn`).
        maxn: longest character n-gram (fastText's `-maxn`).
        bucket: number of n-gram hash buckets (fastText's `-bucket`).
        output_dim: vector size (only needed without `input_matrix`).
        num_words: dictionary size (only needed without `words`).
        eos: fastText's end-of-sentence token.
        **kwargs: base `Layer` arguments.

    Call arguments:
        inputs: `tf.string` tensor of tokens, any shape.

    Returns:
        float32 tensor `inputs.shape + (dim,)`.

    Raises:
        ValueError: `minn`, `maxn` or `bucket` is not a non-negative integer,
            neither `words` nor `num_words` is given, or the sizes disagree or are invalid.

    Example:

    >>> layer = FastTextEmbedding.from_fasttext("model.bin")  # doctest: +SKIP
    >>> layer(tf.constant([["hello", "wrld"]])).shape  # doctest: +SKIP
    TensorShape([1, 2, 300])

    Reference:
        Bojanowski et al., "Enriching Word Vectors with Subword Information",
        TACL 2017; fastText's `Dictionary::computeSubwords` and `hash`.
    """

    # The export module of `tfeff.export.embedder_module`: the context-free baseline.
    embedder_kind = "fasttext"

    def __init__(
        self,
        words=None,
        input_matrix=None,
        minn=3,
        maxn=6,
        bucket=2000000,
        output_dim=None,
        num_words=None,
        eos="</s>",
        **kwargs,
    ):
        super().__init__(trainable=False, **kwargs)
        self.supports_jit = False  # string ops (n-grams, hashing) have no XLA kernels
        for arg, value in (("minn", minn), ("maxn", maxn), ("bucket", bucket)):
            if not isinstance(value, int) or value < 0:
                raise ValueError(
                    f"Received an invalid value for `{arg}`, expected a non-negative "
                    f"integer. Received: {arg}={value}")
        if words is None and num_words is None:
            raise ValueError("Pass `words` (the fastText dictionary) or `num_words`.")
        if words is not None:
            words = [str(w) for w in words]
            if num_words is not None and num_words != len(words):
                raise ValueError(
                    f"`num_words`={num_words} does not match len(words)={len(words)}")
            num_words = len(words)
        if input_matrix is not None:
            input_matrix = np.asarray(input_matrix, dtype=np.float32)
            if input_matrix.ndim != 2 or input_matrix.shape[0] != num_words + bucket:
                raise ValueError(
                    "`input_matrix` must have shape (num_words + bucket, dim) = "
                    f"({num_words + bucket}, dim). Received: {input_matrix.shape}")
            if output_dim is not None and output_dim != input_matrix.shape[1]:
                raise ValueError(
                    f"`output_dim`={output_dim} does not match the input matrix "
                    f"dimension {input_matrix.shape[1]}")
            output_dim = int(input_matrix.shape[1])
        if not isinstance(output_dim, int) or output_dim <= 0:
            raise ValueError(
                "Received an invalid value for `output_dim`, expected a positive "
                f"integer (or an `input_matrix`). Received: output_dim={output_dim}")
        self.minn, self.maxn, self.bucket = minn, maxn, bucket
        self.output_dim = output_dim
        self.num_words = num_words
        self.eos = eos
        self._words = words
        self._initial_matrix = input_matrix
        self._table = None

    def __call__(self, *args, **kwargs):
        backend = keras.backend.backend()
        if backend != "tensorflow":
            raise ValueError(
                "`FastTextEmbedding` runs as a layer only where TensorFlow is the Keras "
                "backend: its inputs are strings and its ops TensorFlow string ops. "
                f"Received: backend={backend!r}. (`word_vectors` and `subword_ids` take "
                "`tf.string` tensors on any backend, e.g. in a `tf.data` pipeline.)")
        return super().__call__(*args, **kwargs)

    @classmethod
    def from_fasttext(cls, model, **kwargs):
        """Builds the layer from a fastText `.bin` path or a loaded model."""
        import fasttext  # Local: only this constructor needs the library.

        if isinstance(model, (str, os.PathLike)):
            path = os.fspath(model)
            if not tf.io.gfile.exists(path):
                raise FileNotFoundError(f"fastText model not found: {path}")
            model = fasttext.load_model(path)
        if model.is_quantized():
            raise ValueError(
                "Quantized fastText models (.ftz) are not supported: their n-gram "
                "rows are pruned and re-indexed. Use the full .bin model.")
        args = model.f.getArgs()
        return cls(
            words=model.get_words(include_freq=False, on_unicode_error="replace"),
            input_matrix=model.get_input_matrix(),
            minn=int(args.minn),
            maxn=int(args.maxn),
            bucket=int(args.bucket),
            **kwargs,
        )

    @classmethod
    def from_file(cls, path, **kwargs):
        """Builds the layer from a `.bin` fastText model (checked first: a corrupt one
        raises a `WordVectorsError`) or a `.vec`/`.txt` file (no subwords)."""
        from tfeff.data import fasttext_files  # not loaded by importing tfeff.layers

        path = os.fspath(path)
        if path.endswith((".vec", ".txt")):
            words, matrix = fasttext_files.WordVectors(path).words_and_matrix()
            return cls(words, matrix, minn=0, maxn=0, bucket=0, **kwargs)
        fasttext_files.check_fasttext_model(path)
        return cls.from_fasttext(path, **kwargs)

    def build(self, input_shape=None):
        initial = self._initial_matrix
        self.input_matrix = self.add_weight(
            shape=(self.num_words + self.bucket, self.output_dim),
            initializer="zeros" if initial is None else (
                lambda shape, dtype=None: tf.constant(initial, dtype=dtype)),
            dtype="float32",
            trainable=False,
            name="input_matrix",
        )
        self._initial_matrix = None
        if self._words is not None:
            self._make_table(self._words)

    def _make_table(self, words):
        if len(words) != self.num_words:
            raise ValueError(
                f"The dictionary has {len(words)} words, the layer expects {self.num_words}")
        keys = tf.constant(words, dtype=tf.string)
        values = tf.range(len(words), dtype=tf.int64)
        self._table = tf.lookup.StaticHashTable(
            tf.lookup.KeyValueTensorInitializer(keys, values), default_value=-1
        )
        self._words = list(words)

    def call(self, inputs):
        inputs = tf.convert_to_tensor(inputs, dtype=tf.string)
        if self._table is None:
            raise RuntimeError("FastTextEmbedding has no dictionary: load its assets first.")
        unique, index = tf.unique(tf.reshape(inputs, [-1]))
        out = tf.gather(self.word_vectors(unique), index)  # (num_tokens, dim)
        return tf.reshape(out, tf.concat([tf.shape(inputs), [self.output_dim]], 0))

    def subword_ids(self, words):
        """Input-matrix rows of each word of a 1-D `tf.string` tensor, as fastText's
        `getSubwords`: an int64 `RaggedTensor` `(num_words, None)`."""
        if not self.built:
            self.build()
        words = tf.convert_to_tensor(words, dtype=tf.string)
        word_ids = self._table.lookup(words)  # (W,), -1 when absent
        in_dict = word_ids >= 0
        own = tf.RaggedTensor.from_row_lengths(
            tf.boolean_mask(word_ids, in_dict), tf.cast(in_dict, tf.int64)
        )
        ngram_ids = self._ngram_ids(words)
        keep = tf.logical_not(tf.logical_and(in_dict, tf.equal(words, self.eos)))
        ngram_ids = tf.ragged.boolean_mask(
            ngram_ids, tf.ones_like(ngram_ids, dtype=tf.bool) & keep[:, None])
        return tf.concat([own, ngram_ids], axis=1)

    def word_vectors(self, words):
        """Vectors of a 1-D `tf.string` tensor of words, `(num_words, dim)`."""
        ids = self.subword_ids(words)  # builds the layer if needed
        rows = tf.gather(self.input_matrix, ids.flat_values)  # (total, dim)
        sums = tf.math.unsorted_segment_sum(
            rows, ids.value_rowids(), num_segments=tf.shape(ids.row_lengths())[0]
        )
        counts = tf.cast(ids.row_lengths(), rows.dtype)[:, None]
        return tf.where(counts > 0, sums * (1.0 / tf.maximum(counts, 1.0)), 0.0)

    def _ngram_ids(self, words):
        """Ragged `(W, None)` rows `num_words + hash % bucket` of each word's n-grams."""
        num = tf.shape(words, out_type=tf.int64)[0]
        lo = max(self.minn, 1)
        if self.bucket == 0 or self.maxn < lo:
            return tf.RaggedTensor.from_row_lengths(
                tf.zeros([0], tf.int64), tf.zeros([num], tf.int64)
            )
        chars = tf.strings.unicode_split(
            tf.strings.join(["<", words, ">"]), "UTF-8", errors="replace"
        )  # ragged (W, chars)
        # Per n, ragged (W, chars - n + 1); fastText skips the lone "<" and ">" (n = 1).
        parts = [tf.strings.ngrams(chars, n, separator="") for n in range(lo, self.maxn + 1)]
        if lo == 1:
            parts[0] = parts[0][:, 1:-1]
        grams = tf.concat(parts, axis=1)
        hashes = _fnv1a32(grams.flat_values, max_bytes=_MAX_UTF8_BYTES * self.maxn)
        return grams.with_flat_values(self.num_words + hashes % self.bucket)

    def compute_output_shape(self, input_shape):
        return tuple(input_shape) + (self.output_dim,)

    def save_assets(self, dir_path):
        with open(os.path.join(dir_path, _WORDS_ASSET), "w", encoding="utf-8") as f:
            f.writelines(word + "\n" for word in self._words)

    def load_assets(self, dir_path):
        with open(os.path.join(dir_path, _WORDS_ASSET), encoding="utf-8") as f:
            words = f.read().split("\n")[:-1]
        self._make_table(words)

    def get_config(self):
        config = super().get_config()
        config.pop("trainable", None)
        config.update({
            "minn": self.minn,
            "maxn": self.maxn,
            "bucket": self.bucket,
            "output_dim": self.output_dim,
            "num_words": self.num_words,
            "eos": self.eos,
        })
        return config


def _fnv1a32(strings, max_bytes):
    """fastText's 32-bit FNV-1a hash of each string (bytes as signed chars), int64."""
    raw = tf.cast(tf.io.decode_raw(strings, tf.uint8, fixed_length=max_bytes), tf.int64)
    lengths = tf.strings.length(strings)  # bytes
    # int8 -> uint32 sign extension: bytes >= 0x80 become 0xFFFFFF80 | byte.
    signed = tf.where(raw >= 128, raw | 0xFFFFFF00, raw)
    h = tf.fill(tf.shape(strings), tf.constant(_FNV_OFFSET, tf.int64))
    for k in range(max_bytes):
        mixed = ((h ^ signed[:, k]) * _FNV_PRIME) & _UINT32
        h = tf.where(k < lengths, mixed, h)
    return h
