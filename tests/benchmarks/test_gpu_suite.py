"""benchmarks/gpu_suite.py with its CPU preset: real models on two backends, no TensorFlow,
results that resume part by part."""

import importlib.util
from importlib import import_module
import json
import math
import os
import subprocess
import sys
import tarfile

import pytest

from tests.conftest import REPO
from tests.benchmarks import tensorflow_free_env
from tests.benchmarks import write_tar

from benchmarks import gpu_parts
from benchmarks import gpu_suite

# One length of the BERT sections: tfeff on both backends, keras-hub, Hugging Face
# (measured where `transformers` is installed, reported as missing where not) and the
# relaxed model; one output-layer model and ELMo-A's adaptive softmax against PyTorch's;
# Masked ELMo's encoder, speed and parity; CoRe's standard and two-phase training. The
# whole list, and a run resumed from its archive, are `slow` (about 3 minutes); the
# default suite runs one real part of each section (`LEAN`), and the runner's logic with
# fake parts (tests/benchmarks/test_runner.py).
PARTS = ["bert_tfeff_jax_32", "bert_keras_hub_jax_32", "bert_hf_torch_32",
         "bert_tfeff_torch_32", "core_relaxed_jax_32", "output_elmo_c_jax",
         "output_adaptive_torch", "lstm_speed_torch", "lstm_parity_torch",
         "core_train_standard_jax", "core_train_two_phase_jax"]
LEAN = ["bert_tfeff_jax_32", "core_relaxed_jax_32", "output_elmo_c_jax",
        "output_adaptive_torch", "lstm_parity_torch", "core_train_standard_jax",
        "core_train_two_phase_jax"]


def test_flops_per_token_golden():
    """2 layers of width 64 and FFN 256, n = 32 with 5 masked, vocabulary 2,000:
    6 x 2 (4 x 64^2 + 2 x 64 x 256) + 12 x 2 x 32 x 64 + 6 (64^2 + 2000 x 64) x 5 / 32."""
    assert gpu_parts.flops_per_token(gpu_suite.PRESETS["cpu"], 32) == 589_824 + 49_152 + 123_840
    assert gpu_parts.masked_per_sequence(128) == 19 and gpu_parts.masked_per_sequence(512) == 77


def test_batches_mask_distinct_sorted_positions_of_ordinary_ids():
    data = gpu_parts.batch(gpu_suite.PRESETS["cpu"], 64)
    assert data["token_ids"].shape == (4, 64) and data["masked_positions"].shape == (4, 10)
    for row in data["masked_positions"]:
        assert list(row) == sorted(set(row))
    assert data["token_ids"].min() >= 5 and data["token_ids"].max() < 2000


def _run_suite(tmp_path_factory, parts, resume):
    """The runner on the CPU preset's `parts`; every Python process it starts has
    TensorFlow unimportable (a sitecustomize on PYTHONPATH). With `resume`, then a second
    run on a fresh folder from the first one's archive less one part."""
    root = tmp_path_factory.mktemp("gpu_suite")
    env = tensorflow_free_env(root)
    out = root / "out"
    # The CoRe parts' arrays, made here where TensorFlow is (the synthetic language).
    from tfeff import data as data_lib

    core_data = str(root / "core_32.npz")
    train, heldout = data_lib.write_synthetic_corpus(str(root), 300, 60)
    import_module("tools.mlm_arrays").build([train], [heldout], core_data, sequence_length=32,
                                  vocabulary_size=300)
    command = [sys.executable, "-m", "benchmarks.gpu_suite", "--preset", "cpu",
               "--parts", ",".join(parts), "--core_data", core_data]
    first = subprocess.run(command + ["--output_dir", str(out), "--archive", str(root / "first.tgz")],
                           env=env, capture_output=True, text=True, cwd=REPO)
    second = None  # the rerun needs a complete first run (its failure is the first test's)
    if resume and first.returncode == 0:
        # A fresh machine: a new results folder, resumed from the first run's archive less
        # one part (as if the job had been cut before it).
        with tarfile.open(root / "first.tgz") as src, \
                tarfile.open(root / "cut.tgz", "w:gz") as dst:
            for member in src.getmembers():
                if member.name != "parts/bert_hf_torch_32.json":
                    dst.addfile(member, src.extractfile(member))
        second = subprocess.run(command + ["--output_dir", str(root / "out2"), "--resume_from",
                                           str(root / "cut.tgz"), "--archive",
                                           str(root / "second.tgz")],
                                env=env, capture_output=True, text=True, cwd=REPO)
    return out, first, second


