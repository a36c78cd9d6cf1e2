"""tfeff.evaluation: task readers, metric, a real probe on fastText features and
fine-tuning (its command line, tfeff-evaluate, is tested in tests/bin/test_evaluate.py)."""

import os

import numpy as np
import pytest

from tests.conftest import REPO
from tfeff import evaluation as tool


def test_readers_name_the_file_and_line(tmp_path):
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


def test_macro_f1_golden():
    gold = np.array([0, 0, 1, 1, 2])
    pred = np.array([0, 1, 1, 1, 0])
    # class 0: tp1 fp1 fn1 -> 0.5; class 1: tp2 fp1 fn0 -> 0.8; class 2: tp0 fn1 -> 0.
    assert tool.macro_f1(gold, pred, 4) == pytest.approx((0.5 + 0.8 + 0.0) / 3)


@pytest.mark.parametrize("num_layers, mix_weights", [(1, []), (3, ["layer_weights"])])
def test_a_probe_learns_layer_weights_only_where_there_are_layers_to_mix(num_layers,
                                                                         mix_weights):
    """Over one layer (a fastText export) the mix's softmax weight is 1 whatever it holds:
    not trainable, so no optimizer looks for its gradient; its scale still trains."""
    probe = tool.build_probe(num_layers, 4, 3)
    mix = probe.get_layer("scalar_mix")
    assert sorted(w.name for w in mix.trainable_weights) == sorted(mix_weights + ["scale"])
    assert len(mix.weights) == 2


def test_probe_on_fasttext_features_learns_tags_and_reports_a_table(fasttext_export, tmp_path):
    """The fastText fixture speaks the synthetic language of seed 1, lexicon 300."""
    from tfeff.data import synthetic_tasks

    paths = synthetic_tasks(str(tmp_path), 250, 100, seed=1, lexicon_size=300)
    # A sentence task that word vectors alone can separate: does it hold the word "the"?
    marker = []
    for split, source in zip(("train", "test"), paths["agreement"]):
        sentences = [sentence for _, sentence in tool.read_tsv(source)]
        path = str(tmp_path / f"marker_{split}.tsv")
        with open(path, "w", encoding="utf-8") as f:
            f.writelines(f"{int('the' in s.split())}\t{s}\n" for s in sentences)
        marker.append(path)
    # Two tasks, two probe seeds: the agreement task itself (which word vectors alone
    # cannot separate) is what the study runs, not what this test can assert on.
    tasks = {"POS": ("tagging", *paths["tagging"], 1),
             "marker": ("classification", *marker)}
    rows = tool.evaluate({"fasttext": fasttext_export}, tasks, ("linear",), (0, 1),
                         epochs=8, log=lambda *_: None)
    by_task = {r["task"]: r for r in rows}
    tags = [t for _, ts in tool.read_conll(paths["tagging"][1], 1) for t in ts]
    majority = max(tags.count(t) for t in set(tags)) / len(tags)
    pos = np.mean(by_task["POS"]["accuracy"])
    assert pos > majority + 0.1, (pos, majority)
    labels = [int(label) for label, _ in tool.read_tsv(marker[1])]
    majority = max(np.mean(labels), 1 - np.mean(labels))
    found = np.mean(by_task["marker"]["accuracy"])
    assert found > majority + 0.1, (found, majority)
    table = tool.table(rows, (0, 1))
    assert table.splitlines()[0] == ("| features | probe | POS acc | POS macro-F1 | marker acc"
                                     " | marker macro-F1 |")
    assert table.splitlines()[2].startswith("| fasttext | linear | ")


def test_fine_tuning_trains_the_encoder_and_learns_the_task(tmp_path):
    """A tiny WordPiece ELMo; the task: does the sentence contain a word of one class?"""
    import random

    from tfeff.config import load_config
    from tfeff.export import model_dir_embedder
    from tfeff.training import pretrain

    overrides = ["data.synthetic.num_train_sentences=600", "data.synthetic.lexicon_size=200",
                 "data.synthetic.num_heldout_sentences=50", "data.synthetic.seed=3",
                 "data.wordpiece_vocabulary_size=300", "data.batch_size=16",
                 "model.units=32", "model.projection_dim=16", "model.embedding_dim=16",
                 "train.steps=20", "train.base_batch_size=16", "train.warmup_steps=5",
                 "train.validation_steps=0"]
    model_dir = str(tmp_path / "elmo")
    pretrain(load_config(os.path.join(REPO, "configs", "demo_elmo_sub.yaml"), overrides),
             model_dir, verbose=0)
    lines = open(os.path.join(model_dir, "corpus", "train.txt"), encoding="utf-8").read()
    sentences = [s for s in lines.splitlines() if s.strip()][:400]
    marker = "the"   # in about half of the sentences
    data = [(int(marker in s.split()), s) for s in sentences]
    assert 0.2 < np.mean([y for y, _ in data]) < 0.8
    random.Random(0).shuffle(data)
    module, _, _ = model_dir_embedder(model_dir)
    before = [v.numpy().copy() for v in module.model.trainable_variables]
    scores = tool.fine_tune(model_dir, data[:300], data[300:], 2, epochs=4,
                            learning_rate=3e-3, module=module)
    head = {id(v) for v in module.model.output_head.variables}
    moved = [(v.path, not np.allclose(b, v.numpy()))
             for v, b in zip(module.model.trainable_variables, before)]
    # every encoder weight moved (the table too: it is the input), the softmax bias did not
    assert moved == [(v.path, id(v) not in head) for v in module.model.trainable_variables]
    assert len(moved) > len(head) + 4
    majority = max(np.mean([y for y, _ in data[300:]]), 1 - np.mean([y for y, _ in data[300:]]))
    assert scores["accuracy"] > majority + 0.1, (scores, majority)

