"""benchmarks/gpu.py on CPU JAX: it runs without TensorFlow and measures real models."""

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import REPO


# A benchmark script's CPU preset (25 s; the GPU suite's test runs its `measure`): `make
# test-slow`.
@pytest.mark.slow
def test_cpu_preset_on_jax_times_the_configured_models(tmp_path):
    results = tmp_path / "gpu.md"
    command = [sys.executable, "-m", "benchmarks.gpu", "--preset",
               "cpu", "--models", "elmo_sampled,bert_relaxed,transformer_lm_gpt", "--precisions",
               "fp32", "--steps", "2", "--warmup", "1", "--output_dir", str(tmp_path)]
    # Fails the run if the tool (or anything it imports) imports TensorFlow.
    guard = ("import sys; sys.modules['tensorflow'] = None; "
             "sys.argv = sys.argv[1:]; import runpy; "
             "runpy.run_module(sys.argv[0], run_name='__main__', alter_sys=True)")
    env = {**os.environ, "KERAS_BACKEND": "jax", "JAX_PLATFORMS": "cpu"}
    done = subprocess.run([sys.executable, "-c", guard, *command[2:]], env=env,
                          capture_output=True, text=True, cwd=REPO)
    assert done.returncode == 0, done.stderr[-4000:]
    data = json.loads((tmp_path / "gpu.json").read_text())
    assert data["backend"] == "jax" and data["preset"] == "cpu"
    rows = {r["model"]: r for r in data["rows"]}
    for name in ("elmo_sampled", "bert_relaxed", "transformer_lm_gpt"):
        row = rows[name]
        assert row["step_s"] > 0 and row["tokens_per_s"] > 0, row
        assert abs(row["tokens_per_s"] * row["step_s"] / row["tokens_per_step"] - 1) < 1e-9
        assert 0 < row["loss"] < 20, row
    # The configured size: the demo BERT's relaxed model (a 2,000-token WordPiece table
    # and 2 layers of width 64).
    from tfeff.config import load_config
    from tfeff.models import from_config

    bert_cfg = load_config(os.path.join(REPO, "configs", "demo_bert_core.yaml"))
    bert = from_config.bert(bert_cfg, bert_cfg.data.wordpiece_vocabulary_size, relaxed=True)
    bert.build()
    assert rows["bert_relaxed"]["params"] == bert.count_params()
    table = results.read_text()
    assert "| elmo_sampled | fp32 |" in table
    assert "SAMPLED / ELMo-C" not in table  # ELMo-C was not run: no ratio
    assert table.splitlines()[0].startswith("Training step on CPU")
