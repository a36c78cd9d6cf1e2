"""CoRe's two-phase pretraining end to end (tiny sizes), resume in each phase, tfeff-convert-core."""

import dataclasses
import glob
import json
import os
import shutil
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

from tests.conftest import REPO
from tfeff import config as config_lib
from tfeff import data as data_lib
from tfeff.config import load_config
from tfeff.training import model_directory
from tfeff.training import pretrain
from tfeff.training import restore_model
from tfeff.training.families import bert as bert_family

CORE = os.path.join(REPO, "configs", "demo_bert_core.yaml")
TINY = [
    "data.synthetic.num_train_sentences=3000", "data.synthetic.num_heldout_sentences=200",
    "data.synthetic.lexicon_size=300", "data.wordpiece_vocabulary_size=400",
    "data.max_sequence_length=32", "data.batch_size=16", "data.max_predictions_per_seq=5",
    "train.steps=240", "train.checkpoint_every=60", "train.log_every=20",
    "train.warmup_steps=20", "train.validation_steps=2", "core.coarse_steps=120",
    "core.plateau_patience=0", "eval.max_batches=4",
]


def _scalars(log_dir, tag):
    out = {}
    for path in glob.glob(os.path.join(log_dir, "events.*")):
        for event in tf.compat.v1.train.summary_iterator(path):
            for value in event.summary.value:
                if value.tag == tag:
                    out[event.step] = float(tf.make_ndarray(value.tensor))
    return out


@pytest.fixture(scope="module")
def core_run(tmp_path_factory):
    model_dir = str(tmp_path_factory.mktemp("core") / "run")
    results = pretrain(load_config(CORE, TINY), model_dir, verbose=0)
    return model_dir, results


def test_two_phase_run_switches_and_loss_falls_across_the_switch(core_run):
    model_dir, results = core_run
    # The refined phase reads on from the coarse phase's input position.
    assert results["switch"] == {"switch_step": 120, "reason": "coarse_steps", "position": 120}
    assert results["step"] == 240
    coarse, refined = results["history"]["coarse"]["loss"], results["history"]["refined"]["loss"]
    assert len(coarse) == 2 and len(refined) == 2
    assert coarse[1] < coarse[0] and refined[0] < coarse[1] and refined[1] < refined[0]
    # One continuous TensorBoard curve over both phases, and the switch step logged.
    steps = sorted(_scalars(os.path.join(model_dir, "logs"), "train/loss"))
    assert steps == list(range(20, 241, 20))
    assert _scalars(os.path.join(model_dir, "logs"), "core/switch_step") == {120: 120.0}
    ev = results["eval"]
    assert ev["masked_tokens"] > 0 and ev["perplexity"] < 400 and 0 < ev["accuracy"] < 1
    # The coarse phase is a complete relaxed model directory; the top level holds the standard.
    relaxed, _, step, _ = restore_model(os.path.join(model_dir, "coarse"))
    standard, _, _, _ = restore_model(model_dir)
    assert relaxed.backbone.is_relaxed and not standard.backbone.is_relaxed and step == 120


def _heldout_batches(config, model_dir):
    """The held-out batches the run's evaluations read (masks keyed by the seed)."""
    return list(bert_family.bert_dataset(
        config, os.path.join(model_dir, "corpus", "heldout.txt"),
        os.path.join(model_dir, "vocabulary.txt"), False, seed=config.train.seed))


def _masked_lm_loss(model, batch):
    """Mean cross-entropy of a batch's masked targets (float64, from the logits)."""
    logits = np.asarray(model(batch, training=False)["mlm_logits"], np.float64)
    log_probs = logits - logits.max(-1, keepdims=True)
    log_probs -= np.log(np.exp(log_probs).sum(-1, keepdims=True))
    ids, weights = batch["masked_ids"].numpy(), batch["masked_weights"].numpy()
    nll = -np.take_along_axis(log_probs, ids[..., None], -1)[..., 0]
    return (nll * weights).sum() / weights.sum()


def test_held_out_loss_is_reported_at_every_checkpoint_of_both_phases(core_run):
    """`train.validation_steps` held-out batches at every checkpoint, as the other families
    do: in the history of each phase, on one TensorBoard curve, and the last one is the
    final model's masked-LM loss on the first two held-out batches."""
    model_dir, results = core_run
    coarse = results["history"]["coarse"]["val_loss"]
    refined = results["history"]["refined"]["val_loss"]
    assert len(coarse) == len(refined) == 2 and np.isfinite(coarse + refined).all()
    curve = _scalars(os.path.join(model_dir, "logs"), "validation/loss")
    assert sorted(curve) == [60, 120, 180, 240]
    np.testing.assert_allclose([curve[s] for s in (60, 120, 180, 240)], coarse + refined,
                               rtol=1e-6)
    config = model_directory.load_model_dir_config(model_dir)
    first = _heldout_batches(config, model_dir)[:2]
    assert [len(b["masked_ids"]) for b in first] == [config.data.batch_size] * 2
    standard, _, step, _ = restore_model(model_dir)
    assert step == 240
    # Keras averages the batches' losses (equal batch sizes); float32 logits.
    expected = np.mean([_masked_lm_loss(standard, b) for b in first])
    np.testing.assert_allclose(refined[-1], expected, rtol=1e-5)


