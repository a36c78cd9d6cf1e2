"""A merged CoRe model directory -> keras-hub preset -> `BertMaskedLM.from_preset`, checked.

One tiny two-phase CoRe run (learned positions, lower-cased WordPieces, BERT's erf
GELU as in `bert_base_core.yaml`) is trained once for the module; its preset is
loaded back with keras-hub's own `from_preset` and compared with the tfeff model:
encoder outputs, masked-LM logits, tokenization and the reserved tokens' names.
"""

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import yaml

from tests.conftest import REPO
from tfeff.config import load_config
from tfeff.convert import ConversionError
from tfeff.convert import write_keras_hub_preset
from tfeff.data import vocabulary as vocabulary_lib
from tfeff.data.mlm_dataset import bert_tokenizer
from tfeff.models.relaxed_merge import check_tolerances
from tfeff.models.relaxed_merge import probe_inputs
from tfeff.training import pretrain
from tfeff.training import restore_model

keras_hub = pytest.importorskip("keras_hub")

CORE = os.path.join(REPO, "configs", "demo_bert_core.yaml")
# demo_bert_core.yaml (2 layers) with BERT's learned positions (what keras-hub's BERT holds)
# and bert_base_core.yaml's lower-casing, narrower, 2 relaxed steps then 2 standard ones on a
# small corpus.
TINY = [
    "model.position_embedding=learned", "data.lower_case=true",
    "data.synthetic.num_train_sentences=600", "data.synthetic.num_heldout_sentences=60",
    "data.synthetic.lexicon_size=300", "data.wordpiece_vocabulary_size=300",
    "data.max_sequence_length=24", "data.batch_size=8", "data.max_predictions_per_seq=4",
    "data.shuffle_buffer=100", "model.hidden_dim=32", "model.num_heads=2",
    "model.intermediate_dim=64", "train.steps=4", "train.warmup_steps=1",
    "train.checkpoint_every=4", "train.log_every=2", "core.coarse_steps=2",
    "core.plateau_patience=0", "eval.max_batches=1",
]
# Text in the corpus' words, capitalized, with an accent, punctuation, two words run
# together (continuation pieces) and a word with a character outside the vocabulary.
SENTENCES = ["{0} Éclair, {1}-{2}! {3} zzqx€ {0}{1}.", "{2}"]
RESERVED = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """`(model_dir, preset_dir, step, errors)` of the trained run and its preset."""
    root = tmp_path_factory.mktemp("keras_hub")
    model_dir, preset_dir = str(root / "core"), str(root / "preset")
    pretrain(load_config(CORE, TINY), model_dir, verbose=0)
    step, errors = write_keras_hub_preset(model_dir, preset_dir)
    return model_dir, preset_dir, step, errors


def _relative_error(reference, candidate):
    reference, candidate = np.asarray(reference, np.float64), np.asarray(candidate, np.float64)
    return np.max(np.abs(reference - candidate)) / np.max(np.abs(reference))


def _sentences(model_dir):
    with open(os.path.join(model_dir, "corpus", "train.txt"), encoding="utf-8") as f:
        words = f.readline().split()
    return [s.format(*(w.capitalize() for w in words)) for s in SENTENCES]


def _compare(model_dir, preset_dir, bounds=None):
    """Relative errors of the preset's `BertMaskedLM` against the tfeff model; `bounds`, a
    dict, gets the float32 rounding bounds of two implementations of the model
    (`check_tolerances`)."""
    bert, _, _, _ = restore_model(model_dir)
    masked_lm = keras_hub.models.BertMaskedLM.from_preset(preset_dir)
    x = probe_inputs(bert)
    inputs = {k: x[k] for k in ("token_ids", "segment_ids", "padding_mask")}
    ours = bert(x)
    mask = x["padding_mask"].astype(bool)
    theirs = masked_lm.backbone(inputs)["sequence_output"]
    logits = masked_lm({**inputs, "mask_positions": x["masked_positions"]})
    if bounds is not None:
        bounds.update(check_tolerances(bert, x["token_ids"].shape[1]))
    return {
        "sequence_output": _relative_error(np.asarray(ours["sequence_output"])[mask],
                                           np.asarray(theirs)[mask]),
        "mlm_logits": _relative_error(ours["mlm_logits"], logits),
    }