@pytest.fixture(scope="module")
def suite(tmp_path_factory):
    """Every part of `PARTS`, then the resumed run (for the `slow` tests)."""
    return _run_suite(tmp_path_factory, PARTS, resume=True)


@pytest.fixture(scope="module")
def lean(tmp_path_factory):
    """One real part of each section (`LEAN`), once."""
    return _run_suite(tmp_path_factory, LEAN, resume=False)


def test_one_real_part_of_each_section_runs_without_tensorflow(lean):
    out, first, _ = lean
    assert first.returncode == 0, first.stderr[-4000:]
    rows = {r["part"]: r for r in json.loads((out / "results.json").read_text())["rows"]}
    assert set(rows) == set(LEAN)
    bert = rows["bert_tfeff_jax_32"]
    assert bert["tokens_per_step"] == 8 * 32 and 0 < bert["loss"] < 20, bert
    assert rows["core_relaxed_jax_32"]["params"] != bert["params"]
    assert rows["output_elmo_c_jax"]["tokens_per_s"] > 0
    adaptive = rows["output_adaptive_torch"]
    assert adaptive["tfeff_params"] == adaptive["torch_params"] > 0
    for loss in adaptive["first_losses"].values():  # untrained: about log V per direction
        assert abs(loss - 2 * math.log(5000)) < 1.5, adaptive["first_losses"]
    assert rows["lstm_parity_torch"]["returncode"] == 0, rows["lstm_parity_torch"]["output"]
    report = (out / "results.md").read_text()
    assert "| tfeff `Bert`, JAX, XLA |" in report
    assert "| `torch.nn.AdaptiveLogSoftmaxWithLoss` | 0.1M |" in report


