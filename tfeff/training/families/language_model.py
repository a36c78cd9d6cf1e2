"""What the next-word language-model families share (`ElmoLM`, `TransformerLM`): their
data, batches, held-out evaluation and summary, and `LanguageModelFamily`.
"""

import hashlib
import json
import logging

import numpy as np
import tensorflow as tf

from tfeff import config as config_lib
from tfeff import data as data_lib
from tfeff.data import files
from tfeff.data import vocabulary as vocabulary_lib
from tfeff.layers.softmax_common import check_frequency_sorted
from tfeff.training import evaluation
from tfeff.training.families.base import DataArtifacts
from tfeff.training.families.base import Family
from tfeff.training.families.base import below_baseline_line
from tfeff.training.model_directory import EPOCH_FILE
from tfeff.training.model_directory import FASTTEXT_FILE
from tfeff.training.model_directory import VECTORS_FILE
from tfeff.training.model_directory import VOCABULARY_FILE
from tfeff.training.model_directory import corpus_files
from tfeff.training.model_directory import file_path
from tfeff.training.strategy import shard_files


# Bytes read from each end of a corpus file for its fingerprint.
_FINGERPRINT_BYTES = 1 << 16


def _file_fingerprint(path):
    """`[path, size, mtime in ns, SHA-256 of its first and last 64 KiB]`: an edit that
    keeps the size changes the time (unless set back) or, near either end, the digest."""
    stat = tf.io.gfile.stat(path)
    digest = hashlib.sha256()
    with tf.io.gfile.GFile(path, "rb") as f:
        digest.update(f.read(_FINGERPRINT_BYTES))
        if stat.length > 2 * _FINGERPRINT_BYTES:
            f.seek(stat.length - _FINGERPRINT_BYTES)
        digest.update(f.read())
    return [path, stat.length, stat.mtime_nsec, digest.hexdigest()]


def _saved_count(saved, counted_for, max_sequence_length):
    """The windows `saved` (the parsed `EPOCH_FILE`) validly records for `counted_for`."""
    if not isinstance(saved, dict) or {k: saved.get(k) for k in counted_for} != counted_for:
        return None
    windows, tokens = saved.get("windows"), saved.get("tokens")
    valid = (all(type(n) is int and n > 0 for n in (windows, tokens))
             and windows <= tokens <= windows * max_sequence_length)
    return windows if valid else None


def epoch_windows(config, model_dir, train_files, vocabulary_path):
    """The training windows of one pass over the corpus (`train.epochs`' unit), kept in
    `<model_dir>/EPOCH_FILE` with what they were counted for, which a new count needs."""
    d = config.data
    with tf.io.gfile.GFile(vocabulary_path, "rb") as f:
        vocabulary_digest = hashlib.sha256(f.read()).hexdigest()
    counted_for = {
        "train_files": train_files,
        "files": [_file_fingerprint(path) for path in data_lib.resolve_files(train_files)],
        "vocabulary_sha256": vocabulary_digest, "max_sequence_length": d.max_sequence_length,
        "tokenization": d.tokenization, "on_invalid_utf8": d.on_invalid_utf8}
    path = file_path(model_dir, EPOCH_FILE)
    if tf.io.gfile.exists(path):
        try:
            with tf.io.gfile.GFile(path) as f:
                saved = _saved_count(json.load(f), counted_for, d.max_sequence_length)
        except ValueError:  # not JSON
            saved = None
        if saved is not None:
            return saved
        logging.info("%s does not hold a count for this corpus and config: counting again",
                     path)
    logging.info("Counting the windows of one epoch of %s (train.epochs)", train_files)
    windows, tokens = data_lib.count_windows(
        train_files, vocabulary_path, d.max_sequence_length, d.on_invalid_utf8,
        wordpiece=d.tokenization == "wordpiece")
    files.write_text_atomic(path, json.dumps(
        {**counted_for, "windows": windows, "tokens": tokens}, indent=2) + "\n")
    return windows


