"""SavedModel embedders that take raw text (TensorFlow-only).

Every model family exports the same interface, so downstream code never
needs to know which model it holds:

* `embed(sentences: tf.string[batch])` -> `layers` float32
  `[batch, num_layers + 1, tokens, dim]` (layer 0 is the context-free token
  layer), `mask` bool `[batch, tokens]`, `tokens` string `[batch, tokens]`.
* `embed_tokens(tokens: tf.string[batch, n])`: the same for pre-tokenized
  input, one word per cell, `""` as padding; output token `i` is input
  word `i` (what token-tagging tasks need). A word that the tokenizer turns
  into nothing (e.g. only control characters) keeps its slot with a false
  mask and zero vectors.
* `tokenize(sentences)` -> `tokens`, `mask`: the words `embed` would return,
  without running the model (cheap: what `tfeff-embed` uses to size files).
* `predict(sentences)` (continuous-output ELMo only) -> `forward` /
  `backward` `[batch, tokens, embedding_dim]`: the predicted fixed-space
  vectors of the next / previous word, `mask`, `tokens`.

Tokenization happens in-graph:

* word-level ELMo: whitespace split; the fastText input (`FastTextEmbedding`)
  embeds any word, a trainable/ALONE input maps unknown words to `<unk>`.
  A literal `<unk>` or `<pad>` in the text is the unknown word, as in
  pre-training: the zero vector of the fixed input, the `<unk>` id otherwise;
* ELMo-Sub: whitespace split, then WordPiece;
* Masked ELMo and BERT: BERT's basic tokenizer (punctuation and CJK split,
  optional lower-casing; a literal `<unk>` stays whole and is the unknown id)
  and WordPiece, exactly as in pre-training.

Outputs are always per word. For WordPiece models a word's vector is its first
piece's (`subword_pooling="first"`, as the continuous-output paper does for
ELMo-Sub), the mean of its pieces (`"mean"`), or the pieces themselves
(`"none"`: `tokens` are then the WordPiece strings).

Each sentence is wrapped in the model's boundary tokens (`<s> ... </s>`,
i.e. `[CLS] ... [SEP]`), which are removed from the outputs. Sentences are
truncated to the leading whole words whose model tokens fit in `max_tokens`
(words for word-level models, pieces for WordPiece models; at most
`max_sequence_length - 2` for BERT). Empty or whitespace-only sentences give
rows with an all-false mask and zeros, not an error. An empty batch (no
sentences, `tf.constant([], tf.string)`) gives empty outputs of the same rank:
`layers` `[0, num_layers + 1, 0, dim]`, `mask` and `tokens` `[0, 0]`.

Loading: plain `tf.saved_model.load(path)`; no tfeff needed. WordPiece
embedders use tensorflow-text ops, so `import tensorflow_text` must come
first (`load_embedder` does it; `assets.extra/embedder.json` says whether it
is needed).
"""

import json
import os
import re
import shutil

import numpy as np
import tensorflow as tf

from tfeff.data import files
from tfeff.data import vocabulary as vocabulary_lib
from tfeff.data.pipeline import unknown_for_padding
from tfeff.training import model_directory

EXTRA_DIR = "assets.extra"
METADATA_FILE = "embedder.json"
FORMAT_VERSION = 2
SUBWORD_POOLING = ("first", "mean", "none")
# How text becomes model tokens: whitespace-split words (`"word"`), whitespace then
# WordPiece (`"wordpiece"`, ELMo-Sub), or BERT's basic tokenizer then WordPiece (`"bert"`).
TOKENIZATIONS = ("word", "wordpiece", "bert")
DEFAULT_MAX_TOKENS = 256
_BOUNDARY_IDS = (vocabulary_lib.BOS_ID, vocabulary_lib.EOS_ID)  # also [CLS], [SEP]
_BOUNDARY_WORDS = (vocabulary_lib.BOS, vocabulary_lib.EOS)
_PROBE = ["a b c", "", "  ", "Zürich 日本 ??"]
# Files of a model directory's layout: an export never replaces a directory holding one.
_MODEL_DIRECTORY_FILES = {model_directory.CONFIG_FILE, model_directory.CHECKPOINT_DIR,
                          model_directory.VOCABULARY_FILE, model_directory.FASTTEXT_FILE,
                          model_directory.VECTORS_FILE}


