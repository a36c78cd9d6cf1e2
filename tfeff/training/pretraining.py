"""`pretrain(config, model_dir)`: data preparation, training with `model.fit`, evaluation.

The model directory's layout, its transactional writes and the shared run
start live in `tfeff.training.model_directory`.
"""

import dataclasses
import json
import logging
import time

import numpy as np
import tensorflow as tf

from tfeff import config as config_lib
from tfeff import data as data_lib
from tfeff.data import files
from tfeff.layers.softmax_common import check_frequency_sorted
from tfeff.models import ElmoLM
from tfeff.training import bert_pretraining
from tfeff.training import evaluation
from tfeff.training import fault_tolerance
from tfeff.training import masked_elmo_pretraining
from tfeff.training import model_directory
from tfeff.training.model_directory import CHECKPOINT_DIR
from tfeff.training.model_directory import EVAL_FILE
from tfeff.training.model_directory import FASTTEXT_FILE
from tfeff.training.model_directory import VECTORS_FILE
from tfeff.training.model_directory import VOCABULARY_FILE
from tfeff.training.model_directory import file_path
from tfeff.training.optimizers import make_optimizer
from tfeff.training.strategy import shard_files

@dataclasses.dataclass
class DataArtifacts:
    train_files: str
    heldout_files: str
    vocabulary_path: str
    word_vectors_path: str
    vectors_path: str


def _count_words(data_cfg, train_files):
    logging.info("Counting words of %s", train_files)
    return data_lib.Vocabulary.build(
        data_lib.text_lines(train_files, data_cfg.on_invalid_utf8),
        min_count=data_cfg.min_count,
        max_words_in_memory=data_cfg.max_words_in_memory,
    )


def prepare_data(config, model_dir):
    """Creates (or reuses) corpus, vocabulary, fastText model and vocabulary vectors."""
    data_cfg, ft_cfg = config.data, config.fasttext
    train_files, heldout_files = model_directory.corpus_files(data_cfg, model_dir)

    vocabulary_path = file_path(model_dir, VOCABULARY_FILE)
    if data_cfg.tokenization == "wordpiece":
        if not tf.io.gfile.exists(vocabulary_path):
            words = _count_words(data_cfg, train_files)
            logging.info("Learning a WordPiece vocabulary of about %d tokens",
                         data_cfg.wordpiece_vocabulary_size)
            data_lib.learn_wordpiece_vocabulary(
                words, data_cfg.wordpiece_vocabulary_size, vocabulary_path
            )
        # Subword models have no fixed vectors: no fastText, no table.
        return DataArtifacts(train_files, heldout_files, vocabulary_path, None, None)
    if not tf.io.gfile.exists(vocabulary_path):
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
    return DataArtifacts(train_files, heldout_files, vocabulary_path,
                         word_vectors_path, vectors_path)


def check_pretrained_vectors(config, model_dir):
    """Validates `fasttext.pretrained` before any work, unless its vocabulary table is
    made already (a resume): a truncated or corrupt file is a `WordVectorsError` naming
    it, not NaN losses later."""
    path = config.fasttext.pretrained
    if (path and config.data.tokenization == "word"
            and not tf.io.gfile.exists(file_path(model_dir, VECTORS_FILE))):
        data_lib.check_word_vectors_file(path)


def build_model(config, vectors_path=None, vocabulary_size=None):
    """The `ElmoLM` of `config` (`vectors_path` for word models, else `vocabulary_size`)."""
    m = config.model
    return ElmoLM(
        None if vectors_path else vocabulary_size,
        embedding_table=vectors_path,
        num_layers=m.num_layers,
        units=m.units,
        projection_dim=m.projection_dim,
        dropout_rate=m.dropout_rate,
        output_layer=m.output_layer,
        output_loss=m.output_loss,
        vmf_regularization1=m.vmf_regularization1,
        vmf_regularization2=m.vmf_regularization2,
        input_embedding=m.input_embedding,
        embedding_dim=m.embedding_dim or None,
        tie_output=m.tie_output,
        adaptive_cutoffs=m.adaptive_cutoffs or None,
        adaptive_div_value=m.adaptive_div_value,
        num_sampled=m.num_sampled,
        seed=config.train.seed,
        alone=m.alone.layer_kwargs() if m.input_embedding == "alone" else None,
        name="elmo_lm",
    )


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


