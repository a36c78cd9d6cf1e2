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


# A benchmark at its tiny preset (about 20 s): `make test-slow`.
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
        [sys.executable, "-m", "benchmarks.alone_reconstruct", "--preset", "tiny",
         "--vectors", str(vec), "--similarity", str(sim), "--output_dir", str(results)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.load(open(results / "alone_reconstruct.json"))
    table = open(results / "alone_reconstruct.md").read()
    assert table in run.stdout
    assert result["num_words"] == len(words) and result["dim"] == matrix.shape[1]
    # 400 words: ceil(400 / 256) = 2 minibatches an epoch, the tiny preset's 375 epochs.
    assert (result["steps_per_epoch"], result["steps"]) == (2, 750)
    assert "an epoch is ceil(400 / 256) = 2 minibatches; 375 epochs = 750 steps" in table
    assert "small.vec: its first 400 words" in table
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
        assert large["spearman_pairs"]["mean"] > 0.9 > small["spearman_pairs"]["mean"], (
            small, large)
        assert large["l2_loss"]["mean"] < 0.2 * small["l2_loss"]["mean"], (small, large)
        assert abs(large["spearman_similarity"]["sim.txt"]["mean"]
                   - result["similarity"]["sim.txt"]["original"]) < 0.1
        assert f"| {filter_type} | trained | 512 | {large['parameters']:,} |" in table


def test_alone_page_shows_the_computed_parameter_table():
    parameters = import_module("benchmarks.alone_parameters")
    table = parameters.markdown()
    assert "| WMT En-De, Takase & Kobayashi (2020) | 37,000 | 512 | 512 | 4096 | 4,194,816 | " \
           "18,944,000 | 0.22 |" in table
    page = open(os.path.join(REPO, "docs", "papers", "alone.md"), encoding="utf-8").read()
    assert table in page, ("docs/papers/alone.md's parameter table is stale: run "
                           "python -m benchmarks.alone_parameters")


# The reconstruction protocol of §3.1 ------------------------------------------------


def _reconstruct():
    return import_module("benchmarks.alone_reconstruct")


def test_paper_preset_is_the_protocol_of_section_3_1():
    reconstruct = _reconstruct()
    paper = reconstruct.PRESETS["paper"]
    assert paper["intermediate_dims"] == [600, 1200, 1800, 2400]
    assert paper["epochs"] == 1000 and paper["seeds"] == 5 and paper["max_words"] == 5000
    assert paper["filter_types"] == ["binary", "real"]
    assert paper["base_modes"] == ["trained", "fixed"]  # Figure 3's "Fix o"
    assert paper["table"] == "english"  # the stand-in when no GloVe is given
    assert (reconstruct.BATCH_SIZE, reconstruct.LEARNING_RATE) == (256, 1e-3)
    # An epoch is ceil(|V| / 256) minibatches: 20 for 5,000 words (5,120 draws, at least
    # the vocabulary), so 1,000 epochs are 20,000 steps.
    assert reconstruct.steps_per_epoch(5000) == 20
    assert paper["epochs"] * reconstruct.steps_per_epoch(paper["max_words"]) == 20_000
    assert reconstruct.steps_per_epoch(256) == 1 and reconstruct.steps_per_epoch(257) == 2
    # Every preset runs the same procedure at other sizes, with the paper's filters.
    for preset in reconstruct.PRESETS.values():
        assert set(preset) == set(paper)
    adam = reconstruct.torch_adam()()
    assert (float(adam.learning_rate), adam.beta_1, adam.beta_2, adam.epsilon) == (
        pytest.approx(1e-3), 0.9, 0.999, 1e-8)


def test_parameter_counts_are_the_papers():
    """§3.1: 0.4M, 0.7M, 1.1M and 1.4M parameters for D_inter 600 ... 2400 with D_o = D_e =
    300: Table 1's D_o + D_inter (D_o + D_e), no biases; Fix o trains all but o."""
    from tfeff.layers import AloneEmbedding

    reconstruct = _reconstruct()
    for intermediate_dim, millions in reconstruct.PAPER_PARAMETERS.items():
        layer = AloneEmbedding(5000, 300, 300, intermediate_dim, seed=0)
        layer.build()
        expected = 300 + intermediate_dim * (300 + 300)
        assert layer.count_params() == expected
        assert reconstruct.paper_parameters(300, intermediate_dim, 300) == expected
        assert round(expected / 1e6, 1) == millions
        fixed = AloneEmbedding(5000, 300, 300, intermediate_dim, seed=0, train_base=False)
        fixed.build()
        assert sum(int(np.prod(v.shape)) for v in fixed.trainable_variables) == \
            reconstruct.paper_parameters(300, intermediate_dim, 300, train_base=False) == \
            expected - 300


def _torch_adam_reference(gradients, parameter, lr=1e-3, b1=0.9, b2=0.999, eps=1e-8):
    """torch.optim.Adam's update with its defaults, in float64."""
    p, m, v = parameter.astype(np.float64), 0.0, 0.0
    for t, g in enumerate(gradients, start=1):
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        p = p - lr / (1 - b1 ** t) * m / (np.sqrt(v) / np.sqrt(1 - b2 ** t) + eps)
    return p


def test_torch_adam_is_pytorchs_update_not_keras():
    import keras

    reconstruct = _reconstruct()
    rng = np.random.default_rng(0)
    start = rng.normal(size=6).astype(np.float32)
    # Gradients near epsilon's scale, where the two places of epsilon differ.
    gradients = [(rng.normal(size=6) * 10.0 ** rng.integers(-9, 0, size=6)).astype(np.float32)
                 for _ in range(5)]

    def run(optimizer):
        variable = keras.Variable(start)
        for g in gradients:
            optimizer.apply_gradients([(keras.ops.convert_to_tensor(g), variable)])
        return np.asarray(variable)

    expected = _torch_adam_reference(gradients, start)
    np.testing.assert_allclose(run(reconstruct.torch_adam()()), expected, rtol=1e-6, atol=1e-9)
    # Keras' Adam, even with eps 1e-8, adds eps to the uncorrected sqrt(v): at step 1
    # a gradient of 1e-8 moves the weight by 0.5 lr in PyTorch, by 0.03 lr in Keras.
    tiny = np.full(1, 1e-8, np.float32)
    moved = {}
    for name, optimizer in (("torch", reconstruct.torch_adam()()),
                            ("keras", keras.optimizers.Adam(1e-3, epsilon=1e-8))):
        variable = keras.Variable(np.zeros(1, np.float32))
        optimizer.apply_gradients([(keras.ops.convert_to_tensor(tiny), variable)])
        moved[name] = -float(np.asarray(variable)[0]) / 1e-3
    assert moved["torch"] == pytest.approx(0.5, rel=1e-4)
    assert moved["keras"] == pytest.approx(np.sqrt(1e-3) / (np.sqrt(1e-3) + 1), rel=1e-4)
    torch = pytest.importorskip("torch")
    parameter = torch.nn.Parameter(torch.tensor(start))
    optimizer = torch.optim.Adam([parameter])  # PyTorch's defaults, as §3.1
    for g in gradients:
        parameter.grad = torch.tensor(g)
        optimizer.step()
    np.testing.assert_allclose(run(reconstruct.torch_adam()()), parameter.detach().numpy(),
                               rtol=1e-6, atol=1e-9)


def test_glove_text_format_and_counts(tmp_path):
    reconstruct = _reconstruct()
    glove = tmp_path / "glove.tiny.3d.txt"
    glove.write_text("the 0.1 0.2 0.3\n, 1 2 3\nof -1 0 1.5\n. . . 4 5 6\ncat 7 8 9\n"
                     "the 9 9 9\n", encoding="utf-8")
    assert reconstruct.table_format(str(glove)) == "glove"
    words, matrix, description = reconstruct.read_table(str(glove), max_words=3)
    assert words == ["the", ",", "of"]
    np.testing.assert_array_equal(matrix, np.array([[0.1, 0.2, 0.3], [1, 2, 3], [-1, 0, 1.5]],
                                                   np.float32))
    assert description == ("glove.tiny.3d.txt (GloVe text format): its first 3 rows (GloVe "
                           "lists words by frequency)")
    words, matrix, _ = reconstruct.read_table(str(glove))
    assert words == ["the", ",", "of", ". . .", "cat"]  # a word with spaces; "the" once
    np.testing.assert_array_equal(matrix[0], np.array([0.1, 0.2, 0.3], np.float32))
    # --counts: the most frequent words that have a vector, in the counts' order.
    counts = tmp_path / "counts.txt"
    counts.write_text("of 50\ndog 40\nthe 100\ncat 10\n,\t20\n", encoding="utf-8")
    assert reconstruct.read_counts(str(counts)) == ["the", "of", "dog", ",", "cat"]
    words, matrix, description = reconstruct.read_table(str(glove), max_words=3,
                                                        counts=str(counts))
    assert words == ["the", "of", ","]
    np.testing.assert_array_equal(matrix[1], np.array([-1, 0, 1.5], np.float32))
    assert "(1 higher-ranked words without one passed over)" in description
    # A .vec file (its `count dim` header) is not taken for GloVe.
    vec = tmp_path / "t.vec"
    vec.write_text("2 3\nthe 1 2 3\ncat 4 5 6\n", encoding="utf-8")
    assert reconstruct.table_format(str(vec)) == "vec"
    assert reconstruct.read_table(str(vec))[0] == ["the", "cat"]
    bad = tmp_path / "bad.txt"
    bad.write_text("a 1 2 3\nb 1 2\n", encoding="utf-8")
    with pytest.raises(reconstruct.TableError, match=r"bad.txt:2: expected a word and 3 numbers"):
        reconstruct.read_glove(str(bad))
    nan = tmp_path / "nan.txt"
    nan.write_text("a 1 2 3\nb 1 nan 2\n", encoding="utf-8")
    with pytest.raises(reconstruct.TableError, match=r"nan.txt:2: the vector of 'b'"):
        reconstruct.read_glove(str(nan))


def test_seeds_are_averaged_with_their_spread(tmp_path, monkeypatch):
    """`run` reports the mean and the sample standard deviation over the seeds of each
    setting: checked against a hand computation, with a stub fit per seed."""
    reconstruct = _reconstruct()
    assert reconstruct.mean_and_spread([0.5, 0.7, 0.9]) == pytest.approx(
        {"mean": 0.7, "sd": 0.2})  # deviations -0.2, 0, 0.2: sqrt(0.08 / 2)
    assert reconstruct.mean_and_spread([0.3]) == {"mean": 0.3, "sd": 0.0}
    rng = np.random.default_rng(0)
    words = [f"w{i}" for i in range(40)]
    matrix = rng.normal(size=(40, 8)).astype(np.float32)
    glove = tmp_path / "g.txt"
    glove.write_text("".join(w + " " + " ".join(map(str, row)) + "\n"
                             for w, row in zip(words, matrix)), encoding="utf-8")
    noise = {seed: rng.normal(size=matrix.shape).astype(np.float32) * (seed - 9)
             for seed in (10, 11, 12)}
    calls = []

    def fake_fit(table, filter_type, intermediate_dim, base_dim, train_base, epochs, seed):
        calls.append((filter_type, intermediate_dim, train_base, epochs, seed))
        return reconstruct.Fit(table + noise[seed], float(seed), 99, 0, 0.0, None)

    monkeypatch.setattr(reconstruct, "fit_alone", fake_fit)
    result = reconstruct.run(vectors=str(glove), filter_types=["real"],
                             base_modes=["trained", "fixed"], intermediate_dims=[8], epochs=7,
                             seeds=3, first_seed=10, num_pairs=300, max_words=0)
    assert calls == [("real", 8, True, 7, s) for s in (10, 11, 12)] + \
        [("real", 8, False, 7, s) for s in (10, 11, 12)]
    entry = result["runs"][0]
    assert entry["l2_loss"] == {"mean": 11.0, "sd": 1.0, "n": 3}  # losses 10, 11, 12
    left, right = reconstruct.sample_pairs(40, 300, 10)
    original = reconstruct.pair_cosines(matrix, left, right)
    per_seed = [scipy.stats.spearmanr(original, reconstruct.pair_cosines(
        matrix + noise[s], left, right)).statistic for s in (10, 11, 12)]
    assert [s["spearman_pairs"] for s in entry["per_seed"]] == pytest.approx(per_seed)
    assert entry["spearman_pairs"]["mean"] == pytest.approx(np.mean(per_seed))
    assert entry["spearman_pairs"]["sd"] == pytest.approx(np.std(per_seed, ddof=1))
    assert result["seeds"] == [10, 11, 12] and result["steps"] == 7  # ceil(40 / 256) = 1
    table = reconstruct.markdown(result)
    assert "| real | fixed | 8 | 99 | 11.0000 ± 1.0000 |" in table
    assert "* Seeds: 3 (10, 11, 12;" in table and "eps 1e-8), no schedule." in table


def test_fix_o_leaves_the_base_embedding_as_initialized():
    reconstruct = _reconstruct()
    from tfeff.layers import AloneEmbedding

    matrix = np.random.default_rng(0).normal(size=(300, 16)).astype(np.float32)
    initial = AloneEmbedding(300, 16, 16, 32, filter_type="real", seed=3)
    initial.build()
    for train_base in (False, True):
        fit = reconstruct.fit_alone(matrix, "real", 32, 0, train_base, epochs=3, seed=3)
        assert fit.steps == 3 * 2 and fit.parameters == (16 if train_base else 0) + 32 * 32
        moved = np.abs(np.asarray(fit.layer.base) - np.asarray(initial.base)).max()
        assert (moved > 0) == train_base, moved
        assert np.abs(np.asarray(fit.layer.output_kernel)
                      - np.asarray(initial.output_kernel)).max() > 0


def test_english_stand_in_without_wordnet_says_how_to_get_it(tmp_path):
    env = dict(os.environ, PYTHONPATH=REPO, TF_CPP_MIN_LOG_LEVEL="3")
    run = subprocess.run(
        [sys.executable, "-m", "benchmarks.alone_reconstruct", "--preset", "paper",
         "--wordnet_dir", str(tmp_path / "no_wordnet"), "--output_dir", str(tmp_path)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 1, run.stderr[-3000:]
    assert "Traceback" not in run.stderr
    assert "apt-get install wordnet-base" in run.stderr
    assert "--vectors" in run.stderr  # or GloVe itself