@pytest.mark.numerics
def test_the_preset_loads_with_from_preset_and_reproduces_the_run(run):
    """After 4 steps from the initializers the feed-forward inputs are tiny, where erf
    and tanh GELU agree to float32 rounding; `test_erf_gelu...` below has larger ones."""
    model_dir, preset_dir, step, errors = run
    assert step == 4
    assert sorted(os.listdir(preset_dir)) == [
        "assets", "config.json", "metadata.json", "model.weights.h5", "preprocessor.json",
        "task.json", "task.weights.h5", "tokenizer.json"]
    loaded = _compare(model_dir, preset_dir)
    assert loaded["sequence_output"] <= 3e-3 and loaded["mlm_logits"] <= 3e-3, loaded
    # What the writer's own check measured before writing, on the same batch.
    assert errors == pytest.approx(loaded, rel=1e-3, abs=1e-7)


@pytest.fixture(scope="module")
def moved(run, tmp_path_factory):
    """A copy of the run whose weights are moved away from the initializers (as
    tests/models/test_bert.py does), so that GELU sees inputs of a trained model's size:
    a new checkpoint at step 5."""
    from tfeff.training.families import bert as bert_family

    model_dir = str(tmp_path_factory.mktemp("moved") / "core")
    shutil.copytree(run[0], model_dir)
    bert, _, _, config = restore_model(model_dir)
    rng = np.random.default_rng(0)
    for w in bert.weights:
        w.assign(w + rng.normal(0, 0.2, w.shape).astype("float32"))
    bert_family.save_converted(bert, config, model_dir, 5)
    return model_dir


@pytest.mark.numerics
def test_erf_gelu_converts_to_about_1e_3(moved, tmp_path):
    """The run uses BERT's erf GELU (`bert_base_core.yaml`'s) and keras-hub's BERT the
    tanh approximation: the encoder agrees to about 1e-3 (relative), not exactly; the
    masked-LM head (keras-hub: erf GELU, layer-norm epsilon 1e-5) likewise."""
    assert load_config(os.path.join(moved, "config.yaml")).model.activation == "gelu"
    step, errors = write_keras_hub_preset(moved, str(tmp_path / "preset"))
    loaded = _compare(moved, str(tmp_path / "preset"))
    print("erf gelu:", loaded)
    assert step == 5 and errors == pytest.approx(loaded, rel=1e-3, abs=1e-7)
    assert 1e-6 < loaded["sequence_output"] <= 3e-3, loaded  # approximate, and close
    assert 1e-6 < loaded["mlm_logits"] <= 3e-3, loaded


@pytest.mark.numerics
def test_a_gelu_approximate_model_converts_exactly(moved, tmp_path):
    """The same weights read as a `gelu_approximate` model (keras-hub's activation and
    epsilon): the encoder is reproduced to float32 rounding (two float32 implementations,
    keras-hub's and tfeff's: `check_tolerances`); the masked-LM head, whose keras-hub
    GELU is erf, stays approximate."""
    model_dir = str(tmp_path / "approximate")
    shutil.copytree(moved, model_dir)
    path = os.path.join(model_dir, "config.yaml")
    with open(path, encoding="utf-8") as f:
        config = yaml.safe_load(f)
    config["model"]["activation"] = "gelu_approximate"
    with open(path, "w", encoding="utf-8") as f:
        yaml.safe_dump(config, f)
    _, errors = write_keras_hub_preset(model_dir, str(tmp_path / "preset"))
    bounds = {}
    loaded = _compare(model_dir, str(tmp_path / "preset"), bounds)
    print("gelu_approximate:", loaded, "float32 bound:", bounds["sequence_output"])
    bound = bounds["sequence_output"]  # about 1e-4 (this model: 2 layers of width 32)
    assert errors["sequence_output"] <= bound and loaded["sequence_output"] <= bound, loaded
    assert 1e-6 < loaded["mlm_logits"] <= 3e-3, loaded