def test_final_evaluation_scores_every_held_out_batch_unless_capped(core_run):
    """`eval.max_batches` 0 (the default) scores the whole held-out set and the summary says
    so with the tokens counted; a cap says what part it scored."""
    model_dir, _ = core_run
    assert config_lib.BertEvalConfig().max_batches == 0
    config = model_directory.load_model_dir_config(model_dir)
    batches = _heldout_batches(config, model_dir)
    tokens = int(sum(b["masked_weights"].numpy().sum() for b in batches))
    assert len(batches) > 2
    standard, _, _, _ = restore_model(model_dir)
    heldout = os.path.join(model_dir, "corpus", "heldout.txt")
    vocabulary = os.path.join(model_dir, "vocabulary.txt")

    def evaluate(max_batches):
        capped = dataclasses.replace(
            config, eval=dataclasses.replace(config.eval, max_batches=max_batches))
        return bert_family.evaluate_bert(standard, capped, heldout, vocabulary)

    whole = evaluate(0)
    assert (whole["batches"], whole["masked_tokens"], whole["complete"]) == (
        len(batches), tokens, True)
    losses = [_masked_lm_loss(standard, b) * b["masked_weights"].numpy().sum()
              for b in batches]
    np.testing.assert_allclose(whole["mlm_loss"], sum(losses) / tokens, rtol=1e-5)
    assert bert_family.BERT.eval_summary(whole)[0].startswith(
        f"held-out: {tokens:,} masked tokens of all {len(batches)} held-out batches,")
    part = evaluate(2)
    assert (part["batches"], part["complete"]) == (2, False)
    assert part["masked_tokens"] == int(sum(b["masked_weights"].numpy().sum()
                                            for b in batches[:2]))
    assert "the first 2 held-out batches (eval.max_batches; there are more)" in (
        bert_family.BERT.eval_summary(part)[0])


def test_config_changes_of_the_phases_are_refused_on_resume(core_run):
    with pytest.raises(ValueError, match="core.coarse_steps: 120 -> 100"):
        pretrain(load_config(CORE, TINY + ["core.coarse_steps=100"]), core_run[0], verbose=0)


