"""benchmarks/paper_speed.py: the papers' speed tables as GPU-suite parts. The plans are read
from the configs (nothing built); the timing and its arithmetic run on a fake clock; one
real part runs end to end through the suite on the CPU preset, without TensorFlow."""

import json
import math
import os
import subprocess
import sys

import pytest

from tests.benchmarks import tensorflow_free_env
from tests.conftest import REPO

from benchmarks import gpu_suite
from benchmarks import harness
from benchmarks import paper_speed

PAPER = gpu_suite.PRESETS["paper"]
CPU = gpu_suite.PRESETS["cpu"]


def _plan(group, sizes=PAPER):
    return {s["scenario"]: {v["key"]: v for v in s["variants"]}
            for s in paper_speed.plan(group, sizes)}


def test_the_speed_parts_come_after_the_existing_parts_in_their_order():
    for preset in ("paper", "cpu"):
        parts = gpu_suite._parts(preset)
        sections = [section for _, _, section, _, _ in parts]
        first = sections.index("speed")
        assert set(sections[first:]) == {"speed"} and first == len(parts) - 5
        assert parts[first - 1][0] == "core_train_two_phase_jax"
        assert [(p, b, i) for p, b, _, i, _ in parts[first:]] == paper_speed.PARTS


def test_table4_runs_the_papers_batches_per_card_at_both_vocabularies():
    """Table 4: S1 one window; S2 the maximal batch per card of each output layer and
    vocabulary (CONT 640, FIXED 512, SUBWORD 320, ADAPTIVE 256 / 192, SAMPLED 256 / 64)."""
    at_800k, at_2m = _plan("table4_800k"), _plan("table4_2m")
    assert {k: v["batch"] for k, v in at_800k["S2"].items()} == {
        "CONT": 640, "FIXED": 512, "SUBWORD": 320, "ADAPTIVE": 256, "SAMPLED": 256}
    assert {k: v["batch"] for k, v in at_2m["S2"].items()} == {
        "CONT": 640, "ADAPTIVE": 192, "SAMPLED": 64}
    for plan in (at_800k, at_2m):
        assert {v["batch"] for v in plan["S1"].values()} == {1}
    assert {v["vocabulary"] for v in at_800k["S2"].values()} == {800_000}
    assert {v["vocabulary"] for v in at_2m["S1"].values()} == {2_000_000}
    assert at_800k["S1"]["CONT"]["paper"] == 0.47 and at_800k["S2"]["CONT"]["paper"] == 115.28
    assert at_2m["S2"]["SAMPLED"]["paper"] == 2.35
    assert at_2m["S2"]["SAMPLED"]["paper_params"] == 1102
    assert at_800k["S2"]["ADAPTIVE"]["paper"] == 1.47
    # The CPU preset: the same plan at its scale, on the demo configs.
    cpu = _plan("table4_800k", CPU)
    assert cpu["S2"]["CONT"]["batch"] == 10 and cpu["S2"]["CONT"]["config"] == "demo_elmo_c"


def test_table4_times_sampled_with_conts_encoder_and_says_so():
    s2 = _plan("table4_800k")["S2"]
    sampled = s2["SAMPLED"]
    assert sampled["config"] == "elmo_sampled" and "model.layer_norm=true" in sampled["overrides"]
    text = paper_speed.label(sampled)
    assert "model.layer_norm=true" in text and ", layer norm," in text
    # Every row the same encoder and optimizer (CONT's Adam), whatever its config's.
    encoders = {v["encoder"] for v in s2.values()}
    assert encoders == {"LSTMP 2 x 4096 -> 512, cell/proj clip 3/3, layer norm, directions mean"}
    assert {v["optimizer"] for v in s2.values()} == {"Adam (epsilon 1e-06), global clipnorm 1"}


