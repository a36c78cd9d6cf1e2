"""The outputs of the binaries never go through a name tfeff does not own: an output that
is an input or lies inside one is refused, `--overwrite` replaces only what the binary
wrote, and a symbolic link at an output is replaced, never written or emptied through.
(The model directory's own names: tests/training/test_owned_files.py.)"""

import json
import os
import shutil
import subprocess
import sys

import pytest

from tests.bin.test_evaluate import _REFUSE
from tests.conftest import REPO
from tfeff.data import files
from tfeff.export.embed_file import embed_file
from tfeff.export.saved_embedder import check_export_path

@pytest.fixture(scope="module")
def export(fasttext_export, tmp_path_factory):
    """A real export (fastText vectors alone): a copy of the run's, which a write through
    it, were one to happen, would not reach."""
    path = str(tmp_path_factory.mktemp("owned_writes") / "export")
    shutil.copytree(fasttext_export, path)
    return path


def _snapshot(directory):
    """`{relative path: bytes}` of every file under `directory`."""
    out = {}
    for root, _, names in os.walk(directory):
        for name in names:
            path = os.path.join(root, name)
            with open(path, "rb") as f:
                out[os.path.relpath(path, directory)] = f.read()
    return out


# Each case through tfeff-evaluate's own main and error boundary, in one process.
_EVALUATE = _REFUSE  # (tests/bin/test_evaluate.py)


def test_evaluate_writes_no_output_into_an_embedder_and_overwrites_only_its_table(export,
                                                                                   tmp_path):
    """`--output <export>/saved_model.pb --overwrite` with that export as `--embedder` (once:
    the export destroyed after the probes trained), the same through a link, a file of the
    user's and a named pipe: each refused before any probe, one line, exit 1, nothing
    changed. An earlier table reached through a link is replaced by a new file; the table
    the link named is left as it was."""
    export_path = export
    before = _snapshot(export_path)
    (tmp_path / "train.tsv").write_text("0\tthe dog runs\n1\ta cat sees\n" * 3,
                                        encoding="utf-8")
    (tmp_path / "test.tsv").write_text("0\tthe big dog\n1\ta small cat\n", encoding="utf-8")
    task = ["--embedder", f"ft={export_path}", "--classification",
            f"{tmp_path}/train.tsv,{tmp_path}/test.tsv", "--seeds", "0", "--epochs", "1"]
    inside = os.path.join(export_path, "saved_model.pb")
    link = tmp_path / "link.md"
    link.symlink_to(inside)
    notes = tmp_path / "notes.md"
    notes.write_text("my notes\n", encoding="utf-8")
    pipe = tmp_path / "pipe.md"
    os.mkfifo(pipe)
    earlier = tmp_path / "earlier.md"
    earlier.write_text("| features | probe | old acc | old macro-F1 |\n", encoding="utf-8")
    results = tmp_path / "results.md"
    results.symlink_to(earlier)
    cases = [
        (inside, f"error: The output {inside} lies inside the embedder ft (--embedder) "
         f"{export_path}, which this job reads: it would be written into that input. Choose "
         "an output path outside it."),
        (link, f"error: The output {link} lies inside the embedder ft (--embedder) "
         f"{export_path}"),
        (notes, f"error: --output {notes} exists and is not a table tfeff-evaluate wrote (its "
         "first line is not a table's header); --overwrite replaces only such a table, so "
         "nothing was written. Choose another output path."),
        (pipe, f"error: {pipe} is a named pipe, where tfeff writes a file: nothing was written "
         "there. Remove it or choose another path."),
        (results, None),
    ]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=REPO)
    args = [[*task, "--output", str(path), "--overwrite"] for path, _ in cases]
    r = subprocess.run([sys.executable, "-c", _EVALUATE, json.dumps(args)], cwd=REPO, env=env,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    outcomes = json.loads(r.stdout.strip().splitlines()[-1])
    for (path, message), (code, stderr) in zip(cases[:-1], outcomes, strict=False):
        assert code == 1 and stderr.startswith(message) and stderr.count("\n") == 1, \
            (path, stderr[-2000:])
    assert outcomes[-1][0] == 0, outcomes[-1][1][-2000:]
    assert _snapshot(export_path) == before
    assert notes.read_text(encoding="utf-8") == "my notes\n"
    assert os.path.islink(link) and os.path.exists(pipe) and not os.path.isfile(pipe)
    assert not os.path.islink(results)
    assert results.read_text(encoding="utf-8").startswith("| features | probe | train acc")
    assert earlier.read_text(encoding="utf-8") == "| features | probe | old acc | old macro-F1 |\n"
    assert not [n for n in os.listdir(tmp_path) if ".tmp-" in n]


def test_an_output_over_a_link_replaces_the_link_and_leaves_its_target(export, tmp_path):
    """`--output` a symbolic link to an earlier export, with `--overwrite`: the finished
    directory replaces the link, the export it named is untouched, nothing is left beside
    them (once: the linked export emptied through the link, then a
    FailedPreconditionError and a `.old` link left). Every writer of a directory moves it
    into place this way (tfeff-export, tfeff-embed, the CoRe converters)."""
    export_path = export
    earlier, finished = tmp_path / "earlier", tmp_path / "finished"
    shutil.copytree(export_path, earlier)
    shutil.copytree(export_path, finished)
    (finished / "new.txt").write_text("new\n", encoding="utf-8")
    before = _snapshot(earlier)
    output = tmp_path / "latest"
    output.symlink_to(earlier)
    recheck = check_export_path(str(output), {}, overwrite=True)  # the link names an export
    files.move_directory_into_place(str(finished), str(output), recheck)
    assert not os.path.islink(output) and (output / "new.txt").read_text() == "new\n"
    assert _snapshot(earlier) == before
    assert sorted(os.listdir(tmp_path)) == ["earlier", "latest"]


def test_embed_replaces_a_linked_partial_folder_and_leaves_its_target(export, tmp_path):
    """`<output>.partial` is tfeff-embed's own name: a symbolic link there (to an empty
    folder of the user's) is removed and the run goes on in a folder of its own (once:
    `[Errno 17] File exists`); the folder it named stays."""
    export_path = export
    text = tmp_path / "input.txt"
    text.write_text("the dog runs\na cat\n", encoding="utf-8")
    mine = tmp_path / "mine"
    mine.mkdir()
    output = tmp_path / "embedded"
    os.symlink(mine, f"{output}.partial")
    result = embed_file(export_path, str(text), str(output))
    assert result["lines"] == 2 and os.path.isfile(output / "embeddings.json")
    assert os.path.isdir(mine) and not os.listdir(mine)
    assert sorted(os.listdir(tmp_path)) == ["embedded", "input.txt", "mine"]