class Tokenization(tf.Module):
    """Sentences -> words -> model tokens, in-graph.

    Args:
        pieces: `"strings"` (the words themselves, for a fastText input),
            `"ids"` (one vocabulary id per word, `<unk>` for the rest) or
            `"wordpiece"`.
        vocabulary: list of tokens in id order (`"ids"` and `"wordpiece"`).
        basic: split with BERT's basic tokenizer instead of whitespace.
        lower_case: the basic tokenizer's lower-casing and accent stripping.
    """

    def __init__(self, pieces, vocabulary=None, basic=False, lower_case=False):
        super().__init__(name="tokenization")
        if pieces not in ("strings", "ids", "wordpiece"):
            raise ValueError(f"Unknown token kind {pieces!r}")
        if pieces != "strings" and not vocabulary:
            raise ValueError(f"A {pieces!r} tokenization needs the vocabulary.")
        self.kind = pieces
        self.vocabulary = list(vocabulary) if vocabulary else None
        self.basic = None
        self.lower_case = bool(lower_case)
        self.requires_tensorflow_text = basic or pieces == "wordpiece"
        if self.vocabulary is not None:
            init = tf.lookup.KeyValueTensorInitializer(
                tf.constant(self.vocabulary), tf.range(len(self.vocabulary), dtype=tf.int64))
            default = vocabulary_lib.UNK_ID if pieces == "ids" else -1
            self.table = tf.lookup.StaticHashTable(init, default_value=default)
        if basic:
            from tfeff.data.wordpiece import BasicTokenizer

            self.basic = BasicTokenizer(lower_case=lower_case)
        if pieces == "wordpiece":
            from tfeff.data import wordpiece as wordpiece_lib

            self.wordpiece = wordpiece_lib.wordpiece_tokenizer(self.table)
            # Piece strings, for subword_pooling="none" (word-level kinds output words).
            self.id_to_token = tf.Variable(self.vocabulary, trainable=False,
                                           name="vocabulary")

    def words(self, sentences):
        """Ragged `[batch, words]` strings of a `[batch]` string tensor, split as in
        pre-training (`tfeff.data.words`; the basic tokenizer sees the same whitespace)."""
        from tfeff.data import words as words_lib

        if self.basic is not None:  # normalizes the whitespace itself
            return self.basic.tokenize(sentences)
        return words_lib.split_tf(sentences)

    def pieces(self, words):
        """Ragged `[batch, words, pieces]` model tokens of ragged `[batch, words]` words."""
        flat = words.flat_values
        if self.kind == "strings":
            values = tf.RaggedTensor.from_tensor(flat[:, None])
        elif self.kind == "ids":
            ids = unknown_for_padding(tf.cast(self.table.lookup(flat), tf.int32))
            values = tf.RaggedTensor.from_tensor(ids[:, None])
        else:
            if self.basic is not None:  # a pre-tokenized word may still split ("don't")
                values = self.wordpiece.tokenize(self.basic.tokenize(flat)).merge_dims(1, 2)
                values = tf.cast(values, tf.int32)
            else:  # as the LM pipeline: a literal <pad> is <unk>
                values = unknown_for_padding(tf.cast(self.wordpiece.tokenize(flat), tf.int32))
        return words.with_flat_values(values)

    def token_strings(self, pieces_flat):
        """The strings of model tokens (ragged, any shape)."""
        if self.kind == "strings":
            return pieces_flat
        return tf.ragged.map_flat_values(tf.gather, self.id_to_token, pieces_flat)


def _keep_fitting_words(words, pieces, budget, subwords):
    """The leading words of each row whose tokens fit in `budget` (rows hold at most
    `budget` words already)."""
    if not subwords:
        return words, pieces
    counts = pieces.row_lengths(axis=2)  # ragged [batch, words]
    total = tf.cumsum(counts.flat_values)
    before_row = tf.gather(tf.concat([[0], total], 0), counts.row_starts())
    within = total - tf.gather(before_row, counts.value_rowids())
    keep = counts.with_flat_values(within <= budget)
    return tf.ragged.boolean_mask(words, keep), tf.ragged.boolean_mask(pieces, keep)


def pool_words(per_token, pieces, how):
    """Word vectors from token vectors.

    Args:
        per_token: `[batch, layers, 1 + tokens + 1, dim]`; token `j` of a row
            is at position `1 + j` (after the opening boundary).
        pieces: ragged `[batch, words, pieces]`.
        how: `"first"` or `"mean"`.

    Returns:
        `(vectors [batch, layers, words, dim], has_pieces [batch, words])`.
    """
    flat = pieces.merge_dims(1, 2)  # [batch, tokens]
    row = flat.value_rowids()
    k = tf.range(tf.shape(row, out_type=tf.int64)[0])
    position = 1 + k - tf.gather(flat.row_starts(), row)
    by_position = tf.transpose(per_token, [0, 2, 1, 3])  # [batch, time, layers, dim]
    h = tf.gather_nd(by_position, tf.stack([row, position], axis=1))  # [k, layers, dim]
    word_pieces = pieces.values  # ragged [words, pieces]
    word = word_pieces.value_rowids()
    n_words = word_pieces.nrows()
    if how == "mean":
        w = tf.math.unsorted_segment_mean(h, word, n_words)
    else:
        first = tf.equal(k, tf.gather(word_pieces.row_starts(), word))
        w = tf.math.unsorted_segment_sum(h * tf.cast(first, h.dtype)[:, None, None], word,
                                         n_words)
    has = word_pieces.row_lengths() > 0
    w = w * tf.cast(has, w.dtype)[:, None, None]
    vectors = tf.RaggedTensor.from_row_splits(w, pieces.row_splits).to_tensor()
    mask = tf.RaggedTensor.from_row_splits(has, pieces.row_splits).to_tensor(False)
    return tf.transpose(vectors, [0, 2, 1, 3]), mask