def test_row_labels_carry_the_exact_shapes():
    s2 = _plan("table4_800k")["S2"]
    assert paper_speed.label(s2["ADAPTIVE"]) == (
        "batch 256 x 20 tokens; V 800,000, fixed input, adaptive, cutoffs [60000, 100000, "
        "640000], divisor 2, tail capacity 0.1; bf16 (mixed_bfloat16), JAX, XLA; LSTMP 2 x 4096 "
        "-> 512, cell/proj clip 3/3, layer norm, directions mean; Adam (epsilon 1e-06), global "
        "clipnorm 1")
    assert paper_speed.label(s2["SUBWORD"]).startswith(
        "batch 320 x 20 tokens, 1.1 tokens a word; 30,000 WordPieces, trainable input, full "
        "softmax, tied; bf16")
    assert "8,192 negatives" in paper_speed.label(s2["FIXED"])
    elmo = _plan("table2")["per_card"]["ELMo"]
    text = paper_speed.label(elmo)
    assert text.startswith("batch 128 x 20 tokens; V 800,000, fixed input, sampled softmax")
    assert "no layer norm, directions mean; Adagrad (accumulators from 1), global clipnorm 10" \
        in text
    gpt = _plan("table5_gpt")["config_batch"]["CONT"]
    assert paper_speed.label(gpt).startswith("batch 32 x 512 tokens; V 800,000")
    assert "transformer 12 x 768, 12 heads, FFN 3072, learned positions, forward stack" \
        in paper_speed.label(gpt)
    masked = _plan("masked_elmo")["config_batch"]
    portable = paper_speed.label(masked["portable path, 4 mask sets"])
    assert portable.startswith("batch 128 x 128 tokens; 28,745 WordPieces, full softmax, tied; "
                               "4 mask sets x 20 predictions; fp32, TF32 off (cuDNN and "
                               "matmuls), PyTorch eager; MaskedBiLSTM 2 x 4096 -> 384")
    assert "use_cudnn false" in portable and "MaskedBiLSTM has none" in portable
    assert "1 mask set x 20" in paper_speed.label(masked["cuDNN path, 1 mask set"])


def test_table2_batches_are_the_configs_global_batch_over_their_cards():
    """Table 2's maximal batch per card, 768 / 256 / 320 / 128, is what each config's global
    batch gives over the cards its comment names (4, and 3 for ELMo); the other scenario
    runs every model at 128 windows, with the configs' own settings."""
    plan = _plan("table2")
    expected = {"ELMo-C": 768, "ELMo-A": 256, "ELMo-Sub": 320, "ELMo": 128}
    for model, batch in expected.items():
        assert paper_speed.config_batch_per_card(model, PAPER["speed"]) == batch
        assert paper_speed.TABLE2[model][4] == batch
        assert plan["per_card"][model]["batch"] == batch
        assert plan["common"][model]["batch"] == 128
    assert plan["per_card"]["ELMo"]["config"] == "elmo_sampled"
    assert "Adagrad" in plan["per_card"]["ELMo"]["optimizer"]
    assert "divisor 2" in plan["per_card"]["ELMo-A"]["output"]
    assert plan["per_card"]["ELMo"]["paper"] == "14 days x 3 cards (4.20x card-days)"
    # The demo configs are one card's.
    assert {v["batch"] for v in _plan("table2", CPU)["per_card"].values()} == {64}


def test_the_gpt_rows_take_their_output_settings_from_the_elmo_configs():
    plan = _plan("table5_gpt")["config_batch"]
    assert set(plan) == set(paper_speed.OUTPUTS)
    assert {v["config"] for v in plan.values()} == {"transformer_lm_gpt"}
    adaptive = plan["ADAPTIVE"]["overrides"]
    assert "model.adaptive_cutoffs=[60000, 100000, 640000]" in adaptive
    assert "model.adaptive_div_value=2.0" in adaptive and "model.adaptive_tail_capacity=0.1" \
        in adaptive
    assert "data.wordpiece_vocabulary_size=30000" in plan["SUBWORD"]["overrides"]
    assert plan["SUBWORD"]["tokens_per_word"] == paper_speed.SUBWORD_TOKENS_PER_WORD
    assert "model.num_sampled=8192" in plan["SAMPLED"]["overrides"]
    assert {k: v["paper"] for k, v in plan.items()} == paper_speed.TABLE5_GPT


def test_steps_for_a_million_words_round_up():
    assert paper_speed.steps_for_words(1e6, 640, 20) == 79  # 78.125
    assert paper_speed.steps_for_words(1e6, 625, 20) == 80  # exactly 80
    assert paper_speed.steps_for_words(1e6, 320, 20, 1.1) == 172  # 171.875
    assert paper_speed.steps_for_words(1e6, 64, 20) == 782  # 781.25


class _FakeModels:
    """`_Models`' interface: each variant's step advances a fake clock by its next duration."""

    def __init__(self, clock, durations, fail=None):
        self.clock, self.durations, self.fail = clock, durations, fail or {}

    def step(self, variant):
        key = variant["key"]
        if key in self.fail:
            raise self.fail[key]
        durations = iter(self.durations[key])

        def step():
            self.clock[0] += next(durations)
            return 1.5
        return step, 1000

    def drop(self, variant):
        self.dropped = variant["key"]


@pytest.fixture
def clock(monkeypatch):
    now = [0.0]
    monkeypatch.setattr(harness.time, "perf_counter", lambda: now[0])
    return now


