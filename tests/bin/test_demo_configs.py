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

from tests.conftest import REPO
from tests.demo_runs import CONFIGS, FULL, LOG_EVERY, TERMINAL, config as _config, overrides, steps
from tests.export.embedder_reference import run_fresh
from tests.test_docs import demo_record
from tfeff.training import FAMILIES
from tfeff.training import get_family

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
    """Each registered family ships at least one demo, and every demo is a family's."""
    assert {_config(n)["family"] for n in CONFIGS} == set(FAMILIES), CONFIGS


@pytest.mark.parametrize("name", CONFIGS)
def test_pretrain_exits_0_and_prints_its_summary(runs, name):
    """The binary prints the family's own summary (`Family.eval_summary`) of the
    held-out results it wrote to `eval.json`."""
    rc, stdout, stderr = runs[name]["pretrain"]
    assert rc == 0, stderr[-3000:]
    model_dir = runs[name]["model_dir"]
    for artifact in ("config.yaml", "vocabulary.txt", "eval.json"):
        assert os.path.exists(os.path.join(model_dir, artifact)), artifact
    with open(os.path.join(model_dir, "eval.json")) as f:
        held_out = get_family(_config(name)["family"]).eval_summary(json.load(f))
    lines = stdout.splitlines()
    assert held_out and all(line.startswith("held-out") for line in held_out), held_out
    start = lines.index(f"finished at step {steps(name)}")
    assert lines[start + 1:start + 1 + len(held_out)] == held_out, stdout[-2000:]
    # Said once (stdout), and stderr holds tfeff's lines and real warnings only: none of
    # the libraries' chatter, no warning tfeff's own calls cause.
    assert stdout.count(held_out[0]) == 1 and held_out[0] not in stderr
    assert not re.search(r"\.cc:\d+\]|absl::InitializeLog|shuffle=True|UserWarning|"
                         r"Sharding callback|is deprecated|GeneratorDataset", stderr), stderr
    with open(os.path.join(model_dir, "eval.json")) as f:
        results = json.load(f)
    with open(os.path.join(model_dir, "vocabulary.txt"), encoding="utf-8") as f:
        assert results["vocabulary_size"] == sum(1 for _ in f)  # what the summary says
    if "targets" in results:  # a language model: the part of the held-out text it scored
        assert 0 < results["targets"] <= results["heldout_targets"], results
        from tfeff.config import load_config

        loaded = load_config(os.path.join(REPO, "configs", f"{name}.yaml"),
                             overrides(name)[1::2])  # the run's own overrides
        assert results["targets"] == min(results["heldout_targets"], loaded.eval.max_targets)
        assert results["unigram_median_rank"] >= 0
    else:  # a masked LM: its batches, and a unigram baseline for a softmax output
        assert results["batches"] >= 1 and isinstance(results["complete"], bool), results
        assert ("unigram_accuracy" in results) == results["softmax"], results
    if name == FULL:
        # The one run long enough to learn (the demo's own training): its held-out
        # ranking beats the unigram baseline it printed, at every k.
        with open(os.path.join(model_dir, "eval.json")) as f:
            results = json.load(f)
        assert results["top_k"] and all(
            acc > results["unigram_top_k"][k] for k, acc in results["top_k"].items()), results
        # What needs no model equals the recorded `make demo` run's exactly (the README's
        # figures): the seeded corpus, its vocabulary, the targets scored and their unigram
        # baseline. The model's own figures are not compared: training is not bit-identical
        # across CPUs and thread counts (`train.deterministic: false`).
        record = demo_record()[0]["eval"]
        for key in ("targets", "heldout_targets", "vocabulary_size", "unigram_top_k",
                    "unigram_median_rank"):
            assert results[key] == record[key], (key, results[key], record[key])
    if _config(name).get("core", {}).get("coarse_steps"):  # CoRe's two phases
        assert re.search(r"CoRe switch at step 2 \(", stdout), stdout[-2000:]
    assert not [f for f in os.listdir(model_dir) if ".tmp-" in f]


@pytest.mark.parametrize("name", CONFIGS)
def test_progress_is_a_bar_on_a_terminal_and_lines_in_a_log(runs, name):
    rc, stdout, stderr = runs[name]["pretrain"]
    assert rc == 0, stderr[-3000:]
    pattern = (r"step (\d+)/(\d+) \((\d+)%\): loss [0-9.]+, .*learning rate \S+, [0-9.]+ "
               r"steps/s, elapsed \w+")
    lines = re.findall(pattern, stderr)
    if name == TERMINAL:  # one line redrawn in place against the whole run, no log lines
        drawn = [re.match(pattern, part).groups() for part in stdout.split("\r")[1:]
                 if re.match(pattern, part)]
        assert drawn and drawn[-1][0] == drawn[-1][1] == str(steps(name)), stdout[:500]
        assert "━" not in stdout and not lines, stderr[-2000:]  # not Keras' bar
        return
    assert "\r" not in stdout and "━" not in stdout, stdout[:500]
    # One line per log_every steps (the CoRe run counts its two phases' steps).
    every = _config(name)["train"]["log_every"] if name == FULL else LOG_EVERY
    total = steps(name)
    assert [int(s) for s, _, _ in lines] == list(range(every, total + 1, every)), lines
    assert {int(t) for _, t, _ in lines} <= {total, 2}, lines
    assert all(int(p) == 100 * int(s) // int(t) for s, t, p in lines), lines


@pytest.mark.parametrize("name", CONFIGS)
def test_export_loads_without_tfeff_and_embeds(runs, name):
    rc, stdout, stderr = runs[name]["export_run"]
    assert rc == 0, stderr[-3000:]
    assert not re.search(r"\.cc:\d+\]|unsupported characters|Assets written|fingerprint",
                         stderr), stderr
    assert re.search(rf"exported step {steps(name)} to ", stdout), stdout
    meta = json.load(open(os.path.join(runs[name]["export"], "assets.extra",
                                       "embedder.json")))
    config = _config(name)
    assert meta["family"] == config["family"]
    assert meta["num_layers"] == config["model"]["num_layers"] + 1  # the token layer first
    out = runs[name]["loaded"]
    words = SENTENCE.split()
    assert out["layers"].shape == (1, meta["num_layers"], len(words), meta["dim"])
    assert out["mask"].tolist() == [[True] * len(words)]
    assert [t.decode() for t in out["tokens"][0]] == words
    layers = out["layers"][0]
    assert np.isfinite(layers).all()
    assert (np.abs(layers).sum(axis=-1) > 0).all()  # every layer, every word
    # Pre-tokenized input gives the same vectors for the same words.
    np.testing.assert_allclose(out["t_layers"], out["layers"], rtol=1e-5, atol=1e-6)
