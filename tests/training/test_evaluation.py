import numpy as np
import pytest

from tests.numerics import rounding_bound
from tfeff.data import Vocabulary
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