def lm_artifacts(config, model_dir, uses_vectors):
    """Corpus, vocabulary and, with `uses_vectors`, fastText and vocabulary vectors, made if
    missing: a `DataArtifacts`. Held-out words get vocabulary rows (count 0), ranked as
    targets through their subword vectors.

    Raises:
        ValueError: a vectors table whose dimension is not `fasttext.dim`.
    """
    data_cfg, ft_cfg = config.data, config.fasttext
    train_files, heldout_files = corpus_files(data_cfg, model_dir)
    vocabulary_path = file_path(model_dir, VOCABULARY_FILE)
    learned = not tf.io.gfile.exists(vocabulary_path)
    wordpiece = data_cfg.tokenization == "wordpiece"
    if learned:
        logging.info("Counting words of %s", train_files)
        vocab = data_lib.Vocabulary.build(
            data_lib.text_lines(train_files, data_cfg.on_invalid_utf8),
            min_count=data_cfg.min_count, max_words_in_memory=data_cfg.max_words_in_memory)
        if wordpiece:
            logging.info("Learning a WordPiece vocabulary of about %d tokens",
                         data_cfg.wordpiece_vocabulary_size)
            data_lib.learn_wordpiece_vocabulary(vocab, data_cfg.wordpiece_vocabulary_size,
                                                vocabulary_path)
        else:
            if heldout_files:
                vocab = vocab.with_extra_words(
                    data_lib.text_lines(heldout_files, data_cfg.on_invalid_utf8))
            vocab.save(vocabulary_path)
            logging.info("Vocabulary: %d words -> %s", len(vocab), vocabulary_path)
    elif not wordpiece:
        vocab = data_lib.Vocabulary.load(vocabulary_path)
    data_lib.check_unknown_rate(train_files, vocabulary_path, data_cfg.tokenization,
                                on_invalid_utf8=data_cfg.on_invalid_utf8, learned=learned)
    artifacts = DataArtifacts(train_files, heldout_files, vocabulary_path)
    if config.train.epochs:
        artifacts.epoch_windows = epoch_windows(config, model_dir, train_files, vocabulary_path)
    if wordpiece:  # `artifacts.vocabulary` loads the WordPieces
        return artifacts
    artifacts.vocabulary = vocab
    if not uses_vectors:
        return artifacts

    word_vectors_path = ft_cfg.pretrained or file_path(model_dir, FASTTEXT_FILE)
    if not ft_cfg.pretrained and not tf.io.gfile.exists(word_vectors_path):
        logging.info("Training %d-d fastText vectors on %s", ft_cfg.dim, train_files)
        data_lib.train_fasttext(
            train_files, word_vectors_path, dim=ft_cfg.dim, minn=ft_cfg.minn,
            maxn=ft_cfg.maxn, bucket=ft_cfg.bucket, epoch=ft_cfg.epoch,
            min_count=ft_cfg.min_count, threads=ft_cfg.threads, lr=ft_cfg.lr,
            on_invalid_utf8=data_cfg.on_invalid_utf8)
    vectors_path = file_path(model_dir, VECTORS_FILE)
    if not tf.io.gfile.exists(vectors_path):
        word_vectors = data_lib.WordVectors(word_vectors_path)
        data_lib.compute_vocabulary_vectors(
            word_vectors, vocab, vectors_path, expected_dim=ft_cfg.dim, center=ft_cfg.center)
    else:
        table = data_lib.load_vocabulary_vectors(vectors_path, len(vocab))
        if table.shape[1] != ft_cfg.dim:
            raise ValueError(f"{vectors_path} has dimension {table.shape[1]}, the config asks "
                             f"for fasttext.dim={ft_cfg.dim}")
    artifacts.vectors_path, artifacts.word_vectors_path = vectors_path, word_vectors_path
    return artifacts


def check_pretrained_vectors(config, model_dir, uses_vectors):
    """Validates `fasttext.pretrained` before any work unless the vocabulary vectors
    exist (a resume): a corrupt file is a `WordVectorsError`, not NaN losses later."""
    path = config.fasttext.pretrained
    if path and uses_vectors and not tf.io.gfile.exists(file_path(model_dir, VECTORS_FILE)):
        data_lib.check_word_vectors_file(path)


