"""SavedModel embedders that take raw text (TensorFlow-only): the modules, and the
factory that picks one for a model (`embedder_module`).

Every model family exports the same signatures (docs/guides/export.md#signatures): `embed`
and `embed_tokens` (for pre-tokenized input, `""` as padding: output word `i` is input word
`i`) -> `layers` float32 `[batch, num_layers + 1, words, dim]` (layer 0: the context-free
token layer), `mask` and `tokens` `[batch, words]`; `tokenize` -> `tokens`, `mask`,
`truncated`, without running the model; and for continuous-output ELMo `predict` ->
`forward` / `backward` (the predicted next / previous word), `mask`, `tokens`.

A WordPiece word's vector is its first piece's (`subword_pooling="first"`, as the
continuous-output paper does for ELMo-Sub), the mean of its pieces (`"mean"`), or the pieces
themselves (`"none"`). Sentences keep their leading whole words whose model tokens fit in
`max_tokens`; empty ones give an all-false mask and zeros, an empty batch empty outputs of
the same rank. Tokenization is in-graph (`tfeff.export.tokenization`); writing and loading
exports: `tfeff.export.saved_embedder`.
"""

import os
import re

import numpy as np
import tensorflow as tf

from tfeff.data import vocabulary as vocabulary_lib
from tfeff.export.tokenization import TOKENIZATIONS
from tfeff.export.tokenization import Tokenization
from tfeff.export.tokenization import _keep_fitting_words

FORMAT_VERSION = 2
SUBWORD_POOLING = ("first", "mean", "none")
DEFAULT_MAX_TOKENS = 256
_BOUNDARY_IDS = (vocabulary_lib.BOS_ID, vocabulary_lib.EOS_ID)  # also [CLS], [SEP]
_BOUNDARY_WORDS = (vocabulary_lib.BOS, vocabulary_lib.EOS)


def pool_words(per_token, pieces, how):
    """`(vectors [batch, layers, words, dim], has_pieces [batch, words])` of `per_token`
    `[batch, layers, 1 + tokens + 1, dim]` (token j at 1 + j), ragged `pieces`
    `[batch, words, pieces]`, pooled `how` (`"first"` or `"mean"`)."""
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
    """The exported module (the interface: docs/guides/export.md#signatures).

    Subclasses implement `_stack(tokens)`: ragged `[batch, tokens]` model tokens ->
    `(stack [batch, layers, 1 + time + 1, dim], extras)`, token `j` at `1 + j` between the
    boundaries, `extras` a dict of per-position tensors `[batch, 1, time + 2, d]`.

    Args:
        tokenization: the in-graph `Tokenization`.
        num_layers: layers of the stack (the token layer included).
        dim: size of each layer's vectors.
        max_tokens: the most model tokens embedded per sentence, a positive int.
        subword_pooling: `"first"`, `"mean"` or `"none"` (WordPiece models only).
        name: the module's name.

    Raises:
        ValueError: `subword_pooling` is unknown, or `max_tokens` not a positive integer.
    """

    family = None
    has_predictions = False

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
        self.predict = (tf.function(self._predict, input_signature=[sentences])
                        if self.has_predictions else None)

    def signatures(self):
        out = {"embed": self.embed, "embed_tokens": self.embed_tokens, "tokenize": self.tokenize,
               "predict": self.predict}
        return {name: function for name, function in out.items() if function is not None}

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
        # Rows of a `[batch, n]` token matrix up to their last non-empty cell.
        nonempty = tf.cast(tokens != "", tf.int32)
        lengths = tf.reduce_sum(tf.cast(tf.cumsum(nonempty, axis=1, reverse=True) > 0,
                                        tf.int64), axis=1)
        return self._split(tf.RaggedTensor.from_tensor(tokens, lengths=lengths))

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
        encoder = model.backbone
        if encoder.input_embedding == "fixed":
            if fasttext_layer is None:
                raise ValueError("An ElmoLM with the fixed fastText input needs `fasttext_layer`.")
            if fasttext_layer.output_dim != encoder.token_embedding_dim:
                raise ValueError(
                    f"The fastText vectors have dimension {fasttext_layer.output_dim}, the "
                    f"model expects {encoder.token_embedding_dim}")
            if not fasttext_layer.built:
                fasttext_layer.build()
        mean = (np.zeros(encoder.token_embedding_dim, np.float32) if vector_mean is None
                else vector_mean)
        self.vector_mean = tf.Variable(np.asarray(mean, np.float32), trainable=False,
                                       name="vector_mean")
        self.has_predictions = model.is_continuous and tokenization.kind != "wordpiece"
        super().__init__(tokenization, model.embedding_num_layers, model.embedding_dim,
                         max_tokens, subword_pooling, name="elmo_embedder")

    def _stack(self, flat):
        if self.model.backbone.input_embedding == "fixed":
            tokens, mask = self._with_boundaries(flat, strings=True)
            vectors = self.fasttext(tokens) - self.vector_mean
            # A literal <unk> (or <pad>) is the unknown word, whose fixed vector in training
            # is zero (the table's reserved rows), not fastText's vector of "<unk>".
            unknown = tf.logical_or(tf.equal(tokens, vocabulary_lib.UNK),
                                    tf.equal(tokens, vocabulary_lib.PAD))
            vectors = tf.where(unknown[:, :, None], tf.zeros_like(vectors), vectors)
        else:
            ids, mask = self._with_boundaries(flat)
            vectors = self.model.backbone.token_embedding(ids)
        stack, forward, backward = self.model.backbone.encode(vectors, mask, training=False)
        extras = {}
        if self.has_predictions:
            extras = {"forward": self.model.head_inputs(forward)[:, None],
                      "backward": self.model.head_inputs(backward)[:, None]}
        return stack, extras


