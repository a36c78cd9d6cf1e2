"""Corpus paths are resolved once, to regular files, and held-out files are not training
files; text and `.vec` rows are taken byte for byte, with what that means said aloud."""

import json
import logging
import os
import pickle
import re
import socket
import subprocess
import sys
import unicodedata

import numpy as np
import pytest

from tests.conftest import REPO
from tfeff.config import load_config
from tfeff.data import (CorpusError, ResolvedFiles, Vocabulary, WordVectors, WordVectorsError,
                        compute_vocabulary_vectors, count_windows, lm_dataset, resolve_files,
                        text_lines, training_and_heldout_files)
from tfeff.layers import FastTextEmbedding
from tfeff.training import pretrain

DEMO = os.path.join(REPO, "configs", "demo_elmo_c.yaml")
NFC = unicodedata.normalize("NFC", "café")
NFD = unicodedata.normalize("NFD", "café")


def _write(path, lines):
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return str(path)


# Small enough that a run which is not refused ends soon.
TINY = ["data.synthetic=null", "model.num_layers=1", "model.units=8", "model.projection_dim=8",
        "fasttext.dim=8", "fasttext.bucket=1000", "fasttext.epoch=1", "train.steps=2",
        "train.warmup_steps=1", "train.validation_steps=1", "data.batch_size=8"]


def _pretrain(tmp_path, *overrides):
    args = [sys.executable, "-m", "tfeff.bin.pretrain", "--config", DEMO,
            "--model_dir", str(tmp_path / "m")]
    for override in TINY + list(overrides):
        args += ["--override", override]
    # A read that never ends fails the test instead of hanging it.
    return subprocess.run(args, cwd=REPO, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"),
                          capture_output=True, text=True, timeout=120)


# Paths: a name is a file before it is a glob, and is resolved once.


def test_a_file_named_like_a_glob_is_itself_in_every_reader(tmp_path):
    """`[x].txt` is that file, not the glob that matches `x.txt`; its resolved list,
    given to the pipelines as the training run gives them, resolves to itself."""
    bracket = _write(tmp_path / "[x].txt", ["a b c d"] * 3)
    _write(tmp_path / "x.txt", ["other words only"] * 5)
    vocabulary = str(tmp_path / "vocabulary.txt")
    Vocabulary.build(text_lines(bracket)).save(vocabulary)
    assert resolve_files(bracket) == [bracket]
    assert list(text_lines(bracket)) == ["a b c d"] * 3
    # The training pipeline gets the resolved list (sharded by file): read as it is.
    assert count_windows(resolve_files(bracket), vocabulary, 10) == (3, 18)
    # An escaped pattern names the same file, resolves once, and stays resolved even if
    # the directory changes afterwards.
    os.remove(tmp_path / "x.txt")
    train, heldout = training_and_heldout_files(str(tmp_path / r"\[x\].txt"), "")
    assert (train.files, heldout) == ((bracket,), "")
    assert train == str(tmp_path / r"\[x\].txt")  # logs and saved state show the pattern
    _write(tmp_path / "x.txt", ["a"])
    assert resolve_files(train) == [bracket]
    batches = list(lm_dataset(resolve_files(train)[0::1], vocabulary, 8, 10))  # a shard
    assert [b.shape for b in batches] == [(3, 6)]
    # What crosses processes and JSON keeps its meaning.
    assert pickle.loads(pickle.dumps(train)).files == (bracket,)
    assert json.loads(json.dumps({"train_files": train})) == {"train_files": train}


def test_a_name_that_is_one_file_twice_is_read_once_and_commas_may_be_in_names(tmp_path):
    corpus = _write(tmp_path / "a,b.txt", ["a b"])
    (tmp_path / "sub").mkdir()
    os.symlink(corpus, tmp_path / "link.txt")
    assert resolve_files(corpus) == [corpus]
    assert resolve_files([corpus, str(tmp_path / "sub" / ".." / "a,b.txt"),
                          str(tmp_path / "link.txt")]) == [corpus]


