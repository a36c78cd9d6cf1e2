"""What the masked-LM families share (`Bert`, `MaskedElmo`): their corpus and BERT-style
WordPiece vocabulary, example batches, and the held-out evaluation's tally and summary."""

import numpy as np
import tensorflow as tf

from tfeff import data as data_lib
from tfeff.data import vocabulary as vocabulary_lib
from tfeff.data.mlm_dataset import check_bert_vocabulary
from tfeff.training import model_directory
from tfeff.training.families.base import DataArtifacts
from tfeff.training.families.base import Family
from tfeff.training.families.base import below_baseline_line
from tfeff.training.model_directory import VOCABULARY_FILE
from tfeff.training.model_directory import file_path


def masked_lm_artifacts(config, model_dir):
    """The corpus and BERT WordPiece vocabulary (learned if missing, checked): `DataArtifacts`."""
    d = config.data
    train_files, heldout_files = model_directory.corpus_files(d, model_dir)
    vocabulary_path = file_path(model_dir, VOCABULARY_FILE)
    learned = not tf.io.gfile.exists(vocabulary_path)
    if learned:
        data_lib.learn_bert_vocabulary(
            train_files, d.wordpiece_vocabulary_size, vocabulary_path, lower_case=d.lower_case,
            on_invalid_utf8=d.on_invalid_utf8, max_words_in_memory=d.max_words_in_memory)
    artifacts = DataArtifacts(train_files, heldout_files, vocabulary_path)
    check_bert_vocabulary(artifacts.vocabulary)
    data_lib.check_unknown_rate(train_files, vocabulary_path, "bert", lower_case=d.lower_case,
                                on_invalid_utf8=d.on_invalid_utf8, learned=learned)
    return artifacts


def masked_lm_example_batch(vocabulary_size, batch_size=2, length=9, seed=0, num_sets=None,
                            predictions=2, bert=False):
    """A batch like `tfeff.data.mlm_dataset`'s (`bert`) or `masked_elmo_dataset`'s
    (`num_sets` mask sets): `[CLS]` ... `[SEP]` rows of random WordPiece ids (the last
    shorter, right-padded) with `predictions` masked positions each."""
    rng = np.random.default_rng(seed)
    first = vocabulary_lib.MASK_ID + 1
    ids = rng.integers(first, max(first + 1, min(vocabulary_size, 5000)),
                       size=(batch_size, length)).astype(np.int32)
    ids[:, 0] = vocabulary_lib.CLS_ID
    lengths = np.full(batch_size, length)
    lengths[-1] = min(length, max(predictions + 2, length - 3))
    ids[np.arange(batch_size), lengths - 1] = vocabulary_lib.SEP_ID
    padding_mask = np.arange(length)[None, :] < lengths[:, None]
    ids[~padding_mask] = vocabulary_lib.PAD_ID

    def one_set():
        # Distinct positions between the boundaries of each row.
        positions = np.stack([np.sort(rng.choice(np.arange(1, n - 1), predictions, False))
                              for n in lengths]).astype(np.int32)
        masked = ids.copy()
        np.put_along_axis(masked, positions, vocabulary_lib.MASK_ID, axis=1)
        return masked, positions, np.take_along_axis(ids, positions, axis=1)

    weights = np.ones((batch_size, predictions), np.float32)
    if bert:
        masked, positions, targets = one_set()
        return {"token_ids": masked, "padding_mask": padding_mask.astype(np.int32),
                "segment_ids": np.zeros_like(ids), "masked_positions": positions,
                "masked_ids": targets, "masked_weights": weights}
    sets = [one_set() for _ in range(num_sets or 1)]
    masked, positions, targets = (np.stack(parts, axis=1) for parts in zip(*sets))
    return {"masked_token_ids": masked, "masked_positions": positions, "masked_ids": targets,
            "masked_weights": np.stack([weights] * len(sets), axis=1),
            "padding_mask": padding_mask.astype(np.int32),
            "reset": np.ones(batch_size, np.int32)}


