"""Masked ELMo data: paragraphs as WordPiece streams, bidirectional TBPTT batches, mask sets.

Senay & Salin's pipeline (docs/papers/masked-elmo.md#maskedelmo), in NumPy fed to
`tf.data` through a generator. Each paragraph becomes `[CLS] s1 [SEP] s2 ...` (the
corpus' ids held in memory). Each epoch the documents are shuffled and dealt whole
to `batch_size` streams (`tbptt_plan`): row s of batch t is window t of stream s,
so the states of one batch initialize the next, and the odd streams walk their
windows in reverse (bidirectional TBPTT, §3.2); `reset` marks where a document
starts and the empty filler windows. Each batch gets `num_sets` mutually exclusive
mask sets (mask accumulation, §3.1; `mask_sets`). Every draw is a function of
`(seed, epoch)` or `(seed, step)`, so a resumed run sees exactly the same batches.
"""

import heapq
import logging

import numpy as np
import tensorflow as tf

from tfeff.data import corpus
from tfeff.data import vocabulary as vocabulary_lib
from tfeff.data.mlm_dataset import bert_tokenizer
from tfeff.data.mlm_dataset import check_bert_vocabulary
from tfeff.data.vocabulary import CLS_ID
from tfeff.data.vocabulary import MASK_ID
from tfeff.data.vocabulary import PAD_ID
from tfeff.data.vocabulary import SEP_ID
from tfeff.data.vocabulary import UNK_ID

_LINES_PER_BATCH = 1024
FIRST_REGULAR_ID = MASK_ID + 1  # random replacements are regular (non-reserved) ids


def tokenize_documents(patterns, vocabulary_path, lower_case=False, on_invalid_utf8="error"):
    """Every paragraph of the corpus as int32 ids `[CLS] s1 [SEP] s2 [SEP] ... sk`.

    Args:
        patterns: glob(s) of text files; paragraphs are separated by blank lines.
        vocabulary_path: a BERT WordPiece vocabulary (`learn_bert_vocabulary`).
        lower_case: lower-case and strip accents before WordPiece.
        on_invalid_utf8: `"error"`, `"skip"` or `"replace"`.

    Returns:
        list of 1-D int32 arrays, in corpus order.
    """
    check_bert_vocabulary(vocabulary_lib.Vocabulary.load(vocabulary_path))
    tokenizer = bert_tokenizer(vocabulary_path, lower_case)
    documents, lines, owners = [], [], []

    def flush():
        if not lines:
            return
        pieces = tokenizer.tokenize(tf.constant(lines)).merge_dims(1, 2)
        current = None
        for owner, ids in zip(owners, pieces.to_list()):
            boundary = SEP_ID if owner == current else CLS_ID
            current = owner
            documents[owner] += [np.array([boundary], np.int32), np.asarray(ids, np.int32)]
        lines.clear()
        owners.clear()

    for paragraph in corpus.paragraphs(patterns, on_invalid_utf8):
        owners += [len(documents)] * len(paragraph)
        lines += paragraph
        documents.append([])
        if len(lines) >= _LINES_PER_BATCH:
            flush()
    flush()
    return [np.concatenate(parts) for parts in documents]


