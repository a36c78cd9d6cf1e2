"""A run whose training text is mostly `<unk>` under its vocabulary stops before training,
naming the file; ordinary held-out text with some unknown words passes."""

import os

import pytest

from tests.conftest import REPO
from tfeff.config import load_config
from tfeff.data import CorpusError, Vocabulary, check_unknown_rate, learn_bert_vocabulary
from tfeff.data import text_lines
from tfeff.data.unknown_rate import unknown_rate
from tfeff.training import pretrain


def _write(path, lines):
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return str(path)


def test_text_that_does_not_match_the_vocabulary_is_refused_naming_the_file(small_corpus,
                                                                            tmp_path):
    train, heldout = small_corpus
    vocab_path = str(tmp_path / "vocabulary.txt")
    vocab = Vocabulary.build(text_lines(train))
    vocab.save(vocab_path)
    # The synthetic held-out text (a few unseen words) and a file with 40% unknown words pass.
    check_unknown_rate(heldout, vocab_path)
    known = " ".join(vocab.words[4:7])
    some_unknown = _write(tmp_path / "some.txt", [f"{known} zorp flib"] * 3)
    assert unknown_rate(some_unknown, vocab_path) == (6, 15, 3)
    check_unknown_rate([train, some_unknown], vocab_path)
    # A short shard of another corpus counts only in the total: a run with it goes on.
    tiny = _write(tmp_path / "tiny.txt", ["zorp flib glimmer wug"] * 5 + [f"{vocab.words[4]} zorp"])
    check_unknown_rate(f"{train},{tiny}", vocab_path)
    # Another corpus: refused, naming the file, whether the vocabulary was kept or learned;
    # on its own (at least MIN_FILE_TOKENS tokens) or in the total.
    other = _write(tmp_path / "other.txt", ["zorp flib glimmer wug"] * 300
                   + [f"{vocab.words[4]} zorp"])
    message = (rf"{other}: 100% of the words in its first 301 lines are not in the vocabulary "
               rf"{vocab_path} .*split into words with spaces.*`data.min_count`")
    with pytest.raises(CorpusError, match=message + r".*has to be removed"):
        check_unknown_rate(f"{train},{other}", vocab_path)
    with pytest.raises(CorpusError, match=rf"{tiny}: 95% of the words in its first 6 lines"):
        check_unknown_rate(tiny, vocab_path)
    assert os.path.exists(vocab_path)
    with pytest.raises(CorpusError, match=message + r".*learned from this text just now"):
        check_unknown_rate(other, vocab_path, learned=True)
    assert not os.path.exists(vocab_path)


def test_bert_tokenization_counts_unknown_wordpieces(tmp_path):
    english = _write(tmp_path / "en.txt", ["the cat sat on the mat, and the dog ran."] * 20)
    vocab_path = str(tmp_path / "vocabulary.txt")
    learn_bert_vocabulary(english, 60, vocab_path, lower_case=True)
    check_unknown_rate(_write(tmp_path / "cased.txt", ["The Cat sat ON the mat."]),
                       vocab_path, "bert", lower_case=True)
    greek = _write(tmp_path / "el.txt", ["η γάτα κάθισε στο χαλί"] * 3)
    with pytest.raises(CorpusError, match=rf"{greek}: 100% of the WordPiece tokens in its "
                       r"first 3 lines .*`data.lower_case`"):
        check_unknown_rate(greek, vocab_path, "bert", lower_case=True)


def test_pretraining_stops_before_fasttext_and_leaves_no_vocabulary(tmp_path):
    """With `data.min_count` above every count, the learned vocabulary holds no word of
    the text: the run stops at once, and the model directory keeps only its config."""
    train = _write(tmp_path / "train.txt",
                   [f"w{i} w{i + 1} w{i + 2} w{i + 3}" for i in range(0, 400, 4)])
    heldout = _write(tmp_path / "heldout.txt", ["w1 w2 w3"])
    config = load_config(os.path.join(REPO, "configs", "demo_elmo_c.yaml"), [
        "data.synthetic=null", f"data.train_files={train}", f"data.heldout_files={heldout}",
        "data.min_count=2"])
    model_dir = str(tmp_path / "model")
    with pytest.raises(CorpusError, match=rf"{train}: 9\d% of the words .*data.min_count"):
        pretrain(config, model_dir, verbose=0)
    assert sorted(os.listdir(model_dir)) == [".tfeff-lock", ".tfeff-model-dir", "config.yaml"]
