import numpy as np
import pytest

from tfeff.data import Vocabulary
from tfeff.testing.numerics import rounding_bound
from tfeff.training import evaluation


@pytest.mark.numerics
def test_target_ranks_equal_brute_force_cosine_ranks():
    rng = np.random.default_rng(0)
    table = rng.normal(size=(50, 6)).astype("float32")
    preds = rng.normal(size=(30, 6)).astype("float32")
    targets = rng.integers(2, 50, size=30)
    ranks = evaluation.target_ranks(preds, targets, table, chunk_size=7, block_size=4)
    unit = lambda a: a / np.linalg.norm(a, axis=-1, keepdims=True)  # noqa: E731
    sims = unit(preds.astype(np.float64)) @ unit(table.astype(np.float64)).T
    sims[:, :2] = -np.inf  # <pad> and <unk> never compete
    target_sims = sims[np.arange(30), targets][:, None]
    expected = (sims > target_sims).sum(1)
    np.testing.assert_array_equal(ranks, expected)
    # The ranks hold whatever the float32 kernels: no other cosine is within twice their
    # rounding (two unit vectors: sums of 6 squares, sqrt, divisions; a dot of 6: 28
    # roundings of 1) of the target's.
    gaps = np.abs(sims - target_sims)
    gaps[np.arange(30), targets] = np.inf
    assert gaps.min() > 2 * rounding_bound(28, 1.0)


def test_log_prob_ranks_equal_brute_force_and_return_target_log_probs():
    rng = np.random.default_rng(1)
    logits = rng.normal(size=(40, 25))
    log_probs = logits - np.log(np.exp(logits).sum(1, keepdims=True))
    targets = rng.integers(2, 25, size=40)
    ranks, lp = evaluation.log_prob_ranks(lambda rows: log_probs[rows], np.arange(40), targets,
                                          block_size=6)
    np.testing.assert_allclose(lp, log_probs[np.arange(40), targets])
    masked = log_probs.copy()
    masked[:, :2] = -np.inf
    np.testing.assert_array_equal(ranks, (masked > lp[:, None]).sum(1))
    assert evaluation.top_k_accuracy(ranks, [1])[1] == np.mean(ranks == 0)


def test_unigram_baseline_predicts_the_most_frequent_words():
    vocab = Vocabulary(["<pad>", "<unk>", "<s>", "</s>", "a", "b", "c"], [0, 0, 9, 9, 7, 5, 1])
    # Ranks by count: <s> 0, </s> 1, a 2, b 3, c 4 (ties by id).
    acc = evaluation.unigram_top_k_accuracy([2, 4, 5, 6], vocab, [1, 3, 5])
    assert acc == {1: 0.25, 3: 0.5, 5: 1.0}


def test_non_finite_outputs_are_an_error_never_a_perfect_score():
    import pytest

    from tfeff.training.errors import NonFiniteOutputError

    rng = np.random.default_rng(2)
    table = rng.normal(size=(20, 4)).astype("float32")
    preds = rng.normal(size=(6, 4)).astype("float32")
    targets = rng.integers(2, 20, size=6)
    preds[3, 1] = np.nan  # a NaN cosine compares false with everything: rank 0
    with pytest.raises(NonFiniteOutputError, match=r"predicted vectors hold NaN/Inf \(1 of 24"):
        evaluation.target_ranks(preds, targets, table)
    preds[3, 1] = np.inf
    with pytest.raises(NonFiniteOutputError, match="predicted vectors"):
        evaluation.target_ranks(preds, targets, table)

    log_probs = np.log(rng.dirichlet(np.ones(20), size=6))
    log_probs[:, 5] = -np.inf  # a class of probability 0 is a log-probability
    ranks, _ = evaluation.log_prob_ranks(lambda rows: log_probs[rows], np.arange(6), targets)
    assert (ranks > 0).any()
    log_probs[2] = np.nan
    with pytest.raises(NonFiniteOutputError, match=r"log-probabilities hold NaN/Inf \(20 of"):
        evaluation.log_prob_ranks(lambda rows: log_probs[rows], np.arange(6), targets)

    evaluation.check_finite_results({"mlm_loss": 2.5, "top_k": {"1": 0.3}, "median_rank": None})
    with pytest.raises(NonFiniteOutputError, match=r"mlm_loss = nan \(eval.mlm_loss\)"):
        evaluation.check_finite_results({"masked_tokens": 4, "mlm_loss": float("nan")}, "eval")
    with pytest.raises(NonFiniteOutputError, match=r"1 = inf \(eval.top_k.1\)"):
        evaluation.check_finite_results({"top_k": {"1": float("inf")}}, "eval")


def test_unigram_ranks_and_log_probs_golden():
    vocab = Vocabulary(["<pad>", "<unk>", "<s>", "</s>", "a", "b", "c"], [0, 0, 9, 9, 7, 5, 1])
    # Ranks by count: <s> 0, </s> 1, a 2, b 3, c 4, then <pad>, <unk> (never predicted).
    np.testing.assert_array_equal(evaluation.unigram_ranks([4, 6, 2, 5], vocab), [2, 4, 0, 3])
    log_probs = evaluation.unigram_log_probs([3, 0, 1, 1, 0], never_targets=(0,))
    # Add-one: 4, 1, 2, 2, 1 -> 0 for id 0; the rest over 6.
    np.testing.assert_allclose(np.exp(log_probs), [0, 1 / 6, 2 / 6, 2 / 6, 1 / 6])


def test_collect_predictions_scores_the_first_targets_and_counts_them_all():
    """The same model and data read whole and cut at `max_targets`: the cut run scores the
    first targets of the whole run and counts as many targets in all."""
    import tensorflow as tf

    from tfeff.models import ElmoBackbone
    from tfeff.models import ElmoLM

    rng = np.random.default_rng(0)
    ids = rng.integers(4, 30, size=(12, 9)).astype(np.int32)
    ids[:, 0] = 2
    ids[:, -1] = 3
    ids[3, 5:] = 0  # a shorter row
    ids[5, 2] = 1  # an <unk> target, left out
    dataset = tf.data.Dataset.from_tensor_slices(ids).batch(4)
    model = ElmoLM(ElmoBackbone(30, token_embedding_dim=8, input_embedding="trainable",
                                num_layers=1, units=8, projection_dim=4, dropout_rate=0.0),
                   output_layer="full")
    whole, whole_ids, whole_total = evaluation.collect_predictions(model, dataset, 10_000)
    cut, cut_ids, cut_total = evaluation.collect_predictions(model, dataset, 25)
    # 8 targets per row and direction; the short row loses the 4 targets of each
    # direction predicted at its padding, the <unk> one in each direction.
    assert whole_total == len(whole_ids) == 2 * 12 * 8 - 8 - 2
    assert cut_total == whole_total and len(cut_ids) == 25
    np.testing.assert_array_equal(cut_ids, whole_ids[:25])
    np.testing.assert_array_equal(cut, whole[:25])
    # The first batch's targets alternate between the directions: a cut inside it keeps
    # both (forward: ids[:4, 1:], backward: ids[:4, :-1], row by row).
    first = ids[:4]
    forward = first[:, 1:][first[:, 1:] >= 2]
    backward = first[:, :-1][(first[:, :-1] >= 2) & (first[:, 1:] > 0)]
    np.testing.assert_array_equal(cut_ids[0:20:2], forward[:10])
    np.testing.assert_array_equal(cut_ids[1:20:2], backward[:10])
