"""benchmarks/precision.py's tiny preset: it times the variants side by side and names
the layer that keeps a model off XLA instead of timing it."""

from importlib import import_module
import json



def test_tiny_preset_times_float32_and_bfloat16_and_names_what_blocks_xla(tmp_path):
    import keras

    tool = import_module("benchmarks.precision")
    results = tmp_path / "precision.md"
    tool.run("tiny", ["elmo_sampled"], ["fp32", "xla", "bf16"], 2, str(tmp_path),
             "python -m benchmarks.precision --preset tiny")
    assert keras.config.dtype_policy().name == "float32"  # the policy scope was left
    data = json.loads((tmp_path / "precision.json").read_text())
    times = data["times"]["elmo_sampled"]
    assert set(times) == {"fp32", "bf16"} and all(len(t) == 2 for t in times.values())
    assert all(s > 0 for t in times.values() for s in t)
    assert "SampledSoftmax `sampled_softmax`" in data["not_compilable"]["elmo_sampled"]["xla"]
    lines = results.read_text().splitlines()
    assert lines[0].startswith("Training step of the demo models on CPU (")
    assert "CPU ratios are not GPU ratios" in lines[0]
    assert "| model | fp32 | xla | bf16 |" in lines
    row = next(line for line in lines if line.startswith("| elmo_sampled |"))
    assert "n/a (1)" in row and row.count("x)") == 1  # bf16's ratio to fp32
    assert any(line.startswith("(1) not compilable with XLA: SampledSoftmax") for line in lines)
