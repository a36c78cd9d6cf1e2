"""AloneEmbedding: every word embedding from one shared vector.

Exact integer hashing (and float32 sums in a fixed order) makes the filters
bit-identical on every device and backend, and independent of the vocabulary size.
The codebooks are built on the host in NumPy; a batch's columns are hashed on the
device in int64 on TensorFlow and uint32 elsewhere (JAX has no int64 without
`jax_enable_x64`): the same bits, as every product is masked to 32 bits and stays
below 2**59. TensorFlow alone runs `lookup="unique"` on the distinct ids only
(`tf.unique`), reuses one table per traced step, and checkpoints the fingerprint.
"""

import functools
import hashlib
import math
import secrets

import keras
import numpy as np
from keras import ops

from tfeff.backend.checks import check_ids
from tfeff.backend.hashing import hash32
from tfeff.backend.hashing import high_product32
from tfeff.backend.host_memory import host_constant
from tfeff.backend.ops import hash_dtype
from tfeff.backend.ops import ids_dtype
from tfeff.backend.ops import unique
from tfeff.backend.tracking import checkpointed_fingerprint
from tfeff.backend.tracking import trace_key
from tfeff.layers.embedding_common import IdEmbeddingMixin
from tfeff.layers.embedding_common import Untracked

FILTER_TYPES = ("binary", "real")
LOOKUPS = ("unique", "table", "token")
# Bump when the construction changes: old checkpoints then fail the fingerprint check.
CONSTRUCTION_VERSION = 1

_MASK32 = 0xFFFFFFFF
_TAG_BINARY, _TAG_REAL, _TAG_ASSIGN = 1, 2, 3
_FINGERPRINT_IDS = 4096  # ids whose assignment enters the fingerprint digest


def _seed_words(seed):
    return (seed & _MASK32, seed >> 32)


def build_codebooks(seed, num_codebooks, codebook_size, base_dim, filter_type,
                    zero_probability):
    """The `(num_codebooks, codebook_size, base_dim)` float32 codebooks of a seed.

    Entry `[k, j, i]` (row i of column j of codebook k) is, with
    `h = hash32(seed mod 2**32, seed // 2**32, tag, k, j, i, ...)`:

    * binary: 1 if `h(tag=1) < round((1 - p_o ** (1 / M)) * 2**32)`, else 0, so that
      an element of the OR of M columns is 0 with probability p_o;
    * real: Box-Muller in float64 of `u_t = (h(tag=2, ..., t) + 0.5) / 2**32`,
      t = 0, 1: `sqrt(-2 ln u_0) cos(2 pi u_1) / sqrt(M)`, rounded to float32.
    """
    k, j, i = np.meshgrid(
        np.arange(num_codebooks), np.arange(codebook_size), np.arange(base_dim),
        indexing="ij",
    )
    s = _seed_words(seed)
    if filter_type == "binary":
        threshold = round((1.0 - zero_probability ** (1.0 / num_codebooks)) * 2**32)
        h = hash32(s[0], s[1], _TAG_BINARY, k, j, i)
        return (h < threshold).astype(np.float32)
    u0, u1 = (
        (hash32(s[0], s[1], _TAG_REAL, k, j, i, t).astype(np.float64) + 0.5) / 2**32
        for t in (0, 1)
    )
    z = np.sqrt(-2.0 * np.log(u0)) * np.cos(2.0 * math.pi * u1)
    return (z / math.sqrt(num_codebooks)).astype(np.float32)


def assign_columns(ids, seed, num_codebooks, codebook_size, xp=np):
    """Column of each codebook assigned to each id: int32 `ids.shape + (M,)`.

    `col_k(w) = (hash32(seed mod 2**32, seed // 2**32, 3, k, w) * c) >> 32`.
    With `xp=keras.ops`, on the backend's device (see the module docstring).
    """
    if xp is np:
        dtype = "int64"
        ids = np.asarray(ids, dtype)[..., None]
    else:
        dtype = hash_dtype()
        ids = ops.expand_dims(ops.cast(ids, dtype), -1)
    s = _seed_words(seed)
    k = xp.arange(num_codebooks, dtype=dtype)
    h = hash32(s[0], s[1], _TAG_ASSIGN, k, ids, xp=xp, dtype=dtype)
    columns = high_product32(h, codebook_size, xp, dtype)
    return columns.astype("int32") if xp is np else ops.cast(columns, "int32")


