"""Every shipped `configs/demo_*.yaml` runs end to end through the binaries.

`tfeff-pretrain` (a few steps on a small corpus, via `--override`; ELMo-C's demo
unchanged), then `tfeff-export`, then the export is loaded in a fresh process that
never imports tfeff and embeds a sentence. Each step must exit 0 and print its
family's summary. The runs are tests/demo_runs.py's, shared with the rest of the
suite (the full ELMo-C run is `trained_dir`).
"""

import json
import os
import re

import numpy as np
import pytest

from tests.demo_runs import CONFIGS, FULL, LOG_EVERY, TERMINAL, config as _config, steps
from tests.export.embedder_reference import run_fresh

SENTENCE = "the small dog saw a cat ."


@pytest.fixture(scope="module")
def runs(demo_runs, tmp_path_factory):
    demo_runs.start(CONFIGS)
    results = {name: demo_runs.get(name) for name in CONFIGS}
    exported = [n for n in CONFIGS if results[n]["export_run"][0] == 0]
    loaded = run_fresh([results[n]["export"] for n in exported], [SENTENCE],
                       [SENTENCE.split()], tmp_path_factory.mktemp("fresh"))
    for name, out in zip(exported, loaded):
        results[name] = {**results[name], "loaded": out}
    return results


def test_every_demo_config_is_covered():
    assert len(CONFIGS) == 9, CONFIGS
    assert {_config(n)["family"] for n in CONFIGS} == {"elmo", "bert", "masked_elmo"}


def _summary_patterns(name):
    """Regexes that the finished run's stdout must match, by family and output layer."""
    config = _config(name)
    number = r"[0-9.]+"
    targets = config["eval"]["max_targets"] if name == FULL else 400
    done = [rf"finished at step {steps(name)}\b"]
    if config["family"] == "elmo":
        done += [rf"held-out top-{k} accuracy: {number} \(unigram baseline {number}\)"
                 for k in (1, 10)]
        if config["model"].get("output_layer", "continuous") == "continuous":
            return done + [rf"held-out median rank {number} \({targets} targets\)"]
        unit = "WordPiece tokens" if config["data"].get("tokenization") == "wordpiece" else \
            "words"
        return done + [rf"held-out perplexity {number} \({unit}; {targets} targets, median rank "]
    unigram = rf" \(unigram {number}\)" if config["family"] == "bert" else ""
    done.append(rf"held-out masked-LM loss {number}, perplexity {number}{unigram}, "
                rf"accuracy {number} \(\d+ masked tokens\)")
    if config.get("core", {}).get("coarse_steps"):
        done.append(r"CoRe switch at step 2 \(")
    return done


@pytest.mark.parametrize("name", CONFIGS)
def test_pretrain_exits_0_and_prints_its_summary(runs, name):
    rc, stdout, stderr = runs[name]["pretrain"]
    assert rc == 0, stderr[-3000:]
    for pattern in _summary_patterns(name):
        assert re.search(pattern, stdout), (pattern, stdout[-2000:])
    model_dir = runs[name]["model_dir"]
    for artifact in ("config.yaml", "vocabulary.txt", "eval.json"):
        assert os.path.exists(os.path.join(model_dir, artifact)), artifact
    assert not [f for f in os.listdir(model_dir) if ".tmp-" in f]


@pytest.mark.parametrize("name", CONFIGS)
def test_progress_is_a_bar_on_a_terminal_and_lines_in_a_log(runs, name):
    rc, stdout, stderr = runs[name]["pretrain"]
    assert rc == 0, stderr[-3000:]
    lines = re.findall(r"step (\d+)/(\d+): loss [0-9.]+, .*learning rate \S+, [0-9.]+ steps/s",
                       stderr)
    if name == TERMINAL:
        assert "\r" in stdout and "━" in stdout, stdout[:500]  # Keras' live bar
        assert not lines, stderr[-2000:]
        return
    assert "\r" not in stdout and "━" not in stdout, stdout[:500]
    # One line per log_every steps (the CoRe run counts its two phases' steps).
    every = _config(name)["train"]["log_every"] if name == FULL else LOG_EVERY
    total = steps(name)
    assert [int(s) for s, _ in lines] == list(range(every, total + 1, every)), lines
    assert {int(t) for _, t in lines} <= {total, 2}, lines


@pytest.mark.parametrize("name", CONFIGS)
def test_export_loads_without_tfeff_and_embeds(runs, name):
    rc, stdout, stderr = runs[name]["export_run"]
    assert rc == 0, stderr[-3000:]
    assert re.search(rf"exported step {steps(name)} to ", stdout), stdout
    meta = json.load(open(os.path.join(runs[name]["export"], "assets.extra",
                                       "embedder.json")))
    config = _config(name)
    model = config["model"]
    family = {"elmo": "elmo", "bert": "bert", "masked_elmo": "masked_elmo"}[config["family"]]
    assert meta["family"] == family
    dim = model["hidden_dim"] if family == "bert" else 2 * model["projection_dim"]
    out = runs[name]["loaded"]
    words = SENTENCE.split()
    assert out["layers"].shape == (1, model["num_layers"] + 1, len(words), dim)
    assert out["mask"].tolist() == [[True] * len(words)]
    assert [t.decode() for t in out["tokens"][0]] == words
    layers = out["layers"][0]
    assert np.isfinite(layers).all()
    assert (np.abs(layers).sum(axis=-1) > 0).all()  # every layer, every word
    # Pre-tokenized input gives the same vectors for the same words.
    np.testing.assert_allclose(out["t_layers"], out["layers"], rtol=1e-5, atol=1e-6)