def test_s2_time_per_million_words_is_steps_times_the_median_step(clock):
    """By hand: CONT 640 x 20 words a step -> 79 steps; ADAPTIVE 256 x 20 -> 196; SUBWORD
    320 x 20 tokens at 1.1 a word -> 172. Medians over 3 interleaved rounds (after the
    compiling step and one warm-up, which are not timed): 0.1, 0.3 and 0.2 s."""
    scenario = paper_speed.plan("table4_800k", PAPER)[1]
    assert scenario["scenario"] == "S2"
    scenario = {**scenario, "variants": [v for v in scenario["variants"]
                                         if v["key"] in ("CONT", "ADAPTIVE", "SUBWORD")]}
    durations = {"CONT": [9.0, 9.0, 0.1, 0.1, 0.5],  # a slow third round slows CONT alone
                 "ADAPTIVE": [9.0, 9.0, 0.3, 0.3, 0.3],
                 "SUBWORD": [9.0, 9.0, 0.2, 0.2, 0.2]}
    rows = {r["key"]: r for r in paper_speed.run_scenario(
        scenario, _FakeModels(clock, durations), rounds=3, warmup=1)}
    cont, adaptive, subword = rows["CONT"], rows["ADAPTIVE"], rows["SUBWORD"]
    assert cont["step_s"] == pytest.approx(0.1) and cont["rounds"] == 3
    assert [r["steps_per_million_words"] for r in (cont, adaptive, subword)] == [79, 196, 172]
    assert cont["seconds_per_million_words"] == pytest.approx(79 * 0.1)
    assert adaptive["seconds_per_million_words"] == pytest.approx(196 * 0.3)
    assert subword["seconds_per_million_words"] == pytest.approx(172 * 0.2)
    assert subword["words_per_step"] == pytest.approx(320 * 20 / 1.1)
    # The ratio: the median of the per-round step ratios (3, 3, 0.6 -> 3), times the steps.
    assert adaptive["step_ratio"] == pytest.approx(3.0)
    assert adaptive["ratio"] == pytest.approx(3.0 * 196 / 79)
    assert subword["ratio"] == pytest.approx(2.0 * 172 / 79)
    assert cont["ratio"] == pytest.approx(1.0) and cont["first_loss"] == 1.5


def test_s1_compares_the_time_of_one_batch(clock):
    scenario = paper_speed.plan("table4_2m", PAPER)[0]
    assert scenario["scenario"] == "S1" and scenario["compare"] == "batch"
    durations = {"CONT": [1.0] + [0.02] * 3, "ADAPTIVE": [1.0] + [0.03] * 3,
                 "SAMPLED": [1.0] + [0.05] * 3}
    rows = {r["key"]: r for r in paper_speed.run_scenario(
        scenario, _FakeModels(clock, durations), rounds=2, warmup=1)}
    assert rows["ADAPTIVE"]["ratio"] == pytest.approx(1.5)
    assert rows["SAMPLED"]["ratio"] == pytest.approx(2.5)
    assert rows["SAMPLED"]["steps_per_million_words"] == 50_000  # one window of 20 a step


def test_a_model_out_of_device_memory_is_a_row_saying_so(clock):
    scenario = paper_speed.plan("table4_2m", PAPER)[1]
    durations = {"CONT": [0.1] * 4, "ADAPTIVE": [0.2] * 4}
    oom = RuntimeError("RESOURCE_EXHAUSTED: Out of memory while trying to allocate 8.2GiB")
    models = _FakeModels(clock, durations, fail={"SAMPLED": oom})
    rows = {r["key"]: r for r in paper_speed.run_scenario(scenario, models, rounds=2, warmup=1)}
    assert rows["SAMPLED"]["error"] == "out of device memory (OOM)"
    assert "step_s" not in rows["SAMPLED"]
    assert models.dropped == "SAMPLED"  # its memory freed for the others
    assert rows["ADAPTIVE"]["ratio"] == pytest.approx(2.0 * 261 / 79)  # 192 x 20: 261 steps
    lines = paper_speed.tables({"speed_li_table4_2m_jax": {
        "title": paper_speed.TITLES["table4_2m"], "device": "NVIDIA H200", "rounds": 2,
        "warmup": 1, "peak_memory_bytes": 3 * 2**30,
        "scenarios": [{"scenario": "S2", "reference": "CONT", "compare": "million_words",
                       "rows": list(rows.values())}]}})
    text = "\n".join(lines)
    assert "S3 (four cards) cannot run on one GPU: not measured." in text
    assert "| SAMPLED | batch 64 x 20 tokens; V 2,000,000" in text
    assert "| out of device memory (OOM) | | | | 2.35x |" in text
    assert f"| {paper_speed.label(rows['CONT'])} | 0.0M | 76M | 100.0 | 79 | 7.90 | 1.00x | " \
        "115.28 s |" in text
    # Another error is not an OOM: it fails the part.
    with pytest.raises(RuntimeError, match="shapes"):
        paper_speed.run_scenario(scenario, _FakeModels(
            clock, durations, fail={"SAMPLED": RuntimeError("incompatible shapes")}), 2, 1)