def _model_inputs(config, model_dir):
    """`(vectors_path, vocabulary_size)` for `build_model` from a prepared model_dir."""
    if config.data.tokenization == "wordpiece":
        vocabulary_path = file_path(model_dir, VOCABULARY_FILE)
        if not tf.io.gfile.exists(vocabulary_path):
            raise FileNotFoundError(
                f"{model_dir} has no {VOCABULARY_FILE}: run tfeff-pretrain first")
        return None, len(data_lib.Vocabulary.load(vocabulary_path))
    vectors_path = file_path(model_dir, VECTORS_FILE)
    if not tf.io.gfile.exists(vectors_path):
        raise FileNotFoundError(f"{model_dir} has no {VECTORS_FILE}: run tfeff-pretrain first")
    return vectors_path, None


def restore_model(model_dir, config=None, strategy=None, with_optimizer=False):
    """Builds the model of `model_dir` and restores its latest checkpoint.

    Returns:
        `(model, optimizer_or_None, step)`.

    Raises:
        FileNotFoundError: the directory has no config or no checkpoint.
    """
    if config is None:
        config = model_directory.load_model_dir_config(model_dir)
    vectors_path, vocabulary_size = _model_inputs(config, model_dir)
    return model_directory.restore_latest(
        model_dir, config, lambda: build_model(config, vectors_path, vocabulary_size),
        strategy, with_optimizer,
    )


def pretrain(config, model_dir, strategy="default", devices=None, verbose="auto",
             restore_fallback=False, callbacks=()):
    """Prepares the data, trains (resuming from the latest checkpoint), evaluates.

    A `BertConfig` goes to `tfeff.training.bert_pretraining.pretrain_bert`, a
    `MaskedElmoConfig` to `masked_elmo_pretraining.pretrain_masked_elmo`.
    Checkpointing, exact resume, preemption and fault handling are
    `tfeff.training.fault_tolerance`'s.

    Args:
        config: an `ElmoConfig`, `BertConfig` or `MaskedElmoConfig`.
        model_dir: output directory (created; resumed when it holds a run).
        strategy: `"default"`, `"mirrored"` or `"multi_worker"`.
        devices: device list for `"mirrored"`.
        verbose: `"auto"`: Keras' progress bar when stdout is a terminal, else
            one log line per `train.log_every` steps; `0`, `1`, `2`: Keras' own.
        restore_fallback: restore the newest readable checkpoint when the
            latest is corrupted (else `CheckpointError`).
        callbacks: more Keras callbacks for `model.fit`.

    Returns:
        dict with `step`, `history` (metric lists), `preempted` (stopped by
        SIGTERM after saving) and `eval` (top-k results; chief only, not
        after a preemption).

    Raises:
        tfeff.training.errors.TrainingError: a fault (non-finite loss with
            `train.on_nan: stop`, out of memory, a missing corpus file, a full
            or unwritable disk, an unreadable checkpoint); the directory
            stays resumable.
    """
    family_kwargs = dict(verbose=verbose, restore_fallback=restore_fallback, callbacks=callbacks)
    if config.family == "bert":
        return bert_pretraining.pretrain_bert(config, model_dir, strategy, devices,
                                              **family_kwargs)
    if config.family == "masked_elmo":
        return masked_elmo_pretraining.pretrain_masked_elmo(config, model_dir, strategy,
                                                            devices, **family_kwargs)
    strategy, info, artifacts = model_directory.start_run(
        config, model_dir, strategy, devices, lambda: prepare_data(config, model_dir),
        lambda: check_pretrained_vectors(config, model_dir))
    vocab = data_lib.Vocabulary.load(artifacts.vocabulary_path)
    check_output_layer(config, vocab)
    train_cfg = config.train

    with strategy.scope():
        model = build_model(config, artifacts.vectors_path, len(vocab))
        model.build()
        optimizer = make_optimizer(train_cfg, config.data.batch_size)
        optimizer.build(model.trainable_variables)
        model.compile(
            optimizer=optimizer,
            jit_compile=False,
            steps_per_execution=train_cfg.steps_per_execution,
        )
        training = fault_tolerance.ResumableTraining(
            model, optimizer, file_path(model_dir, CHECKPOINT_DIR), train_cfg.keep_checkpoints,
            strategy)
        start = training.restore(restore_fallback)
    logging.info(
        "Model: %s trainable parameters; starting at step %d of %d",
        f"{model.count_params():,}", start, train_cfg.steps,
    )

    wordpiece_input = config.data.tokenization == "wordpiece"
    train_files = data_lib.resolve_files(artifacts.train_files)

    def build(position, file_shard):
        return train_dataset(config, artifacts, train_files, file_shard).skip(position)

    validation = None
    if artifacts.heldout_files and train_cfg.validation_steps:
        validation = data_lib.lm_dataset(
            artifacts.heldout_files, artifacts.vocabulary_path,
            batch_size=config.data.batch_size,
            max_sequence_length=config.data.max_sequence_length,
            on_invalid_utf8=config.data.on_invalid_utf8, wordpiece=wordpiece_input,
        )
    t0 = time.time()
    history, preempted = training.fit(
        build, train_cfg.steps, global_batch_size=config.data.batch_size,
        num_files=len(train_files), every=train_cfg.checkpoint_every,
        log_every=train_cfg.log_every, on_nan=train_cfg.on_nan,
        callbacks=[*model_directory.chief_loggers(info, model_dir, train_cfg), *callbacks],
        validation_data=validation, validation_steps=train_cfg.validation_steps,
        verbose=verbose,
    )
    if not preempted:
        training.save_if_new()
    train_seconds = time.time() - t0
    step = training.step

    results = {"step": step, "history": history, "train_seconds": train_seconds,
               "preempted": preempted}
    if artifacts.heldout_files and info.is_chief and not preempted:
        results["eval"] = evaluate(model, config, artifacts, vocab)
        results["eval"]["train_seconds"] = train_seconds
        files.write_text_atomic(
            file_path(model_dir, EVAL_FILE), json.dumps(results["eval"], indent=2) + "\n"
        )
        for k in config.eval.top_k:
            logging.info(
                "held-out top-%d accuracy: %.4f (unigram baseline %.4f)",
                k, results["eval"]["top_k"][str(k)], results["eval"]["unigram_top_k"][str(k)],
            )
    return results