class TokenIdsEmbedderModule(EmbedderModule):
    """Any model that embeds token ids layer by layer (`MaskedElmo`, `Bert`, a new family's):
    the "embeddable" contract of docs/contributing/families.md (`embedding_layers`,
    `embedding_num_layers`, `embedding_dim`, `vocabulary_size`, `max_embedding_tokens`).

    Args:
        model: the embeddable model.
        tokenization: the in-graph `Tokenization` of the model's vocabulary.
        family: the family name of the export's metadata (`"bert"`, ...).
        max_tokens: None: the model's `max_embedding_tokens` (also the most allowed), else 256.
        subword_pooling: `"first"`, `"mean"` or `"none"`.

    Raises:
        ValueError: `max_tokens` is more than the model's `max_embedding_tokens` (or, from
            `EmbedderModule`, not a positive integer, or `subword_pooling` is unknown).
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


def embedder_module(model, *, embedder=None, family=None, vocabulary=None,
                    fasttext_layer=None, vector_mean=None, tokenization=None, lower_case=False,
                    max_tokens=None, subword_pooling="first"):
    """The `EmbedderModule` of a model: what `export_embedder` saves.

    Args:
        model: an `ElmoLM`, any model with `embedding_layers` (`MaskedElmo`, `Bert`, ...:
            `TokenIdsEmbedderModule`), or a `FastTextEmbedding` (one layer).
        embedder: one of `EMBEDDERS`; None: the model's `embedder_kind`, else `"token_ids"`.
        family: the metadata's `family` (`"token_ids"`; default: the class name, snake case).
        vocabulary: a `Vocabulary`, its file, or the tokens in id order; needed by every
            model except ELMo with the fixed fastText input.
        fasttext_layer: `FastTextEmbedding` of an ELMo's fixed input vectors.
        vector_mean: the mean subtracted from the fixed vectors (`fasttext.center`).
        tokenization: one of `TOKENIZATIONS` as in pre-training (ElmoLM `"word"` or
            `"wordpiece"`, BERT `"bert"`); default: `model.embedding_tokenization` or `"word"`.
        lower_case: `"bert"` tokenization: as `data.lower_case` in pre-training.
        max_tokens: longest input in model tokens (boundaries excluded; longer sentences keep
            their leading whole words); default 256, BERT's (and its maximum) its length - 2.
        subword_pooling: WordPiece models: `"first"`, `"mean"` or `"none"`.

    Returns:
        The `EmbedderModule` (not saved).

    Raises:
        TypeError: `embedder` is None and the model is none of the kinds above.
        ValueError: `embedder` or `tokenization` is unknown, an `ElmoLM` is given `"bert"`
            tokenization, the vocabulary is missing where needed, or of another size.
    """
    if embedder is None:
        embedder = getattr(model, "embedder_kind", None)
        if not isinstance(embedder, str):
            embedder = "token_ids" if hasattr(model, "embedding_layers") else None
        if embedder is None:
            raise TypeError(
                "export_embedder takes an ElmoLM, a FastTextEmbedding or a model with "
                "`embedding_layers` (MaskedElmo, Bert, ...; see TokenIdsEmbedderModule). "
                f"Received: {type(model).__name__}")
    if embedder not in EMBEDDERS:
        raise ValueError(f"Received an invalid value for `embedder`, expected one of "
                         f"{EMBEDDERS}. Received: embedder={embedder!r}")
    given_or_default = DEFAULT_MAX_TOKENS if max_tokens is None else max_tokens  # 0 is refused
    if embedder == "fasttext":
        return FastTextEmbedderModule(model, given_or_default)
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
        if model.backbone.input_embedding == "fixed":
            kind = "strings"
        else:
            kind = "wordpiece" if tokenization == "wordpiece" else "ids"
            if words is None:
                raise ValueError(
                    f"An ElmoLM with input_embedding={model.backbone.input_embedding!r} needs "
                    "the `vocabulary` it was trained with.")
            _check_size(words, model.backbone.vocabulary_size)
        return ElmoEmbedderModule(model, Tokenization(kind, words), fasttext_layer, vector_mean,
                                  given_or_default, subword_pooling)
    if words is None:
        raise ValueError(f"A {type(model).__name__} embedder needs its `vocabulary`.")
    # A task's vocabulary is its backbone's; a model of its own may hold it itself.
    _check_size(words, getattr(model, "backbone", model).vocabulary_size)
    tok = Tokenization("ids" if tokenization == "word" else "wordpiece", words,
                       basic=tokenization == "bert", lower_case=lower_case)
    family = family or re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", type(model).__name__).lower()
    return TokenIdsEmbedderModule(model, tok, family, max_tokens, subword_pooling)


def _check_size(words, vocabulary_size):
    if len(words) != vocabulary_size:
        raise ValueError(
            f"The vocabulary has {len(words)} tokens, the model {vocabulary_size}: not the "
            "vocabulary the model was trained with.")