def test_the_tokenizer_has_bert_names_and_tfeff_ids(run):
    model_dir, preset_dir, _, _ = run
    tokenizer = keras_hub.models.BertTokenizer.from_preset(preset_dir)
    words = vocabulary_lib.Vocabulary.load(os.path.join(model_dir, "vocabulary.txt")).words
    assert words[:5] == list(vocabulary_lib.SPECIALS) + [vocabulary_lib.MASK]
    assert [tokenizer.id_to_token(i) for i in range(5)] == RESERVED
    assert (tokenizer.pad_token_id, tokenizer.cls_token_id, tokenizer.sep_token_id,
            tokenizer.mask_token_id, tokenizer.token_to_id("[UNK]")) == (
        vocabulary_lib.PAD_ID, vocabulary_lib.CLS_ID, vocabulary_lib.SEP_ID,
        vocabulary_lib.MASK_ID, vocabulary_lib.UNK_ID)
    assert tokenizer.get_vocabulary()[5:] == words[5:]

    # The classifier's preprocessor packs [CLS] ids [SEP] and pads, as tfeff's data does.
    n = 24
    sentences = _sentences(model_dir)
    preprocessor = keras_hub.models.BertTextClassifierPreprocessor.from_preset(
        preset_dir, sequence_length=n)
    theirs = np.asarray(preprocessor(sentences)["token_ids"])
    pieces = bert_tokenizer(os.path.join(model_dir, "vocabulary.txt"), lower_case=True)
    ours = pieces.tokenize(sentences).merge_dims(1, 2).to_list()
    expected = np.zeros((len(sentences), n), np.int64)
    for row, ids in zip(expected, ours):
        packed = [vocabulary_lib.CLS_ID] + ids + [vocabulary_lib.SEP_ID]
        row[:len(packed)] = packed
    np.testing.assert_array_equal(theirs, expected)
    flat = [tokenizer.id_to_token(int(i)) for i in ours[0]]
    # A real test: a capitalized corpus word is found (lower-cased), continuation pieces
    # occur, punctuation is split off (the corpus has `,` and `.`; `-` and `!` are [UNK]s
    # of their own, as is the word with a character outside the vocabulary), and accents
    # are stripped.
    assert flat[0] != "[UNK]" and any(t.startswith("##") for t in flat), flat
    assert "," in flat and flat[-1] == "." and flat.count("[UNK]") == 3, flat
    assert list(tokenizer("Éclair")) == list(tokenizer("eclair"))

    # The masked-LM preprocessor has the run's length and masking.
    masked_lm = keras_hub.models.BertMaskedLMPreprocessor.from_preset(preset_dir)
    assert (masked_lm.sequence_length, masked_lm.mask_selection_length,
            masked_lm.mask_selection_rate) == (n, 4, 0.15)
    x, y, _ = masked_lm(sentences)
    assert np.asarray(x["token_ids"]).shape == (2, n) and np.asarray(y).shape == (2, 4)


@pytest.mark.slow
def test_a_text_classifier_fine_tunes_from_the_preset(run):
    """The fine-tuning recipe: the classifier's preprocessor packs to the model's length
    (keras-hub's default, 512, exceeds its position table). `slow` (28 s): the preset's
    backbone, tokenizer and preprocessor load and compute the run's outputs in the test
    above."""
    preset_dir = run[1]
    preprocessor = keras_hub.models.BertTextClassifierPreprocessor.from_preset(
        preset_dir, sequence_length=24)
    classifier = keras_hub.models.BertTextClassifier.from_preset(
        preset_dir, num_classes=2, preprocessor=preprocessor)
    loss = classifier.train_on_batch(_sentences(run[0]), np.array([0, 1]))
    assert np.isfinite(loss[0] if isinstance(loss, list) else loss)


def _edited_copy(model_dir, destination, **model):
    """A copy of `model_dir`'s config.yaml (only) with `model` keys replaced."""
    os.makedirs(destination)
    with open(os.path.join(model_dir, "config.yaml"), encoding="utf-8") as f:
        config = yaml.safe_load(f)
    config["model"].update(model)
    with open(os.path.join(destination, "config.yaml"), "w", encoding="utf-8") as f:
        yaml.safe_dump(config, f)
    return destination