@pytest.mark.slow
def test_the_parts_measure_equal_models_without_tensorflow(suite):
    out, first, _ = suite
    assert first.returncode == 0, first.stderr[-4000:]
    data = json.loads((out / "results.json").read_text())
    rows = {r["part"]: r for r in data["rows"]}
    assert set(rows) == set(PARTS)
    measured = [r for r in rows.values()
                if "step_s" in r and r["section"] in ("peers", "core")]
    for r in measured:
        assert r["tokens_per_step"] == 8 * 32 and r["masked_per_sequence"] == 5
        assert abs(r["tokens_per_s"] * r["step_s"] / r["tokens_per_step"] - 1) < 1e-9
        assert 0 < r["loss"] < 20, r
    # The same tfeff model on both backends; keras-hub's backbone adds its pooler
    # (a width x width dense layer and its bias), which the masked LM never uses.
    tfeff = rows["bert_tfeff_jax_32"]["params"]
    assert rows["bert_tfeff_torch_32"]["params"] == tfeff
    assert rows["bert_keras_hub_jax_32"]["params"] == tfeff + 64 * 64 + 64
    assert rows["core_relaxed_jax_32"]["params"] != tfeff
    assert rows["bert_tfeff_jax_32"]["versions"]["keras_backend"] == "jax"
    assert rows["bert_tfeff_torch_32"]["versions"]["keras_backend"] == "torch"
    hf = rows["bert_hf_torch_32"]
    if importlib.util.find_spec("transformers") is None:
        assert hf["error"] == "not installed: transformers", hf
    else:  # the same architecture, weight for weight (measured: 236,560 each)
        assert hf["params"] == tfeff and 0 < hf["loss"] < 20, hf
    assert data["environment"]["packages"]["keras"]
    # ELMo-C's demo model at a 5K-word vocabulary; the encoder benchmark's four torch
    # variants; the parity check passed.
    elmo_c = rows["output_elmo_c_jax"]
    assert elmo_c["word_vocabulary"] == 5000 and elmo_c["tokens_per_s"] > 0
    # tfeff's AdaptiveSoftmax and PyTorch's AdaptiveLogSoftmaxWithLoss of the same cutoffs
    # and div_value hold the same weights (measured: 69,408 each); untrained, each scores
    # about log V per direction on the two directions.
    adaptive = rows["output_adaptive_torch"]
    assert adaptive["cutoffs"] == [500, 2000]
    assert adaptive["tfeff_params"] == adaptive["torch_params"] > 0
    for loss in adaptive["first_losses"].values():
        assert abs(loss - 2 * math.log(5000)) < 1.5, adaptive["first_losses"]
    assert adaptive["tfeff_step_s"] > 0 and adaptive["torch_step_s"] > 0
    assert rows["lstm_speed_torch"]["returncode"] == 0, rows["lstm_speed_torch"]["output"]
    for variant in ("portable", "rnn_cell", "keras_lstm", "torch_lstm", "torch_peer"):
        assert f"| {variant} |" in rows["lstm_speed_torch"]["table"]
    assert rows["lstm_parity_torch"]["returncode"] == 0, rows["lstm_parity_torch"]["output"]
    # ELMo-C's step traced: ops found, busy for part of the step at most (the trace's steps
    # run a little slower than the timed ones).
    # So are the Keras BERT steps on JAX (not PyTorch's), and the report shows them.
    for row in (elmo_c, rows["bert_tfeff_jax_32"], rows["bert_keras_hub_jax_32"],
                rows["core_relaxed_jax_32"]):
        profile = row["profile"]
        assert profile["ops_per_step"] > 10 and profile["top"] and profile["kinds"], profile
        assert 0 < profile["busy_ms_per_step"] < 2000 * row["step_s"]
    assert "profile" not in rows["bert_tfeff_torch_32"]
    report = (out / "results.md").read_text()
    assert "keras-hub `BertMaskedLM`, JAX, XLA, n=32:\n\nDevice busy" in report


@pytest.mark.numerics
def test_core_training_runs_both_schedules_on_the_same_steps(lean):
    out, first, _ = lean
    assert first.returncode == 0, first.stderr[-4000:]
    data = json.loads((out / "results.json").read_text())
    rows = {r["part"]: r for r in data["rows"]}
    standard, two = rows["core_train_standard_jax"], rows["core_train_two_phase_jax"]
    vocabulary = 300  # learned to about 300 tokens; untrained, a loss near log V
    for row in (standard, two):
        assert row["steps"] == 20 and [p["step"] for p in row["points"]] == [10, 20]
        seconds = [p["seconds"] for p in row["points"]]
        assert 0 < seconds[0] < seconds[1] == row["train_seconds"]
        assert all(0 < p["loss"] < math.log(vocabulary) + 1 for p in row["points"])
        assert row["sizes"]["layers"] == 2 and row["sequence_length"] == 32
    assert standard["switch"] is None and {p["phase"] for p in standard["points"]} == {"standard"}
    # The relaxed phase to step 10, merged (the float32 check passed), then standard.
    assert [p["phase"] for p in two["points"]] == ["relaxed", "standard"]
    switch = two["switch"]
    assert switch["step"] == 10 and switch["merge_s"] > 0
    # Each output within what float32 rounding can put between the relaxed model and the
    # merged one on the check's probe (check_tolerances: twice the rounding of its longest
    # path), whatever the kernels.
    from tfeff.models import Bert
    from tfeff.models import BertBackbone
    from tfeff.models.relaxed_merge import check_tolerances

    s, n = two["sizes"], two["sequence_length"]
    relaxed = Bert(BertBackbone(vocabulary, num_layers=s["layers"], hidden_dim=s["hidden"],
                                num_heads=s["heads"], intermediate_dim=s["intermediate"],
                                max_sequence_length=n,
                                position_embedding=s["position_embedding"],
                                relaxed=s["relaxed"]))
    bounds = check_tolerances(relaxed, min(n, 32))  # probe_inputs' length
    errors = switch["relative_errors"]
    assert errors and all(errors[k] <= bounds[k] for k in errors), (errors, bounds)
    assert switch["seconds"] == pytest.approx(two["points"][0]["seconds"], abs=1.0)
    assert standard["params"] == two["params"]  # the merged model is the standard one
    summary = data["core_training"]
    assert summary["target"] == standard["points"][-1]["loss"]
    assert summary["standard"]["to_final_s"] <= standard["train_seconds"]
    text = (out / "results.md").read_text()
    assert "### CoRe: two-phase vs standard training (2 layers, width 64" in text
    assert "| standard | 20 |  |" in text and "| two-phase | 20 | 10 |" in text
    assert "Time to the standard run's final held-out loss" in text
    assert "its float32 check passed" in text
    if importlib.util.find_spec("matplotlib") is None:
        assert "No PNG (matplotlib is not installed here)" in text
    else:
        assert (out / "core_training.png").stat().st_size > 0


