"""The ELMo family (`family: elmo`): `ElmoLM` with any input embedding and output layer.

Word models read fixed fastText vectors (`vocabulary_vectors.npy`, trained
on the corpus or `fasttext.pretrained`); WordPiece models
(`data.tokenization: wordpiece`) have no fixed vectors. Evaluation ranks
the vocabulary for every held-out next/previous token (top-k accuracy
against the unigram baseline; perplexity for softmax outputs).
"""

import logging

import numpy as np
import tensorflow as tf

from tfeff import config as config_lib
from tfeff import data as data_lib
from tfeff.data import fasttext_tables
from tfeff.layers import FastTextEmbedding
from tfeff.layers.softmax_common import check_frequency_sorted
from tfeff.models import experiment
from tfeff.training import evaluation
from tfeff.training.families.base import DataArtifacts
from tfeff.training.families.base import Family
from tfeff.training.model_directory import FASTTEXT_FILE
from tfeff.training.model_directory import VECTORS_FILE
from tfeff.training.model_directory import VOCABULARY_FILE
from tfeff.training.model_directory import corpus_files
from tfeff.training.model_directory import file_path
from tfeff.training.strategy import shard_files


def _count_words(data_cfg, train_files):
    logging.info("Counting words of %s", train_files)
    return data_lib.Vocabulary.build(
        data_lib.text_lines(train_files, data_cfg.on_invalid_utf8),
        min_count=data_cfg.min_count,
        max_words_in_memory=data_cfg.max_words_in_memory,
    )


def _check_unknown_words(data_cfg, train_files, vocabulary_path, learned):
    """Stops the run before fastText and training when the training text is mostly
    `<unk>` under the vocabulary (`tfeff.data.check_unknown_rate`)."""
    data_lib.check_unknown_rate(train_files, vocabulary_path, data_cfg.tokenization,
                                on_invalid_utf8=data_cfg.on_invalid_utf8, learned=learned)


def check_output_layer(config, vocab):
    """Checks the output layer's settings against the vocabulary (ConfigError)."""
    m = config.model
    size = len(vocab)
    if m.output_layer == "adaptive" and m.adaptive_cutoffs[-1] >= size:
        raise config_lib.ConfigError(
            f"`model.adaptive_cutoffs` {m.adaptive_cutoffs} must lie inside (0, {size}): "
            f"the vocabulary has {size} entries"
        )
    if m.output_layer in ("sampled", "fixed") and m.num_sampled >= size:
        raise config_lib.ConfigError(
            f"`model.num_sampled`={m.num_sampled} must be smaller than the vocabulary "
            f"({size} entries)"
        )
    if m.output_layer in ("adaptive", "sampled", "fixed"):
        # Clusters and the log-uniform sampler assume frequency-ordered ids.
        check_frequency_sorted(vocab.counts, first_id=len(data_lib.SPECIALS))