@pytest.mark.parametrize("which,error,message", [
    ("relaxed", ConversionError, r"model\.relaxed is set.*tfeff-convert-core --model_dir"),
    ("rotary", ConversionError, r"config\.yaml: model\.position_embedding is 'rotary'"),
    ("relu", ConversionError, r"config\.yaml: model\.activation is 'relu'"),
    ("not_switched", ConversionError, r"two-phase CoRe run \(core\.coarse_steps: 2\) that has "
                                      r"not switched"),
    ("inside", ValueError, r"lies inside the model directory"),
    ("occupied", FileExistsError, r"is not a keras-hub preset written by tfeff"),
    ("missing", FileNotFoundError, r"not a tfeff model directory \(no config\.yaml\)"),
])
def test_refusals_name_the_cause_and_write_nothing(run, tmp_path, which, error, message):
    model_dir = run[0]
    source, out = model_dir, str(tmp_path / "preset")
    if which == "relaxed":
        source = os.path.join(model_dir, "coarse")
    elif which in ("rotary", "relu"):
        change = {"rotary": {"position_embedding": "rotary"}, "relu": {"activation": "relu"}}
        source = _edited_copy(model_dir, str(tmp_path / which), **change[which])
    elif which == "not_switched":
        source = str(tmp_path / "not_switched")  # as during the relaxed phase
        shutil.copytree(model_dir, source, ignore=shutil.ignore_patterns("checkpoints"))
    elif which == "inside":
        out = os.path.join(model_dir, "preset")
    elif which == "occupied":
        os.makedirs(out)
        open(os.path.join(out, "keep.txt"), "w").close()
    elif which == "missing":
        source = str(tmp_path / "none")
    with pytest.raises(error, match=message):
        write_keras_hub_preset(source, out, overwrite=which == "occupied")
    assert (os.listdir(out) == ["keep.txt"]) if which == "occupied" else not os.path.exists(out)
    # No staging folder (`<output>.tmp-*`) or lock is left beside the output.
    assert not [p for p in os.listdir(os.path.dirname(out))
                if p.startswith(os.path.basename(out) + ".")]


def test_a_failed_save_leaves_nothing_and_overwrite_replaces_a_preset(run, tmp_path,
                                                                      monkeypatch):
    model_dir, preset_dir = run[0], str(tmp_path / "preset")
    shutil.copytree(run[1], preset_dir)
    with pytest.raises(FileExistsError, match="pass overwrite=True"):
        write_keras_hub_preset(model_dir, preset_dir)

    def half_written(task, directory):
        open(os.path.join(directory, "config.json"), "w").close()
        raise OSError("disk full")

    monkeypatch.setattr(keras_hub.models.BertMaskedLM, "save_to_preset", half_written)
    with pytest.raises(OSError, match="disk full"):
        write_keras_hub_preset(model_dir, str(tmp_path / "new"))
    assert sorted(os.listdir(tmp_path)) == ["preset"]
    monkeypatch.undo()
    os.remove(os.path.join(preset_dir, "metadata.json"))
    write_keras_hub_preset(model_dir, preset_dir, overwrite=True)
    assert "metadata.json" in os.listdir(preset_dir)
    assert sorted(os.listdir(tmp_path)) == ["preset"]


