"""tfeff-evaluate: its refusals, and a run on small CoNLL and TSV files against
`tfeff.evaluation` run in process."""

import collections
import json
import os
import re
import subprocess
import sys

import pytest

from tests.bin.test_quiet import TENSORFLOW_LINES
from tests.conftest import REPO
from tfeff import evaluation


def _evaluate(args, cwd=REPO, env=None):
    """The binary's run; `env` changes the environment (a None value removes the
    variable)."""
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONPATH": REPO, **(env or {})}
    env = {name: value for name, value in env.items() if value is not None}
    return subprocess.run([sys.executable, "-m", "tfeff.bin.evaluate", *args], cwd=cwd,
                          env=env, capture_output=True, text=True, timeout=300)


@pytest.fixture
def task_files(tmp_path):
    """A one-sentence CoNLL pair and a two-sentence TSV pair, each a usable task (two
    classes, a test file that is not the training file)."""
    (tmp_path / "a.conll").write_text("the\tDET\ndog\tNOUN\n", encoding="utf-8")
    (tmp_path / "b.conll").write_text("a\tDET\ncat\tNOUN\n", encoding="utf-8")
    (tmp_path / "a.tsv").write_text("1\tthe dog\n0\ta cat\n", encoding="utf-8")
    (tmp_path / "b.tsv").write_text("0\tthe cat\n1\ta dog\n", encoding="utf-8")
    return {name: str(tmp_path / name) for name in ("a.conll", "b.conll", "a.tsv", "b.tsv")}


# Each refusal through the binary's own main and error boundary, in one process (a
# process per case would import TensorFlow for each, at the boundary).
_REFUSE = """
import contextlib, io, json, sys
from absl import flags
from tfeff.bin import evaluate
out = []
for args in json.loads(sys.argv[1]):
    err = io.StringIO()
    flags.FLAGS(["tfeff-evaluate", *args])
    try:
        with contextlib.redirect_stderr(err):
            evaluate.main(["tfeff-evaluate"])
        code = 0
    except SystemExit as e:
        code = e.code
    flags.FLAGS.unparse_flags()
    out.append([code, err.getvalue()])
print(json.dumps(out))
"""


