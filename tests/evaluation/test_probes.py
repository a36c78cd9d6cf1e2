"""tools/evaluate_features.py: task readers, metric, and a real probe on fastText features."""

import importlib.util
import os

import numpy as np
import pytest

from tests.conftest import REPO


@pytest.fixture(scope="module")
def tool():
    spec = importlib.util.spec_from_file_location(
        "evaluate_features", os.path.join(REPO, "tools", "evaluate_features.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_readers_name_the_file_and_line(tool, tmp_path):
    conll = tmp_path / "a.conll"
    conll.write_text("# comment\nthe\tDET\ndog\tNOUN\n\nruns\n", encoding="utf-8")
    with pytest.raises(tool.FormatError, match=r"a.conll:5: expected a tag in column 1"):
        tool.read_conll(str(conll), 1)
    conll.write_text("the DET x\ndog NOUN y\n\n\nruns VERB z\n", encoding="utf-8")
    assert tool.read_conll(str(conll), 1) == [(["the", "dog"], ["DET", "NOUN"]),
                                              (["runs"], ["VERB"])]
    assert tool.read_conll(str(conll))[0][1] == ["x", "y"]
    tsv = tmp_path / "a.tsv"
    tsv.write_text("1\tgood one\n\nno tab here\n", encoding="utf-8")
    with pytest.raises(tool.FormatError, match=r"a.tsv:3: expected 'label<TAB>sentence'"):
        tool.read_tsv(str(tsv))


def test_macro_f1_golden(tool):
    gold = np.array([0, 0, 1, 1, 2])
    pred = np.array([0, 1, 1, 1, 0])
    # class 0: tp1 fp1 fn1 -> 0.5; class 1: tp2 fp1 fn0 -> 0.8; class 2: tp0 fn1 -> 0.
    assert tool.macro_f1(gold, pred, 4) == pytest.approx((0.5 + 0.8 + 0.0) / 3)


def test_probe_on_fasttext_features_learns_tags_and_reports_a_table(tool, fasttext_model,
                                                                     tmp_path):
    """The fastText fixture speaks the synthetic language of seed 1, lexicon 300."""
    from tfeff.data import synthetic_tasks
    from tfeff.export import export_fasttext

    export_fasttext(fasttext_model[0], str(tmp_path / "ft"))
    paths = synthetic_tasks(str(tmp_path), 250, 100, seed=1, lexicon_size=300)
    tasks = {"POS": ("tagging", *paths["tagging"], 1),
             "agreement": ("classification", *paths["agreement"])}
    rows = tool.evaluate({"fasttext": str(tmp_path / "ft")}, tasks, ("linear",), (0, 1),
                         epochs=8, log=lambda *_: None)
    by_task = {r["task"]: r for r in rows}
    tags = [t for _, ts in tool.read_conll(paths["tagging"][1], 1) for t in ts]
    majority = max(tags.count(t) for t in set(tags)) / len(tags)
    pos = np.mean(by_task["POS"]["accuracy"])
    assert pos > majority + 0.1, (pos, majority)
    assert len(by_task["agreement"]["accuracy"]) == 2
    table = tool.table(rows, (0, 1))
    assert table.splitlines()[0] == ("| features | probe | POS acc | POS macro-F1 | agreement acc"
                                     " | agreement macro-F1 |")
    assert table.splitlines()[2].startswith("| fasttext | linear | ")
