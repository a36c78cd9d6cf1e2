"""A directory that is not an export tfeff wrote, or an export that was damaged, is refused
where exports are opened (`tfeff.export.load_embedder`, which `tfeff-evaluate` and
`tfeff-embed` call): one error naming the directory and what is wrong, which the binaries'
error boundary prints as one line with exit status 1 (once a KeyError or a protobuf
traceback)."""

import json
import os
import re
import shutil

import pytest
import tensorflow as tf

from tfeff.bin import common
from tfeff.evaluation import evaluate
from tfeff.export import load_embedder
from tfeff.export.embed_file import embed_file


@pytest.fixture(scope="module")
def export(fasttext_export):
    """A real tfeff export (fastText vectors alone: the cheapest), shared by the run."""
    return fasttext_export


class _Foreign(tf.Module):
    """Another program's SavedModel: a `serving_default`, or an `embed` of its own."""

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="text")])
    def serve(self, text):
        return {"scores": tf.strings.length(text)}


def _foreign(path, signature, metadata_of=None):
    """Saves `_Foreign` at `path` with its function as `signature`; with `metadata_of`, a
    copy of that export's `assets.extra/embedder.json` beside it (as if copied over)."""
    module = _Foreign()
    tf.saved_model.save(module, path, signatures={signature: module.serve})
    if metadata_of:
        shutil.copytree(os.path.join(metadata_of, "assets.extra"),
                        os.path.join(path, "assets.extra"))
    return path


@pytest.fixture
def task(tmp_path):
    """A tagging task of two classes whose test file is not its training file."""
    train, test = tmp_path / "train.conll", tmp_path / "test.conll"
    train.write_text("the\tDET\ndog\tNOUN\n\na\tDET\ncat\tNOUN\n", encoding="utf-8")
    test.write_text("the\tDET\ncat\tNOUN\n", encoding="utf-8")
    return {"pos": ("tagging", str(train), str(test), 1)}


def _one_error_line(capsys, run):
    """`run` through the binaries' error boundary: exit status 1 and one `error:` line."""
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_:
        common.run_main(run)
    err = capsys.readouterr().err
    assert exit_.value.code == 1, err
    assert err.startswith("error: ") and err.count("\n") == 1, err
    return err.strip()


def test_another_programs_savedmodel_is_named_not_a_tfeff_embedder(export, task, tmp_path,
                                                                  capsys):
    """tfeff-evaluate with a SavedModel of another program once ended in
    `KeyError: 'embed_tokens'`; tfeff-embed with one carrying a copied embedder.json, in a
    KeyError for `layers`. Both now stop before any work with one line naming it."""
    plain = _foreign(str(tmp_path / "plain"), "serving_default")
    err = _one_error_line(capsys, lambda: evaluate({"x": plain}, task, seeds=(0,), epochs=1,
                                                   log=lambda line: None))
    assert err == (f"error: {plain} is a SavedModel but not a tfeff embedder: it has no "
                   "`embed` or `embed_tokens` signature (its signatures: serving_default). "
                   "Give a directory that tfeff-export wrote.")

    lookalike = _foreign(str(tmp_path / "lookalike"), "embed", metadata_of=export)
    lines = tmp_path / "lines.txt"
    lines.write_text("the dog\n", encoding="utf-8")
    out = tmp_path / "embedded"
    err = _one_error_line(capsys, lambda: embed_file(lookalike, str(lines), str(out)))
    assert err.startswith(f"error: {lookalike} is a SavedModel but not a tfeff embedder: "
                          "it has no `embed_tokens` signature (its signatures: embed)"), err
    assert not out.exists() and not os.path.exists(f"{out}.partial")


def _truncate(path, keep=0.5):
    with open(path, "rb") as f:
        data = f.read()
    with open(path, "wb") as f:
        f.write(data[:int(len(data) * keep)])


_VARIABLES = os.path.join("variables", "variables")
# How an export is damaged, and the reason the error gives (what TensorFlow said).
DAMAGE = {
    "garbage saved_model.pb": (
        lambda d: open(os.path.join(d, "saved_model.pb"), "wb").write(os.urandom(4000)),
        r"Cannot parse file .*saved_model\.pb"),
    "truncated saved_model.pb": (lambda d: _truncate(os.path.join(d, "saved_model.pb")),
                                 r"Cannot parse file .*saved_model\.pb"),
    "empty saved_model.pb": (lambda d: open(os.path.join(d, "saved_model.pb"), "wb").close(),
                             r"saved_model\.pb is empty"),
    "no variables": (lambda d: shutil.rmtree(os.path.join(d, "variables")),
                     r"Failed to find any matching files for .*variables"),
    "truncated variables": (
        lambda d: _truncate(os.path.join(d, _VARIABLES + ".data-00000-of-00001")), r".+"),
    "corrupted variables index": (
        lambda d: open(os.path.join(d, _VARIABLES + ".index"), "wb").write(os.urandom(300)),
        r".+"),
}


def _listing(path):
    """Every file under `path` with its size: what a refusal must leave as it was."""
    return {os.path.relpath(os.path.join(root, name), path):
            os.path.getsize(os.path.join(root, name))
            for root, _, names in os.walk(path) for name in names}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_a_damaged_export_is_named_with_what_tensorflow_said(export, damage, tmp_path,
                                                             capsys):
    """Each once a traceback (OSError from protobuf, IndexError, an op error) or exit status
    1 with TensorFlow's words alone; now one line naming the directory, the reason and what
    to do (a ValueError, the binaries' bad input); the directory is left as it was."""
    path = str(tmp_path / "damaged")
    shutil.copytree(export, path)
    damaged, reason = DAMAGE[damage]
    damaged(path)
    before = _listing(path)
    err = _one_error_line(capsys, lambda: load_embedder(path))
    assert re.fullmatch(
        rf"error: {re.escape(path)} does not load as a SavedModel \(.*{reason}.*\): the export "
        r"is damaged or incomplete; export it again with tfeff-export\.", err), err
    assert _listing(path) == before


def test_a_real_export_loads_with_its_whole_interface(export):
    """The check refuses no export of tfeff's: every signature the metadata lists is there
    (every family's exports are loaded the same way in tests/export and the demo runs)."""
    loaded = load_embedder(export)
    with open(os.path.join(export, "assets.extra", "embedder.json"), encoding="utf-8") as f:
        assert sorted(loaded.signatures) == json.load(f)["signatures"]
    out = loaded.signatures["embed"](sentences=tf.constant(["the dog"]))
    assert out["layers"].shape[:3] == (1, 1, 2)
