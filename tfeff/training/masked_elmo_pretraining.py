"""Masked ELMo pretraining: WordPiece documents, TBPTT streams, mask accumulation, masked perplexity.

Layout of `model_dir` (as for the other families, see `pretraining`):

    config.yaml, corpus/ (synthetic data), vocabulary.txt (WordPiece)
    wordpiece_corpus.txt, fasttext.bin, vocabulary_vectors.npy
                              (`model.output_layer: continuous` only: fastText
                              trained on the WordPiece-tokenized corpus)
    checkpoints/              model, optimizer and the carried LSTM states
    logs/                     TensorBoard scalars
    eval.json                 held-out masked loss, perplexity, accuracy

The batch of step s is a function of `(train.seed, s)` (see
`tfeff.data.masked_elmo_dataset`) and the carried LSTM states are in the
checkpoint, so a resumed run continues exactly where it stopped.
"""

import json
import logging
import os
import time

import numpy as np
import tensorflow as tf

from tfeff import data as data_lib
from tfeff.data import files
from tfeff.data.mlm_dataset import check_bert_vocabulary
from tfeff.models import MaskedElmo
from tfeff.training import fault_tolerance
from tfeff.training import model_directory
from tfeff.training.optimizers import make_optimizer

WORDPIECE_CORPUS_FILE = "wordpiece_corpus.txt"
_path = os.path.join


def prepare_masked_elmo_data(config, model_dir):
    """`(documents, heldout_documents_or_None, vocabulary_path, vectors_path_or_None)`.

    Learns the WordPiece vocabulary if missing and tokenizes the corpus
    (`tfeff.data.tokenize_documents`); for a continuous output also trains
    fastText on the WordPiece-tokenized corpus and writes the table.
    """
    d = config.data
    train_files, heldout_files = model_directory.corpus_files(d, model_dir)
    vocabulary_path = _path(model_dir, model_directory.VOCABULARY_FILE)
    if not tf.io.gfile.exists(vocabulary_path):
        data_lib.learn_bert_vocabulary(
            train_files, d.wordpiece_vocabulary_size, vocabulary_path, lower_case=d.lower_case,
            on_invalid_utf8=d.on_invalid_utf8, max_words_in_memory=d.max_words_in_memory)
    vocabulary = data_lib.Vocabulary.load(vocabulary_path)
    check_bert_vocabulary(vocabulary)

    def tokenize(patterns):
        return data_lib.tokenize_documents(patterns, vocabulary_path, d.lower_case,
                                           d.on_invalid_utf8)

    documents = tokenize(train_files)
    heldout = tokenize(heldout_files) if heldout_files else None
    vectors_path = None
    if config.model.output_layer == "continuous":
        vectors_path = _wordpiece_vectors(config, model_dir, documents, vocabulary)
    return documents, heldout, vocabulary_path, vectors_path


def _wordpiece_vectors(config, model_dir, documents, vocabulary):
    """fastText vectors of every WordPiece, trained on the WordPiece-tokenized corpus."""
    ft = config.fasttext
    vectors_path = _path(model_dir, model_directory.VECTORS_FILE)
    if tf.io.gfile.exists(vectors_path):
        return vectors_path
    word_vectors_path = ft.pretrained or _path(model_dir, model_directory.FASTTEXT_FILE)
    if not ft.pretrained and not tf.io.gfile.exists(word_vectors_path):
        corpus_path = _path(model_dir, WORDPIECE_CORPUS_FILE)
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


def build_masked_elmo(config, vocabulary_size, vectors_path=None):
    """The `MaskedElmo` of `config`."""
    m = config.model
    return MaskedElmo(
        vocabulary_size,
        num_layers=m.num_layers,
        units=m.units,
        projection_dim=m.projection_dim,
        dropout_rate=m.dropout_rate,
        output_layer=m.output_layer,
        output_loss=m.output_loss,
        embedding_table=vectors_path,
        adaptive_cutoffs=m.adaptive_cutoffs or None,
        adaptive_div_value=m.adaptive_div_value,
        input_embedding=m.input_embedding,
        alone=m.alone.layer_kwargs() if m.input_embedding == "alone" else None,
        use_cudnn=m.use_cudnn,
        tbptt_batch_size=config.data.batch_size if m.tbptt else None,
        name="masked_elmo",
    )


def _model_inputs(config, model_dir):
    vocabulary_path = _path(model_dir, model_directory.VOCABULARY_FILE)
    if not tf.io.gfile.exists(vocabulary_path):
        raise FileNotFoundError(f"{model_dir} has no {model_directory.VOCABULARY_FILE}")
    vectors_path = None
    if config.model.output_layer == "continuous":
        vectors_path = _path(model_dir, model_directory.VECTORS_FILE)
    return len(data_lib.Vocabulary.load(vocabulary_path)), vectors_path


def restore_masked_elmo(model_dir, config=None, strategy=None, with_optimizer=False):
    """Builds the MaskedElmo of `model_dir` and restores its latest checkpoint.

    Returns:
        `(model, optimizer_or_None, step, config)`.
    """
    if config is None:
        config = model_directory.load_model_dir_config(model_dir)
    if config.family != "masked_elmo":
        raise ValueError(f"{model_dir} holds a {config.family!r} model, not a Masked ELMo")
    vocabulary_size, vectors_path = _model_inputs(config, model_dir)
    model, optimizer, step = model_directory.restore_latest(
        model_dir, config, lambda: build_masked_elmo(config, vocabulary_size, vectors_path),
        strategy, with_optimizer)
    return model, optimizer, step, config


