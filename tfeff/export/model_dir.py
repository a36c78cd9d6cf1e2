"""Export from a model directory: restore the latest checkpoint and write an embedder
(or hand back the in-memory module, for fine-tuning)."""

import os

import numpy as np
import tensorflow as tf

from tfeff.data import fasttext_tables
from tfeff.export.embedder import embedder_module
from tfeff.export.embedder import export_embedder
from tfeff.layers import FastTextEmbedding
from tfeff.training import model_directory
from tfeff.training import pretraining as pretrain_lib


def fasttext_layer_for(word_vectors_path):
    """The in-graph fastText layer of a `.bin` model or a `.vec` file (no subwords).

    The file is validated first (`fasttext_tables.check_fasttext_model`): a
    truncated or corrupt model is a `WordVectorsError` naming it, never an
    embedder with broken vectors.
    """
    if word_vectors_path.endswith((".vec", ".txt")):
        words, matrix = fasttext_tables.WordVectors(word_vectors_path).words_and_matrix()
        return FastTextEmbedding(words, matrix, minn=0, maxn=0, bucket=0, name="fasttext")
    fasttext_tables.check_fasttext_model(word_vectors_path)
    return FastTextEmbedding.from_fasttext(word_vectors_path, name="fasttext")


def model_dir_embedder(model_dir, max_tokens=None, subword_pooling="first"):
    """The in-memory embedder of a model directory's latest checkpoint, unexported.

    The module `export_model_dir` would write, with the restored Keras model
    still live (`module.model`): what fine-tuning the encoder needs.

    Returns:
        `(module, extra_files, step)`: the `EmbedderModule`, the files an
        export copies beside it (`{name: path}`), and the checkpoint's step.
    """
    model, options, extra_files, step = _restore(model_dir, max_tokens, subword_pooling)
    return embedder_module(model, **options), extra_files, step


def _restore(model_dir, max_tokens, subword_pooling):
    config = model_directory.load_model_dir_config(model_dir)
    vocabulary_path = os.path.join(model_dir, model_directory.VOCABULARY_FILE)
    extra_files = {"vocabulary.txt": vocabulary_path}
    options = {"vocabulary": vocabulary_path, "max_tokens": max_tokens,
               "subword_pooling": subword_pooling}
    if config.family == "bert":
        from tfeff.training.bert_pretraining import restore_bert

        model, _, step, _ = restore_bert(model_dir, config)
        options["lower_case"] = config.data.lower_case
    elif config.family == "masked_elmo":
        from tfeff.training.masked_elmo_pretraining import restore_masked_elmo

        model, _, step, _ = restore_masked_elmo(model_dir, config)
        options["lower_case"] = config.data.lower_case
    else:
        model, _, step = pretrain_lib.restore_model(model_dir, config)
        options["tokenization"] = config.data.tokenization
        vectors_path = os.path.join(model_dir, model_directory.VECTORS_FILE)
        if tf.io.gfile.exists(vectors_path):
            extra_files["vocabulary_vectors.npy"] = vectors_path
        if config.model.input_embedding == "fixed":
            word_vectors_path = config.fasttext.pretrained or os.path.join(
                model_dir, model_directory.FASTTEXT_FILE)
            mean_file = fasttext_tables.mean_path(vectors_path)
            options["fasttext_layer"] = fasttext_layer_for(word_vectors_path)
            options["vector_mean"] = (np.load(mean_file) if tf.io.gfile.exists(mean_file)
                                      else None)
    return model, options, extra_files, step


def export_model_dir(model_dir, output, overwrite=False, max_tokens=None,
                     subword_pooling="first"):
    """Exports the latest checkpoint of any tfeff model directory as a SavedModel embedder.

    ELMo (every input and output layer, word or WordPiece tokens), Masked ELMo
    and BERT (standard, relaxed, or converted by CoRe) directories export; the
    tokenization is the one the model was trained with (`config.yaml`).

    Returns:
        The exported checkpoint's step.
    """
    model, options, extra_files, step = _restore(model_dir, max_tokens, subword_pooling)
    export_embedder(model, output, extra_files=extra_files, overwrite=overwrite, **options)
    return step


def export_fasttext(fasttext_path, output, overwrite=False, max_tokens=None):
    """Exports fastText vectors alone (`.bin` with subwords, or `.vec`) as a one-layer
    embedder with the same signatures: the context-free baseline of feature evaluations."""
    if not tf.io.gfile.exists(fasttext_path):
        raise FileNotFoundError(f"fastText model not found: {fasttext_path}")
    return export_embedder(fasttext_layer_for(fasttext_path), output, max_tokens=max_tokens,
                           overwrite=overwrite)
