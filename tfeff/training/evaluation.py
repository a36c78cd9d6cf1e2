"""Held-out evaluation of continuous outputs: top-k accuracy by nearest vectors.

A target's rank is the number of vocabulary vectors whose cosine with the prediction is
strictly higher than the target's own, computed in blocks of predictions x chunks of the
table: a 2M-word table is never a batch x V matrix, nor normalized as a whole copy.
"""

import math

import numpy as np

from tfeff.data import vocabulary as vocabulary_lib
from tfeff.training.errors import NonFiniteOutputError


def check_finite(values, what):
    """`NonFiniteOutputError` if `values` (an array) holds NaN or Inf."""
    values = np.asarray(values)
    _raise_if_any(np.count_nonzero(~np.isfinite(values)), values.size, what)


def _raise_if_any(bad, size, what):
    # A NaN compares false with everything: it would rank first, a broken model scored perfect.
    if bad:
        raise NonFiniteOutputError(
            f"the model's {what} hold NaN/Inf ({int(bad)} of {size} values): a broken "
            "model, not a score; the weights or the input vectors are non-finite")


def check_finite_results(results, prefix="results"):
    """`NonFiniteOutputError` naming the first NaN/Inf number of a (nested) results dict."""
    for key, value in results.items():
        name = f"{prefix}.{key}"
        if isinstance(value, dict):
            check_finite_results(value, name)
        elif isinstance(value, float) and not math.isfinite(value):
            raise NonFiniteOutputError(
                f"the held-out evaluation gave {key} = {value} ({name}): the model's outputs "
                "are non-finite, a broken model, not a score")


def _normalize(x):
    x = np.asarray(x, dtype=np.float32)
    return x / np.maximum(np.linalg.norm(x, axis=-1, keepdims=True), 1e-12)


def target_ranks(predictions, target_ids, table, chunk_size=8192, block_size=1024,
                 excluded_ids=(vocabulary_lib.PAD_ID, vocabulary_lib.UNK_ID)):
    """Cosine rank of each target among all table rows (0 = nearest).

    Args:
        predictions: `(n, dim)` predicted vectors.
        target_ids: `(n,)` ids of the true targets.
        table: `(V, dim)` array (a memory map is fine).
        chunk_size: table rows scored at once.
        block_size: predictions scored at once.
        excluded_ids: rows that never count as competitors.

    Returns:
        int64 `(n,)`.
    """
    check_finite(predictions, "predicted vectors")
    predictions = _normalize(predictions)
    target_ids = np.asarray(target_ids, dtype=np.int64)
    target_sims = np.einsum("nd,nd->n", predictions, _normalize(np.asarray(table[target_ids])))
    ranks = np.zeros(len(target_ids), dtype=np.int64)
    excluded = np.asarray(sorted(excluded_ids), dtype=np.int64)
    for start in range(0, table.shape[0], chunk_size):
        chunk = _normalize(np.asarray(table[start:start + chunk_size]))
        keep = np.ones(len(chunk), dtype=bool)
        inside = excluded[(excluded >= start) & (excluded < start + len(chunk))]
        keep[inside - start] = False
        columns = np.arange(start, start + len(chunk))
        for b in range(0, len(predictions), block_size):
            sims = predictions[b:b + block_size] @ chunk.T  # (block, chunk)
            above = sims > target_sims[b:b + block_size, None]
            # The target's own column: the matmul may round its cosine above
            # the einsum's, and a target never outranks itself.
            own = columns[None, :] == target_ids[b:b + block_size, None]
            ranks[b:b + block_size] += np.count_nonzero(above & keep[None, :] & ~own, axis=1)
    return ranks


def top_k_accuracy(ranks, ks):
    """The fraction of targets ranked among the k nearest, for each k.

    Args:
        ranks: the targets' ranks (0 = nearest), e.g. from `target_ranks`.
        ks: the k values (ints).

    Returns:
        `{k: accuracy}`, with accuracy 0.0 when there are no ranks.
    """
    ranks = np.asarray(ranks)
    return {int(k): float(np.mean(ranks < k)) if len(ranks) else 0.0 for k in ks}


def unigram_ranks(target_ids, vocabulary):
    """Each target's int64 rank (0 = most frequent) by training count in `vocabulary`,
    `<pad>` and `<unk>` never predicted: the context-free baseline of the ranks above."""
    counts = np.asarray(vocabulary.counts, dtype=np.float64)
    counts[: vocabulary_lib.BOS_ID] = -1  # never predict <pad>/<unk>
    order = np.argsort(-counts, kind="stable")
    rank_of = np.empty(len(order), dtype=np.int64)
    rank_of[order] = np.arange(len(order))
    return rank_of[np.asarray(target_ids, dtype=np.int64)]