def test_command_line_names_a_bad_argument_and_exits_non_zero(task_files, tmp_path):
    """Two refusals through `python -m tfeff.bin.evaluate`, then every other one in a
    single process: one line naming the flag, exit status 1, nothing written."""
    conll = f"{task_files['a.conll']},{task_files['b.conll']}"
    tsv = f"{task_files['a.tsv']},{task_files['b.tsv']}"
    export = f"x={tmp_path}/none"
    table = tmp_path / "table.md"
    table.write_text("an earlier table\n", encoding="utf-8")
    bad = _evaluate(["--embedder", "no-equals-sign", "--classification", tsv])
    assert bad.returncode == 1 and "Traceback" not in bad.stderr, bad.stderr[-2000:]
    assert "error: --embedder wants NAME=PATH, got 'no-equals-sign'" in bad.stderr
    missing = _evaluate(["--embedder", export, "--classification", tsv])
    assert missing.returncode == 1 and "Traceback" not in missing.stderr
    assert f"error: {tmp_path}/none is not a SavedModel directory" in missing.stderr, (
        missing.stderr[-2000:])
    cases = [
        (["--embedder", "x=", "--classification", tsv],
         "error: --embedder wants NAME=PATH, got 'x='"),
        (["--embedder", export, "--embedder", export, "--classification", tsv],
         "error: --embedder: two embedders named 'x'"),
        (["--embedder", export], "error: give at least one --embedder and one --tagging or "
         "--classification"),
        (["--classification", tsv], "error: give at least one --embedder and one --tagging "
         "or --classification"),
        (["--embedder", export, "--tagging", task_files["a.conll"]],
         f"error: --tagging wants [NAME=]TRAIN,TEST, got '{task_files['a.conll']}'"),
        (["--embedder", export, "--classification", f"{tsv},{task_files['a.tsv']}"],
         f"error: --classification wants [NAME=]TRAIN,TEST, got '{tsv},{task_files['a.tsv']}'"),
        (["--embedder", export, "--classification", f"{tmp_path}/none.tsv,{task_files['b.tsv']}"],
         f"error: --classification {tmp_path}/none.tsv,{task_files['b.tsv']}: "
         f"{tmp_path}/none.tsv is not a file"),
        # Both pairs would be the task `a`: the second is refused, not dropped.
        (["--embedder", export, "--tagging", conll, "--classification", tsv],
         f"error: --classification {tsv}: a second task named 'a'; name one of them: "
         "--classification NAME=TRAIN,TEST"),
        (["--embedder", export, "--tagging", conll, "--tag_column", "0"],
         "error: --tag_column 0 is the word column; give the tag's column"),
        (["--embedder", export, "--classification", tsv, "--probe", "linear,mlp"],
         "error: --probe wants linear, bilstm or both (linear,bilstm), got 'linear,mlp'"),
        (["--embedder", export, "--classification", tsv, "--seeds", "0,one"],
         "error: --seeds must be integers, got '0,one'"),
        (["--embedder", export, "--classification", tsv, "--seeds", "1,1"],
         "error: --seeds wants one or more different integers, got '1,1'"),
        (["--embedder", export, "--classification", tsv, "--epochs", "0"],
         "error: --epochs must be a positive integer, got 0"),
        (["--embedder", export, "--classification", tsv, "--output", task_files["a.tsv"],
          "--overwrite"], f"error: --output {task_files['a.tsv']} is one of the task files"),
        (["--embedder", export, "--classification", tsv, "--output", str(tmp_path)],
         f"error: --output {tmp_path} is a directory; give a file name"),
        (["--embedder", export, "--classification", tsv, "--output", str(table)],
         f"error: --output {table} exists; pass --overwrite to replace it"),
        # Named, the same files are two tasks; then the missing export is what is wrong.
        (["--embedder", export, "--tagging", f"pos={conll}", "--classification", tsv],
         f"error: {tmp_path}/none is not a SavedModel directory: it has no saved_model.pb "
         "(give the directory tfeff-export wrote)"),
    ]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=REPO)
    r = subprocess.run([sys.executable, "-c", _REFUSE, json.dumps([a for a, _ in cases])],
                       cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    results = json.loads(r.stdout.strip().splitlines()[-1])
    for (args, message), (code, stderr) in zip(cases, results, strict=True):
        assert (code, stderr) == (1, message + "\n"), args
    assert sorted(os.listdir(tmp_path)) == ["a.conll", "a.tsv", "b.conll", "b.tsv", "table.md"]
    assert table.read_text(encoding="utf-8") == "an earlier table\n"


def _majority_by_hand(train, test):
    """`(accuracy, macro-F1)` in percent of predicting the most frequent of the `train`
    classes (the first in sorted order on a tie) for every `test` item: counted here,
    not by tfeff. The predicted class scores 2·hits / (hits + n); every other class of
    the test set scores 0; a class in neither is left out of the mean."""
    counts = collections.Counter(train)
    top = min(counts, key=lambda c: (-counts[c], c))
    hits = test.count(top)
    present = set(test) | {top}
    return 100 * hits / len(test), 100 * (2 * hits / (hits + len(test))) / len(present)


def test_the_table_is_tfeff_evaluations_for_the_same_tasks_and_seeds(fasttext_export,
                                                                     tmp_path):
    """The fastText fixture speaks the synthetic language of seed 1, lexicon 300. A
    tagging task (tag column 1, named after its file) and a classification task (named on
    the command line), three seeds, two epochs: the binary's table (on stdout and in
    --output, whose directory it creates) is the in-process one; its majority-class row
    is a count of the task files. The export has one layer (fastText), whose scalar mix
    has nothing to learn: no "no gradient" warning; six probes are trained and scored
    without a retracing warning; and, run without TF_CPP_MIN_LOG_LEVEL, none of
    TensorFlow's C++ lines reach stderr."""
    from tfeff.data import synthetic_tasks

    export = fasttext_export
    paths = synthetic_tasks(str(tmp_path / "tasks"), 120, 60, seed=1, lexicon_size=300)
    output = tmp_path / "results" / "features.md"
    args = ["--embedder", f"ft={export}",
            "--tagging", ",".join(paths["tagging"]), "--tag_column", "1",
            "--classification", "agree=" + ",".join(paths["agreement"]),
            "--seeds", "3,4,5", "--epochs", "2", "--output", str(output)]
    r = _evaluate(args, env={"TF_CPP_MIN_LOG_LEVEL": None})
    assert r.returncode == 0, r.stderr[-3000:]
    assert not TENSORFLOW_LINES.search(r.stderr), r.stderr[-3000:]
    assert not re.search(r"gradient|retracing", r.stderr, re.I), r.stderr[-3000:]
    tasks = {"tagging_train": ("tagging", *paths["tagging"], 1),
             "agree": ("classification", *paths["agreement"])}
    rows = evaluation.evaluate({"ft": export}, tasks, ("linear",), (3, 4, 5),
                               epochs=2, log=lambda *_: None)
    expected = evaluation.table(rows, (3, 4, 5))
    assert r.stdout == expected
    assert output.read_text(encoding="utf-8") == expected
    assert os.listdir(output.parent) == ["features.md"]  # no temporary left
    lines = expected.splitlines()
    assert lines[0] == ("| features | probe | tagging_train acc | tagging_train macro-F1 "
                        "| agree acc | agree macro-F1 |")
    assert len(lines) == 7 and lines[2].startswith("| ft | linear | ")
    assert lines[5] == "Mean ± standard deviation over probe seeds [3, 4, 5] (percent)."
    numbers = [float(x) for x in re.findall(r"(\d+\.\d) ± \d+\.\d", lines[2])]
    assert len(numbers) == 4 and all(0 <= x <= 100 for x in numbers), numbers

    def column(path, index, sep=None):
        with open(path, encoding="utf-8") as f:
            return [line.rstrip("\n").split(sep)[index] for line in f
                    if line.strip() and not line.startswith("#")]

    tagging = _majority_by_hand(column(paths["tagging"][0], 1), column(paths["tagging"][1], 1))
    agree = _majority_by_hand(column(paths["agreement"][0], 0, "\t"),
                              column(paths["agreement"][1], 0, "\t"))
    assert r.stdout.splitlines()[3] == "| majority class | — | " + " | ".join(
        f"{x:.1f}" for x in (*tagging, *agree)) + " |"
    assert "tagging_train" in r.stderr and "agree" in r.stderr  # the progress lines