class EmbedderModule(tf.Module):
    """The exported module. Subclasses say how model tokens become the layer stack.

    Subclasses implement `_stack(tokens)`: ragged `[batch, tokens]` model
    tokens -> `(stack, extras)` with `stack` `[batch, layers, 1 + time + 1,
    dim]` (token `j` at position `1 + j`, boundaries around) and `extras` a
    dict of other per-position tensors `[batch, 1, time + 2, d]` (predictions).

    Args:
        tokenization: the in-graph `Tokenization` (sentences to words to
            model tokens).
        num_layers: layers of the stack (the token layer included).
        dim: size of each layer's vectors.
        max_tokens: the most model tokens embedded per sentence, a positive
            int (see the module docstring).
        subword_pooling: `"first"`, `"mean"` or `"none"` (WordPiece models
            only; others use `"first"`).
        name: the module's name.

    Raises:
        ValueError: `subword_pooling` is unknown, or `max_tokens` is not a
            positive integer.
    """

    family = None

    def __init__(self, tokenization, num_layers, dim, max_tokens, subword_pooling="first",
                 name="embedder"):
        super().__init__(name=name)
        if subword_pooling not in SUBWORD_POOLING:
            raise ValueError(
                f"Received an invalid value for `subword_pooling`, expected one of "
                f"{SUBWORD_POOLING}. Received: subword_pooling={subword_pooling!r}")
        if not isinstance(max_tokens, int) or max_tokens < 1:
            raise ValueError(
                f"Received an invalid value for `max_tokens`, expected a positive integer. "
                f"Received: max_tokens={max_tokens!r}")
        self.tokenization = tokenization
        # Track every variable explicitly, as Keras' ExportArchive does: Keras 3 layers
        # that keep sublayers in nested lists/dicts are not all visible to SavedModel.
        self.model_variables = [v for part in (getattr(self, "model", None),
                                                getattr(self, "fasttext", None))
                                if part is not None for v in part.variables]
        self.num_layers = int(num_layers)
        self.dim = int(dim)
        self.max_tokens = max_tokens
        self.subwords = tokenization.kind == "wordpiece"
        self.subword_pooling = subword_pooling if self.subwords else "first"
        sentences = tf.TensorSpec([None], tf.string, name="sentences")
        tokens = tf.TensorSpec([None, None], tf.string, name="tokens")
        self.embed = tf.function(self._embed, input_signature=[sentences])
        self.embed_tokens = tf.function(self._embed_tokens, input_signature=[tokens])
        self.tokenize = tf.function(self._tokenize, input_signature=[sentences])
        self.predict = None
        if self.has_predictions:
            self.predict = tf.function(self._predict, input_signature=[sentences])

    has_predictions = False

    def signatures(self):
        out = {"embed": self.embed, "embed_tokens": self.embed_tokens, "tokenize": self.tokenize}
        if self.predict is not None:
            out["predict"] = self.predict
        return out

    def metadata(self):
        return {
            "format_version": FORMAT_VERSION,
            "family": self.family,
            "num_layers": self.num_layers,
            "dim": self.dim,
            "max_tokens": self.max_tokens,
            "tokenization": self.tokenization.kind,
            "basic_tokenizer": self.tokenization.basic is not None,
            "lower_case": self.tokenization.lower_case,
            "subword_pooling": self.subword_pooling,
            "requires": ["tensorflow_text"] if self.tokenization.requires_tensorflow_text else [],
            "signatures": sorted(self.signatures()),
        }

    # Tokenization -----------------------------------------------------------------------

    def _split(self, words):
        # No more than max_tokens words can fit: a huge line is not tokenized further.
        words = words[:, :self.max_tokens]
        pieces = self.tokenization.pieces(words)
        # An empty word (padding inside a token matrix) keeps its slot but has no tokens.
        per_word = pieces.values
        nonempty = tf.repeat(words.flat_values != "", per_word.row_lengths())
        pieces = words.with_flat_values(
            tf.ragged.boolean_mask(per_word, per_word.with_flat_values(nonempty)))
        return _keep_fitting_words(words, pieces, self.max_tokens, self.subwords)

    def _sentence_words(self, sentences):
        return self._split(self.tokenization.words(sentences))

    def _given_words(self, tokens):
        """Rows of a `[batch, n]` token matrix up to their last non-empty cell."""
        nonempty = tf.cast(tokens != "", tf.int32)
        lengths = tf.reduce_sum(tf.cast(tf.cumsum(nonempty, axis=1, reverse=True) > 0,
                                        tf.int64), axis=1)
        return self._split(tf.RaggedTensor.from_tensor(tokens, lengths=lengths))

    # Outputs ----------------------------------------------------------------------------

    def _run(self, words, pieces):
        flat = pieces.merge_dims(1, 2)
        stack, extras = self._stack(flat)
        stack = tf.cast(stack, tf.float32)
        if self.subword_pooling == "none":
            width = tf.shape(stack)[2] - 2
            mask = tf.sequence_mask(flat.row_lengths(), maxlen=width)
            keep = tf.cast(mask, tf.float32)[:, None, :, None]
            tokens = self.tokenization.token_strings(flat).to_tensor(default_value="")
            layers = stack[:, :, 1:-1] * keep
            extras = {k: tf.cast(v, tf.float32)[:, 0, 1:-1] * keep[:, 0] for k, v in extras.items()}
            return layers, mask, tokens, extras
        layers, mask = pool_words(stack, pieces, self.subword_pooling)
        extras = {k: pool_words(tf.cast(v, tf.float32), pieces, self.subword_pooling)[0][:, 0]
                  for k, v in extras.items()}
        tokens = words.to_tensor(default_value="")
        return layers, mask, tokens, extras

    def _outputs(self, words, pieces):
        layers, mask, tokens, _ = self._run(words, pieces)
        return {"layers": layers, "mask": mask, "tokens": tokens}

    @staticmethod
    def _some_rows(batch):
        """`(rows, n)`: `batch` itself, or one row of `""` in place of an empty batch
        (the model's scans cannot run over no rows); outputs are then cut to `n` rows."""
        n = tf.shape(batch)[0]
        filler = tf.fill(tf.concat([[1], tf.shape(batch)[1:]], 0), "")
        return tf.cond(n > 0, lambda: batch, lambda: filler), n

    def _embed(self, sentences):
        rows, n = self._some_rows(sentences)
        return {k: v[:n] for k, v in self._outputs(*self._sentence_words(rows)).items()}

    def _embed_tokens(self, tokens):
        rows, n = self._some_rows(tokens)
        return {k: v[:n] for k, v in self._outputs(*self._given_words(rows)).items()}

    def _tokenize(self, sentences):
        all_words = self.tokenization.words(sentences)
        words, pieces = self._split(all_words)
        # Whether a row lost words to `max_tokens` (its leading words are what is embedded).
        truncated = all_words.row_lengths() > words.row_lengths()
        if self.subword_pooling == "none":
            flat = pieces.merge_dims(1, 2)
            tokens = self.tokenization.token_strings(flat).to_tensor(default_value="")
            return {"tokens": tokens, "truncated": truncated,
                    "mask": tf.sequence_mask(flat.row_lengths(), maxlen=tf.shape(tokens)[1])}
        has = tf.ragged.map_flat_values(lambda p: p > 0, pieces.row_lengths(axis=2))
        return {"tokens": words.to_tensor(default_value=""), "mask": has.to_tensor(False),
                "truncated": truncated}

    def _predict(self, sentences):
        rows, n = self._some_rows(sentences)
        words, pieces = self._sentence_words(rows)
        _, mask, tokens, extras = self._run(words, pieces)
        return {k: v[:n] for k, v in {**extras, "mask": mask, "tokens": tokens}.items()}

    # Helpers for subclasses --------------------------------------------------------------

    @staticmethod
    def _with_boundaries(flat, strings=False):
        """Dense `[batch, 1 + time + 1]` tokens with boundaries, and the mask."""
        n = flat.nrows()
        bos, eos = _BOUNDARY_WORDS if strings else _BOUNDARY_IDS
        dtype = tf.string if strings else tf.int32
        opening = tf.RaggedTensor.from_tensor(tf.fill([n, 1], tf.constant(bos, dtype)))
        closing = tf.RaggedTensor.from_tensor(tf.fill([n, 1], tf.constant(eos, dtype)))
        tokens = tf.concat([opening, tf.cast(flat, dtype), closing], axis=1)
        dense = tokens.to_tensor(default_value="" if strings else 0)
        mask = tf.sequence_mask(tokens.row_lengths(), maxlen=tf.shape(dense)[1])
        return dense, mask


