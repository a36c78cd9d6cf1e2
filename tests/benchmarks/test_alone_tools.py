from importlib import import_module
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import scipy.stats

from tests.conftest import REPO


def test_spearman_equals_scipy_with_ties():
    reconstruct = import_module("benchmarks.alone_reconstruct")
    rng = np.random.default_rng(0)
    for _ in range(5):
        a = rng.integers(0, 6, size=50).astype(float)  # many ties
        b = a + rng.normal(size=50)
        np.testing.assert_allclose(reconstruct.spearman(a, b),
                                   scipy.stats.spearmanr(a, b).statistic, rtol=1e-12)
    np.testing.assert_allclose(reconstruct.rank([3, 1, 3, 2]), scipy.stats.rankdata([3, 1, 3, 2]))


def test_similarity_files_parse_with_header_and_report_bad_lines(tmp_path):
    reconstruct = import_module("benchmarks.alone_reconstruct")
    good = tmp_path / "ws.csv"
    good.write_text("Word 1,Word 2,Human (mean)\nlove,sex,6.77\ntiger\tcat\t7.35\n")
    assert reconstruct.read_similarity(str(good)) == [("love", "sex", 6.77), ("tiger", "cat", 7.35)]
    bad = tmp_path / "bad.txt"
    bad.write_text("a b 1.0\nc d high\n")
    with pytest.raises(ValueError, match=r"bad.txt:2: the score 'high' is not a number"):
        reconstruct.read_similarity(str(bad))
    short = tmp_path / "short.txt"
    short.write_text("a b 1.0\nc d\n")
    with pytest.raises(ValueError, match=r"short.txt:2: expected `word1 word2 score`"):
        reconstruct.read_similarity(str(short))


# A benchmark at its tiny preset (31 s): `make test-slow`.
@pytest.mark.slow
def test_reconstruction_of_real_fasttext_vectors_at_ci_size(fasttext_model, tmp_path):
    """The tiny preset on a real fastText model's vectors (a .vec file)."""
    _, model = fasttext_model
    words = [w for w in model.get_words() if w.isalpha()][:400]
    matrix = np.stack([model.get_word_vector(w) for w in words])
    matrix -= matrix.mean(axis=0)  # centered, as the demo's table (raw cosines are all ~1)
    vec = tmp_path / "small.vec"
    with open(vec, "w", encoding="utf-8") as f:
        f.write(f"{len(words)} {matrix.shape[1]}\n")
        for w, row in zip(words, matrix):
            f.write(w + " " + " ".join(f"{x:.6f}" for x in row) + "\n")
    # A similarity file whose "human" scores follow the vectors' cosines, with
    # noise, plus one pair with an unknown word.
    rng = np.random.default_rng(0)
    pairs = rng.choice(len(words), size=(60, 2))
    pairs = pairs[pairs[:, 0] != pairs[:, 1]]
    sim = tmp_path / "sim.txt"
    with open(sim, "w", encoding="utf-8") as f:
        f.write("word1\tword2\tscore\n")
        for i, j in pairs:
            a, b = matrix[i], matrix[j]
            score = a @ b / np.linalg.norm(a) / np.linalg.norm(b) + rng.normal(scale=0.05)
            f.write(f"{words[i]}\t{words[j]}\t{10 * score:.3f}\n")
        f.write("zzzunknown\tcat\t5.0\n")

    results = tmp_path / "results"
    env = dict(os.environ, PYTHONPATH=REPO, TF_CPP_MIN_LOG_LEVEL="3")
    run = subprocess.run(
        [sys.executable, "-m", "benchmarks.alone_reconstruct", "--preset", "tiny", "--vectors", str(vec),
         "--similarity", str(sim), "--output_dir", str(results)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.load(open(results / "alone_reconstruct.json"))
    table = open(results / "alone_reconstruct.md").read()
    assert table in run.stdout
    assert result["num_words"] == len(words) and result["dim"] == matrix.shape[1]
    assert result["similarity"]["sim.txt"]["covered"] == len(pairs)
    assert result["similarity"]["sim.txt"]["pairs"] == len(pairs) + 1
    assert result["similarity"]["sim.txt"]["original"] > 0.8  # the scores follow the cosines
    runs = {(r["filter_type"], r["intermediate_dim"]): r for r in result["runs"]}
    assert sorted(runs) == [("binary", 16), ("binary", 512), ("real", 16), ("real", 512)]
    dim = matrix.shape[1]
    for filter_type in ("binary", "real"):
        small, large = runs[(filter_type, 16)], runs[(filter_type, 512)]
        assert large["parameters"] == dim + 512 * 2 * dim
        # A large FFN reconstructs the table: its cosines keep the original's order,
        # on the fixed pairs and on the similarity file, far better than a small FFN.
        assert large["spearman_pairs"] > 0.9 > small["spearman_pairs"], (small, large)
        assert large["l2_loss"] < 0.2 * small["l2_loss"], (small, large)
        assert abs(large["spearman_similarity"]["sim.txt"]
                   - result["similarity"]["sim.txt"]["original"]) < 0.1
        assert f"| {filter_type} | 512 | {large['parameters']:,} |" in table


def test_alone_page_shows_the_computed_parameter_table():
    parameters = import_module("benchmarks.alone_parameters")
    table = parameters.markdown()
    assert "| WMT En-De, Takase & Kobayashi (2020) | 37,000 | 512 | 512 | 4096 | 4,194,816 | " \
           "18,944,000 | 0.22 |" in table
    page = open(os.path.join(REPO, "docs", "papers", "alone.md"), encoding="utf-8").read()
    assert table in page, ("docs/papers/alone.md's parameter table is stale: run "
                           "python -m benchmarks.alone_parameters")