def train_dataset(config, artifacts, train_files, file_shard=None):
    """The training batches of an ELMo run (repeated; `file_shard`: see `shard_files`)."""
    files_, batch_size = shard_files(train_files, config.data.batch_size,
                                                     file_shard)
    return data_lib.lm_dataset(
        files_, artifacts.vocabulary_path, batch_size=batch_size,
        max_sequence_length=config.data.max_sequence_length,
        shuffle_buffer=config.data.shuffle_buffer, seed=config.train.seed,
        repeat=True, on_invalid_utf8=config.data.on_invalid_utf8,
        drop_remainder=True, wordpiece=config.data.tokenization == "wordpiece",
    )


def evaluate(model, config, artifacts, vocab):
    """Held-out top-k accuracy (both directions) vs the unigram baseline.

    Continuous outputs rank the vocabulary by cosine with the prediction;
    softmax outputs rank it by log-probability and also report perplexity
    (of words, or of WordPiece tokens for subword models: not comparable).
    """
    heldout = data_lib.lm_dataset(
        artifacts.heldout_files, artifacts.vocabulary_path,
        batch_size=config.data.batch_size,
        max_sequence_length=config.data.max_sequence_length,
        on_invalid_utf8=config.data.on_invalid_utf8,
        wordpiece=config.data.tokenization == "wordpiece",
    )
    predictions, target_ids = evaluation.collect_predictions(
        model, heldout, config.eval.max_targets
    )
    results = {"targets": int(len(target_ids)), "output_layer": config.model.output_layer,
               "tokenization": config.data.tokenization}
    if model.is_continuous:
        table = data_lib.load_vocabulary_vectors(artifacts.vectors_path, len(vocab))
        ranks = evaluation.target_ranks(
            predictions, target_ids, table, chunk_size=config.eval.chunk_size
        )
    else:
        ranks, log_probs = evaluation.log_prob_ranks(model.log_prob, predictions, target_ids)
        results["perplexity"] = float(np.exp(-np.mean(log_probs))) if len(log_probs) else None
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
