"""Every public layer goes through the shared `run_layer_test` (layer_checks.py)."""

import pathlib
import re

import tfeff.layers


def test_every_public_layer_runs_the_standard_checks():
    sources = "\n".join(p.read_text(encoding="utf-8")
                        for p in pathlib.Path(__file__).parent.glob("test_*.py"))
    tested = set(re.findall(r"run_layer_test\(\s*(\w+)", sources))
    assert set(tfeff.layers.__all__) <= tested, set(tfeff.layers.__all__) - tested
