"""SavedModel embedders that take raw sentences (TensorFlow-only).

The exported module has two signatures, both over `sentences: tf.string[batch]`
(whitespace-tokenized in-graph; each sentence is wrapped in `<s> ... </s>`
for the model and the boundaries are removed from the outputs):

* `embed` -> `layers` float32 `[batch, num_layers + 1, tokens, dim]`,
  `mask` bool `[batch, tokens]`, `tokens` string `[batch, tokens]`.
* `predict` (continuous outputs only) -> `forward` / `backward` float32
  `[batch, tokens, embedding_dim]` (the predicted fixed-space vectors of the
  next / previous word), `mask`, `tokens`.

Every word-level `ElmoLM` exports (all output layers share the encoder and
the fastText input); WordPiece models are not exported yet.

Token vectors are computed in-graph by `FastTextEmbedding`, exactly as
fastText's `get_word_vector`, so words never seen in training get their
subword vector. Sentences longer than `max_tokens` words are truncated; empty
or whitespace-only sentences give all-false mask rows. The SavedModel loads
with plain `tf.saved_model.load` and needs no tfeff (and no tensorflow-text).
`assets.extra/` holds the vocabulary and its vectors for nearest-word lookups.
"""

import os
import shutil

import numpy as np
import tensorflow as tf

from tfeff.data import files
from tfeff.data import vocabulary as vocabulary_lib

EXTRA_DIR = "assets.extra"


class ElmoEmbedderModule(tf.Module):
    """The exported module: an `ElmoLM` on top of in-graph fastText vectors."""

    def __init__(self, model, fasttext_layer, vector_mean=None, max_tokens=256):
        super().__init__(name="elmo_embedder")
        if model.input_embedding != "fixed":
            raise NotImplementedError(
                "Only models with the fixed fastText input embedding can be exported "
                f"for now; this one has input_embedding={model.input_embedding!r}."
            )
        if fasttext_layer.output_dim != model.embedding_dim:
            raise ValueError(
                f"The fastText vectors have dimension {fasttext_layer.output_dim}, the "
                f"model expects {model.embedding_dim}"
            )
        self.model = model
        self.fasttext = fasttext_layer
        if not fasttext_layer.built:
            fasttext_layer.build()
        mean = np.zeros(model.embedding_dim, np.float32) if vector_mean is None else vector_mean
        self.vector_mean = tf.Variable(np.asarray(mean, np.float32), trainable=False,
                                       name="vector_mean")
        self.max_tokens = int(max_tokens)
        spec = tf.TensorSpec([None], tf.string, name="sentences")
        self.embed = tf.function(self._embed, input_signature=[spec])
        self.predict = None
        if model.is_continuous:
            self.predict = tf.function(self._predict, input_signature=[spec])

    def signatures(self):
        out = {"embed": self.embed}
        if self.predict is not None:
            out["predict"] = self.predict
        return out

    def _run(self, sentences):
        words = tf.strings.split(sentences)[:, : self.max_tokens]  # ragged (batch, words)
        n = words.nrows()
        bos = tf.RaggedTensor.from_tensor(tf.fill([n, 1], vocabulary_lib.BOS))
        eos = tf.RaggedTensor.from_tensor(tf.fill([n, 1], vocabulary_lib.EOS))
        tokens = tf.concat([bos, words, eos], axis=1).to_tensor(default_value="")
        lengths = words.row_lengths()
        mask = tf.sequence_mask(lengths + 2, maxlen=tf.shape(tokens)[1])
        vectors = self.fasttext(tokens) - self.vector_mean  # (batch, time, emb)
        stack, forward, backward = self.model.encode(vectors, mask, training=False)
        word_mask = tf.sequence_mask(lengths, maxlen=tf.shape(tokens)[1] - 2)
        return stack, forward, backward, word_mask, words.to_tensor(default_value="")

    def _embed(self, sentences):
        stack, _, _, word_mask, words = self._run(sentences)
        keep = tf.cast(word_mask, stack.dtype)[:, None, :, None]
        return {"layers": stack[:, :, 1:-1] * keep, "mask": word_mask, "tokens": words}

    def _predict(self, sentences):
        _, forward, backward, word_mask, words = self._run(sentences)
        keep = tf.cast(word_mask, forward.dtype)[:, :, None]
        return {
            "forward": self.model.head_inputs(forward)[:, 1:-1] * keep,
            "backward": self.model.head_inputs(backward)[:, 1:-1] * keep,
            "mask": word_mask,
            "tokens": words,
        }


def export_embedder(model, path, fasttext_layer, vector_mean=None, max_tokens=256,
                    extra_files=None, overwrite=False):
    """Writes a SavedModel embedder to `path`, atomically.

    The SavedModel is written to a temporary sibling, reloaded and checked
    (both signatures present and runnable), then renamed into place; a failed
    export leaves no partial directory and never touches an existing one
    unless `overwrite` is set and the new export succeeded.

    Args:
        model: a trained `tfeff.models.ElmoLM`.
        path: output directory.
        fasttext_layer: `tfeff.layers.FastTextEmbedding` of the model's vectors.
        vector_mean: the mean subtracted from the fixed vectors (`fasttext.center`).
        max_tokens: longest sentence, in words; longer ones are truncated.
        extra_files: `{name: source_path}` copied to `assets.extra/`.
        overwrite: replace an existing export.
    """
    if tf.io.gfile.exists(path) and not overwrite:
        raise FileExistsError(f"{path} exists; pass overwrite=True (--overwrite) to replace it")
    module = ElmoEmbedderModule(model, fasttext_layer, vector_mean, max_tokens)
    tmp = files.temporary_sibling(path)
    try:
        tf.saved_model.save(module, tmp, signatures=module.signatures())
        for name, source in (extra_files or {}).items():
            tf.io.gfile.makedirs(os.path.join(tmp, EXTRA_DIR))
            tf.io.gfile.copy(source, os.path.join(tmp, EXTRA_DIR, name), overwrite=True)
        loaded = tf.saved_model.load(tmp)
        probe = loaded.signatures["embed"](sentences=tf.constant(["a b", ""]))
        if probe["layers"].shape[0] != 2:
            raise RuntimeError("The exported embedder failed its reload check.")
        if tf.io.gfile.exists(path):
            trash = files.temporary_sibling(path) + ".old"
            tf.io.gfile.rename(path, trash)
            tf.io.gfile.rename(tmp, path)
            tf.io.gfile.rmtree(trash)
        else:
            tf.io.gfile.rename(tmp, path)
    finally:
        if tf.io.gfile.exists(tmp):
            shutil.rmtree(tmp, ignore_errors=True)
    return path


def load_embedder(path):
    """Loads an exported embedder (plain `tf.saved_model.load`)."""
    if not tf.io.gfile.exists(os.path.join(path, "saved_model.pb")):
        raise FileNotFoundError(f"{path} is not a SavedModel directory")
    return tf.saved_model.load(path)