# Ids never masked (`<unk>` included), so the unigram baseline gives them probability 0.
MASKED_LM_NEVER_TARGETS = (vocabulary_lib.PAD_ID, vocabulary_lib.UNK_ID, vocabulary_lib.CLS_ID,
                           vocabulary_lib.SEP_ID, vocabulary_lib.MASK_ID)


class MaskedLMTally:
    """Sums a masked-LM evaluation (and the unigram baseline's) over batches."""

    def __init__(self, unigram=None):
        self.unigram = unigram
        self.guess = int(np.argmax(unigram)) if unigram is not None else None
        self.loss = self.unigram_loss = 0.0
        self.correct = self.unigram_correct = 0
        self.count, self.batches = 0.0, 0
        self.complete = True  # `first_batches` says

    def add(self, loss_sum, ids, weights, predicted=None):
        """One batch (NumPy); `predicted`: the argmax ids, None for a continuous output."""
        hit = weights > 0
        self.batches += 1
        self.loss += float(loss_sum)
        self.count += float(weights.sum())
        if predicted is not None:
            self.correct += int(((predicted == ids) & hit).sum())
        if self.unigram is not None:
            self.unigram_loss -= float((np.where(hit, self.unigram[ids], 0.0) * weights).sum())
            self.unigram_correct += int(((ids == self.guess) & hit).sum())

    def results(self, vocabulary_size, softmax=True):
        """The results dict (`masked_lm_summary`'s keys)."""
        count = max(self.count, 1.0)
        out = {"masked_tokens": int(self.count), "mlm_loss": self.loss / count,
               "batches": self.batches, "complete": bool(self.complete),
               "vocabulary_size": int(vocabulary_size), "softmax": bool(softmax)}
        if softmax:
            out.update(perplexity=float(np.exp(self.loss / count)),
                       accuracy=self.correct / count)
            if self.unigram is not None:
                out.update(unigram_perplexity=float(np.exp(self.unigram_loss / count)),
                           unigram_accuracy=self.unigram_correct / count)
        return out


def first_batches(dataset, count, tally):
    """The first `count` batches of `dataset` (0: all); `tally.complete` says if that was all."""
    tally.complete = True
    if not count:
        yield from dataset
        return
    for index, batch in enumerate(dataset.take(count + 1)):
        if index == count:
            tally.complete = False
            return
        yield batch


def masked_lm_summary(results):
    """The held-out lines of `MaskedLMTally.results`, beside the unigram baseline's."""
    batches = results.get("batches")
    if batches is None:
        scope = "held-out"
    elif results.get("complete"):
        scope = f"all {batches} held-out batches"
    else:
        scope = f"the first {batches} held-out batches (eval.max_batches; there are more)"
    lines = [f"held-out: {results['masked_tokens']:,} masked tokens of {scope}, <unk> never "
             f"masked; vocabulary {results.get('vocabulary_size', 0):,} WordPieces"]
    if not results.get("softmax", True):
        return lines + [f"held-out masked loss {results['mlm_loss']:.4f} (cosine distance "
                        "to the target's fastText vector; no baseline)"]
    below = []
    line = f"held-out masked-LM loss {results['mlm_loss']:.4f} (nats)"
    if results.get("perplexity") is not None:
        line += f", perplexity {results['perplexity']:.2f}"
        if results.get("unigram_perplexity") is not None:
            line += f" (unigram baseline {results['unigram_perplexity']:.2f})"
            if results["perplexity"] > results["unigram_perplexity"]:
                below.append("perplexity")
    if results.get("accuracy") is not None:
        line += f", accuracy {results['accuracy']:.4f}"
        if results.get("unigram_accuracy") is not None:
            line += f" (unigram baseline {results['unigram_accuracy']:.4f})"
            if results["accuracy"] < results["unigram_accuracy"]:
                below.append("accuracy")
    return lines + [line] + below_baseline_line(below)


class MaskedLMFamily(Family):
    """A `Family` of masked language models: their summary and WordPiece embedder."""

    def eval_summary(self, results):
        return masked_lm_summary(results)

    def embedder_options(self, config, model_dir):
        options, extra_files = super().embedder_options(config, model_dir)
        options.update(tokenization="bert", lower_case=config.data.lower_case)
        return options, extra_files