def test_core_training_without_its_data_is_refused_before_anything_runs(tmp_path):
    done = subprocess.run([sys.executable, "-m", "benchmarks.gpu_suite",
                           "--preset", "cpu", "--output_dir", str(tmp_path / "out"),
                           "--core_data", str(tmp_path / "none.npz")],
                          capture_output=True, text=True, cwd=REPO)
    assert done.returncode == 2
    assert f"--core_data {tmp_path / 'none.npz'}: no such file" in done.stderr
    assert "python -m tools.mlm_arrays --synthetic" in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "out").exists()


def test_the_archive_holds_the_results_without_work(lean):
    out, first, _ = lean
    assert first.returncode == 0, first.stderr[-4000:]
    assert (out / "work").is_dir()  # word tables, the trace: left out of the archive
    with tarfile.open(out.parent / "first.tgz") as tar:
        names = tar.getnames()
        assert (json.load(tar.extractfile("results.json"))
                == json.loads((out / "results.json").read_text()))
    assert sorted(names) == sorted(["environment.json", "results.json", "results.md",
                                    *[f"parts/{p}.json" for p in LEAN]]
                                   + (["core_training.png"]
                                      if (out / "core_training.png").exists() else []))


@pytest.mark.slow
def test_a_run_resumed_from_an_archive_runs_only_the_missing_part(suite):
    out, first, second = suite
    assert second is not None, first.stderr[-4000:]
    assert second.returncode == 0, second.stderr[-4000:]
    lines = second.stdout.splitlines()
    for part in PARTS:
        if part != "bert_hf_torch_32":
            assert f"{part}: done earlier" in lines
    assert any(line.startswith("bert_hf_torch_32: ") and "earlier" not in line
               for line in lines), second.stdout
    out2 = out.parent / "out2"
    # The parts it did not run are the first run's, byte for byte; the machine is the
    # first run's; the new archive holds every part.
    for part in PARTS:
        if part != "bert_hf_torch_32":
            assert ((out2 / "parts" / f"{part}.json").read_bytes()
                    == (out / "parts" / f"{part}.json").read_bytes())
    assert (out2 / "environment.json").read_bytes() == (out / "environment.json").read_bytes()
    with tarfile.open(out.parent / "second.tgz") as tar:
        assert {f"parts/{p}.json" for p in PARTS} <= set(tar.getnames())
    out = out2
    text = (out / "results.md").read_text()
    assert "| tfeff `Bert`, JAX, XLA |" in text and "| tfeff `Bert`, PyTorch eager |" in text
    rows = json.loads((out / "results.json").read_text())["rows"]
    standard = next(r for r in rows if r["part"] == "bert_tfeff_jax_32")
    relaxed = next(r for r in rows if r["part"] == "core_relaxed_jax_32")
    ratio = f"{standard['step_s'] / relaxed['step_s']:.2f}x"
    assert any(line.startswith("| 32 |") and ratio in line for line in text.splitlines()), text
    assert "`python -m benchmarks.gpu_suite --preset cpu --parts" in text and "--resume_from" in text
    assert "ELMo-C: " in text and "words/s against the target of 200,000" in text
    assert "Parity of the torch LSTM path on cpu: equal to the portable path" in text
    assert "| `torch.nn.AdaptiveLogSoftmaxWithLoss` | 0.1M |" in text


