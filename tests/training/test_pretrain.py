import json
import os

import pytest

from tests.conftest import REPO
from tfeff.config import ConfigError, load_config
from tfeff.training import pretrain

DEMO = os.path.join(REPO, "configs", "demo_elmo_c.yaml")
SMALL = [
    "data.synthetic.num_train_sentences=12000",
    "data.synthetic.num_heldout_sentences=300",
    "fasttext.bucket=20000",
    "train.steps=600",
    "train.warmup_steps=50",
    "train.checkpoint_every=200",
    "train.validation_steps=5",
    "eval.max_targets=4000",
]


def test_demo_training_loss_falls_and_beats_unigram(trained_dir):
    model_dir, results = trained_dir
    loss = results["history"]["loss"]
    assert loss[-1] < loss[0]
    ev = json.load(open(os.path.join(model_dir, "eval.json")))
    assert ev["targets"] == 20000
    for k in ("1", "10"):
        assert ev["top_k"][k] > ev["unigram_top_k"][k], ev
    assert ev["top_k"]["1"] > 2 * ev["unigram_top_k"]["1"], ev
    for name in ("config.yaml", "vocabulary.txt", "fasttext.bin", "vocabulary_vectors.npy"):
        assert os.path.exists(os.path.join(model_dir, name))
    assert os.listdir(os.path.join(model_dir, "logs"))
    assert not [f for f in os.listdir(model_dir) if ".tmp-" in f]


def test_checkpoint_holds_every_model_weight(trained_dir):
    import tensorflow as tf
    from tfeff.training import restore_model

    model_dir, _ = trained_dir
    names = {n for n, _ in tf.train.list_variables(
        tf.train.latest_checkpoint(os.path.join(model_dir, "checkpoints")))}
    model, _, step, _ = restore_model(model_dir)
    assert step == 1500
    model_entries = [n for n in names if n.startswith("model/")]
    assert len(model_entries) == len(model.weights)
    for w in model.weights:
        assert any(w.path.split("/")[-2] in n and n.endswith(w.path.split("/")[-1] + "/.ATTRIBUTES/VARIABLE_VALUE") for n in model_entries), w.path
    assert not any("token_embedding" in n for n in names)  # the fixed table is not saved


def test_resume_rejects_changed_model_and_continues_with_more_steps(trained_dir):
    model_dir, _ = trained_dir
    with pytest.raises(ConfigError, match="model.units: 256 -> 64"):
        pretrain(load_config(DEMO, SMALL + ["model.units=64"]), model_dir, verbose=0)


def test_fasttext_dimension_mismatch_is_reported(trained_dir, tmp_path):
    model_dir, _ = trained_dir
    cfg = load_config(DEMO, SMALL + [f"fasttext.pretrained={model_dir}/fasttext.bin",
                                     "fasttext.dim=300"])
    with pytest.raises(ValueError, match="dimension 64.*fasttext.dim"):
        pretrain(cfg, str(tmp_path / "m"), verbose=0)


VARIANT_STEPS = [
    "train.steps=120",
    "train.warmup_steps=10",
    "train.checkpoint_every=40",
    "train.validation_steps=2",
    "eval.max_targets=3000",
]


# `slow` (about 3 minutes together): the default suite has to fit 15 minutes on 2 cores. The
# output layers learn in their own layer tests, and the sub and alone models train briefly in
# the export and feature tests.
@pytest.mark.slow
# "sub" also compares its export with the model (tests/export/embedder_reference.py).
@pytest.mark.parametrize("variant", ["a", "sampled", "fixed",
                                     pytest.param("sub", marks=pytest.mark.numerics), "alone"])
def test_each_output_layer_variant_trains_from_its_demo_config(variant, trained_dir, tmp_path):
    """Every demo_elmo_*.yaml trains (loss falls) and beats the unigram baseline.

    The data section of these configs equals demo_elmo_c.yaml's, so the
    corpus, vocabulary and fastText model of the demo run are reused.
    """
    import shutil

    source, _ = trained_dir
    model_dir = str(tmp_path / variant)
    shutil.copytree(os.path.join(source, "corpus"), os.path.join(model_dir, "corpus"))
    shutil.copy(os.path.join(source, ".tfeff-model-dir"), model_dir)  # the data are tfeff's
    if variant not in ("sub", "alone"):  # subword LMs learn their own WordPiece vocabulary
        for name in ("vocabulary.txt", "fasttext.bin", "vocabulary_vectors.npy",
                     "vocabulary_vectors.mean.npy"):
            shutil.copy(os.path.join(source, name), model_dir)
    config = load_config(os.path.join(REPO, "configs", f"demo_elmo_{variant}.yaml"), VARIANT_STEPS)
    results = pretrain(config, model_dir, verbose=0)
    loss = results["history"]["loss"]
    assert loss[-1] < 0.9 * loss[0], loss
    ev = results["eval"]
    assert ev["top_k"]["1"] > 2 * ev["unigram_top_k"]["1"], ev
    assert ev["top_k"]["10"] > ev["unigram_top_k"]["10"], ev
    assert 1 < ev["perplexity"] < len(open(os.path.join(model_dir, "vocabulary.txt")).readlines())
    if variant == "alone":
        # The ALONE embedding is the layer of the config, and the checkpoint holds
        # nothing vocabulary-sized for it (only o, the FFN and the filter fingerprint).
        import tensorflow as tf

        from tfeff.training import restore_model

        model, _, _, _ = restore_model(model_dir)
        alone = model.backbone.token_embedding
        assert (alone.base_dim, alone.intermediate_dim, alone.seed) == (64, 256, 0)
        assert alone.count_params() == 64 + 256 * (64 + 64)
        ckpt = tf.train.latest_checkpoint(os.path.join(model_dir, "checkpoints"))
        shapes = [s for n, s in tf.train.list_variables(ckpt) if "alone" in n]
        assert shapes and all(alone.vocabulary_size not in s for s in shapes), shapes
    if variant == "sub":
        # WordPiece LMs export word-level embedders (an ALONE input: tests/export).
        from tests.export.embedder_reference import check_model_dir_export
        from tfeff.training import restore_model

        model, _, _, _ = restore_model(model_dir)
        loaded = check_model_dir_export(model_dir, str(tmp_path / "export"), "elmo_wordpiece",
                                        model)
        assert sorted(loaded.signatures) == ["embed", "embed_tokens", "tokenize"]