@pytest.mark.parametrize("make, pattern, message", [
    (lambda d: (d / "shards").mkdir(), "shards",
     r"The corpus pattern `{d}/shards` is a directory, not a file: name the files in it "
     r"\(e.g. `{d}/shards/\*.txt`\)\."),
    (lambda d: (d / "shards").mkdir(), "shard*",
     r"The corpus pattern `{d}/shard\*` matches only directories \({d}/shards\): name the "
     r"files in them\."),
    (lambda d: (os.symlink(d / "b", d / "a"), os.symlink(d / "a", d / "b")), "a",
     r"The corpus file {d}/a is a symbolic link loop, not a regular file \(a corpus is read "
     r"several times: vocabulary, fastText, every epoch\)\."),
    (lambda d: (os.symlink(d / "b", d / "a"), os.symlink(d / "a", d / "b")), "*",
     r"The corpus pattern `{d}/\*` matches {d}/a, which is a symbolic link loop, not a regular "
     r"file"),
    (lambda d: os.symlink(d / "gone.txt", d / "a"), "a",
     r"The corpus file {d}/a is a symbolic link to nothing \(to {d}/gone.txt\)\."),
    (lambda d: os.mkfifo(d / "pipe"), "pipe",
     r"The corpus file {d}/pipe is a named pipe \(FIFO\), not a regular file \(a corpus is "
     r"read several times"),
    (lambda d: os.mkfifo(d / "pipe"), "pi?e",
     r"The corpus pattern `{d}/pi\?e` matches {d}/pipe, which is a named pipe \(FIFO\)"),
    (lambda d: socket.socket(socket.AF_UNIX).bind(str(d / "s")), "s",
     r"The corpus file {d}/s is a socket, not a regular file"),
])
def test_what_is_not_a_regular_file_is_named_for_what_it_is(make, pattern, message, tmp_path):
    make(tmp_path)
    with pytest.raises(CorpusError, match=message.format(d=re.escape(str(tmp_path)))):
        resolve_files(str(tmp_path / pattern))
    # The same message where a run resolves its files, for training and held-out text.
    good = _write(tmp_path / "good.txt", ["a b"])
    with pytest.raises(CorpusError, match=message.format(d=re.escape(str(tmp_path)))):
        training_and_heldout_files(good, str(tmp_path / pattern))


# Held-out files are not training files.


@pytest.mark.parametrize("heldout", [
    "{d}/train.txt", "{d}/sub/../train.txt", "./{rel}/train.txt", "{d}/link.txt",
    "{d}/hard.txt", "{d}/held.txt,{d}/t*.txt", "{d}/copy.txt",
])
def test_held_out_files_that_are_training_files_are_refused(heldout, tmp_path, monkeypatch):
    train = _write(tmp_path / "train.txt", ["a b c", "d e"])
    _write(tmp_path / "held.txt", ["a e"])
    (tmp_path / "sub").mkdir()
    os.symlink(train, tmp_path / "link.txt")
    os.link(train, tmp_path / "hard.txt")
    _write(tmp_path / "copy.txt", ["a b c", "d e"])
    monkeypatch.chdir(tmp_path.parent)
    heldout = heldout.format(d=tmp_path, rel=tmp_path.name)
    with pytest.raises(CorpusError, match=(
            r"The held-out file .* \(data.heldout_files `" + re.escape(heldout) + r"`\) (is|has "
            r"the same bytes as) the training file " + re.escape(train) + r" \(data.train_files "
            r"`.*`\): held-out results would be measured on training text\.")):
        training_and_heldout_files(train, heldout)


def test_held_out_text_of_its_own_is_accepted(tmp_path):
    train = _write(tmp_path / "train.txt", ["a b c", "d e"])
    held = _write(tmp_path / "held.txt", ["a b c", "d f"])  # same size, other bytes
    assert training_and_heldout_files(train, held)[1].files == (held,)


def test_pretrain_refuses_held_out_training_text_before_any_work(tmp_path):
    train = _write(tmp_path / "train.txt", ["a b c"] * 50)
    (tmp_path / "sub").mkdir()
    config = load_config(DEMO, TINY + [f"data.train_files={train}",
                                       f"data.heldout_files={tmp_path}/sub/../train.txt"])
    with pytest.raises(CorpusError, match=re.escape(
            f"The held-out file {tmp_path}/sub/../train.txt (data.heldout_files "
            f"`{tmp_path}/sub/../train.txt`) is the training file {train}")):
        pretrain(config, str(tmp_path / "m"), verbose=0)
    assert not os.path.exists(tmp_path / "m" / "vocabulary.txt")


# A subprocess run: under `slow` for the default suite's time budget (the mechanism is
# also checked in process there).
@pytest.mark.slow
def test_pretrain_refuses_a_held_out_pipe_instead_of_waiting_for_a_writer(tmp_path):
    train = _write(tmp_path / "train.txt", ["a b c"] * 50)
    os.mkfifo(tmp_path / "heldout")
    r = _pretrain(tmp_path, f"data.train_files={train}",
                  f"data.heldout_files={tmp_path}/heldout")
    assert r.returncode == 1, r.stderr[-2000:]
    assert (f"error: The corpus file {tmp_path}/heldout is a named pipe (FIFO), not a regular "
            "file") in r.stderr
    assert "Traceback" not in r.stderr
    assert not os.path.exists(tmp_path / "m" / "vocabulary.txt")