class ElmoEmbedderModule(EmbedderModule):
    """`ElmoLM` (every input and output layer): the biLSTM stack of the LM."""

    family = "elmo"

    def __init__(self, model, tokenization, fasttext_layer=None, vector_mean=None,
                 max_tokens=DEFAULT_MAX_TOKENS, subword_pooling="first"):
        self.model = model
        self.fasttext = fasttext_layer
        if model.input_embedding == "fixed":
            if fasttext_layer is None:
                raise ValueError("An ElmoLM with the fixed fastText input needs `fasttext_layer`.")
            if fasttext_layer.output_dim != model.embedding_dim:
                raise ValueError(
                    f"The fastText vectors have dimension {fasttext_layer.output_dim}, the "
                    f"model expects {model.embedding_dim}")
            if not fasttext_layer.built:
                fasttext_layer.build()
        mean = np.zeros(model.embedding_dim, np.float32) if vector_mean is None else vector_mean
        self.vector_mean = tf.Variable(np.asarray(mean, np.float32), trainable=False,
                                       name="vector_mean")
        self.has_predictions = model.is_continuous and tokenization.kind != "wordpiece"
        super().__init__(tokenization, model.num_layers + 1, 2 * model.projection_dim,
                         max_tokens, subword_pooling, name="elmo_embedder")

    def _stack(self, flat):
        if self.model.input_embedding == "fixed":
            tokens, mask = self._with_boundaries(flat, strings=True)
            vectors = self.fasttext(tokens) - self.vector_mean
            # A literal <unk> (or <pad>) is the unknown word, whose fixed vector in
            # training is zero (the table's reserved rows), not fastText's vector of
            # the string "<unk>".
            unknown = tf.logical_or(tf.equal(tokens, vocabulary_lib.UNK),
                                    tf.equal(tokens, vocabulary_lib.PAD))
            vectors = tf.where(unknown[:, :, None], tf.zeros_like(vectors), vectors)
        else:
            ids, mask = self._with_boundaries(flat)
            vectors = self.model.token_embedding(ids)
        stack, forward, backward = self.model.encode(vectors, mask, training=False)
        extras = {}
        if self.has_predictions:
            extras = {"forward": self.model.head_inputs(forward)[:, None],
                      "backward": self.model.head_inputs(backward)[:, None]}
        return stack, extras