def test_cli_writes_a_preset_and_refuses_a_relaxed_directory(run, tmp_path, capsys):
    from tfeff.bin import common
    from tfeff.bin import convert_core

    model_dir = run[0]
    out = str(tmp_path / "preset")
    r = subprocess.run(
        [sys.executable, "-m", "tfeff.bin.convert_core", "--model_dir", model_dir,
         "--keras_hub_preset", out], cwd=REPO, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"),
        capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert f"(step 4) as the keras-hub preset {out}; relative errors" in r.stdout
    assert keras_hub.models.BertBackbone.from_preset(out).vocabulary_size == len(
        keras_hub.models.BertTokenizer.from_preset(out).get_vocabulary())
    # A refusal through the binaries' error boundary: one line, exit status 1, no output.
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_:
        common.run_main(lambda: convert_core._write_preset(
            os.path.join(model_dir, "coarse"), str(tmp_path / "other"), False))
    err = capsys.readouterr().err
    assert exit_.value.code == 1 and "Traceback" not in err
    assert err.startswith("error: ") and "model.relaxed is set" in err and err.count("\n") == 1
    assert sorted(os.listdir(tmp_path)) == ["preset"]


@pytest.mark.parametrize("args,message", [
    (["--output_dir", "o", "--keras_hub_preset", "p"], "exactly one of --output_dir"),
    ([], "exactly one of --output_dir"),
    (["--keras_hub_preset", "p", "--hf_dir", "h"], "exactly one of --output_dir"),
    (["--output_dir", "o", "--overwrite"],
     "--overwrite applies to --keras_hub_preset and --hf_dir only"),
    (["--keras_hub_preset", "p", "--rtol", "0.1"], "--rtol applies to --output_dir only"),
    (["--hf_dir", "h", "--rtol", "0.1"], "--rtol applies to --output_dir only"),
    (["--keras_hub_preset", "p", "no-hub"], r"needs keras_hub, which cannot be imported .*'\.\[hub\]'"),
    (["--hf_dir", "h", "no-safetensors"], r"needs safetensors, which cannot be imported .*'\.\[hf\]'"),
])
def test_cli_usage_errors_name_the_flags(tmp_path, monkeypatch, args, message):
    """Refused before any work, with absl's usage error (exit status 1, no traceback); a
    missing keras-hub (an import that fails) is named with the install command."""
    from absl import app
    from absl import flags

    from tfeff.bin import convert_core

    for flag, module in (("no-hub", "keras_hub"), ("no-safetensors", "safetensors")):
        if flag in args:
            args = args[:-1]
            monkeypatch.setitem(sys.modules, module, None)  # importing it fails
    try:
        flags.FLAGS(["tfeff-convert-core", "--model_dir", str(tmp_path), *args])
        with pytest.raises(app.UsageError, match=message):
            convert_core.main(["tfeff-convert-core"])
    finally:
        flags.FLAGS.unparse_flags()
    assert os.listdir(tmp_path) == []


@pytest.mark.numerics
def test_a_hugging_face_directory_loads_in_transformers_and_computes_the_same(run, tmp_path):
    """`write_hf_model_dir` (tfeff-convert-core --hf_dir): the real `transformers` loads the
    tokenizer with the model's casing, tokenizing as tfeff did, and the model, whose
    masked-LM logits and sequence output equal tfeff's to float32 rounding."""
    transformers = pytest.importorskip("transformers")
    import torch

    from tfeff.convert import write_hf_bert
    from tfeff.convert import write_hf_model_dir

    model_dir = run[0]
    out = str(tmp_path / "hf")
    with pytest.raises(ConversionError, match="model.relaxed is set.*merge it first"):
        write_hf_model_dir(os.path.join(model_dir, "coarse"), out)  # the relaxed phase
    assert not os.path.exists(out)
    step = write_hf_model_dir(model_dir, out)
    assert step == run[2]
    assert sorted(os.listdir(out)) == ["config.json", "model.safetensors",
                                       "special_tokens_map.json", "tokenizer_config.json",
                                       "vocab.txt"]
    bert, _, _, config = restore_model(model_dir)
    with open(os.path.join(out, "tokenizer_config.json"), encoding="utf-8") as f:
        assert json.load(f)["do_lower_case"] is config.data.lower_case  # the run's casing
    # A word of the vocabulary, capitalized and upper-cased: a tokenizer that lower-cases
    # reads them as the word, one that does not, not. transformers without
    # tokenizer_config.json lower-cases whatever the vocabulary.
    vocabulary = os.path.join(model_dir, "vocabulary.txt")
    words = vocabulary_lib.Vocabulary.load(vocabulary).words
    word = next(w for w in words[5:] if w.isalpha() and w.islower() and len(w) > 3)
    sentences = [f"the {word} , {word.capitalize()} !", f"{word.upper()} ({word})"]
    for lower_case in (True, False):
        directory = out if lower_case == config.data.lower_case else str(tmp_path / "other")
        if directory != out:
            write_hf_bert(bert, directory, vocabulary, lower_case=lower_case)
        tokenizer = transformers.AutoTokenizer.from_pretrained(directory)
        theirs = [tokenizer(s, add_special_tokens=False)["input_ids"] for s in sentences]
        ours = bert_tokenizer(vocabulary, lower_case).tokenize(sentences).merge_dims(
            1, 2).to_list()
        assert theirs == ours, lower_case
        assert (ours[0][1] == ours[0][3]) is lower_case  # "word" and "Word" alike or not
        assert tokenizer("a")["input_ids"][0] == vocabulary_lib.CLS_ID
    model = transformers.BertForPreTraining.from_pretrained(out, attn_implementation="eager")
    model.eval()
    x = probe_inputs(bert, 3, 12)
    n = x["token_ids"].shape[1]
    positions = np.broadcast_to(np.arange(n), x["token_ids"].shape).astype("int32")
    mine = bert({**x, "masked_positions": positions}, training=False)
    with torch.no_grad():
        hf = model(input_ids=torch.tensor(x["token_ids"], dtype=torch.long),
                   token_type_ids=torch.tensor(x["segment_ids"], dtype=torch.long),
                   attention_mask=torch.tensor(x["padding_mask"], dtype=torch.long),
                   output_hidden_states=True)
    mask = np.asarray(x["padding_mask"], bool)
    bounds = check_tolerances(bert, n)
    for name, theirs_out, ours_out in (
            ("mlm_logits", hf.prediction_logits.numpy(), np.asarray(mine["mlm_logits"])),
            ("sequence_output", hf.hidden_states[-1].numpy(),
             np.asarray(mine["sequence_output"]))):
        error = _relative_error(ours_out[mask], theirs_out[mask])
        assert error <= bounds[name], (name, error, bounds[name])
