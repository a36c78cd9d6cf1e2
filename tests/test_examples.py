"""The examples under examples/ run as a user would run them."""

import os
import subprocess
import sys

import tfeff.layers

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LOSSES = ["cosine_distance", "l2_distance", "vmf_nll", "CosineDistance", "L2Distance",
          "VonMisesFisherLoss"]


def test_keras_user_example_trains_saves_and_reloads_every_layer_and_loss(tmp_path):
    """examples/keras_user.py: the user's own encoder, stock compile and fit, `.keras`
    save and `load_model` with the default safe_mode, equal outputs (the script checks
    each and exits non-zero on a failure)."""
    result = subprocess.run(
        [sys.executable, os.path.join(ROOT, "examples", "keras_user.py"),
         "--output_dir", str(tmp_path)],
        capture_output=True, text=True, timeout=900, cwd=str(tmp_path))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    rows = {line.split()[0]: line.split() for line in result.stdout.splitlines()[1:-1]}
    assert set(tfeff.layers.__all__) | set(LOSSES) <= set(rows)
    for name, row in rows.items():
        first, last, difference = float(row[2]), float(row[3]), float(row[4])
        assert last < first and difference <= 1e-5, row
    assert {p.name for p in tmp_path.glob("*.keras")} >= {f"{n}.keras" for n in rows}