class TokenIdsEmbedderModule(EmbedderModule):
    """Any model that embeds token ids layer by layer: `MaskedElmo`, `Bert` (standard,
    relaxed or converted), and a new family's model, with no code here.

    The model's side of the contract (the "embeddable model"):

    * `embedding_layers(token_ids, padding_mask, training=False)`: every layer
      for int32 `[batch, time]` ids, boundary tokens included, as
      `[batch, embedding_num_layers, time, embedding_dim]`;
    * `embedding_num_layers`, `embedding_dim` and `vocabulary_size`;
    * optionally `max_embedding_tokens`: the most tokens it embeds between the
      boundary tokens (default and maximum of `max_tokens`), or None.

    Args:
        model: the embeddable model.
        tokenization: the in-graph `Tokenization` of the model's vocabulary.
        family: the family name written to the export's metadata (`"bert"`,
            `"masked_elmo"`, ...).
        max_tokens: the most model tokens embedded per sentence; None: the
            model's `max_embedding_tokens`, else `DEFAULT_MAX_TOKENS`.
        subword_pooling: `"first"`, `"mean"` or `"none"` (see the module
            docstring).

    Raises:
        ValueError: `max_tokens` is more than the model's
            `max_embedding_tokens` (or, from `EmbedderModule`, is not a
            positive integer, or `subword_pooling` is unknown).
    """

    def __init__(self, model, tokenization, family, max_tokens=None, subword_pooling="first"):
        self.model = model
        self.family = family
        limit = getattr(model, "max_embedding_tokens", None)
        if max_tokens is None:
            max_tokens = limit or DEFAULT_MAX_TOKENS
        if limit is not None and max_tokens > limit:
            raise ValueError(
                f"`max_tokens`={max_tokens} does not fit this {type(model).__name__}: it "
                f"embeds at most {limit} tokens between its boundary tokens.")
        super().__init__(tokenization, model.embedding_num_layers, model.embedding_dim,
                         max_tokens, subword_pooling, name=f"{family}_embedder")

    def _stack(self, flat):
        ids, mask = self._with_boundaries(flat)
        return self.model.embedding_layers(ids, mask, training=False), {}


class FastTextEmbedderModule(EmbedderModule):
    """fastText vectors alone (one layer): the context-free baseline."""

    family = "fasttext"

    def __init__(self, fasttext_layer, max_tokens=DEFAULT_MAX_TOKENS):
        self.fasttext = fasttext_layer
        if not fasttext_layer.built:
            fasttext_layer.build()
        super().__init__(Tokenization("strings"), 1, fasttext_layer.output_dim, max_tokens,
                         name="fasttext_embedder")

    def _stack(self, flat):
        vectors = self.fasttext(flat.to_tensor(default_value=""))
        return tf.pad(vectors, [[0, 0], [1, 1], [0, 0]])[:, None], {}


def _vocabulary_words(vocabulary):
    if vocabulary is None:
        return None
    if isinstance(vocabulary, vocabulary_lib.Vocabulary):
        return vocabulary.words
    if isinstance(vocabulary, (str, os.PathLike)):
        return vocabulary_lib.Vocabulary.load(os.fspath(vocabulary)).words
    return list(vocabulary)


EMBEDDERS = ("elmo", "token_ids", "fasttext")


def _snake_case(name):
    return re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", name).lower()