def masked_elmo_dataset(config, documents, vocabulary_size, training, start_step=0,
                        repeat=None):
    d, m = config.data, config.model
    return data_lib.masked_elmo_dataset(
        documents, d.batch_size, d.max_sequence_length, d.max_predictions_per_seq,
        vocabulary_size, num_sets=m.mask_accumulation if training else 1,
        mask_rate=d.mask_rate, mask_token_rate=d.mask_token_rate,
        random_token_rate=d.random_token_rate, seed=config.train.seed + (0 if training else 1),
        repeat=training if repeat is None else repeat, start_step=start_step,
        reverse_half=d.reverse_half_streams and training,
    )


def pretrain_masked_elmo(config, model_dir, strategy="default", devices=None, verbose="auto",
                         restore_fallback=False, callbacks=()):
    """Masked-LM pretraining of `config.model` (resuming from the latest checkpoint).

    Arguments and faults as `tfeff.training.pretrain`. The batches are a
    function of the step, so a resumed run starts its pipeline at the
    checkpointed input position; under multi-worker training every worker
    builds the global batch and keeps its rows (the TBPTT streams are global).

    Returns:
        dict with `step`, `history`, `train_seconds`, `preempted` and `eval`
        (held-out masked loss, perplexity and, for softmax outputs, accuracy).
    """
    strategy, info, (documents, heldout, vocabulary_path, vectors_path) = \
        model_directory.start_run(config, model_dir, strategy, devices,
                                  lambda: prepare_masked_elmo_data(config, model_dir))
    d = config.data
    vocabulary_size = len(data_lib.Vocabulary.load(vocabulary_path))
    train_cfg = config.train
    with strategy.scope():
        model = build_masked_elmo(config, vocabulary_size, vectors_path)
        model.build()
        optimizer = make_optimizer(train_cfg, d.batch_size)
        optimizer.build(model.trainable_variables)
        model.compile(optimizer=optimizer, jit_compile=False,
                      steps_per_execution=train_cfg.steps_per_execution)
        training = fault_tolerance.ResumableTraining(
            model, optimizer, _path(model_dir, model_directory.CHECKPOINT_DIR),
            train_cfg.keep_checkpoints, strategy)
        start = training.restore(restore_fallback)
    logging.info("Masked ELMo: %s parameters; step %d, training to step %d",
                 f"{model.count_params():,}", start, train_cfg.steps)
    validation = None
    if heldout is not None and train_cfg.validation_steps:
        # Keras' validation: masked loss of one mask set from zero states, at every
        # checkpoint (val_loss; exp(val_loss) is the masked perplexity of softmax
        # outputs). A finite dataset: Keras re-reads it from the start each time, so
        # every point of the curve is on the same batches and masks.
        validation = masked_elmo_dataset(config, heldout, vocabulary_size, False,
                                         repeat=True).take(train_cfg.validation_steps)

    def build(position, file_shard):
        del file_shard  # never asked: num_files=None (documents are held in memory)
        return masked_elmo_dataset(config, documents, vocabulary_size, True,
                                   start_step=position)

    build.checkpointable = False  # a generator; the position is what resumes it
    t0 = time.time()
    history, preempted = training.fit(
        build, train_cfg.steps, global_batch_size=d.batch_size,
        every=train_cfg.checkpoint_every, log_every=train_cfg.log_every,
        on_nan=train_cfg.on_nan,
        callbacks=[*model_directory.chief_loggers(info, model_dir, train_cfg), *callbacks],
        validation_data=validation, validation_steps=train_cfg.validation_steps,
        verbose=verbose)
    if not preempted:
        training.save_if_new()
    step = training.step
    results = {"step": step, "history": history, "train_seconds": time.time() - t0,
               "preempted": preempted}
    if heldout is not None and info.is_chief and not preempted:
        results["eval"] = evaluate_masked_elmo(model, config, heldout, vocabulary_size)
        files.write_text_atomic(_path(model_dir, model_directory.EVAL_FILE),
                                json.dumps(results["eval"], indent=2) + "\n")
        logging.info("held-out masked-LM results: %s", results["eval"])
    return results


def evaluate_masked_elmo(model, config, documents, vocabulary_size):
    """Held-out masked loss, perplexity (softmax outputs) and top-1 accuracy.

    One mask set per batch (seeded: every call sees the same masks), windows
    read in document order with carried states as in training but without
    reversed streams, so each window's forward state comes from its left context.
    """
    ds = masked_elmo_dataset(config, documents, vocabulary_size, training=False)
    loss_sum, correct, count = 0.0, 0, 0.0
    states = None
    for batch in ds.take(config.eval.max_batches):
        if states is not None:
            keep = 1.0 - tf.cast(batch["reset"], tf.float32)[:, None]
            states = [s * keep for s in states]
        outputs = model.set_outputs(batch, 0, states)
        states = outputs["states"] if model.tbptt_batch_size else None
        weights = batch["masked_weights"][:, 0]
        loss_sum += float(tf.reduce_sum(outputs["masked_losses"]))
        count += float(tf.reduce_sum(weights))
        if not model.is_continuous:
            predicted = np.argmax(model.log_prob(outputs["masked_output"]).numpy(), -1)
            correct += int(((predicted == batch["masked_ids"][:, 0].numpy())
                            * (weights.numpy() > 0)).sum())
    mean = loss_sum / max(count, 1.0)
    result = {"masked_tokens": int(count), "mlm_loss": mean}
    if not model.is_continuous:
        result["perplexity"] = float(np.exp(mean))
        result["accuracy"] = correct / max(count, 1.0)
    return result
