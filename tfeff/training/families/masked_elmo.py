"""The Masked ELMo family (`family: masked_elmo`): WordPiece documents, TBPTT streams,
mask accumulation, masked perplexity.

The batch of step s is a function of `(train.seed, s)` (`tfeff.data.masked_elmo_dataset`)
and the carried LSTM states are in the checkpoint, so a resumed run continues exactly
where it stopped; every worker builds the global batch and keeps its rows.
"""

import logging

import numpy as np
import tensorflow as tf

from tfeff import data as data_lib
from tfeff.data import files
from tfeff.data.masked_elmo_dataset import epoch_windows
from tfeff.models import from_config
from tfeff.training import evaluation
from tfeff.training import model_directory
from tfeff.training.families.masked_lm import MASKED_LM_NEVER_TARGETS
from tfeff.training.families.masked_lm import MaskedLMFamily
from tfeff.training.families.masked_lm import MaskedLMTally
from tfeff.training.families.masked_lm import first_batches
from tfeff.training.families.masked_lm import masked_lm_artifacts
from tfeff.training.families.masked_lm import masked_lm_example_batch
from tfeff.training.model_directory import file_path


def _wordpiece_vectors(config, model_dir, documents, vocabulary):
    """fastText vectors of every WordPiece, trained on the WordPiece-tokenized corpus."""
    ft = config.fasttext
    vectors_path = file_path(model_dir, model_directory.VECTORS_FILE)
    if tf.io.gfile.exists(vectors_path):
        return vectors_path
    word_vectors_path = ft.pretrained or file_path(model_dir, model_directory.FASTTEXT_FILE)
    if not ft.pretrained and not tf.io.gfile.exists(word_vectors_path):
        corpus_path = file_path(model_dir, model_directory.WORDPIECE_CORPUS_FILE)
        words = vocabulary.words
        lines = (" ".join(words[i] for i in doc if i >= len(data_lib.SPECIALS)) + "\n"
                 for doc in documents)
        files.write_text_atomic(corpus_path, "".join(lines))
        logging.info("Training %d-d fastText vectors on the WordPiece corpus", ft.dim)
        data_lib.train_fasttext(corpus_path, word_vectors_path, dim=ft.dim, minn=ft.minn,
                                maxn=ft.maxn, bucket=ft.bucket, epoch=ft.epoch,
                                min_count=ft.min_count, threads=ft.threads, lr=ft.lr)
    data_lib.compute_vocabulary_vectors(data_lib.WordVectors(word_vectors_path), vocabulary,
                                        vectors_path, expected_dim=ft.dim, center=ft.center)
    return vectors_path


def masked_elmo_dataset(config, documents, vocabulary_size, training, start_step=0,
                        repeat=None):
    """The batches of `documents` (training: `model.mask_accumulation` mask sets,
    reversed half streams; else one seeded mask set) from step `start_step` on."""
    d, m = config.data, config.model
    return data_lib.masked_elmo_dataset(
        documents, d.batch_size, d.max_sequence_length, d.max_predictions_per_seq,
        vocabulary_size, num_sets=m.mask_accumulation if training else 1,
        mask_rate=d.mask_rate, mask_token_rate=d.mask_token_rate,
        random_token_rate=d.random_token_rate, seed=config.train.seed + (0 if training else 1),
        repeat=training if repeat is None else repeat, start_step=start_step,
        reverse_half=d.reverse_half_streams and training,
        name="training" if training else "held-out")


def unigram_log_probs(documents, vocabulary_size):
    """Add-one smoothed log-frequencies of the tokens of `documents`."""
    counts = np.bincount(np.concatenate(documents) if documents else np.zeros(0, np.int64),
                         minlength=vocabulary_size)[:vocabulary_size]
    return evaluation.unigram_log_probs(counts, MASKED_LM_NEVER_TARGETS)


def evaluate_masked_elmo(model, config, documents, vocabulary_size, unigram=None):
    """Held-out masked loss (softmax: also perplexity, accuracy and the `unigram`'s) of
    the first `eval.max_batches` batches, one seeded mask set each, with carried states."""
    ds = masked_elmo_dataset(config, documents, vocabulary_size, training=False)
    tally = MaskedLMTally(unigram if not model.is_continuous else None)
    states = None
    for batch in first_batches(ds, config.eval.max_batches, tally):
        if states is not None:
            keep = 1.0 - tf.cast(batch["reset"], tf.float32)[:, None]
            states = [s * keep for s in states]
        outputs = model.set_outputs(batch, 0, states)
        states = outputs["states"] if model.tbptt_batch_size else None
        predicted = (None if model.is_continuous else
                     np.argmax(model.log_prob(outputs["masked_output"]).numpy(), -1))
        tally.add(tf.reduce_sum(outputs["masked_losses"]).numpy(),
                  batch["masked_ids"][:, 0].numpy(), batch["masked_weights"][:, 0].numpy(),
                  predicted)
    return tally.results(vocabulary_size, softmax=not model.is_continuous)


class MaskedElmoFamily(MaskedLMFamily):
    name = "masked_elmo"
    label = "Masked ELMo"
    position_addressed = True  # batches are a function of the step; documents in memory

    def uses_vectors(self, config):
        return config.model.output_layer == "continuous"

    def prepare_data(self, config, model_dir):
        """`masked_lm_artifacts` with `documents` (and WordPiece vectors if continuous)."""
        d = config.data
        artifacts = masked_lm_artifacts(config, model_dir)

        def tokenize(patterns):
            return data_lib.tokenize_documents(patterns, artifacts.vocabulary_path,
                                               d.lower_case, d.on_invalid_utf8)

        artifacts.documents = tokenize(artifacts.train_files)
        if config.train.epochs:
            artifacts.epoch_windows = epoch_windows([len(doc) for doc in artifacts.documents],
                                                    d.max_sequence_length)
        artifacts.heldout_documents = (tokenize(artifacts.heldout_files)
                                       if artifacts.heldout_files else None)
        if self.uses_vectors(config):
            artifacts.vectors_path = _wordpiece_vectors(config, model_dir, artifacts.documents,
                                                        artifacts.vocabulary)
        return artifacts

    def build_model(self, config, vocabulary_size, vectors_path=None):
        """The `MaskedElmo` of `config` (`vectors_path`: a continuous output's targets)."""
        return from_config.masked_elmo(config, vocabulary_size, vectors_path)

    def train_dataset(self, config, artifacts, position=0, file_shard=None):
        del file_shard  # never asked: position-addressed batches are not sharded by file
        return masked_elmo_dataset(config, artifacts.documents, artifacts.vocabulary_size,
                                   True, start_step=position)

    def example_batch(self, config, vocabulary_size, batch_size=2, length=9, seed=0):
        """`model.mask_accumulation` mask sets, every row a new document (`reset`)."""
        return masked_lm_example_batch(vocabulary_size, batch_size, length, seed,
                                       num_sets=config.model.mask_accumulation)

    def validation_dataset(self, config, artifacts):
        """Masked loss of one mask set from zero states, the same batches every time."""
        if artifacts.heldout_documents is None or not config.train.validation_steps:
            return None
        return masked_elmo_dataset(config, artifacts.heldout_documents,
                                   artifacts.vocabulary_size, False,
                                   repeat=True).take(config.train.validation_steps)

    def evaluate(self, model, config, artifacts):
        return evaluate_masked_elmo(
            model, config, artifacts.heldout_documents, artifacts.vocabulary_size,
            unigram=unigram_log_probs(artifacts.documents, artifacts.vocabulary_size))


MASKED_ELMO = MaskedElmoFamily()