def embedder_module(model, *, embedder=None, family=None, vocabulary=None,
                    fasttext_layer=None, vector_mean=None, tokenization=None, lower_case=False,
                    max_tokens=None, subword_pooling="first"):
    """The `EmbedderModule` of a model: what `export_embedder` saves.

    `embedder` names the module (one of `EMBEDDERS`): `"elmo"` for an `ElmoLM`
    (any input embedding, the predictions of a continuous output),
    `"fasttext"` for a `FastTextEmbedding`, `"token_ids"` for any model with
    `embedding_layers` (`TokenIdsEmbedderModule`). A training family names its
    own (`Family.embedder_options`); None picks by the model.

    Args:
        model: an `ElmoLM`, any model with `embedding_layers`, or a
            `FastTextEmbedding` (as for `export_embedder`).
        embedder: which module embeds (one of `EMBEDDERS`); None picks by the model.
        family: the `family` of the metadata (`"token_ids"` modules; default:
            the model's class name in snake case).
        vocabulary: the model's vocabulary (a `Vocabulary`, its file, or a list
            of tokens in id order); needed by every model except ELMo with the
            fixed fastText input.
        fasttext_layer: `FastTextEmbedding` of an ELMo's fixed input vectors.
        vector_mean: the mean subtracted from the fixed vectors (`fasttext.center`).
        tokenization: one of `TOKENIZATIONS` (see `export_embedder`); default:
            the model's `embedding_tokenization`, else `"word"`.
        lower_case: `"bert"` tokenization: as `data.lower_case` in pre-training.
        max_tokens: longest input in model tokens (boundaries excluded); None:
            the default (see `export_embedder`).
        subword_pooling: WordPiece models: `"first"`, `"mean"` or `"none"`.

    Returns:
        The `EmbedderModule` (not saved).

    Raises:
        TypeError: `embedder` is None and the model is none of the kinds
            above.
        ValueError: `embedder` or `tokenization` is unknown, an `ElmoLM` is
            given `"bert"` tokenization, the vocabulary is missing where needed,
            or its size differs from the model's.
    """
    from tfeff.layers import FastTextEmbedding
    from tfeff.models import ElmoLM

    if embedder is None:
        if isinstance(model, FastTextEmbedding):
            embedder = "fasttext"
        elif isinstance(model, ElmoLM):
            embedder = "elmo"
        elif hasattr(model, "embedding_layers"):
            embedder = "token_ids"
        else:
            raise TypeError(
                "export_embedder takes an ElmoLM, a FastTextEmbedding or a model with "
                "`embedding_layers` (MaskedElmo, Bert, ...; see TokenIdsEmbedderModule). "
                f"Received: {type(model).__name__}")
    if embedder not in EMBEDDERS:
        raise ValueError(f"Received an invalid value for `embedder`, expected one of "
                         f"{EMBEDDERS}. Received: embedder={embedder!r}")
    if embedder == "fasttext":
        return FastTextEmbedderModule(model, _default_max_tokens(max_tokens))
    if tokenization is None:
        tokenization = getattr(model, "embedding_tokenization", "word")
    if tokenization not in TOKENIZATIONS:
        raise ValueError(
            f"Received an invalid value for `tokenization`, expected one of "
            f"{TOKENIZATIONS}. Received: tokenization={tokenization!r}")
    words = _vocabulary_words(vocabulary)
    if embedder == "elmo":
        if tokenization == "bert":
            raise ValueError("An ElmoLM reads `word` or `wordpiece` tokens, not `bert`.")
        if model.input_embedding == "fixed":
            kind = "strings"
        else:
            kind = "wordpiece" if tokenization == "wordpiece" else "ids"
            if words is None:
                raise ValueError(
                    f"An ElmoLM with input_embedding={model.input_embedding!r} needs the "
                    "`vocabulary` it was trained with.")
            _check_size(words, model.vocabulary_size)
        return ElmoEmbedderModule(model, Tokenization(kind, words), fasttext_layer, vector_mean,
                                  _default_max_tokens(max_tokens), subword_pooling)
    if words is None:
        raise ValueError(f"A {type(model).__name__} embedder needs its `vocabulary`.")
    _check_size(words, model.vocabulary_size)
    tok = Tokenization("ids" if tokenization == "word" else "wordpiece", words,
                       basic=tokenization == "bert", lower_case=lower_case)
    return TokenIdsEmbedderModule(model, tok, family or _snake_case(type(model).__name__),
                                  max_tokens, subword_pooling)


def _default_max_tokens(max_tokens):
    """`None` means the default; any other value (0 included) is checked as given."""
    return DEFAULT_MAX_TOKENS if max_tokens is None else max_tokens


def _check_size(words, vocabulary_size):
    if len(words) != vocabulary_size:
        raise ValueError(
            f"The vocabulary has {len(words)} tokens, the model {vocabulary_size}: not the "
            "vocabulary the model was trained with.")