class _TableMemo:
    """The embedding tables of one traced TensorFlow graph, by (replica, `training`):
    under `tf.distribute` each replica, traced into the same graph, needs its own.
    Other backends reuse nothing (XLA merges equal work)."""

    def __init__(self):
        self.graph, self.tables = None, {}

    def get(self, key, training=None):
        """The table of `key` for `training` (None: any, training first), or None."""
        if key is None or self.graph is not key[0]:
            return None
        if training is None:
            tables = sorted(self.tables.items(), reverse=True)
            return next((t for (r, _), t in tables if r == key[1]), None)
        return self.tables.get((key[1], training))

    def put(self, key, training, table):
        if key is None:
            return
        if self.graph is not key[0]:
            self.graph, self.tables = key[0], {}
        self.tables[(key[1], training)] = table


def check_fingerprint(stored, expected, layer_name):
    """Raises ValueError naming the differing fields when `stored != expected`."""
    if stored == expected:
        return
    a, b = (dict(f.split("=", 1) for f in s.split() if "=" in f) for s in (stored, expected))
    diff = ", ".join(
        f"{k}: saved {a.get(k)!s} vs layer {b.get(k)!s}"
        for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)
    )
    raise ValueError(
        f"AloneEmbedding `{layer_name}`: the saved weights were trained with other filters "
        f"({diff}). The filters are rebuilt from the seed and not stored, so these weights "
        "only make sense with the layer settings they were trained with.")