def test_masked_elmo_compares_mask_sets_and_paths_each_to_its_own_reference(clock):
    scenario, = paper_speed.plan("masked_elmo", PAPER)
    one, four, portable = [v["key"] for v in scenario["variants"]]
    durations = {one: [5.0] + [0.25] * 3, four: [5.0] + [1.0] * 3, portable: [5.0] + [1.5] * 3}
    rows = {r["key"]: r for r in paper_speed.run_scenario(
        scenario, _FakeModels(clock, durations), rounds=2, warmup=1)}
    assert rows[four]["ratio"] == pytest.approx(4.0) and rows[four]["paper"] == "+6% (§3.1)"
    assert rows[portable]["versus"] == four and rows[portable]["ratio"] == pytest.approx(1.5)
    text = "\n".join(paper_speed.tables({"speed_masked_elmo_torch": {
        "title": paper_speed.TITLES["masked_elmo"], "device": "NVIDIA H200", "rounds": 2,
        "warmup": 1, "torch_flags": {"cudnn_allow_tf32": False},
        "scenarios": [{"scenario": "config_batch", "reference": one, "compare": "batch",
                       "rows": list(rows.values())}]}}))
    assert "| 1500.0 | | | 1.50x of cuDNN path, 4 mask sets | 20% speed-up (§2.2) |" in text


# A subprocess run: under `slow` for the default suite's time budget (the mechanism is
# also checked in process there).
@pytest.mark.slow
def test_a_real_part_runs_end_to_end_without_tensorflow(tmp_path):
    """The Masked ELMo part on the CPU preset (about 20 s): the suite's own command, in
    processes where TensorFlow cannot be imported."""
    env = tensorflow_free_env(tmp_path)
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "-m", "benchmarks.gpu_suite", "--preset", "cpu",
                           "--output_dir", str(out), "--parts", "speed_masked_elmo_torch"],
                          env=env, capture_output=True, text=True, cwd=REPO)
    assert done.returncode == 0, done.stderr[-4000:]
    part = json.loads((out / "parts" / "speed_masked_elmo_torch.json").read_text())
    assert part["versions"]["keras_backend"] == "torch"
    assert part["torch_flags"] == {"cudnn_allow_tf32": False, "matmul_allow_tf32": False}
    rows = {r["key"]: r for r in part["scenarios"][0]["rows"]}
    one, four, portable = (rows["cuDNN path, 1 mask set"], rows["cuDNN path, 4 mask sets"],
                           rows["portable path, 4 mask sets"])
    # One model, three ways to run it: the same weights; untrained, about log V per set.
    assert one["params"] == four["params"] == portable["params"] > 0
    for row in (one, four, portable):
        assert row["step_s"] > 0 and row["batch"] == 32 and row["length"] == 32
        assert abs(row["first_loss"] - math.log(2000)) < 1.5, row["first_loss"]
    # Four mask sets run the encoder four times.
    assert four["ratio"] > 1.5, four
    report = (out / "results.md").read_text()
    assert "### Masked ELMo: mask sets and the cuDNN path" in report
    assert f"| cuDNN path, 4 mask sets | {paper_speed.label(four)} | " \
        f"{four['params'] / 1e6:.1f}M |" in report


@pytest.mark.slow
def test_every_speed_part_runs_on_the_cpu_preset_without_tensorflow(tmp_path):
    """The whole CPU dry run of the speed parts (9 to 20 minutes on 2 shared cores)."""
    env = tensorflow_free_env(tmp_path)
    out = tmp_path / "out"
    parts = [p for p, _, _ in paper_speed.PARTS]
    done = subprocess.run([sys.executable, "-m", "benchmarks.gpu_suite", "--preset", "cpu",
                           "--output_dir", str(out), "--parts", ",".join(parts),
                           "--part_limit_s", "1200"],  # 10 compiles a part on shared cores
                          env=env, capture_output=True, text=True, cwd=REPO)
    assert done.returncode == 0, done.stderr[-4000:]
    report = (out / "results.md").read_text()
    for part, _, group in paper_speed.PARTS:
        data = json.loads((out / "parts" / f"{part}.json").read_text())
        planned = paper_speed.plan(group, CPU)
        assert [s["scenario"] for s in data["scenarios"]] == [s["scenario"] for s in planned]
        for scenario in data["scenarios"]:
            for row in scenario["rows"]:
                assert row["step_s"] > 0 and math.isfinite(row["first_loss"]), row
                assert row["ratio"] > 0 and f"| {row['key']} | {paper_speed.label(row)} |" \
                    in report
        assert f"### {paper_speed.TITLES[group]}" in report
