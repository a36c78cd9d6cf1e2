import os
import subprocess
import sys

import pytest

from tests.conftest import REPO

DEMO = os.path.join(REPO, "configs", "demo_elmo_c.yaml")


def _run(args, tmp_path):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    return subprocess.run([sys.executable, "-m", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("extra, message", [
    (["--override", "model.unitz=4"], "Unknown config key `model.unitz`"),
    (["--override", "train.steps=-1"], "`train.steps` must be positive"),
    (["--override", "data.synthetic=null", "--override", "data.train_files=/no/such/*.txt"],
     "No file matches the corpus pattern `/no/such/\\*.txt`"),
])
def test_pretrain_exits_nonzero_with_a_clear_message(extra, message, tmp_path):
    r = _run(["tfeff.bin.pretrain", "--config", DEMO, "--model_dir", str(tmp_path / "m"), *extra],
             tmp_path)
    assert r.returncode == 1
    import re
    assert re.search(message, r.stderr), r.stderr[-2000:]


def test_pretrain_reports_invalid_utf8_with_file_and_line(tmp_path):
    corpus = tmp_path / "c.txt"
    corpus.write_bytes(b"a b c\nd e\n\xc3\x28 broken\n")
    r = _run(["tfeff.bin.pretrain", "--config", DEMO, "--model_dir", str(tmp_path / "m"),
              "--override", "data.synthetic=null", "--override", f"data.train_files={corpus}"],
             tmp_path)
    assert r.returncode == 1
    assert f"{corpus}:3: the line is not valid UTF-8" in r.stderr
    assert not os.path.exists(tmp_path / "m" / "vocabulary.txt")


def test_export_of_missing_directory_exits_nonzero(tmp_path):
    r = _run(["tfeff.bin.export", "--model_dir", str(tmp_path / "none"), "--output",
              str(tmp_path / "o")], tmp_path)
    assert r.returncode == 1 and "not a tfeff model directory" in r.stderr
    assert not os.path.exists(tmp_path / "o")


def test_export_takes_exactly_one_source_and_names_a_missing_fasttext_file(tmp_path):
    r = _run(["tfeff.bin.export", "--output", str(tmp_path / "o")], tmp_path)
    assert r.returncode != 0 and "exactly one of --model_dir and --fasttext" in r.stderr
    r = _run(["tfeff.bin.export", "--fasttext", str(tmp_path / "ft.bin"), "--output",
              str(tmp_path / "o")], tmp_path)
    assert r.returncode == 1 and f"fastText model not found: {tmp_path / 'ft.bin'}" in r.stderr
    assert not os.path.exists(tmp_path / "o")
