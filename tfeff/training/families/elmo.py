"""The ELMo family (`family: elmo`): `ElmoLM` with any input embedding and output layer."""

import numpy as np
import tensorflow as tf

from tfeff.data import fasttext_tables
from tfeff.layers import FastTextEmbedding
from tfeff.models import from_config
from tfeff.training.families.language_model import LanguageModelFamily
from tfeff.training.model_directory import FASTTEXT_FILE
from tfeff.training.model_directory import VECTORS_FILE
from tfeff.training.model_directory import file_path


class ElmoFamily(LanguageModelFamily):
    name = "elmo"
    label = "ELMo"

    def uses_vectors(self, config):
        return config.data.tokenization == "word"

    def build_model(self, config, vocabulary_size, vectors_path=None):
        """The `ElmoLM` of `config` (`vectors_path`: the fixed vectors of word models)."""
        return from_config.elmo_lm(config, vocabulary_size, vectors_path)

    def embedder_options(self, config, model_dir):
        """Also the vectors, and a fixed input embedding's fastText layer and mean."""
        options, extra_files = super().embedder_options(config, model_dir)
        vectors_path = file_path(model_dir, VECTORS_FILE)
        if tf.io.gfile.exists(vectors_path):
            extra_files[VECTORS_FILE] = vectors_path
        if config.model.input_embedding == "fixed":
            word_vectors_path = config.fasttext.pretrained or file_path(model_dir, FASTTEXT_FILE)
            mean_file = fasttext_tables.mean_path(vectors_path)
            options["fasttext_layer"] = FastTextEmbedding.from_file(word_vectors_path,
                                                                    name="fasttext")
            options["vector_mean"] = (np.load(mean_file) if tf.io.gfile.exists(mean_file)
                                      else None)
        return options, extra_files


ELMO = ElmoFamily()