# Text is taken byte for byte; `.vec` rows as fastText writes and reads them.


def test_two_unicode_spellings_of_a_word_are_two_words_and_said_so(caplog):
    with caplog.at_level(logging.WARNING):
        vocabulary = Vocabulary.build([f"{NFC} au lait", f"un {NFD}", "naïve"])
    assert NFC in vocabulary and NFD in vocabulary  # byte for byte, as documented
    assert ("The text spells 1 word(s) in more than one Unicode normalization form, e.g. "
            f"'{NFD}' (U+0301) and '{NFC}' (U+00E9)") in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        Vocabulary.build([f"{NFC} au lait", "naïve"])
    assert "normalization" not in caplog.text


def test_vec_rows_split_at_any_ascii_whitespace_as_fasttext_reads_them(tmp_path):
    path = tmp_path / "v.vec"
    path.write_text("3 3\nthe\t0.1\t0.2\t0.3\ncat  1 2  3 \nno\u00a0break 4 5 6\n",
                    encoding="utf-8")
    vectors = WordVectors(str(path))
    np.testing.assert_array_equal(vectors.vector("cat"), [1, 2, 3])
    np.testing.assert_allclose(vectors.vector("the"), [0.1, 0.2, 0.3])
    # A no-break space is part of a word (fastText splits at ASCII whitespace only).
    np.testing.assert_array_equal(vectors.vector("no\u00a0break"), [4, 5, 6])
    # The layer reads the same rows.
    layer = FastTextEmbedding.from_file(str(path))
    np.testing.assert_array_equal(np.asarray(layer(np.array(["cat", "dog"]))),
                                  [[1, 2, 3], [0, 0, 0]])
    bad = tmp_path / "bad.vec"
    bad.write_text("2 3\nthe 0.1 0.2 0.3\ncat 1 x 3\n", encoding="utf-8")
    with pytest.raises(WordVectorsError, match=r"bad.vec:3: 'x' in the vector of 'cat' is not "
                                               r"a number"):
        WordVectors(str(bad))
    blank = tmp_path / "blank.vec"
    blank.write_text("2 3\nthe 0.1 0.2 0.3\n\ncat 1 2 3\n", encoding="utf-8")
    with pytest.raises(WordVectorsError, match=r"blank.vec:3: expected a word and 3 numbers, "
                                               r"got a blank line"):
        WordVectors(str(blank))


def test_a_word_with_two_vectors_is_refused_naming_both_lines(tmp_path):
    path = tmp_path / "dup.vec"
    path.write_text("3 2\nthe 1 2\ncat 3 4\nthe 5 6\n", encoding="utf-8")
    message = (r"dup.vec:4: the word 'the' has a vector already, on line 2: a .vec file gives "
               r"each word one vector")
    with pytest.raises(WordVectorsError, match=message):
        WordVectors(str(path))
    with pytest.raises(WordVectorsError, match=message):
        FastTextEmbedding.from_file(str(path))


def test_vocabulary_words_without_a_vector_are_counted_aloud(tmp_path, caplog):
    vocabulary = Vocabulary.build(["the cat sat", "the dog", NFD])
    half = tmp_path / "half.vec"
    half.write_text(f"4 2\n</s> 1 1\nthe 1 2\ncat 3 4\n{NFC} 5 6\n", encoding="utf-8")
    out = str(tmp_path / "table.npy")
    with caplog.at_level(logging.WARNING):
        compute_vocabulary_vectors(WordVectors(str(half)), vocabulary, out)
    assert (f"half.vec: 4 of 7 vocabulary words have no vector in it and get zeros ('<s>', "
            f"'{NFD}', 'dog', 'sat'), among them the sentence boundary <s>: as inputs they "
            "carry nothing, as targets nothing can be learned for them. 1 of them is in it "
            "spelled in another Unicode normalization form (NFC or NFD)") in caplog.text
    table = np.load(out)
    assert not table[vocabulary.id("dog")].any() and table[vocabulary.id("cat")].any()
    # Vectors that know none of the words: refused, nothing written.
    other = tmp_path / "other.vec"
    other.write_text("2 2\n</s> 1 1\nhund 1 2\n", encoding="utf-8")
    out = str(tmp_path / "none.npy")
    with pytest.raises(WordVectorsError, match=r"other.vec: none of the 5 words of the "
                                               r"vocabulary has a vector in it"):
        compute_vocabulary_vectors(WordVectors(str(other)), vocabulary, out)
    assert sorted(os.listdir(tmp_path)) == ["half.vec", "other.vec", "table.npy"]