def test_plateau_rule():
    model = keras.Sequential([keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    model.build((None, 1))
    stopper = bert_family.PlateauStopper(window=2, patience=2, threshold=0.1)
    stopper.set_model(model)
    losses = [10, 10, 5, 5, 4.8, 4.8, 4.7, 4.7, 1, 1]  # windows: 10, 5, 4.8, 4.7 -> stop
    running = 0.0
    for i, loss in enumerate(losses):
        running += loss
        stopper.on_train_batch_end(i, {"loss": running / (i + 1)})
        if model.stop_training:
            break
    assert i == 7 and stopper.stopped_step is not None
    assert stopper.best == pytest.approx(4.7)


def _cli(*args):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    return subprocess.run([sys.executable, "-m", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300)


@pytest.mark.numerics
def test_convert_cli_writes_a_standard_directory_that_pretraining_continues(core_run, tmp_path):
    relaxed_dir = os.path.join(core_run[0], "coarse")
    out = str(tmp_path / "standard")
    r = _cli("tfeff.bin.convert_core", "--model_dir", relaxed_dir, "--output_dir", out)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "step 120" in r.stdout
    config = load_config(os.path.join(out, "config.yaml"))
    assert config.model.relaxed is None and not config.core.enabled
    standard, _, step, _ = restore_model(out)
    relaxed, _, _, _ = restore_model(relaxed_dir)
    from tfeff.models.relaxed_merge import check_tolerances
    from tfeff.models.relaxed_merge import compare_outputs
    from tfeff.models.relaxed_merge import probe_inputs
    x = probe_inputs(relaxed)
    errors = compare_outputs(relaxed(x, exact_attention=True), standard(x), x["padding_mask"])
    # Each output within twice the float32 rounding of its longest path (rounding_counts).
    bounds = check_tolerances(relaxed, x["token_ids"].shape[1])
    assert step == 120 and all(errors[k] <= bounds[k] for k in errors), (errors, bounds)
    results = pretrain(load_config(os.path.join(out, "config.yaml"), ["train.steps=150"]), out,
                       verbose=0)
    assert results["step"] == 150 and len(results["history"]["train"]["loss"]) == 1


@pytest.mark.parametrize("which,message", [
    ("standard", "holds a standard BERT"),
    ("two_phase", "two-phase CoRe run .* relaxed model is in"),
    ("missing", "not a tfeff model directory"),
    ("exists", "exists and is not empty"),
])
def test_convert_cli_refuses_with_a_clear_message_and_writes_nothing(core_run, tmp_path, which,
                                                                     message):
    source = {"standard": None, "two_phase": core_run[0], "missing": str(tmp_path / "none"),
              "exists": os.path.join(core_run[0], "coarse")}[which]
    out = str(tmp_path / "out")
    if which == "standard":
        source = str(tmp_path / "std")
        os.makedirs(source)
        cfg = load_config(os.path.join(core_run[0], "config.yaml"))
        from tfeff.config import write_yaml
        write_yaml(bert_family.standard_config(cfg), os.path.join(source, "config.yaml"))
    if which == "exists":
        os.makedirs(out)
        open(os.path.join(out, "keep.txt"), "w").close()
    r = _cli("tfeff.bin.convert_core", "--model_dir", source, "--output_dir", out)
    assert r.returncode == 1
    import re
    assert re.search(message, r.stderr), r.stderr[-2000:]
    assert (os.listdir(out) == ["keep.txt"]) if which == "exists" else not os.path.exists(out)
    # No staging folder (`<output>.tmp-*`) or lock is left beside the output.
    assert not [p for p in os.listdir(tmp_path) if p.startswith(os.path.basename(out) + ".")]


@pytest.mark.numerics
def test_embedder_export_reproduces_the_relaxed_model(core_run, tmp_path):
    """The coarse phase's relaxed BERT (anchor attention, factorized FFN) exports; a
    standard BERT is the same code path minus those layers (tests/export)."""
    from tests.export.embedder_reference import check_model_dir_export

    model_dir = os.path.join(core_run[0], "coarse")
    model, _, _, config = restore_model(model_dir)
    assert model.backbone.is_relaxed
    loaded = check_model_dir_export(model_dir, str(tmp_path / "export"), "bert", model,
                                    lower_case=config.data.lower_case,
                                    max_tokens=config.data.max_sequence_length - 2)
    assert loaded.signatures["embed"](sentences=tf.constant(["a"]))["layers"].shape[1] == 3


def test_batch_size_is_frozen_once_the_coarse_phase_has_a_checkpoint(core_run, tmp_path):
    """The batch may change before the first checkpoint (e.g. after running out of memory);
    a coarse-phase checkpoint counts, though the refined phase has none yet."""
    from tfeff.config import ConfigError
    from tfeff.training.model_directory import resolve_config

    model_dir = str(tmp_path / "run")
    shutil.copytree(core_run[0], model_dir)
    shutil.rmtree(os.path.join(model_dir, "checkpoints"))
    with pytest.raises(ConfigError, match="data.batch_size: 16 -> 8"):
        resolve_config(load_config(CORE, TINY + ["data.batch_size=8"]), model_dir)
    shutil.rmtree(os.path.join(model_dir, "coarse", "checkpoints"))
    resolve_config(load_config(CORE, TINY + ["data.batch_size=8"]), model_dir)


def _wordpiece_counts(lines, words):
    """Token-id counts by greedy longest-match-first WordPiece, in plain Python."""
    ids = {w: i for i, w in enumerate(words)}
    counts = np.zeros(len(words), np.int64)
    for line in lines:
        for word in line.split():  # the synthetic text is spaced and lower case
            start, pieces = 0, []
            while start < len(word):
                for end in range(len(word), start, -1):
                    piece = word[start:end] if start == 0 else "##" + word[start:end]
                    if piece in ids:
                        pieces.append(ids[piece])
                        start = end
                        break
                else:
                    pieces = [ids["<unk>"]]
                    break
            for i in pieces:
                counts[i] += 1
    return counts


def test_unigram_perplexity_scores_the_heldout_targets_by_training_frequencies(core_run):
    model_dir, results = core_run
    config = model_directory.load_model_dir_config(model_dir)
    vocabulary_path = os.path.join(model_dir, "vocabulary.txt")
    words = data_lib.Vocabulary.load(vocabulary_path).words
    with open(os.path.join(model_dir, "corpus", "train.txt"), encoding="utf-8") as f:
        lines = f.read().splitlines()
    counts = _wordpiece_counts(lines, words)
    got, read = data_lib.token_counts(os.path.join(model_dir, "corpus", "train.txt"),
                                      vocabulary_path)
    np.testing.assert_array_equal(got, counts)
    assert read == len(lines)
    # A token budget stops after the chunk that reaches it, and counts exactly those lines.
    part, read = data_lib.token_counts(os.path.join(model_dir, "corpus", "train.txt"),
                                       vocabulary_path, max_tokens=1000)
    assert 0 < read < len(lines) and part.sum() >= 1000
    np.testing.assert_array_equal(part, _wordpiece_counts(lines[:read], words))

    smoothed = counts + 1.0
    smoothed[list(bert_family.NEVER_TARGETS)] = 0.0
    probs = smoothed / smoothed.sum()
    heldout = os.path.join(model_dir, "corpus", "heldout.txt")
    nll, n = 0.0, 0.0
    for batch in bert_family.bert_dataset(config, heldout, vocabulary_path, False,
                                               seed=config.train.seed).take(
                                                   config.eval.max_batches):
        weights = batch["masked_weights"].numpy()
        ids = batch["masked_ids"].numpy()[weights > 0]
        nll -= np.log(probs[ids]).sum()
        n += len(ids)
    ev = results["eval"]
    assert ev["masked_tokens"] == n
    np.testing.assert_allclose(ev["unigram_perplexity"], np.exp(nll / n), rtol=1e-9)
    # Even this tiny run (240 steps) is below the context-free baseline.
    assert ev["perplexity"] < ev["unigram_perplexity"]
    with open(os.path.join(model_dir, "eval.json")) as f:
        assert json.load(f)["unigram_perplexity"] == ev["unigram_perplexity"]


# Exact resume of a two-phase run: killed in the coarse phase, at the switch, in the refined
# phase. Deterministic runs through the binary (op determinism stays in their processes); a
# kill leaves the directory as it was at its last completed write, which each case rebuilds
# from the uninterrupted run's files.
RESUME = [o for o in TINY if not o.startswith(("train.", "core."))] + [
    "train.steps=40", "train.checkpoint_every=10", "train.keep_checkpoints=10",
    "train.log_every=10", "train.warmup_steps=5", "train.validation_steps=2",
    "core.coarse_steps=20",
    "core.plateau_patience=0"]


def _pretrain_cli(model_dir):
    overrides = sum((["--override", o] for o in RESUME), [])
    r = _cli("tfeff.bin.pretrain", "--config", CORE, "--model_dir", model_dir,
             "--deterministic", *overrides)
    assert r.returncode == 0, r.stderr[-3000:]
    return r


def _keep_checkpoints_up_to(directory, step):
    """The checkpoint directory as a kill after `step`'s checkpoint leaves it."""
    kept = []
    for path in glob.glob(os.path.join(directory, "ckpt-*")):
        if int(os.path.basename(path).split(".")[0].split("-")[1]) > step:
            os.remove(path)
        else:
            kept.append(int(os.path.basename(path).split(".")[0].split("-")[1]))
    kept = sorted(set(kept))
    with open(os.path.join(directory, "checkpoint"), "w") as f:
        f.write(f'model_checkpoint_path: "ckpt-{step}"\n' + "".join(
            f'all_model_checkpoint_paths: "ckpt-{s}"\n' for s in kept))


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    model_dir = str(tmp_path_factory.mktemp("core_resume") / "reference")
    _pretrain_cli(model_dir)
    return model_dir


@pytest.mark.parametrize("kill", ["coarse_step_10", "during_the_merge", "refined_step_30"])
def test_a_killed_two_phase_run_resumes_bit_identical(uninterrupted, tmp_path, kill):
    """The rerun ends with the uninterrupted run's weights, optimizer moments and RNG
    states bit for bit; the merge is redone from the relaxed checkpoint when the kill
    came before the standard model was saved."""
    from tests.training.test_fault_tolerance import _assert_bit_identical

    model_dir = str(tmp_path / "run")
    shutil.copytree(uninterrupted, model_dir)
    os.remove(os.path.join(model_dir, "eval.json"))
    top = os.path.join(model_dir, "checkpoints")
    if kill == "refined_step_30":
        _keep_checkpoints_up_to(top, 30)
    else:
        shutil.rmtree(top)
        if kill == "coarse_step_10":
            os.remove(os.path.join(model_dir, "coarse", "core_switch.json"))
            _keep_checkpoints_up_to(os.path.join(model_dir, "coarse", "checkpoints"), 10)
    r = _pretrain_cli(model_dir)
    assert ("CoRe: switched" in r.stderr) == (kill != "refined_step_30"), r.stderr[-2000:]
    for phase in ("coarse/checkpoints", "checkpoints"):
        step = 20 if phase.startswith("coarse") else 40
        _assert_bit_identical(os.path.join(model_dir, phase, f"ckpt-{step}"),
                              os.path.join(uninterrupted, phase, f"ckpt-{step}"))
