import numpy as np

from tfeff.data import Vocabulary
from tfeff.training import evaluation


def test_target_ranks_equal_brute_force_cosine_ranks():
    rng = np.random.default_rng(0)
    table = rng.normal(size=(50, 6)).astype("float32")
    preds = rng.normal(size=(30, 6)).astype("float32")
    targets = rng.integers(2, 50, size=30)
    ranks = evaluation.target_ranks(preds, targets, table, chunk_size=7, block_size=4)
    unit = lambda a: a / np.linalg.norm(a, axis=-1, keepdims=True)  # noqa: E731
    sims = unit(preds.astype(np.float64)) @ unit(table.astype(np.float64)).T
    sims[:, :2] = -np.inf  # <pad> and <unk> never compete
    expected = (sims > sims[np.arange(30), targets][:, None]).sum(1)
    np.testing.assert_array_equal(ranks, expected)


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