def export_embedder(model, path, *, embedder=None, family=None, vocabulary=None,
                    fasttext_layer=None, vector_mean=None, tokenization=None, lower_case=False,
                    max_tokens=None, subword_pooling="first", extra_files=None,
                    overwrite=False):
    """Writes a SavedModel embedder of `model` to `path`, atomically.

    The SavedModel is written to a temporary sibling, reloaded, and its
    signatures are checked against the in-memory module on probe sentences
    (empty ones included); only then is it renamed into place. A failed export
    leaves no partial directory and never touches an existing one unless
    `overwrite` is set and the new export succeeded.

    Args:
        model: an `ElmoLM`, any model with `embedding_layers` (`MaskedElmo`,
            `Bert` standard or relaxed, ...: see `TokenIdsEmbedderModule`), or a
            `FastTextEmbedding` (fastText vectors alone, one layer).
        path: output directory.
        embedder: which module embeds (one of `EMBEDDERS`); None picks by the model.
        family: the `family` of the metadata (`"token_ids"` modules; default:
            the model's class name in snake case).
        vocabulary: the model's vocabulary (a `Vocabulary`, its file, or a list
            of tokens in id order); needed by every model except ELMo with the
            fixed fastText input.
        fasttext_layer: `FastTextEmbedding` of an ELMo's fixed input vectors.
        vector_mean: the mean subtracted from the fixed vectors (`fasttext.center`).
        tokenization: one of `TOKENIZATIONS`, as in pre-training: ElmoLM
            `"word"` or `"wordpiece"` (ELMo-Sub, `data.tokenization`); Masked
            ELMo and BERT `"bert"`. Default: the model's `embedding_tokenization`,
            else `"word"`.
        lower_case: `"bert"` tokenization: as `data.lower_case` in pre-training.
        max_tokens: longest input in model tokens (boundaries excluded); longer
            sentences keep their leading whole words that fit. Default 256;
            BERT's default and maximum is `max_sequence_length - 2`.
        subword_pooling: WordPiece models: `"first"`, `"mean"` or `"none"`.
        extra_files: `{name: source_path}` copied to `assets.extra/`.
        overwrite: replace an existing export (only an export: see
            `check_export_path`).

    Returns:
        The embedder's metadata (also in `assets.extra/embedder.json`).

    The path is checked first (`check_export_path`): a `path` that is,
    contains or lies inside a file the export reads raises `ValueError`; an
    existing `path` raises `FileExistsError` when `overwrite` is off, or when
    it is not an export (e.g. a model directory). The arguments are then
    checked as by `embedder_module`.
    """
    sources = dict(extra_files or {})
    if isinstance(vocabulary, (str, os.PathLike)):
        sources["vocabulary"] = vocabulary
    recheck = check_export_path(
        path, {f"file {name!r}": source for name, source in sources.items()}, overwrite)
    module = embedder_module(
        model, embedder=embedder, family=family, vocabulary=vocabulary,
        fasttext_layer=fasttext_layer, vector_mean=vector_mean,
        tokenization=tokenization, lower_case=lower_case, max_tokens=max_tokens,
        subword_pooling=subword_pooling)
    metadata = module.metadata()
    with files.exclusive_output(path, "tfeff-export"):
        _write_export(module, path, metadata, extra_files, recheck)
    return metadata


def _write_export(module, path, metadata, extra_files, recheck):
    """`export_embedder`'s writing, through a temporary sibling of `path`."""
    tmp = files.temporary_sibling(path)
    try:
        tf.saved_model.save(module, tmp, signatures=module.signatures())
        extra = os.path.join(tmp, EXTRA_DIR)
        tf.io.gfile.makedirs(extra)
        for name, source in (extra_files or {}).items():
            tf.io.gfile.copy(source, os.path.join(extra, name), overwrite=True)
        with tf.io.gfile.GFile(os.path.join(extra, METADATA_FILE), "w") as f:
            f.write(json.dumps(metadata, indent=2, sort_keys=True) + "\n")
        _check_reload(module, tmp)
        files.move_directory_into_place(tmp, path, recheck)
    finally:
        if tf.io.gfile.exists(tmp):
            shutil.rmtree(tmp, ignore_errors=True)


def _not_an_export(path):
    """None when `path` is an embedder `export_embedder` wrote, else what it is instead."""
    if not tf.io.gfile.isdir(path):
        return "a file, not a directory"
    names = {name.rstrip("/") for name in tf.io.gfile.listdir(path)}
    found = sorted(names & _MODEL_DIRECTORY_FILES)
    if found:
        return f"it holds {', '.join(found)}: a model directory"
    if "saved_model.pb" not in names:
        return "it has no saved_model.pb"
    if not tf.io.gfile.exists(os.path.join(path, EXTRA_DIR, METADATA_FILE)):
        return f"it has no {EXTRA_DIR}/{METADATA_FILE}"
    return None


def check_export_path(path, inputs, overwrite):
    """Refuses an export path that would destroy an input or what is not an export.

    `path` must not be, contain or lie inside an input (a model directory may
    hold its export: `runs/demo/export`); an existing `path` is replaced only
    with `overwrite` and only when it is an export `export_embedder` wrote
    (`saved_model.pb` and `assets.extra/embedder.json`, no model-directory
    files), never a model directory or anything else.

    Args:
        path: the export directory.
        inputs: `{description: path}` of what the export reads; descriptions
            that start with "model directory" may hold `path`.
        overwrite: whether an existing export may be replaced.

    Returns:
        The check again, as a function (see `tfeff.data.files.check_output`).

    A refused path raises `ValueError` or `FileExistsError`, as
    `tfeff.data.files.check_output` does.
    """
    return files.check_output(path, inputs, overwrite=overwrite, kind="an export",
                       foreign=_not_an_export,
                       containers=[d for d in inputs if d.startswith("model directory")])


