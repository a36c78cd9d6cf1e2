"""`train_fasttext` with the real fastText: over-long words are left out of its text, and a
model that fails its check is never put in place."""

import logging
import os

import pytest

from tfeff.data import CorpusError, WordVectorsError, check_fasttext_model, train_fasttext
from tfeff.data.fasttext_training import MAX_WORD_CHARS


def test_an_enormous_word_is_left_out_of_fasttext_with_a_warning(small_corpus, tmp_path,
                                                                 caplog):
    lines = open(small_corpus[0], encoding="utf-8").read().splitlines()
    giant = "ab" * 1_000_000  # a 2-million-character line without spaces
    lines.insert(10, giant)
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(lines) + "\n", encoding="utf-8")
    model_dir = tmp_path / "model"
    path = str(model_dir / "fasttext.bin")
    with caplog.at_level(logging.WARNING):
        train_fasttext(str(corpus), path, dim=16, minn=2, maxn=4, bucket=5000, epoch=1)
    assert f"longer than {MAX_WORD_CHARS} characters" in caplog.text
    assert f"{corpus}:11 (2,000,000 characters)" in caplog.text
    check_fasttext_model(path)
    import fasttext

    model = fasttext.load_model(path)
    assert giant not in model.words and "the" in model.words
    assert model.get_word_vector(giant[:5000]).any()  # n-grams still give it a vector
    assert sorted(os.listdir(model_dir)) == ["fasttext.bin"]


def test_a_corpus_of_only_enormous_words_is_refused_before_training(tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("x" * (MAX_WORD_CHARS + 1) + "\n", encoding="utf-8")
    model_dir = tmp_path / "model"
    with pytest.raises(CorpusError, match=rf"no word to train fastText on .*"
                       rf"{corpus}:1 \(1,001 characters\).*split into words with spaces"):
        train_fasttext(str(corpus), str(model_dir / "fasttext.bin"), dim=8, bucket=100)
    assert not os.listdir(model_dir)


def test_a_model_that_fails_its_check_is_not_kept(tmp_path):
    """A corpus this small and repetitive trains no output vector at all (fastText skips
    frequent words): the model is rejected before it is renamed into place."""
    corpus = tmp_path / "tiny.txt"
    corpus.write_text("\n".join(["the cat sat on the mat", "a dog ran"] * 50
                                + ["the dog sat"] * 50) + "\n", encoding="utf-8")
    model_dir = tmp_path / "model"
    with pytest.raises(WordVectorsError, match=rf"fastText training on {corpus} gave an "
                       r"unusable model: the output matrix is all zeros.*not kept"):
        train_fasttext(str(corpus), str(model_dir / "fasttext.bin"), dim=16, bucket=2000,
                       epoch=1)
    assert not os.listdir(model_dir)


def test_a_model_cut_short_on_a_full_disk_blames_the_disk_not_the_corpus(fasttext_model,
                                                                          tmp_path,
                                                                          monkeypatch):
    """fastText writes its model without checking its writes, so a full disk left a
    truncated file, which was reported as a corpus too small ("use more text"). The
    model here is a real one cut in half; the disk's free space is what the check reads."""
    import collections
    import errno
    import shutil

    from tfeff.data import fasttext_training

    path = tmp_path / "model.bin"
    shutil.copy(fasttext_model[0], path)
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) // 2)
    usage = collections.namedtuple("usage", "total used free")
    monkeypatch.setattr(fasttext_training.shutil, "disk_usage",
                        lambda _: usage(1 << 30, (1 << 30) - 4096, 4096))
    with pytest.raises(OSError) as full:
        fasttext_training._check_trained_model(str(path), "corpus.txt")
    assert full.value.errno == errno.ENOSPC and full.value.filename == str(path)
    assert "fastText could not write its whole model" in str(full.value)
    assert "4,096 bytes are free on that disk" in str(full.value)
    monkeypatch.setattr(fasttext_training.shutil, "disk_usage",
                        lambda _: usage(1 << 40, 1 << 30, (1 << 40) - (1 << 30)))
    with pytest.raises(WordVectorsError, match="use more text"):
        fasttext_training._check_trained_model(str(path), "corpus.txt")