@keras.saving.register_keras_serializable(package="tfeff")
class AloneEmbedding(IdEmbeddingMixin, keras.layers.Layer):
    """ALONE: all word embeddings from one shared vector and fixed random filters.

    The embedding of word `w` is `FFN(m_w * o)`: `o` is one trainable vector
    of size `base_dim` (D_o), `m_w` a fixed filter and `FFN(x) = relu(x W_1) W_2`
    (bias-free, dropout after the ReLU): `D_o + D_inter * (D_o + D_e)`
    parameters whatever the vocabulary size.

    Word `w` takes one pseudo-random column of each of `num_codebooks` (M)
    codebooks of `codebook_size` (c) columns; its filter is their sum: clipped
    to 1 for `"binary"` filters (0/1 entries; each element 0 with probability
    `zero_probability`), unchanged for `"real"` ones (Gaussian, variance 1 / M).
    The filters are rebuilt from `seed` (`build_codebooks`, `assign_columns`),
    never stored: checkpoints and `.keras` files carry `o`, the FFN and a short
    fingerprint of the filters; loading them into other filters raises a ValueError.

    `embedding_table()` computes all `(vocabulary_size, output_dim)` embeddings
    and `attend(hidden)` scores against them (the paper's tied softmax). Inside
    one traced function (a Keras train step) the table is computed once per
    replica and shared by every call that needs it (one gradient tape); set
    `lookup="table"` when the output is tied. Costs: docs/papers/alone.md#lookup.

    Args:
        vocabulary_size: number of ids, > 0.
        output_dim: embedding size D_e, > 0.
        base_dim: size D_o of the shared vector and the filters, > 0.
        intermediate_dim: FFN inner size D_inter, > 0.
        num_codebooks: M, > 0 (paper: 8).
        codebook_size: c, columns per codebook, in (0, 2**31) (paper: 64).
        filter_type: `"binary"` or `"real"`.
        zero_probability: p_o in (0, 1), the binary filters' zero rate (paper: 0.5).
        seed: int in [0, 2**63) that determines the filters and, mod 2**31, the
            default initializers; None draws one below 2**31 (kept in `get_config`).
        dropout_rate: in [0, 1), after the ReLU, per embedded word (per token for `"token"`).
        train_base: whether `o` is trainable.
        mask_zero: if True, id 0 is padding and `compute_mask` returns `ids != 0`.
        lookup: FFN per distinct id (`"unique"`) or token (`"token"`), or table rows (`"table"`).
        table_chunk_size: rows of the table computed at a time, > 0.
        base_initializer: initializer of `o` (default: seeded normal, stddev 1).
        kernel_initializer: initializer of the FFN kernels (default: seeded Glorot uniform).
        **kwargs: base `Layer` arguments.

    Call arguments:
        inputs: int ids of any shape, in [0, vocabulary_size). Ids outside
            raise an InvalidArgumentError (eager or in a graph; not under XLA).
        training: bool, enables dropout.

    Returns:
        `inputs.shape + (output_dim,)` in the compute dtype.

    Raises:
        ValueError: an argument is outside the values its entry above allows.

    Example:

    >>> layer = AloneEmbedding(1000, output_dim=16, base_dim=16, intermediate_dim=32, seed=0)
    >>> tuple(layer(np.array([[3, 3, 999]])).shape)
    (1, 3, 16)
    >>> layer.count_params() == 16 + 32 * (16 + 16)
    True

    Reference:
        Takase & Kobayashi, "All Word Embeddings from One Embedding",
        NeurIPS 2020 (https://arxiv.org/abs/2004.12073).
    """

    def __init__(
        self,
        vocabulary_size,
        output_dim,
        base_dim,
        intermediate_dim,
        num_codebooks=8,
        codebook_size=64,
        filter_type="binary",
        zero_probability=0.5,
        seed=None,
        dropout_rate=0.0,
        train_base=True,
        mask_zero=False,
        lookup="unique",
        table_chunk_size=8192,
        base_initializer=None,
        kernel_initializer=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        for arg, value in (
            ("vocabulary_size", vocabulary_size),
            ("output_dim", output_dim),
            ("base_dim", base_dim),
            ("intermediate_dim", intermediate_dim),
            ("num_codebooks", num_codebooks),
            ("codebook_size", codebook_size),
            ("table_chunk_size", table_chunk_size),
        ):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value <= 0:
                raise ValueError(
                    f"Received an invalid value for `{arg}`, expected a positive integer. "
                    f"Received: {arg}={value!r}")
        if codebook_size >= 2**31:
            raise ValueError(
                "Received an invalid value for `codebook_size`, expected less than 2**31. "
                f"Received: codebook_size={codebook_size}")
        if filter_type not in FILTER_TYPES:
            raise ValueError(
                f"Received an invalid value for `filter_type`, expected one of {FILTER_TYPES}. "
                f"Received: filter_type={filter_type!r}")
        if isinstance(zero_probability, bool) or not 0 < zero_probability < 1:
            raise ValueError(
                "Received an invalid value for `zero_probability`, expected a value in "
                f"(0, 1). Received: zero_probability={zero_probability!r}")
        if not 0 <= dropout_rate < 1:
            raise ValueError(
                "Received an invalid value for `dropout_rate`, expected a value in [0, 1). "
                f"Received: dropout_rate={dropout_rate!r}")
        if lookup not in LOOKUPS:
            raise ValueError(
                f"Received an invalid value for `lookup`, expected one of {LOOKUPS}. "
                f"Received: lookup={lookup!r}")
        if seed is None:
            seed = secrets.randbelow(2**31)
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or not (
                0 <= seed < 2**63):
            raise ValueError(
                "Received an invalid value for `seed`, expected a non-negative integer "
                f"below 2**63 or None. Received: seed={seed!r}")
        self.vocabulary_size = int(vocabulary_size)
        self.output_dim = int(output_dim)
        self.base_dim = int(base_dim)
        self.intermediate_dim = int(intermediate_dim)
        self.num_codebooks = int(num_codebooks)
        self.codebook_size = int(codebook_size)
        self.filter_type = filter_type
        self.zero_probability = float(zero_probability)
        self.seed = int(seed)
        self.dropout_rate = float(dropout_rate)
        self.train_base = bool(train_base)
        self.mask_zero = bool(mask_zero)
        self.supports_masking = self.mask_zero
        self.lookup = lookup  # each compiles: XLA's `tf.unique`, jax.jit's static shape
        self.table_chunk_size = int(table_chunk_size)
        self._base_initializer_arg = base_initializer
        self._kernel_initializer_arg = kernel_initializer
        self.base_initializer = keras.initializers.get(
            base_initializer or keras.initializers.RandomNormal(stddev=1.0,
                                                                seed=self._random_seed(0)))
        self.kernel_initializer = keras.initializers.get(kernel_initializer)

        codebooks = build_codebooks(
            self.seed, self.num_codebooks, self.codebook_size, self.base_dim,
            self.filter_type, self.zero_probability,
        )
        self._frozen = Untracked(codebooks=host_constant(codebooks, init_scope=True))
        self.filter_fingerprint = self._fingerprint(codebooks)
        # A TensorFlow checkpoint carries it too (None off TensorFlow).
        self._fingerprint_checker = checkpointed_fingerprint(
            self.filter_fingerprint, functools.partial(
                check_fingerprint, expected=self.filter_fingerprint, layer_name=self.name))
        self._memo = _TableMemo()
        self.dropout = keras.layers.Dropout(
            self.dropout_rate, seed=self._random_seed(0), dtype=self.dtype_policy,
            name="ffn_dropout")

    def _random_seed(self, offset):
        return (self.seed + offset) % 2**31

    def _fingerprint(self, codebooks):
        """One line `key=value ...` describing the filters, with a digest of their content."""
        digest = hashlib.sha256(codebooks.tobytes())
        ids = np.arange(_FINGERPRINT_IDS)  # the filter of an id does not depend on V
        columns = assign_columns(ids, self.seed, self.num_codebooks, self.codebook_size)
        digest.update(columns.astype("<i8").tobytes())
        return (f"alone-filters construction={CONSTRUCTION_VERSION} base_dim={self.base_dim} "
                f"num_codebooks={self.num_codebooks} codebook_size={self.codebook_size} "
                f"filter_type={self.filter_type} zero_probability={self.zero_probability!r} "
                f"seed={self.seed} digest={digest.hexdigest()[:16]}")

    def build(self, input_shape=None):
        kernel_inits = [self.kernel_initializer] * 2
        if self._kernel_initializer_arg is None:
            kernel_inits = [keras.initializers.GlorotUniform(seed=self._random_seed(i))
                            for i in (1, 2)]
        self.base = self.add_weight(
            name="base", shape=(self.base_dim,), initializer=self.base_initializer,
            trainable=self.train_base,
        )
        self.intermediate_kernel = self.add_weight(
            name="intermediate_kernel", shape=(self.base_dim, self.intermediate_dim),
            initializer=kernel_inits[0],
        )
        self.output_kernel = self.add_weight(
            name="output_kernel", shape=(self.intermediate_dim, self.output_dim),
            initializer=kernel_inits[1],
        )
        self.dropout.build((None, self.intermediate_dim))

    @property
    def codebooks(self):
        """The host constant `(num_codebooks, codebook_size, base_dim)`."""
        return self._frozen.codebooks

    def filters(self, ids):
        """float32 filters `m_w` of `ids`: `ids.shape + (base_dim,)`."""
        columns = assign_columns(ids, self.seed, self.num_codebooks, self.codebook_size,
                                 xp=ops)
        total = ops.take(self.codebooks[0], columns[..., 0], axis=0)
        for k in range(1, self.num_codebooks):  # a fixed order: bit-identical sums everywhere
            total = total + ops.take(self.codebooks[k], columns[..., k], axis=0)
        if self.filter_type == "binary":
            total = ops.minimum(total, 1.0)
        return total

    def _embed(self, ids, training):
        """FFN(m_w * o) of 1-D `ids`: `(n, output_dim)`."""
        x = self.filters(ids) * ops.cast(self.base, "float32")  # (n, D_o)
        x = ops.cast(x, self.compute_dtype)
        h = ops.relu(ops.matmul(x, ops.cast(self.intermediate_kernel, x.dtype)))  # (n, D_inter)
        h = self.dropout(h, training=training)
        return ops.matmul(h, ops.cast(self.output_kernel, h.dtype))  # (n, D_e)

    def embedding_table(self, training=False):
        """All embeddings `(vocabulary_size, output_dim)`, once per traced graph and `training`."""
        if not self.built:
            self.build()  # the weights do not depend on an input shape
        training = bool(training)
        key = trace_key()
        table = self._memo.get(key, training)
        if table is not None:
            return table
        size, end = self.table_chunk_size, self.vocabulary_size
        chunks = [self._embed(ops.arange(start, min(start + size, end), dtype="int32"), training)
                  for start in range(0, end, size)]
        table = chunks[0] if len(chunks) == 1 else ops.concatenate(chunks, axis=0)
        self._memo.put(key, training, table)
        return table

    @property
    def embeddings(self):
        """This graph's table (whatever its `training`), else the inference table."""
        table = self._memo.get(trace_key())
        return table if table is not None else self.embedding_table(training=False)

    def attend(self, hidden, training=False):
        """Logits `hidden @ table^T`: `hidden.shape[:-1] + (vocabulary_size,)`."""
        table = self.embedding_table(training)
        hidden = ops.convert_to_tensor(hidden)
        return ops.einsum("...d,vd->...v", hidden, ops.cast(table, hidden.dtype))

    def call(self, inputs, training=None):
        # int64 where the backend has it by default (JAX has not): ids are not wrapped.
        ids = ops.cast(inputs, ids_dtype())
        flat = ops.reshape(ids, (-1,))  # (tokens,)
        if self.lookup == "table":
            rows = ops.take(self.embedding_table(training), check_ids(self, flat), axis=0)
        elif self.lookup == "token":
            rows = self._embed(check_ids(self, flat), training)
        else:
            # Each distinct id embedded (and dropped out) once; only TensorFlow's are
            # the distinct ids alone, elsewhere one slot per token (static shapes).
            distinct, index = unique(flat)  # (distinct,), (tokens,)
            rows = ops.take(self._embed(check_ids(self, distinct), training), index, axis=0)
        return ops.reshape(rows, tuple(ops.shape(ids)) + (self.output_dim,))

    def save_own_variables(self, store):
        super().save_own_variables(store)
        store["filter_fingerprint"] = np.frombuffer(self.filter_fingerprint.encode(), np.uint8)

    def load_own_variables(self, store):
        keys = set(store.keys())
        if "filter_fingerprint" not in keys:
            raise ValueError(
                f"AloneEmbedding `{self.name}`: the saved weights carry no filter fingerprint, "
                "so they cannot be checked against this layer's filters.")
        stored = bytes(np.asarray(store["filter_fingerprint"], np.uint8)).decode("utf-8")
        check_fingerprint(stored, self.filter_fingerprint, self.name)
        variables = self._trainable_variables + self._non_trainable_variables
        if len(keys) - 1 != len(variables):
            raise ValueError(
                f"AloneEmbedding `{self.name}` expects {len(variables)} saved variables, "
                f"found {len(keys) - 1}.")
        for i, variable in enumerate(variables):
            variable.assign(store[str(i)])

    def get_config(self):
        config = super().get_config()
        serialize = keras.initializers.serialize
        config.update({
            "vocabulary_size": self.vocabulary_size,
            "output_dim": self.output_dim,
            "base_dim": self.base_dim,
            "intermediate_dim": self.intermediate_dim,
            "num_codebooks": self.num_codebooks,
            "codebook_size": self.codebook_size,
            "filter_type": self.filter_type,
            "zero_probability": self.zero_probability,
            "seed": self.seed,
            "dropout_rate": self.dropout_rate,
            "train_base": self.train_base,
            "mask_zero": self.mask_zero,
            "lookup": self.lookup,
            "table_chunk_size": self.table_chunk_size,
            "base_initializer": (None if self._base_initializer_arg is None
                                 else serialize(self.base_initializer)),
            "kernel_initializer": (None if self._kernel_initializer_arg is None
                                   else serialize(self.kernel_initializer)),
        })
        return config
