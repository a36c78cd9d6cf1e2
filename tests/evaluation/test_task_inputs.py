"""tfeff-evaluate and tfeff.evaluation check a task's files against each other, and an
export against the tasks, before anything is scored: degenerate tasks and test data that
is the training data are refused with one line naming the file; what an export leaves
out is counted and reported; an export whose outputs are not one per word is refused for
tagging; the table carries a majority-class row."""

import json
import os
import subprocess
import sys

import keras
import numpy as np
import pytest

from tests.bin.test_evaluate import _REFUSE
from tests.conftest import REPO
from tfeff import evaluation as tool

# A WordPiece vocabulary where every word is one piece, except the plurals ("cat ##s").
_SPECIALS = ["<pad>", "<unk>", "<s>", "</s>", "[MASK]"]
_WORDS = {"the": "DET", "a": "DET", "cat": "NOUN", "dog": "NOUN", "runs": "VERB",
          "sees": "VERB", "cats": "NOUN", "dogs": "NOUN"}
_VOCABULARY = _SPECIALS + ["the", "a", "cat", "dog", "runs", "sees", "##s"]
_PIECES = {w: 2 if w.endswith("s") and w[:-1] in _VOCABULARY else 1 for w in _WORDS}
MAX_TOKENS = 6


@pytest.fixture(scope="module")
def wordpiece_exports(tmp_path_factory):
    """A tiny untrained BERT exported with `max_tokens=6` and first-piece pooling
    (`"first"`: its path), and the same model's piece-level embedder
    (`subword_pooling="none"`): `"pieces"`, its module in memory, the code an export
    saves (tests/export/test_embedder.py compares the two), with its `signatures`;
    `"none"`, the first-piece export's copy holding the piece-level module's metadata,
    which is all the command line reads before it refuses a tagging task. One export
    instead of two: each costs seconds of tracing, saving and reloading."""
    import shutil
    import types

    from tfeff.export import embedder_module
    from tfeff.export import export_embedder
    from tfeff.models import Bert
    from tfeff.models import BertBackbone

    keras.utils.set_random_seed(0)
    bert = Bert(BertBackbone(len(_VOCABULARY), num_layers=1, hidden_dim=8, num_heads=1,
                             intermediate_dim=16, max_sequence_length=MAX_TOKENS + 2))
    bert.build()
    base = tmp_path_factory.mktemp("wordpiece_exports")
    paths = {"first": str(base / "first"), "none": str(base / "none")}
    export_embedder(bert, paths["first"], vocabulary=_VOCABULARY, max_tokens=MAX_TOKENS)
    pieces = embedder_module(bert, vocabulary=_VOCABULARY, max_tokens=MAX_TOKENS,
                             subword_pooling="none")
    shutil.copytree(paths["first"], paths["none"])
    metadata = os.path.join(paths["none"], "assets.extra", "embedder.json")
    with open(metadata, encoding="utf-8") as f:
        exported = json.load(f)
    assert exported["subword_pooling"] == "first"
    with open(metadata, "w", encoding="utf-8") as f:
        json.dump({**exported, **pieces.metadata()}, f)
    return {**paths, "pieces": types.SimpleNamespace(signatures=pieces.signatures())}


def _sentences(seed, n, lengths):
    rng = np.random.default_rng(seed)
    words = sorted(_WORDS)
    return [[words[i] for i in rng.integers(0, len(words), int(rng.integers(*lengths)))]
            for _ in range(n)]


def _conll(path, sentences):
    with open(path, "w", encoding="utf-8") as f:
        f.writelines("".join(f"{w}\t{_WORDS[w]}\n" for w in s) + "\n" for s in sentences)
    return str(path)


def _tsv(path, rows):
    with open(path, "w", encoding="utf-8") as f:
        f.writelines(f"{label}\t{sentence}\n" for label, sentence in rows)
    return str(path)


def _kept(sentence):
    """Words of `sentence` the export embeds: the leading ones whose pieces fit."""
    total = 0
    for n, word in enumerate(sentence):
        total += _PIECES[word]
        if total > MAX_TOKENS:
            return n
    return len(sentence)