def _check_reload(module, path):
    """The reloaded SavedModel must compute what the module computes.

    It runs the module's own graph on the same weights in the same process: the same
    operations on the same kernels, so the same float32 values, except where a kernel
    adds in an order of its own (on GPUs, the atomic adds of `unsorted_segment_mean`:
    `"mean"` pooling of a word's pieces, at most `max_tokens`). Two orders of a sum of K
    terms differ by at most 2 K u of their size (u = 2**-24, float32's unit roundoff;
    Higham, *Accuracy and Stability of Numerical Algorithms*, eq. (3.4)): the bound is
    2 * max_tokens * u times the output's largest value, 3e-5 of it for the default
    256. A reload that lost or mixed up a weight or the tokenizer differs by far more.
    """
    loaded = tf.saved_model.load(path)
    if set(loaded.signatures) != set(module.signatures()):
        raise RuntimeError(f"The exported embedder lost signatures: {sorted(loaded.signatures)}")
    probe = tf.constant(_PROBE)
    got = loaded.signatures["embed"](sentences=probe)
    want = module.embed(probe)
    for key in ("layers", "mask", "tokens"):
        a, b = got[key].numpy(), want[key].numpy()
        if a.dtype.kind == "f" and a.shape == b.shape:
            bound = 2 * module.max_tokens * 2.0**-24 * float(np.max(np.abs(b), initial=0.0))
            same = bool(np.all(np.abs(a.astype(np.float64) - b) <= bound))
        else:
            same = np.array_equal(a, b)
        if a.shape != b.shape or not same:
            raise RuntimeError(f"The exported embedder failed its reload check ({key!r}).")
    if got["mask"].numpy()[1:3].any():
        raise RuntimeError("The exported embedder gives tokens for empty sentences.")
    none = loaded.signatures["embed"](sentences=tf.constant([], tf.string))
    if none["layers"].shape[:3] != (0, module.num_layers, 0) or none["mask"].shape != (0, 0):
        raise RuntimeError("The exported embedder fails on an empty batch.")


def read_metadata(path, required=False):
    """`assets.extra/embedder.json` of an export (`{}` for exports older than it).

    Args:
        path: the export directory.
        required: refuse an export without it (instead of `{}`).

    Returns:
        The metadata as a dict (see `EmbedderModule.metadata`).

    Raises:
        ValueError: naming the file, when it is missing (`required`), is not JSON,
            lacks a key, or was written by a newer tfeff (`format_version`).
    """
    meta = os.path.join(path, EXTRA_DIR, METADATA_FILE)
    if not tf.io.gfile.exists(meta):
        if required:
            raise ValueError(
                f"{path} has no {EXTRA_DIR}/{METADATA_FILE}: it is not an export of this "
                "tfeff (or one older than that file); export it again with tfeff-export.")
        return {}
    try:
        with tf.io.gfile.GFile(meta) as f:
            data = json.load(f)
    except (ValueError, UnicodeDecodeError) as e:
        raise ValueError(f"{meta} is not valid JSON ({e}): export again with tfeff-export.") \
            from e
    version = data.get("format_version") if isinstance(data, dict) else None
    if not isinstance(version, int) or isinstance(version, bool):
        raise ValueError(f"{meta} has no integer `format_version`: not a tfeff export's "
                         "metadata; export again with tfeff-export.")
    if version > FORMAT_VERSION:
        raise ValueError(f"{meta} says format_version {version}, but this tfeff reads exports "
                         f"up to format_version {FORMAT_VERSION}: upgrade tfeff, or export "
                         "again with this one.")
    for key, kind in (("num_layers", int), ("dim", int)):
        value = data.get(key)
        if not isinstance(value, kind) or isinstance(value, bool) or value <= 0:
            raise ValueError(f"{meta}: `{key}` must be a positive integer. Received: "
                             f"{key}={value!r}; export again with tfeff-export.")
    return data


def check_metadata_matches(path, meta, loaded):
    """Raises ValueError naming `embedder.json` when its `num_layers` or `dim` is not what
    the SavedModel's `embed` signature returns (its static shape)."""
    shape = loaded.signatures["embed"].structured_outputs["layers"].shape
    for key, axis in (("num_layers", 1), ("dim", -1)):
        actual = shape[axis] if shape.rank else None
        if actual is not None and actual != meta[key]:
            raise ValueError(
                f"{os.path.join(path, EXTRA_DIR, METADATA_FILE)} says {key}={meta[key]}, but "
                f"the SavedModel's `embed` returns {actual}: the file does not belong to this "
                "export; export again with tfeff-export.")


def load_embedder(path):
    """Loads an exported embedder with `tf.saved_model.load`.

    Imports tensorflow-text first when the embedder's tokenizer needs its ops
    (WordPiece models); a process without tfeff does the same by hand:
    `import tensorflow_text` then `tf.saved_model.load(path)`.

    Args:
        path: the export directory (`export_embedder`).

    Returns:
        The loaded SavedModel, with its `embed`, `embed_tokens`, `tokenize`
        (and, where exported, `predict`) signatures.

    Raises:
        FileNotFoundError: `path` holds no `saved_model.pb`.
    """
    if not tf.io.gfile.exists(os.path.join(path, "saved_model.pb")):
        raise FileNotFoundError(f"{path} is not a SavedModel directory")
    if "tensorflow_text" in read_metadata(path).get("requires", []):
        import tensorflow_text  # noqa: F401  (registers the tokenizer ops)
    return tf.saved_model.load(path)