def epoch_windows(document_lengths, window):
    """The windows of `window` tokens of one pass over the documents (`train.epochs`' unit);
    `tbptt_plan` deals them in at least `windows / num_streams` steps."""
    return int(sum(-(-int(n) // window) for n in document_lengths))


def tbptt_plan(document_lengths, num_streams, window, rng, reverse_half=True):
    """Which window of which document each stream reads at each step: each document, in
    shuffled order, goes whole to the stream with the fewest windows so far.

    Args:
        document_lengths: tokens per document.
        num_streams: number of streams (the batch size).
        window: tokens per window.
        rng: `np.random.Generator` that shuffles the documents.
        reverse_half: reverse the window order of the odd streams.

    Returns:
        dict of int arrays `(steps, num_streams)`: `document` (-1 for an empty filler
        window), `window` (index within the document), and bool `reset` (the first
        window of its document in this stream's order, or a filler).
    """
    lengths = np.asarray(document_lengths, np.int64)
    streams = [[] for _ in range(num_streams)]
    heap = [(0, s) for s in range(num_streams)]
    for doc in rng.permutation(len(lengths)):
        count = epoch_windows([lengths[doc]], window)
        if count == 0:
            continue
        size, s = heapq.heappop(heap)
        streams[s].extend((doc, w) for w in range(count))
        heapq.heappush(heap, (size + count, s))
    steps = max(len(st) for st in streams)
    document = np.full((steps, num_streams), -1, np.int64)
    index = np.zeros((steps, num_streams), np.int64)
    for s, st in enumerate(streams):
        if reverse_half and s % 2 == 1:
            st = st[::-1]
        for t, (doc, w) in enumerate(st):
            document[t, s], index[t, s] = doc, w
    previous = np.vstack([np.full((1, num_streams), -2), document[:-1]])
    reset = (document != previous) | (document < 0)
    return {"document": document, "window": index, "reset": reset}


def window_ids(documents, plan_document, plan_window, window):
    """Token ids `(rows, window)` and lengths of the planned windows (filler: empty)."""
    rows = len(plan_document)
    ids = np.zeros((rows, window), np.int32)
    lengths = np.zeros(rows, np.int32)
    for r, (doc, w) in enumerate(zip(plan_document, plan_window)):
        if doc < 0:
            continue
        piece = documents[doc][w * window:(w + 1) * window]
        ids[r, :len(piece)] = piece
        lengths[r] = len(piece)
    return ids, lengths


def mask_sets(ids, lengths, rng, num_sets, vocabulary_size, max_predictions_per_seq,
              mask_rate=0.15, mask_token_rate=0.8, random_token_rate=0.1):
    """`num_sets` mutually exclusive masked-LM sets over one batch: per row and set,
    `round(mask_rate * n)` of its n maskable tokens (not `[CLS]`, `[SEP]`, `<unk>`), at
    most P and `n // K`, masked 80/10/10 (`[MASK]`, a random regular token, kept).

    Args:
        ids: int `(batch, time)` right-padded token ids.
        lengths: int `(batch,)`.
        rng: `np.random.Generator`.
        num_sets: K; the sets of a row are disjoint.
        vocabulary_size: range of the random replacement tokens.
        max_predictions_per_seq: P, masked positions per row and set.
        mask_rate: as for `masked_elmo_dataset`.
        mask_token_rate: as for `masked_elmo_dataset`.
        random_token_rate: as for `masked_elmo_dataset`.

    Returns:
        dict of int32 `masked_token_ids` `(batch, K, time)` (each set's inputs),
        `masked_positions`, `masked_ids` and float32 `masked_weights` `(batch, K, P)`.
    """
    batch, time = ids.shape
    k, p = num_sets, max_predictions_per_seq
    inputs = np.repeat(ids[:, None, :], k, axis=1).astype(np.int32)
    positions = np.zeros((batch, k, p), np.int32)
    targets = np.zeros((batch, k, p), np.int32)
    weights = np.zeros((batch, k, p), np.float32)
    for b in range(batch):
        row = ids[b, :lengths[b]]
        candidates = np.flatnonzero(~np.isin(row, (CLS_ID, SEP_ID, PAD_ID, UNK_ID)))
        n = len(candidates)
        per_set = min(p, max(1, int(round(mask_rate * n))), n // k)
        if per_set == 0:
            continue
        chosen = np.sort(rng.permutation(candidates)[:k * per_set].reshape(k, per_set), axis=1)
        draw = rng.random((k, per_set))
        random_ids = rng.integers(FIRST_REGULAR_ID, vocabulary_size, (k, per_set))
        original = row[chosen]
        inputs[b, np.arange(k)[:, None], chosen] = np.where(
            draw < mask_token_rate, MASK_ID,
            np.where(draw < mask_token_rate + random_token_rate, random_ids, original))
        positions[b, :, :per_set] = chosen
        targets[b, :, :per_set] = original
        weights[b, :, :per_set] = 1.0
    return {"masked_token_ids": inputs, "masked_positions": positions,
            "masked_ids": targets, "masked_weights": weights}


def masked_elmo_batches(documents, batch_size, max_sequence_length, max_predictions_per_seq,
                        vocabulary_size, num_sets=1, mask_rate=0.15, mask_token_rate=0.8,
                        random_token_rate=0.1, seed=0, repeat=True, start_step=0,
                        reverse_half=True):
    """Yields the batches of `masked_elmo_dataset` as NumPy dicts: step t of epoch e uses
    the plan of `(seed, e)` and masks of `(seed, t)`; earlier steps than `start_step` are
    skipped without masking."""
    lengths = [len(d) for d in documents]
    if not any(lengths):
        raise ValueError("No document has a token.")
    step, epoch = 0, 0
    while True:
        plan = tbptt_plan(lengths, batch_size, max_sequence_length,
                          np.random.default_rng([seed, epoch]), reverse_half)
        steps = len(plan["reset"])
        if step + steps <= start_step:  # a whole epoch before the resume point
            step += steps
            epoch += 1
            continue
        for t in range(steps):
            if step >= start_step:
                ids, row_lengths = window_ids(documents, plan["document"][t],
                                              plan["window"][t], max_sequence_length)
                batch = mask_sets(ids, row_lengths, np.random.default_rng([seed, 1, step]),
                                  num_sets, vocabulary_size, max_predictions_per_seq,
                                  mask_rate, mask_token_rate, random_token_rate)
                positions = np.arange(max_sequence_length)[None, :]
                batch["padding_mask"] = (positions < row_lengths[:, None]).astype(np.int32)
                batch["reset"] = plan["reset"][t].astype(np.int32)
                yield batch
            step += 1
        epoch += 1
        if not repeat:
            return


def masked_elmo_dataset(documents, batch_size, max_sequence_length, max_predictions_per_seq,
                        vocabulary_size, num_sets=1, mask_rate=0.15, mask_token_rate=0.8,
                        random_token_rate=0.1, seed=0, repeat=True, start_step=0,
                        reverse_half=True, name="training"):
    """`tf.data.Dataset` of Masked ELMo batches (see the module docstring). Rows are
    streams: under `tf.distribute`, keep the split of the global batch fixed (the default).

    Args:
        documents: the token-id documents (`tokenize_documents`).
        batch_size: rows (streams) per batch, the global batch.
        max_sequence_length: n, the window length in tokens.
        max_predictions_per_seq: p, masked positions per row and set.
        vocabulary_size: range of the random replacement tokens.
        num_sets: K, the disjoint mask sets per batch (mask accumulation).
        mask_rate: fraction of a row's maskable tokens masked in each set;
            `num_sets * mask_rate` must be in (0, 1].
        mask_token_rate: fraction of the masked positions replaced by `[MASK]`.
        random_token_rate: fraction replaced by a random regular token (the rest stay).
        seed: seed of the document shuffles and the masks.
        repeat: run epoch after epoch forever (training); False stops after one.
        start_step: skip the batches before this step (a resumed run).
        reverse_half: walk the odd streams' windows in reverse order.
        name: what the documents are, for the log (`"training"`, `"held-out"`).

    Returns:
        The prefetched `tf.data.Dataset` of dicts: int32 `masked_token_ids`
        `(batch, K, n)` (each set's inputs), `masked_positions`, `masked_ids` and float32
        `masked_weights` `(batch, K, p)` (K = `num_sets`), int32 `padding_mask`
        `(batch, n)` and `reset` `(batch,)`.

    Raises:
        ValueError: a size or `num_sets` is not positive, or `num_sets * mask_rate` is
            not in (0, 1].
    """
    for argument, value in (("batch_size", batch_size),
                            ("max_sequence_length", max_sequence_length),
                            ("max_predictions_per_seq", max_predictions_per_seq),
                            ("num_sets", num_sets)):
        if not isinstance(value, (int, np.integer)) or value <= 0:
            raise ValueError(f"`{argument}` must be a positive integer. "
                             f"Received: {argument}={value}")
    if not 0 < mask_rate * num_sets <= 1:
        raise ValueError(
            f"`num_sets` * `mask_rate` must be in (0, 1]: the {num_sets} mask sets are "
            f"disjoint. Received: num_sets={num_sets}, mask_rate={mask_rate}")
    k, n, p = num_sets, max_sequence_length, max_predictions_per_seq
    signature = {
        "masked_token_ids": tf.TensorSpec((batch_size, k, n), tf.int32),
        "masked_positions": tf.TensorSpec((batch_size, k, p), tf.int32),
        "masked_ids": tf.TensorSpec((batch_size, k, p), tf.int32),
        "masked_weights": tf.TensorSpec((batch_size, k, p), tf.float32),
        "padding_mask": tf.TensorSpec((batch_size, n), tf.int32),
        "reset": tf.TensorSpec((batch_size,), tf.int32),
    }
    logging.info("Masked ELMo %s data: %d documents (paragraphs), %d tokens", name,
                 len(documents), sum(len(d) for d in documents))
    ds = tf.data.Dataset.from_generator(
        lambda: masked_elmo_batches(
            documents, batch_size, n, p, vocabulary_size, k, mask_rate, mask_token_rate,
            random_token_rate, seed, repeat, start_step, reverse_half),
        output_signature=signature)
    return ds.prefetch(tf.data.AUTOTUNE)