# What any archive is refused for (a member outside it, no results.json, not a .tar.gz) is
# tests/benchmarks/test_runner.py's; here, what the suite adds, through its command line.
@pytest.mark.parametrize("members, message", [
    ({"results.json": b'{"preset": "paper"}'}, "results of the paper preset, not cpu"),
    ({"results.json": b'{"preset": "cpu"}', "work/table.npy": b""},
     "member 'work/table.npy' is not part of a results archive"),
    ({"results.json": b"[1, 2]"}, "its results.json names no preset"),
    (None, "no such file"),
])
def test_an_archive_that_is_not_one_is_refused_naming_it(tmp_path, members, message):
    path = tmp_path / "in.tgz"
    if isinstance(members, dict):
        write_tar(path, members)
    elif members is not None:
        path.write_bytes(members)
    done = subprocess.run([sys.executable, "-m", "benchmarks.gpu_suite",
                           "--preset", "cpu", "--output_dir", str(tmp_path / "out"),
                           "--parts", "bert_tfeff_jax_32", "--resume_from", str(path)],
                          capture_output=True, text=True, cwd=REPO)
    assert done.returncode == 2, done.stderr
    assert f"--resume_from {path}: {message}" in done.stderr
    assert "Traceback" not in done.stderr and not (tmp_path / "escape.json").exists()
    assert not (tmp_path / "out" / "parts").exists() or not os.listdir(tmp_path / "out" / "parts")


def test_unknown_parts_are_named_and_nothing_runs(tmp_path):
    done = subprocess.run([sys.executable, "-m", "benchmarks.gpu_suite",
                           "--preset", "cpu", "--output_dir", str(tmp_path / "out"),
                           "--parts", "bert_tfeff_jax_32,bert_nope"],
                          capture_output=True, text=True, cwd=REPO)
    assert done.returncode == 2
    assert "--parts: unknown bert_nope" in done.stderr
    assert "Traceback" not in done.stderr and not (tmp_path / "out").exists()


def test_a_deadline_starts_no_part_it_cannot_finish_and_says_how_to_resume(tmp_path):
    """Within a minute of the deadline no part starts: exit 3, the parts left named."""
    done = subprocess.run([sys.executable, "-m", "benchmarks.gpu_suite",
                           "--preset", "cpu", "--output_dir", str(tmp_path / "out"),
                           "--parts", "bert_tfeff_jax_32,output_elmo_c_jax", "--deadline_s", "30"],
                          capture_output=True, text=True, cwd=REPO)
    assert done.returncode == 3, done.stderr[-2000:]
    assert ("stopped at the deadline with 2 parts left (bert_tfeff_jax_32, output_elmo_c_jax): "
            "rerun the same command to resume") in done.stderr
    assert not os.listdir(tmp_path / "out" / "parts")
    assert "| tfeff `Bert`" not in (tmp_path / "out" / "results.md").read_text()


def test_a_part_past_its_time_is_killed_and_writes_nothing(tmp_path):
    (tmp_path / "parts").mkdir()
    ok, detail = import_module("benchmarks.runner").run_process(
        gpu_suite._part_command("cpu", str(tmp_path), str(tmp_path / "unused.npz"),
                                "lstm_speed_torch"), gpu_suite._part_environment("torch"), 2)
    assert (ok, detail) == (False, None)
    assert not (tmp_path / "parts" / "lstm_speed_torch.json").exists()
