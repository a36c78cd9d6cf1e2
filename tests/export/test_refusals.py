"""Writers never destroy what they read: export, embed and convert refuse an output that
is, holds or lies in an input, and `overwrite` replaces only an earlier output of the
same kind. Reading a model directory that a run is still training in is safe: a
checkpoint deleted between its choice and its restore makes the newest one chosen again."""

import glob
import hashlib
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from tests.conftest import REPO
from tests.models.test_bert import make_bert
from tfeff.convert import write_hf_bert
from tfeff.convert.relaxed_to_standard import convert_model_dir
from tfeff.export import export_fasttext, export_model_dir
from tfeff.export import model_dir_embedder
from tfeff.export.embed_file import embed_file
from tfeff.export.saved_embedder import check_export_path
from tfeff.training import checkpoints
from tfeff.training import restore_model
from tfeff.training.errors import CheckpointError


def _tree(path):
    """`{relative path: sha256}` of every file under `path` (`"dir"` for directories)."""
    out = {}
    for root, dirs, names in os.walk(path):
        for name in dirs:
            out[os.path.relpath(os.path.join(root, name), path) + "/"] = "dir"
        for name in names:
            full = os.path.join(root, name)
            with open(full, "rb") as f:
                out[os.path.relpath(full, path)] = hashlib.sha256(f.read()).hexdigest()
    return out


def _leftovers(parent):
    """Temporary siblings and partial directories a writer may leave in `parent`."""
    return sorted(n for n in os.listdir(parent)
                  if ".tmp-" in n or n.endswith(".partial") or n.startswith((".convert-", ".hf-")))


