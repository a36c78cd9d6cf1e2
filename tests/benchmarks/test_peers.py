"""benchmarks/peers.py: a tiny run of two sections, one per backend, each in its own
process, and its refusal of an unknown section."""

import json
import os
import subprocess
import sys

from tests.conftest import REPO


def test_a_tiny_run_writes_one_row_per_comparison(tmp_path):
    # adaptive (PyTorch; it also checks that both layers give the same loss on the same
    # weights) and continuous (JAX): two backends, two subprocesses, about 20 s.
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.peers", "--preset", "tiny",
         "--sections", "continuous,adaptive", "--rounds", "2", "--output_dir", str(tmp_path)],
        capture_output=True, text=True, cwd=REPO)
    assert done.returncode == 0, done.stderr[-4000:]
    data = json.loads((tmp_path / "peers.json").read_text())
    assert [r["section"] for r in data["rows"]] == ["continuous", "adaptive"]
    for row in data["rows"]:
        assert row["tfeff_ms"] > 0 and row["peer_ms"] > 0 and row["ratio"] > 0, row
    assert data["rows"][1]["peer"] == "PyTorch"
    table = (tmp_path / "peers.md").read_text()
    assert data["command"] in table and data["machine"] in table
    assert table.count("\n| continuous |") == 1 and table.count("\n| adaptive |") == 1


def test_an_unknown_section_is_refused_by_name(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.peers", "--sections",
         "adaptive,softmax", "--output_dir", str(tmp_path)], capture_output=True, text=True,
        cwd=REPO)
    assert done.returncode != 0
    assert "--sections: unknown softmax" in done.stderr
    assert "Traceback" not in done.stderr