def unigram_top_k_accuracy(target_ids, vocabulary, ks):
    """Accuracy of always predicting the k most frequent tokens (the baseline);
    `<pad>` and `<unk>` are never predicted.

    Args:
        target_ids: the true targets' ids.
        vocabulary: the `tfeff.data.Vocabulary` whose counts rank the tokens.
        ks: the k values (ints).

    Returns:
        `{k: accuracy}`, as `top_k_accuracy`.
    """
    return top_k_accuracy(unigram_ranks(target_ids, vocabulary), ks)


def unigram_log_probs(counts, never_targets):
    """Add-one smoothed log-frequencies `(V,)` of the training `counts`, `-inf` for
    `never_targets`: the context-free model a language model's perplexity should beat."""
    smoothed = np.asarray(counts, dtype=np.float64) + 1.0
    smoothed[list(never_targets)] = 0.0
    with np.errstate(divide="ignore"):
        return np.log(smoothed / smoothed.sum())


def collect_predictions(model, dataset, max_targets, count_up_to=None):
    """Runs a language model on batches of ids; returns `(predictions, target_ids, total)`:
    the first `max_targets` targets (each batch's directions interleaved) and how many
    `dataset` holds (counted without the model past `max_targets`; the count stops at
    `count_up_to` when given). `model(ids)` is a dict of each direction's outputs, which
    `model.prediction_pairs(outputs, ids)` aligns with their targets as `(direction,
    outputs, target_ids, valid)` (`ElmoLM.prediction_pairs`).
    """
    preds, targets, total, directions = [], [], 0, None
    for ids in dataset:
        ids = ids.numpy()
        if total >= max_targets:  # enough scored: count the rest (no features needed)
            if count_up_to is not None and total >= count_up_to:
                break
            empty = {name: np.zeros(ids.shape + (0,), np.float32) for name in directions}
            total += sum(int(valid.sum()) for *_, valid in model.prediction_pairs(empty, ids))
            continue
        out = {name: value.numpy() for name, value in model(ids, training=False).items()}
        directions = list(out)
        pairs = [(pred[valid], tgt[valid]) for _, pred, tgt, valid
                 in model.prediction_pairs(out, ids)]
        # The directions' targets interleaved (f0 b0 f1 b1 ...): a cut keeps both.
        order = np.argsort(np.concatenate([np.arange(len(t)) for _, t in pairs]),
                           kind="stable")
        preds.append(np.concatenate([p for p, _ in pairs])[order])
        targets.append(np.concatenate([t for _, t in pairs])[order])
        total += len(order)
    if not preds:
        return np.zeros((0, 1), np.float32), np.zeros((0,), np.int64), 0
    return np.concatenate(preds)[:max_targets], np.concatenate(targets)[:max_targets], total


def log_prob_ranks(log_prob_fn, hidden, target_ids, block_size=512,
                   excluded_ids=(vocabulary_lib.PAD_ID, vocabulary_lib.UNK_ID)):
    """`(ranks, target_log_probs)` of `target_ids` under a softmax output: int64 numbers of
    classes other than `excluded_ids` with a strictly higher log-probability, and float64.
    `log_prob_fn` maps `block_size` rows of `hidden` (the output layer's inputs) to their
    `(block, V)` log-probabilities."""
    target_ids = np.asarray(target_ids, dtype=np.int64)
    ranks = np.zeros(len(target_ids), np.int64)
    target_lp = np.zeros(len(target_ids), np.float64)
    excluded = np.asarray(sorted(excluded_ids), dtype=np.int64)
    for b in range(0, len(target_ids), block_size):
        lp = np.array(log_prob_fn(hidden[b:b + block_size]), dtype=np.float64)  # (block, V)
        # -inf is a log-probability (a class of probability 0); NaN and +inf are not.
        _raise_if_any(np.count_nonzero(np.isnan(lp) | (lp == np.inf)), lp.size,
                      "log-probabilities")
        own = lp[np.arange(len(lp)), target_ids[b:b + block_size]]
        lp[:, excluded] = -np.inf
        ranks[b:b + block_size] = np.count_nonzero(lp > own[:, None], axis=1)
        target_lp[b:b + block_size] = own
    return ranks, target_lp