def test_command_line_refuses_degenerate_tasks_before_loading_an_embedder(
        wordpiece_exports, tmp_path):
    """Through tfeff-evaluate's main and error boundary: each case is one line naming the
    file, exit status 1. The embedder does not exist, so a task refused with its own
    message was checked before any embedder was loaded."""
    good_train = _tsv(tmp_path / "train.tsv", [(1, "the cat runs"), (0, "a dog sees")])
    good_test = _tsv(tmp_path / "test.tsv", [(0, "the dog runs"), (1, "a cat sees")])
    one_train = _tsv(tmp_path / "one_train.tsv", [(1, "the cat runs"), (1, "a dog sees")])
    empty_test = _tsv(tmp_path / "empty_test.tsv", [(0, ""), (1, "  ")])
    copy = tmp_path / "copy.tsv"
    copy.write_bytes(open(good_train, "rb").read())
    one_tag = tmp_path / "one_tag.conll"
    one_tag.write_text("the\tX\ncat\tX\n\na\tX\n", encoding="utf-8")
    conll_train = _conll(tmp_path / "train.conll", [["the", "cat"], ["a", "dog", "runs"]])
    conll_test = _conll(tmp_path / "test.conll", [["a", "cat", "sees"]])
    dotted = os.path.join(str(tmp_path), ".", "..", tmp_path.name, "train.tsv")
    missing = f"x={tmp_path}/no_export"
    cases = [
        (["--classification", f"{one_train},{good_test}"],
         f"{one_train}: every training label of task 'one_train' is '1'; a task needs at "
         "least two different labels to score"),
        (["--tagging", f"pos={one_tag},{conll_test}", "--tag_column", "1"],
         f"{one_tag}: every training tag of task 'pos' is 'X'; a task needs at least two "
         "different tags to score"),
        (["--classification", f"{good_train},{empty_test}"],
         f"{empty_test}: every sentence of task 'train' is empty; there is nothing to "
         "classify"),
        (["--classification", f"t={good_train},{good_train}"],
         f"{good_train}: the test data of task 't' is its training data ({good_train}); "
         "give held-out test data"),
        (["--classification", f"t={good_train},{dotted}"],
         f"{dotted}: the test data of task 't' is its training data ({good_train}); "
         "give held-out test data"),
        (["--classification", f"t={good_train},{copy}"],
         f"{copy}: the test data of task 't' holds the same examples as its training data "
         f"({good_train}); give held-out test data"),
        # A sound task: what is wrong is then the missing embedder.
        (["--classification", f"{good_train},{good_test}"],
         f"{tmp_path}/no_export is not a SavedModel directory"),
    ]
    args = [["--embedder", missing, *a] for a, _ in cases]
    # Piece-level outputs cannot carry word tags: refused from its metadata.
    none = wordpiece_exports["none"]
    args.append(["--embedder", f"wp={none}", "--tagging", f"pos={conll_train},{conll_test}",
                 "--tag_column", "1"])
    messages = [m for _, m in cases] + [
        f"{none}: embedder 'wp' was exported with subword_pooling='none' (one vector per "
        "WordPiece, not per word), so tagging task 'pos' cannot align its tags with them; "
        "export it again with --subword_pooling first or mean"]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=REPO)
    r = subprocess.run([sys.executable, "-c", _REFUSE, json.dumps(args)], cwd=REPO, env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    results = json.loads(r.stdout.strip().splitlines()[-1])
    for arg, message, (code, stderr) in zip(args, messages, results, strict=True):
        if "no_export" in message:  # load_embedder's own message; its wording may grow
            assert code == 1 and stderr.startswith(f"error: {message}"), (arg, stderr)
            assert stderr.count("\n") == 1, stderr
        else:
            assert (code, stderr) == (1, f"error: {message}\n"), arg


def test_read_task_checks_the_two_files_against_each_other(tmp_path):
    """The library's own check (every path through `evaluate` and `fine_tune` uses it):
    a test class the training file lacks, and the count of test sentences that are also
    training sentences."""
    train = _conll(tmp_path / "a.conll", [["the", "cat"], ["a", "dog", "runs"]])
    test = _conll(tmp_path / "b.conll", [["the", "cat"], ["a", "cat", "sees"]])
    task = tool.read_task("pos", ("tagging", train, test, 1))
    assert task.classes == ["DET", "NOUN", "VERB"] and task.overlap == 1  # "the cat"
    assert tool.read_tasks({"pos": task})["pos"] is task
    unknown = tmp_path / "c.conll"
    unknown.write_text("a\tDET\ncat\tADJ\nsees\tVERB\n", encoding="utf-8")
    with pytest.raises(tool.FormatError, match=r"c.conll: tags not in the training data of "
                       r"task 'pos': \['ADJ'\]"):
        tool.read_task("pos", ("tagging", train, str(unknown), 1))
    # Fine-tuning checks its examples the same way, before building any model.
    with pytest.raises(tool.FormatError, match="every training label of task 'fine-tuning' "
                       "is 0; a task needs at least two different labels"):
        tool.fine_tune(str(tmp_path / "no_model_dir"), [(0, "the cat"), (0, "a dog")],
                       [(0, "a cat")], 2)
    with pytest.raises(tool.FormatError, match="holds the same examples as its training"):
        tool.fine_tune(str(tmp_path / "no_model_dir"), [(0, "the cat"), (1, "a dog")],
                       [(0, "the cat"), (1, "a dog")], 2)


def test_what_an_export_leaves_out_is_counted_and_reported(wordpiece_exports, tmp_path):
    """Sentences longer than the export's 6 pieces: the tokens past it have no vector.
    Every one is counted (train and test), named in the rows, the log and the table, and
    the scores count only the others; empty classification sentences likewise, and the
    classification sentences cut to 6 pieces."""
    train = _sentences(0, 24, (2, 10))
    test = _sentences(1, 8, (2, 10))
    tagging = (_conll(tmp_path / "train.conll", train), _conll(tmp_path / "test.conll", test))
    lost = {name: [sum(len(s) - _kept(s) for s in part), sum(map(len, part))]
            for name, part in (("train", train), ("test", test))}
    assert lost["test"][0] > 0 and lost["train"][0] > 0  # the case is exercised
    sentences = [(i % 2, " ".join(s)) for i, s in enumerate(train)]
    classification = (_tsv(tmp_path / "train.tsv", sentences),
                      _tsv(tmp_path / "test.tsv", [(0, "the cat"), (1, ""), (0, "a dog runs"),
                                                   (1, " "), (1, "dogs see")]))
    logged = []
    rows = tool.evaluate({"wp": wordpiece_exports["first"]},
                         {"pos": ("tagging", *tagging, 1),
                          "order": ("classification", *classification)},
                         ("linear",), (0,), epochs=1, log=logged.append)
    by_task = {r["task"]: r for r in rows}
    assert by_task["pos"]["missing"] == {"unit": "tokens", **lost}
    cut = sum(_kept(s) < len(s) for s in train)
    assert 0 < cut < len(train)
    assert by_task["order"]["missing"] == {"unit": "sentences", "train": [0, 24],
                                           "test": [2, 5],
                                           "truncated": {"train": cut, "test": 0}}
    assert (f"pos: embedder wp gives no vector to {lost['test'][0]} of {lost['test'][1]} "
            "test tokens (past the export's max_tokens, or without a model token): they are "
            "not scored") in logged
    text = tool.table(rows, (0,))
    assert (f"Not embedded: wp on pos: {lost['test'][0]} of {lost['test'][1]} test tokens and "
            f"{lost['train'][0]} of {lost['train'][1]} training tokens have no vector (past "
            "the export's max_tokens, or without a model token); the scores count the others "
            "only.") in text.splitlines()
    assert ("Not embedded: wp on order: 2 of 5 test sentences and 0 of 24 training sentences "
            "have no vector (no token the export embeds); they are classified from no "
            "features.") in text.splitlines()
    assert (f"Cut to max_tokens: wp on order: 0 of 5 test and {cut} of 24 training "
            "sentences; they are classified from their leading words.") in text.splitlines()


def test_piece_level_outputs_are_not_taken_for_words(wordpiece_exports):
    """An embedder whose outputs are pieces (an older export, without the metadata that
    says so, takes this path): its positions are checked against the given words."""
    from tfeff.export import load_embedder

    embedder = wordpiece_exports["pieces"]
    with pytest.raises(ValueError, match="output token 0 of sentence 2 is 'cat', not the "
                       "given word 'cats': its outputs are not one per word"):
        tool.token_features(embedder, [["the", "dog"], ["cats", "run"]])
    first = load_embedder(wordpiece_exports["first"])
    layers, mask = tool.token_features(first, [["the", "dog"], ["cats", "dogs", "a", "a",
                                                                "cat"]])
    assert mask.tolist() == [[True, True, False, False], [True, True, True, True]]


def test_the_table_has_a_majority_class_row(tmp_path):
    """Training labels 3 x a, 1 x b; test a, b, b, b: predicting `a` everywhere scores
    25% accuracy and macro-F1 (2/5 + 0) / 2 = 20%."""
    train = _tsv(tmp_path / "train.tsv", [("a", "x"), ("a", "y"), ("a", "z"), ("b", "w")])
    test = _tsv(tmp_path / "test.tsv", [("a", "x y"), ("b", "y"), ("b", "z z"), ("b", "v")])
    task = tool.read_task("t", ("classification", train, test))
    majority = tool.majority_baseline(task)
    assert majority == {"class": "a", "accuracy": 0.25, "macro_f1": pytest.approx(0.2)}
    rows = [{"task": "t", "embedder": "e", "probe": "linear", "accuracy": [0.5, 0.7],
             "macro_f1": [0.4, 0.6], "majority": majority,
             "missing": {"unit": "sentences", "train": [0, 4], "test": [0, 4]}}]
    lines = tool.table(rows, (0, 1)).splitlines()
    assert lines[2:4] == ["| e | linear | 60.0 ± 14.1 | 50.0 ± 14.1 |",
                          "| majority class | — | 25.0 | 20.0 |"]
    assert not any(line.startswith("Not embedded") for line in lines)