def _one_error_line(stderr):
    assert "Traceback" not in stderr, stderr[-3000:]
    errors = [line for line in stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, stderr[-3000:]
    return errors[0]


@pytest.fixture
def model_copy(trained_dir, tmp_path):
    """A private copy of the trained ELMo-C model directory (the writers under test
    must not get a chance to damage the shared one)."""
    path = str(tmp_path / "models" / "elmo_c")
    shutil.copytree(trained_dir[0], path)
    return path


@pytest.fixture
def embedder(demo_runs, tmp_path):
    """A private copy of the ELMo-C demo's export, written by `tfeff-export` (the
    session's demo run of the `trained_dir` model)."""
    run = demo_runs.get("demo_elmo_c")
    assert run["export_run"][0] == 0, run["export_run"][2][-3000:]
    return shutil.copytree(run["export"], str(tmp_path / "embedders" / "elmo_c"))


def _write_lines(path, lines):
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return str(path)


def test_export_and_embed_binaries_refuse_to_overwrite_what_they_read(model_copy, embedder,
                                                                      tmp_path):
    """`--overwrite` onto the model directory (export) or the embedder (embed) itself: exit
    1 with one error line naming both paths, and every input file as it was."""
    models, embedders = _tree(model_copy), _tree(embedder)
    text = _write_lines(tmp_path / "in.txt", ["the dogs run .", "a cat"])
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    runs = [subprocess.Popen([sys.executable, "-m", *args], cwd=REPO, env=env, text=True,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            for args in (["tfeff.bin.export", "--model_dir", model_copy, "--output",
                          model_copy, "--overwrite"],
                         ["tfeff.bin.embed", "--embedder", embedder, "--input", text,
                          "--output", embedder, "--overwrite"])]  # both at once: 2 cores
    (_, export_err), (_, embed_err) = [run.communicate(timeout=300) for run in runs]
    assert [run.returncode for run in runs] == [1, 1], export_err[-3000:] + embed_err[-3000:]
    assert (f"The output {model_copy} is the model directory (model_dir) {model_copy}"
            in _one_error_line(export_err))
    assert (f"The output {embedder} is the embedder (embedder_path, --embedder) {embedder}"
            in _one_error_line(embed_err))
    assert _tree(model_copy) == models and _tree(embedder) == embedders
    for parent in (os.path.dirname(model_copy), os.path.dirname(embedder), str(tmp_path)):
        assert _leftovers(parent) == []


# -- export ------------------------------------------------------------------------------

def test_export_refuses_every_output_that_would_destroy_an_input_or_foreign_data(
        model_copy, fasttext_model, tmp_path):
    before = _tree(model_copy)
    parent = os.path.dirname(model_copy)
    link = str(tmp_path / "link")
    os.symlink(model_copy, link)
    fasttext_in_model_dir = os.path.join(model_copy, "fasttext.bin")
    cases = [
        # (call, error, message)
        (lambda: export_model_dir(model_copy, parent, overwrite=True), ValueError,
         f"The output {parent} contains the model directory (model_dir) {model_copy}"),
        (lambda: export_model_dir(model_copy, link, overwrite=True), ValueError,
         f"The output {link} is the model directory (model_dir) {model_copy}"),
        (lambda: export_model_dir(model_copy, os.path.join(model_copy, "checkpoints"),
                                  overwrite=True), FileExistsError,
         "checkpoints exists and is not an export written by tfeff (it has no "
         "saved_model.pb)"),
        (lambda: export_fasttext(fasttext_in_model_dir, model_copy, overwrite=True), ValueError,
         f"The output {model_copy} contains the fastText file (fasttext_path, --fasttext) "
         f"{fasttext_in_model_dir}"),
        (lambda: export_fasttext(fasttext_model[0], model_copy, overwrite=True), FileExistsError,
         "is not an export written by tfeff (it holds checkpoints, config.yaml, fasttext.bin, "
         "vocabulary.txt, vocabulary_vectors.npy: a model directory)"),
        (lambda: export_fasttext(fasttext_model[0], fasttext_model[0], overwrite=True),
         ValueError, "ft.bin is the fastText file"),
    ]
    for call, error, message in cases:
        with pytest.raises(error) as info:
            call()
        assert message in str(info.value), str(info.value)
    assert _tree(model_copy) == before
    assert _leftovers(parent) == [] and _leftovers(str(tmp_path)) == []


def test_overwrite_may_replace_an_export_but_no_other_directory(embedder, fasttext_model,
                                                               tmp_path):
    check_export_path(embedder, {}, overwrite=True)  # an export: overwrite may replace it
    # A directory of other files, holding a SavedModel-like name, is not an export.
    other = tmp_path / "other"
    other.mkdir()
    (other / "saved_model.pb").write_bytes(b"not tfeff's")
    with pytest.raises(FileExistsError, match=r"other exists and is not an export.*"
                       r"assets.extra/embedder.json"):
        export_fasttext(fasttext_model[0], str(other), overwrite=True)
    assert _tree(str(other)) == {"saved_model.pb": hashlib.sha256(b"not tfeff's").hexdigest()}
    assert sorted(os.listdir(tmp_path)) == ["embedders", "other"]


# -- embed -------------------------------------------------------------------------------

def test_what_appears_at_the_output_while_a_writer_works_is_checked_again(tmp_path):
    """The output is checked before the work and again when the finished directory is
    moved into place: a directory that appeared there meanwhile is never replaced."""
    from tfeff.data import files

    output = str(tmp_path / "export")
    recheck = check_export_path(output, {"model directory (model_dir)": str(tmp_path / "m")},
                                overwrite=True)  # nothing there yet: passes
    finished = tmp_path / "finished"
    finished.mkdir()
    (finished / "saved_model.pb").write_bytes(b"new")
    os.makedirs(os.path.join(output, "checkpoints"))  # someone's model directory, meanwhile
    (tmp_path / "export" / "config.yaml").write_text("family: elmo\n")
    before = _tree(output)
    with pytest.raises(FileExistsError, match=rf"{output} exists and is not an export"):
        files.move_directory_into_place(str(finished), output, recheck)
    assert _tree(output) == before and (finished / "saved_model.pb").exists()
    shutil.rmtree(output)
    files.move_directory_into_place(str(finished), output, recheck)
    assert _tree(output) == {"saved_model.pb": hashlib.sha256(b"new").hexdigest()}


def test_embed_refuses_inputs_and_foreign_outputs_and_replaces_its_own(embedder, tmp_path):
    source = embedder
    before = _tree(source)
    text = _write_lines(tmp_path / "in.txt", ["the dogs run .", "a cat", ""])
    text_bytes = open(text, "rb").read()
    # An earlier output of tfeff-embed is replaced with overwrite.
    out = str(tmp_path / "out")
    embed_file(source, text, out)
    meta = embed_file(source, text, out, overwrite=True, layers=[1])
    assert meta["layers"] == [1] and sorted(os.listdir(out)) == [
        "embeddings.json", "layer_1.npy", "offsets.npy", "tokens.txt"]
    # A directory with a file tfeff-embed does not write is not replaced.
    (tmp_path / "out" / "notes.txt").write_text("mine")
    kept = _tree(out)
    foreign_dir = tmp_path / "foreign.partial"
    foreign_dir.mkdir()
    (foreign_dir / "keep.txt").write_text("mine")
    cases = [
        (dict(output=text), ValueError,
         f"The output {text} is the input file (input_path, --input) {text}"),
        (dict(output=os.path.dirname(source)), ValueError,
         f"contains the embedder (embedder_path, --embedder) {source}"),
        (dict(output=os.path.join(source, "variables", "x")), ValueError,
         f"lies inside the embedder (embedder_path, --embedder) {source}"),
        (dict(output=out), FileExistsError,
         "out exists and is not a tfeff-embed output written by tfeff (it holds notes.txt"),
        # `<output>.partial` is the embed job's own: a foreign one is not deleted either.
        (dict(output=str(tmp_path / "foreign")), FileExistsError,
         "foreign.partial exists and is not an unfinished tfeff-embed output"),
        (dict(input_path=str(tmp_path), output=str(tmp_path / "o")), ValueError,
         f"The input {tmp_path} is not a regular file (input_path, --input)"),
    ]
    for kwargs, error, message in cases:
        args = {"embedder_path": source, "input_path": text, "overwrite": True, **kwargs}
        with pytest.raises(error) as info:
            embed_file(**args)
        assert message in str(info.value), str(info.value)
    assert _tree(source) == before and open(text, "rb").read() == text_bytes
    assert _tree(out) == kept and os.listdir(foreign_dir) == ["keep.txt"]
    assert sorted(os.listdir(tmp_path)) == ["embedders", "foreign.partial", "in.txt", "out"]


# -- convert -----------------------------------------------------------------------------

def test_convert_and_hugging_face_writers_refuse_their_inputs(model_copy, tmp_path):
    before = _tree(model_copy)
    for output, relation in ((model_copy, "is"), (os.path.dirname(model_copy), "contains"),
                             (os.path.join(model_copy, "standard"), "lies inside")):
        with pytest.raises(ValueError, match=f"The output {output} {relation} the model "
                           f"directory \\(model_dir, --model_dir\\) {model_copy}"):
            convert_model_dir(model_copy, output)
    assert _tree(model_copy) == before
    bert = make_bert()
    vocab = tmp_path / "vocab" / "vocab.txt"
    vocab.parent.mkdir()
    words = ["<pad>", "<unk>", "<s>", "</s>", "[MASK]"] + [f"w{i}" for i in range(5, 40)]
    assert len(words) == bert.backbone.vocabulary_size
    vocab.write_text("".join(f"{w}\t1\n" for w in words))
    with pytest.raises(ValueError, match=f"contains the vocabulary file \\(vocabulary_path\\) "
                       f"{vocab}"):
        write_hf_bert(bert, str(vocab.parent), vocabulary_path=str(vocab), overwrite=True)
    hf = str(tmp_path / "hf")
    write_hf_bert(bert, hf, vocabulary_path=str(vocab))
    write_hf_bert(bert, hf, vocabulary_path=str(vocab), overwrite=True)  # its own: replaced
    with pytest.raises(FileExistsError, match="holds checkpoints, config.yaml"):
        write_hf_bert(bert, model_copy, overwrite=True)
    assert _tree(model_copy) == before and sorted(os.listdir(hf)) == [
        "config.json", "model.safetensors", "special_tokens_map.json", "tokenizer_config.json",
        "vocab.txt"]
    assert _leftovers(str(tmp_path)) == [] and _leftovers(os.path.dirname(model_copy)) == []


# -- a model directory that a run is still training in -----------------------------------

def _checkpoint_files(prefix):
    return glob.glob(prefix + ".index") + glob.glob(prefix + ".data-*")


def _record(directory, prefixes):
    """What `tf.train.CheckpointManager` records after a save: the kept checkpoints."""
    tf.compat.v1.train.update_checkpoint_state(
        directory, os.path.basename(prefixes[-1]), [os.path.basename(p) for p in prefixes])


def test_a_checkpoint_deleted_between_choice_and_restore_makes_the_newest_restored(
        model_copy, monkeypatch):
    directory = os.path.join(model_copy, "checkpoints")
    prefixes = sorted(glob.glob(os.path.join(directory, "ckpt-*.index")),
                      key=lambda p: checkpoints.checkpoint_step(p[:-len(".index")]))
    assert len(prefixes) >= 2, prefixes
    newest, chosen = prefixes[-1][:-len(".index")], prefixes[-2][:-len(".index")]
    # The directory as it was before the run's last save: `chosen` is its newest.
    held = os.path.join(model_copy, "held")
    os.makedirs(held)
    for f in _checkpoint_files(newest):
        shutil.move(f, held)
    _record(directory, [chosen])
    select = checkpoints.select_checkpoint
    choices = []

    def select_then_save(path, fallback=False):
        """The real choice; then the run saves `newest` and deletes the chosen one."""
        prefix, names = select(path, fallback)
        choices.append(prefix)
        if len(choices) == 1:
            for f in os.listdir(held):
                shutil.move(os.path.join(held, f), directory)
            _record(directory, [newest])
            for f in _checkpoint_files(prefix):
                os.remove(f)
        return prefix, names

    def key(variable):  # checkpoints.make_checkpoint's name, escaped as TensorFlow does
        return f"model/{variable.path.replace('/', '.').replace('.', '..')}/.ATTRIBUTES/" \
            "VARIABLE_VALUE"

    reader = tf.train.load_checkpoint(chosen)
    older = {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()
             if name.startswith("model/")}
    monkeypatch.setattr(checkpoints, "select_checkpoint", select_then_save)
    module, _, step = model_dir_embedder(model_copy)  # what export_model_dir restores
    assert choices == [chosen, newest]
    assert step == checkpoints.checkpoint_step(newest)
    assert not _checkpoint_files(chosen)
    newer = tf.train.load_checkpoint(newest)
    weights = module.model.weights
    for v in weights:
        np.testing.assert_array_equal(v.numpy(), newer.get_tensor(key(v)))
    assert any(not np.array_equal(v.numpy(), older[key(v)]) for v in weights)


def test_checkpoints_that_stay_missing_or_keep_vanishing_give_an_error_naming_the_model_dir(
        model_copy, monkeypatch):
    directory = os.path.join(model_copy, "checkpoints")

    def kept():
        return sorted((p[:-len(".index")] for p in
                       glob.glob(os.path.join(directory, "ckpt-*.index"))),
                      key=checkpoints.checkpoint_step)

    # The newest checkpoint lost its data file, and its index still lists it.
    newest = kept()[-1]
    for f in glob.glob(newest + ".data-*"):
        os.remove(f)
    with pytest.raises(CheckpointError, match=f"{model_copy}: files of its newest checkpoint "
                       f"{os.path.basename(newest)} are missing"):
        restore_model(model_copy)
    os.remove(newest + ".index")
    _record(directory, kept())
    remaining = len(kept())
    # Every checkpoint is deleted in turn right after it was chosen.
    select = checkpoints.select_checkpoint
    deleted = []

    def select_then_delete(path, fallback=False):
        """The real choice; then a run deletes it and records the rest."""
        prefix, names = select(path, fallback)
        if prefix is not None:
            for f in _checkpoint_files(prefix):
                os.remove(f)
            deleted.append(os.path.basename(prefix))
            if kept():
                _record(directory, kept())
            else:
                os.remove(os.path.join(directory, "checkpoint"))
        return prefix, names

    monkeypatch.setattr(checkpoints, "select_checkpoint", select_then_delete)
    with pytest.raises(CheckpointError) as info:
        restore_model(model_copy)
    assert len(deleted) == remaining and not glob.glob(os.path.join(directory, "ckpt-*"))
    assert str(info.value) == (
        f"every checkpoint of {model_copy} vanished while it was being read "
        f"({', '.join(deleted)} were deleted): is a run still training there? Try again.")


def test_export_refuses_nan_vectors_and_a_second_writer_and_sweeps_a_killed_ones(model_copy,
                                                                                  tmp_path):
    """export_model_dir (tfeff-export's work): a vectors table with NaN rows (once exported
    as it was) is refused naming the rows; while another process writes the output (its
    lock) the export is refused naming it; what a killed export left beside the output
    goes with the next one."""
    output = str(tmp_path / "export")
    broken = str(tmp_path / "broken")
    shutil.copytree(model_copy, broken)
    vectors = os.path.join(broken, "vocabulary_vectors.npy")
    table = np.load(vectors)
    table[5] = np.nan
    np.save(vectors, table)
    with pytest.raises(ValueError, match=re.escape(
            f"The embedding table `{vectors}` holds NaN or Inf in 1 of its {len(table)} rows "
            "(ids 5)")):
        export_model_dir(broken, output)
    assert not os.path.exists(output)

    from tfeff.data import files

    held = files.lock(output + ".lock", "tfeff-export")  # another writer's lock (flock is
    try:                                                 # per open file, as a process's)
        with pytest.raises(FileExistsError, match=re.escape(
                f"{output} is being written by tfeff-export (pid {os.getpid()} on ")):
            export_model_dir(model_copy, output)
    finally:
        held.close()
    leftover = tmp_path / "export.tmp-0badf00d"  # a killed export's SavedModel in progress
    leftover.mkdir()
    (leftover / "saved_model.pb").write_bytes(b"half")
    export_model_dir(model_copy, output)
    assert sorted(os.listdir(tmp_path)) == ["broken", "export", "models"]