def check_output_layer(model_cfg, vocab):
    """ConfigError unless the output layer's settings of `model_cfg` fit the vocabulary."""
    m, size = model_cfg, len(vocab)
    if m.output_layer == "adaptive" and m.adaptive_cutoffs[-1] >= size:
        raise config_lib.ConfigError(
            f"`model.adaptive_cutoffs` {m.adaptive_cutoffs} must lie inside (0, {size}): "
            f"the vocabulary has {size} entries")
    if m.output_layer in ("sampled", "fixed") and m.num_sampled >= size:
        raise config_lib.ConfigError(
            f"`model.num_sampled`={m.num_sampled} must be smaller than the vocabulary "
            f"({size} entries)")
    if m.output_layer in ("adaptive", "sampled", "fixed"):
        # Clusters and the log-uniform sampler assume frequency-ordered ids.
        check_frequency_sorted(vocab.counts, first_id=len(data_lib.SPECIALS))


def lm_dataset(config, artifacts, position=0, file_shard=None, heldout=False):
    """The training batches from input `position` on, or the `heldout` ones once."""
    d = config.data
    common = dict(max_sequence_length=d.max_sequence_length, on_invalid_utf8=d.on_invalid_utf8,
                  wordpiece=d.tokenization == "wordpiece")
    if heldout:
        return data_lib.lm_dataset(artifacts.heldout_files, artifacts.vocabulary_path,
                                   batch_size=d.batch_size, **common)
    files_, batch_size = shard_files(artifacts.train_file_list, d.batch_size, file_shard)
    return data_lib.lm_dataset(
        files_, artifacts.vocabulary_path, batch_size=batch_size,
        shuffle_buffer=d.shuffle_buffer, seed=config.train.seed, repeat=True,
        drop_remainder=True, **common).skip(position)


def lm_example_batch(vocabulary_size, batch_size=2, length=9, seed=0):
    """A batch like `lm_dataset`'s: int32 `(batch_size, length)` rows `<s>` ... `</s>` of
    random ids (of the first 5000 words), the last row shorter and right-padded."""
    rng = np.random.default_rng(seed)
    top = max(len(vocabulary_lib.SPECIALS) + 1, min(vocabulary_size, 5000))
    ids = rng.integers(len(vocabulary_lib.SPECIALS), top,
                       size=(batch_size, length)).astype(np.int32)
    ids[:, 0] = vocabulary_lib.BOS_ID
    lengths = np.full(batch_size, length)
    lengths[-1] = max(2, length - 3)
    ids[np.arange(batch_size), lengths - 1] = vocabulary_lib.EOS_ID
    ids[np.arange(length)[None, :] >= lengths[:, None]] = vocabulary_lib.PAD_ID
    return ids


# The held-out targets past `eval.max_targets` are counted (no model, only the
# pipeline) up to this many times `eval.max_targets`: a summary then says "more than".
HELDOUT_COUNT_LIMIT = 50


def evaluate_lm(model, config, artifacts):
    """Held-out top-k accuracy, median rank and (softmax) perplexity of the first
    `eval.max_targets` targets, each beside its unigram baseline. Continuous outputs rank
    the vocabulary by cosine with the prediction, softmax outputs by `model.log_prob`."""
    vocab = artifacts.vocabulary
    count_up_to = HELDOUT_COUNT_LIMIT * config.eval.max_targets
    predictions, target_ids, total = evaluation.collect_predictions(
        model, lm_dataset(config, artifacts, heldout=True), config.eval.max_targets,
        count_up_to=count_up_to)
    results = {"targets": int(len(target_ids)), "heldout_targets": int(total),
               "heldout_counted_all": bool(total < count_up_to),
               "directions": 2 if getattr(config.model, "bidirectional", True) else 1,
               "vocabulary_size": len(vocab), "output_layer": config.model.output_layer,
               "tokenization": config.data.tokenization}
    if model.is_continuous:
        table = data_lib.load_vocabulary_vectors(artifacts.vectors_path, len(vocab))
        ranks = evaluation.target_ranks(predictions, target_ids, table,
                                        chunk_size=config.eval.chunk_size)
    else:
        ranks, log_probs = evaluation.log_prob_ranks(model.log_prob, predictions, target_ids)
        results["perplexity"] = (float(np.exp(-np.mean(log_probs))) if len(log_probs)
                                 else None)
        unigram = evaluation.unigram_log_probs(
            vocab.counts, (vocabulary_lib.PAD_ID, vocabulary_lib.UNK_ID))
        results["unigram_perplexity"] = (float(np.exp(-np.mean(unigram[target_ids])))
                                         if len(target_ids) else None)
    ks = config.eval.top_k
    baseline = evaluation.unigram_ranks(target_ids, vocab)
    results.update({
        "top_k": {str(k): v for k, v in evaluation.top_k_accuracy(ranks, ks).items()},
        "unigram_top_k": {str(k): v for k, v in evaluation.top_k_accuracy(baseline, ks).items()},
        "median_rank": float(np.median(ranks)) if len(ranks) else None,
        "unigram_median_rank": float(np.median(baseline)) if len(baseline) else None,
    })
    return results


