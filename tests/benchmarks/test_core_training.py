"""benchmarks/core_training.py: BERT's masking in NumPy, the batches both runs share, and the
time-to-loss reading of a curve."""

import math

import numpy as np
import pytest

from tfeff.testing.numerics import assert_close

from benchmarks import core_training

SPECIAL = {"pad": 0, "unk": 1, "cls": 2, "sep": 3, "mask": 4}


def windows(rng, rows=400, n=32, vocabulary=300):
    """`[CLS] tokens [SEP]` right-padded windows of random lengths (ids 5 and up)."""
    ids = np.zeros((rows, n), np.int32)
    lengths = rng.integers(3, n + 1, rows)
    for r, length in enumerate(lengths):
        ids[r, :length] = np.r_[2, rng.integers(5, vocabulary, length - 2), 3]
    return ids, lengths


def test_masking_picks_ceil_15_percent_of_the_ordinary_tokens_80_10_10():
    rng = np.random.default_rng(0)
    ids, lengths = windows(rng)
    x = core_training.mask_windows(ids, np.random.default_rng(1), 5, 300, SPECIAL)
    ordinary = lengths - 2
    counts = x["masked_weights"].sum(1)
    np.testing.assert_array_equal(counts, np.minimum(5, np.ceil(0.15 * ordinary)))
    np.testing.assert_array_equal(x["padding_mask"], ids != 0)
    changed = kept = masked = 0
    for r in range(len(ids)):
        k = int(counts[r])
        positions = x["masked_positions"][r, :k]
        assert len(set(positions)) == k and all(1 <= p <= lengths[r] - 2 for p in positions)
        np.testing.assert_array_equal(x["masked_ids"][r, :k], ids[r, positions])
        assert not x["masked_ids"][r, k:].any() and not x["masked_positions"][r, k:].any()
        others = np.setdiff1d(np.arange(ids.shape[1]), positions)
        np.testing.assert_array_equal(x["token_ids"][r, others], ids[r, others])
        new = x["token_ids"][r, positions]
        masked += int((new == 4).sum())
        kept += int((new == ids[r, positions]).sum())
        changed += int(((new != 4) & (new != ids[r, positions])).sum())
    total = counts.sum()
    # 80% [MASK]; 10% random (which keeps the token 1 time in 300); 10% kept.
    assert abs(masked / total - 0.8) < 0.04 and abs(changed / total - 0.1) < 0.03
    assert abs(kept / total - 0.1) < 0.03


def test_batches_from_a_step_are_the_batches_of_a_run_from_zero():
    rng = np.random.default_rng(0)
    ids, _ = windows(rng, rows=50)
    arrays = {"train": ids, "max_predictions_per_seq": 5, "vocabulary_size": 300,
              "special_ids": SPECIAL}
    whole = core_training.batches(arrays, 8, seed=3)
    first = [next(whole)[0] for _ in range(9)]  # 6 per epoch: crosses into a new order
    later = core_training.batches(arrays, 8, seed=3, start_step=5)
    for step in range(5, 9):
        batch = next(later)[0]
        for key in batch:
            np.testing.assert_array_equal(batch[key], first[step][key])
    epoch = np.concatenate([b["masked_ids"] for b in first[:6]])
    assert not np.array_equal(first[0]["token_ids"], first[6]["token_ids"])
    assert epoch.shape == (48, 5)


def test_first_reach_interpolates_between_evaluations():
    points = [{"seconds": 10, "loss": 6.0}, {"seconds": 20, "loss": 5.0},
              {"seconds": 30, "loss": 4.0}, {"seconds": 40, "loss": 4.5}]
    assert core_training.first_reach(points, 4.5) == 25
    assert core_training.first_reach(points, 6.5) == 10
    assert core_training.first_reach(points, 3.9) is None
    assert math.isclose(core_training.first_reach(points, 5.9), 11)


@pytest.mark.numerics
def test_heldout_loss_is_the_mean_over_every_prediction_and_scores_the_merged_model():
    from tfeff.convert import merge_relaxed_bert
    from tfeff.models import Bert
    from tfeff.models import BertBackbone
    from tfeff.models.relaxed_merge import rounding_counts

    rng = np.random.default_rng(0)
    ids, _ = windows(rng, rows=7, n=16, vocabulary=40)
    x = core_training.mask_windows(ids, rng, 3, 40, SPECIAL)
    relaxed = Bert(BertBackbone(40, num_layers=1, hidden_dim=16, num_heads=2,
                                intermediate_dim=32, max_sequence_length=16,
                                relaxed={"num_anchors": 3, "ffn_rank": 4}, seed=0))
    relaxed.build()
    for w in relaxed.weights:  # away from the initializers' zeros and ones
        w.assign(w + rng.normal(0, 0.3, w.shape).astype("float32"))
    standard = merge_relaxed_bert(relaxed)
    raw = np.asarray(standard(x)["mlm_logits"], np.float64)
    logits = raw - raw.max(-1, keepdims=True)
    log_p = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    ce = -np.take_along_axis(log_p, x["masked_ids"][..., None], -1)[..., 0]
    expected = (ce * x["masked_weights"]).sum() / x["masked_weights"].sum()
    # Batches of 3 over 7 windows (the last one short), summed before dividing.
    merged = core_training.heldout_evaluator(standard, x, 3)()
    exact = core_training.heldout_evaluator(relaxed, x, 3, exact_attention=True)()
    approximate = core_training.heldout_evaluator(relaxed, x, 3)()
    # Against the float64 loss of the same logits: the logits in other batches (the longest
    # path, rounding_counts), a float32 log-softmax over 40 (~50), the mean of up to 21
    # targets; all of the logits' size.
    n = rounding_counts(relaxed, x["token_ids"].shape[1])["mlm_logits"] + 50 + 22
    assert_close(merged, expected, n=n, scale=np.abs(raw).max(), err_msg="merged")
    assert_close(exact, expected, n=n, scale=np.abs(raw).max(), err_msg="exact attention")
    assert abs(approximate - expected) > 1e-3  # anchor attention is an approximation