class ElmoFamily(Family):
    name = "elmo"
    label = "ELMo"

    def check_inputs(self, config, model_dir):
        """Validates `fasttext.pretrained` before any work, unless its vocabulary table
        is made already (a resume): a truncated or corrupt file is a `WordVectorsError`
        naming it, not NaN losses later."""
        path = config.fasttext.pretrained
        if (path and config.data.tokenization == "word"
                and not tf.io.gfile.exists(file_path(model_dir, VECTORS_FILE))):
            data_lib.check_word_vectors_file(path)

    def uses_vectors(self, config):
        return config.data.tokenization == "word"

    def prepare_data(self, config, model_dir):
        """Corpus, vocabulary, fastText model and vocabulary vectors (WordPiece: the
        vocabulary only); the training text is checked against the vocabulary before
        fastText trains (`<unk>` rate), the output layer after."""
        data_cfg, ft_cfg = config.data, config.fasttext
        train_files, heldout_files = corpus_files(data_cfg, model_dir)

        vocabulary_path = file_path(model_dir, VOCABULARY_FILE)
        learned = not tf.io.gfile.exists(vocabulary_path)
        if not self.uses_vectors(config):
            if learned:
                words = _count_words(data_cfg, train_files)
                logging.info("Learning a WordPiece vocabulary of about %d tokens",
                             data_cfg.wordpiece_vocabulary_size)
                data_lib.learn_wordpiece_vocabulary(
                    words, data_cfg.wordpiece_vocabulary_size, vocabulary_path
                )
            _check_unknown_words(data_cfg, train_files, vocabulary_path, learned)
            # Subword models have no fixed vectors: no fastText, no table.
            artifacts = DataArtifacts(train_files, heldout_files, vocabulary_path)
            check_output_layer(config, artifacts.vocabulary)
            return artifacts
        if learned:
            vocab = _count_words(data_cfg, train_files)
            if heldout_files:
                # Open vocabulary: held-out words get rows (count 0) so that they
                # can be evaluated as targets through their subword vectors.
                vocab = vocab.with_extra_words(
                    data_lib.text_lines(heldout_files, data_cfg.on_invalid_utf8)
                )
            vocab.save(vocabulary_path)
            logging.info("Vocabulary: %d words -> %s", len(vocab), vocabulary_path)
        else:
            vocab = data_lib.Vocabulary.load(vocabulary_path)
        _check_unknown_words(data_cfg, train_files, vocabulary_path, learned)

        if ft_cfg.pretrained:
            word_vectors_path = ft_cfg.pretrained
        else:
            word_vectors_path = file_path(model_dir, FASTTEXT_FILE)
            if not tf.io.gfile.exists(word_vectors_path):
                logging.info("Training %d-d fastText vectors on %s", ft_cfg.dim, train_files)
                data_lib.train_fasttext(
                    train_files, word_vectors_path, dim=ft_cfg.dim, minn=ft_cfg.minn,
                    maxn=ft_cfg.maxn, bucket=ft_cfg.bucket, epoch=ft_cfg.epoch,
                    min_count=ft_cfg.min_count, threads=ft_cfg.threads, lr=ft_cfg.lr,
                    on_invalid_utf8=data_cfg.on_invalid_utf8,
                )

        vectors_path = file_path(model_dir, VECTORS_FILE)
        if not tf.io.gfile.exists(vectors_path):
            word_vectors = data_lib.WordVectors(word_vectors_path)
            data_lib.compute_vocabulary_vectors(
                word_vectors, vocab, vectors_path, expected_dim=ft_cfg.dim,
                center=ft_cfg.center,
            )
        else:
            table = data_lib.load_vocabulary_vectors(vectors_path, len(vocab))
            if table.shape[1] != ft_cfg.dim:
                raise ValueError(
                    f"{vectors_path} has dimension {table.shape[1]}, the config asks for "
                    f"fasttext.dim={ft_cfg.dim}"
                )
        artifacts = DataArtifacts(train_files, heldout_files, vocabulary_path, vectors_path,
                                  word_vectors_path)
        artifacts.vocabulary = vocab
        check_output_layer(config, vocab)
        return artifacts

    def probe_vocabulary_size(self, config):
        m = config.model
        return max(super().probe_vocabulary_size(config), m.num_sampled + 1,
                   *(c + 1 for c in m.adaptive_cutoffs))

    def build_model(self, config, vocabulary_size, vectors_path=None):
        """The `ElmoLM` of `config` (`vectors_path`: the fixed vectors of word models)."""
        return experiment.elmo_lm(config, vocabulary_size, vectors_path)

    def train_dataset(self, config, artifacts, position=0, file_shard=None):
        """The training batches of an ELMo run (repeated; `file_shard`: see `shard_files`)."""
        files_, batch_size = shard_files(artifacts.train_file_list, config.data.batch_size,
                                         file_shard)
        d = config.data
        return data_lib.lm_dataset(
            files_, artifacts.vocabulary_path, batch_size=batch_size,
            max_sequence_length=d.max_sequence_length, shuffle_buffer=d.shuffle_buffer,
            seed=config.train.seed, repeat=True, on_invalid_utf8=d.on_invalid_utf8,
            drop_remainder=True, wordpiece=d.tokenization == "wordpiece",
        ).skip(position)

    def heldout_dataset(self, config, artifacts):
        """The held-out batches, in file order."""
        d = config.data
        return data_lib.lm_dataset(
            artifacts.heldout_files, artifacts.vocabulary_path, batch_size=d.batch_size,
            max_sequence_length=d.max_sequence_length, on_invalid_utf8=d.on_invalid_utf8,
            wordpiece=d.tokenization == "wordpiece",
        )

    def validation_dataset(self, config, artifacts):
        if artifacts.heldout_files and config.train.validation_steps:
            return self.heldout_dataset(config, artifacts)
        return None

    def evaluate(self, model, config, artifacts):
        """Held-out top-k accuracy (both directions) vs the unigram baseline.

        Continuous outputs rank the vocabulary by cosine with the prediction;
        softmax outputs rank it by log-probability and also report perplexity
        (of words, or of WordPiece tokens for subword models: not comparable).
        """
        vocab = artifacts.vocabulary
        predictions, target_ids = evaluation.collect_predictions(
            model, self.heldout_dataset(config, artifacts), config.eval.max_targets
        )
        results = {"targets": int(len(target_ids)), "output_layer": config.model.output_layer,
                   "tokenization": config.data.tokenization}
        if model.is_continuous:
            table = data_lib.load_vocabulary_vectors(artifacts.vectors_path, len(vocab))
            ranks = evaluation.target_ranks(
                predictions, target_ids, table, chunk_size=config.eval.chunk_size
            )
        else:
            ranks, log_probs = evaluation.log_prob_ranks(model.log_prob, predictions,
                                                         target_ids)
            results["perplexity"] = (float(np.exp(-np.mean(log_probs))) if len(log_probs)
                                     else None)
        ks = config.eval.top_k
        results.update({
            "top_k": {str(k): v for k, v in evaluation.top_k_accuracy(ranks, ks).items()},
            "unigram_top_k": {
                str(k): v
                for k, v in evaluation.unigram_top_k_accuracy(target_ids, vocab, ks).items()
            },
            "median_rank": float(np.median(ranks)) if len(ranks) else None,
        })
        return results

    def eval_summary(self, results):
        return "; ".join(
            f"top-{k} accuracy {results['top_k'][k]:.4f} (unigram baseline "
            f"{results['unigram_top_k'][k]:.4f})" for k in results["top_k"])

    def embedder_options(self, config, model_dir):
        """Word models also carry their vectors; a fixed input embedding carries the
        in-graph fastText layer (and the centering mean) that embeds any word."""
        options, extra_files = super().embedder_options(config, model_dir)
        options["tokenization"] = config.data.tokenization
        vectors_path = file_path(model_dir, VECTORS_FILE)
        if tf.io.gfile.exists(vectors_path):
            extra_files[VECTORS_FILE] = vectors_path
        if config.model.input_embedding == "fixed":
            word_vectors_path = config.fasttext.pretrained or file_path(model_dir,
                                                                        FASTTEXT_FILE)
            mean_file = fasttext_tables.mean_path(vectors_path)
            options["fasttext_layer"] = FastTextEmbedding.from_file(word_vectors_path,
                                                                    name="fasttext")
            options["vector_mean"] = (np.load(mean_file) if tf.io.gfile.exists(mean_file)
                                      else None)
        return options, extra_files


ELMO = ElmoFamily()