def lm_summary(results):
    """The held-out lines of `evaluate_lm`'s results beside their unigram baselines, and
    a line flagging an accuracy or perplexity below its baseline (not the median rank:
    frequency alone ranks the frequent half of the targets well)."""
    unit = "WordPiece tokens" if results["tokenization"] == "wordpiece" else "words"
    total = results.get("heldout_targets", results["targets"])
    of = "the" if results.get("heldout_counted_all", True) else "more than"
    part = (f"the first {results['targets']:,} of {of} {total:,} held-out targets "
            "(eval.max_targets)" if total > results["targets"] else
            f"all {results['targets']:,} held-out targets")
    directions = "both directions" if results.get("directions", 2) == 2 else "left to right"
    lines = [f"held-out: {part}, {directions}, <unk> left out; vocabulary "
             f"{results.get('vocabulary_size', 0):,} {unit}"]
    below = []
    for k, acc in results["top_k"].items():
        base = results["unigram_top_k"][k]
        lines.append(f"held-out top-{k} accuracy: {acc:.4f} (unigram baseline {base:.4f})")
        if acc < base:
            below.append(f"top-{k} accuracy")
    if results.get("median_rank") is not None:
        line = f"held-out median rank {results['median_rank']:g} (0 = first"
        if results.get("unigram_median_rank") is not None:  # shown, never flagged: see
            line += f"; unigram baseline {results['unigram_median_rank']:g}"  # the guide
        lines.append(line + ")")
    if results.get("perplexity") is not None:
        line = f"held-out perplexity {results['perplexity']:.2f} ({unit}"
        if results.get("unigram_perplexity") is not None:
            line += f"; unigram baseline {results['unigram_perplexity']:.2f}"
            if results["perplexity"] > results["unigram_perplexity"]:
                below.append("perplexity")
        lines.append(line + ")")
    return lines + below_baseline_line(
        below, continuous=results.get("output_layer") == "continuous")


class LanguageModelFamily(Family):
    """Next-word language models: subclasses implement `uses_vectors` and `build_model`."""

    def uses_vectors(self, config):
        raise NotImplementedError

    def check_inputs(self, config, model_dir):
        check_pretrained_vectors(config, model_dir, self.uses_vectors(config))

    def prepare_data(self, config, model_dir):
        """`lm_artifacts`, then `check_output_layer`."""
        artifacts = lm_artifacts(config, model_dir, self.uses_vectors(config))
        check_output_layer(config.model, artifacts.vocabulary)
        return artifacts

    def probe_vocabulary_size(self, config):
        m = config.model
        return max(super().probe_vocabulary_size(config), m.num_sampled + 1,
                   *(c + 1 for c in m.adaptive_cutoffs))

    def train_dataset(self, config, artifacts, position=0, file_shard=None):
        return lm_dataset(config, artifacts, position, file_shard)

    def example_batch(self, config, vocabulary_size, batch_size=2, length=9, seed=0):
        return lm_example_batch(vocabulary_size, batch_size, length, seed)

    def validation_dataset(self, config, artifacts):
        if artifacts.heldout_files and config.train.validation_steps:
            return lm_dataset(config, artifacts, heldout=True)
        return None

    def evaluate(self, model, config, artifacts):
        return evaluate_lm(model, config, artifacts)

    def eval_summary(self, results):
        return lm_summary(results)

    def embedder_options(self, config, model_dir):
        """The family's module with the data's tokenization."""
        options, extra_files = super().embedder_options(config, model_dir)
        options["tokenization"] = config.data.tokenization
        return options, extra_files
