"""A standard BERT model directory -> a keras-hub preset (`BertMaskedLM` with its preprocessor).

`write_keras_hub_preset(model_dir, preset_dir)` writes, with keras-hub's own
`save_to_preset`, what `keras_hub.models.BertMaskedLM.from_preset(preset_dir)`
(or `BertBackbone`, `BertTokenizer`, `BertTextClassifier` ... `.from_preset`)
loads:

* the backbone (`to_keras_hub`): `config.json`, `model.weights.h5`, `metadata.json`;
* the masked-LM head: `task.json`, `task.weights.h5`. tfeff's `mlm_dense`,
  `mlm_norm` and `mlm_bias` are keras-hub's `MaskedLMHead` intermediate dense,
  layer norm and output bias; both tie the output projection to the token
  embedding. keras-hub's head always uses erf GELU and layer-norm epsilon
  1e-5, tfeff's the model's `activation` and `layer_norm_epsilon`, so its
  logits agree only approximately;
* the preprocessor (`preprocessor.json`: `BertMaskedLMPreprocessor` with the
  model's `data.max_sequence_length` and masking rates) and the tokenizer
  (`tokenizer.json`, `assets/tokenizer/vocabulary.txt`): tfeff's WordPiece
  vocabulary with BERT's names for the reserved ids, `<pad> <unk> <s> </s>
  [MASK]` (ids 0-4) becoming `[PAD] [UNK] [CLS] [SEP] [MASK]`. tfeff's masked-LM
  data already reads `<s>` and `</s>` as `[CLS]` and `[SEP]` (`[CLS] A [SEP]`,
  `[CLS] A [SEP] B [SEP]`), as keras-hub's preprocessors pack them. With
  `data.lower_case`, the tokenizer lower-cases and strips accents, as tfeff's
  `text.BertTokenizer(lower_case=True)` does.
"""

import logging
import os

import numpy as np

from tfeff.convert.hf_bert import bert_vocabulary
from tfeff.convert.hf_bert import standard_bert_problem
from tfeff.convert.keras_hub_bert import copy_weights
from tfeff.convert.keras_hub_bert import exact_in_keras_hub
from tfeff.convert.keras_hub_bert import import_keras_hub
from tfeff.convert.keras_hub_bert import to_keras_hub
from tfeff.convert.staging import staged_directory
from tfeff.data import files
from tfeff.models.relaxed_merge import ConversionError
from tfeff.models.relaxed_merge import check_tolerances
from tfeff.models.relaxed_merge import compare_outputs
from tfeff.models.relaxed_merge import probe_inputs
from tfeff.training import model_directory
from tfeff.training.families import bert as bp

__all__ = ["write_keras_hub_preset"]

# What keras-hub's preset saving writes for a BertMaskedLM with its preprocessor: an
# existing directory holding anything else is not replaced.
_PRESET_FILES = frozenset({"config.json", "model.weights.h5", "metadata.json", "task.json",
                           "task.weights.h5", "preprocessor.json", "tokenizer.json",
                           "assets"})
# The largest relative error accepted from the conversion's check where keras-hub's model
# is not the same function (erf GELU, the head's epsilon: 1e-4 to 1e-2 apart); a wrong
# weight moves the outputs by far more than 5e-2. Exact conversions (keras-hub's
# activation and epsilon) are held to the float32 rounding of the model's longest path
# (`check_tolerances`).
_APPROXIMATE_RTOL = 5e-2


def _not_a_preset(path):
    """None when `path` holds only what `write_keras_hub_preset` writes."""
    if not os.path.isdir(path):
        return "a file, not a directory"
    names = set(os.listdir(path))
    other = sorted(names - _PRESET_FILES)
    if other:
        return f"it holds {', '.join(other[:5])}, which a keras-hub preset does not"
    if not {"config.json", "tokenizer.json"} <= names:
        return "it lacks config.json or tokenizer.json"
    return None


def _not_convertible(config, model_dir):
    """Why keras-hub's BERT cannot hold the model of `model_dir` (naming the config key),
    or None."""
    if (config.family == "bert" and config.model.position_embedding == "learned"
            and config.model.activation == "relu"):  # before the CoRe checks, as said first
        return (f"{os.path.join(model_dir, model_directory.CONFIG_FILE)}: model.activation "
                "is 'relu'; keras-hub's BertBackbone always uses GELU (exactly: "
                "gelu_approximate; approximately: gelu)")
    return standard_bert_problem(config, model_dir, "keras-hub presets",
                                 "keras-hub's BertBackbone")


def _masked_lm(keras_hub, bert, config, words):
    """The `BertMaskedLM` (backbone, head weights, preprocessor) of a standard `bert`."""
    d = config.data
    tokenizer = keras_hub.models.BertTokenizer(
        vocabulary=words, lowercase=d.lower_case, strip_accents=d.lower_case)
    preprocessor = keras_hub.models.BertMaskedLMPreprocessor(
        tokenizer, sequence_length=d.max_sequence_length, mask_selection_rate=d.mask_rate,
        mask_selection_length=d.max_predictions_per_seq, mask_token_rate=d.mask_token_rate,
        random_token_rate=d.random_token_rate)
    task = keras_hub.models.BertMaskedLM(to_keras_hub(bert), preprocessor=preprocessor)
    # keras-hub's MaskedLMHead exposes no accessors for its sublayers either.
    head = task.masked_lm_head
    copy_weights(bert.mlm_dense.weights, head._intermediate_dense.weights, bert.mlm_dense.path)
    copy_weights(bert.mlm_norm.weights, head._intermediate_layer_norm.weights, bert.mlm_norm.path)
    copy_weights([bert.mlm_bias], [head._bias], bert.mlm_bias.path)
    return task


def _check(bert, task):
    """`(errors, bounds)`: the relative errors of the preset's model against `bert` on a
    fixed batch, per output, and the largest each may reach."""
    x = probe_inputs(bert)
    ours = bert(x, training=False)
    inputs = {k: x[k] for k in ("token_ids", "segment_ids", "padding_mask")}
    theirs = task.backbone(inputs, training=False)
    reference = {"sequence_output": ours["sequence_output"], "mlm_logits": ours["mlm_logits"]}
    candidate = {"sequence_output": theirs["sequence_output"],
                 "mlm_logits": task({**inputs, "mask_positions": x["masked_positions"]},
                                    training=False)}
    if bert.use_nsp:
        reference["pooled_output"] = ours["pooled_output"]
        candidate["pooled_output"] = theirs["pooled_output"]
    errors = compare_outputs(reference, candidate, x["padding_mask"])
    exact = exact_in_keras_hub(bert)
    rounding = check_tolerances(bert, np.shape(x["token_ids"])[1])
    bounds = {name: rounding[name] if exact and name != "mlm_logits" else _APPROXIMATE_RTOL
              for name in errors}
    return errors, bounds


def write_keras_hub_preset(model_dir, preset_dir, overwrite=False):
    """Writes a standard BERT model directory as a keras-hub preset.

    The preset holds a `keras_hub.models.BertMaskedLM`: the backbone
    (`to_keras_hub`), the masked-LM head, a `BertMaskedLMPreprocessor` (the
    model's `data.max_sequence_length` and masking rates) and a
    `BertTokenizer` whose vocabulary is the model's, its reserved tokens named
    `[PAD] [UNK] [CLS] [SEP] [MASK]` (ids 0-4), lower-casing and stripping
    accents with `data.lower_case`. keras-hub's own `save_to_preset` writes it;
    `keras_hub.models.BertMaskedLM.from_preset(preset_dir)` loads it, and so do
    `BertBackbone` and `BertTokenizer`. `BertTextClassifier.from_preset` needs
    `num_classes` and a preprocessor that packs to at most the model's length
    (`BertTextClassifierPreprocessor.from_preset(preset_dir,
    sequence_length=...)`): keras-hub's default, 512, exceeds the position table.

    Before anything is written, the keras-hub model is compared with the tfeff
    model on a fixed batch. The sequence output (and, with `model.use_nsp`, the
    pooled output) must agree to float32 rounding (relative, twice the
    probabilistic bound of the model's longest path: `check_tolerances`, about
    4e-4 for BERT-base) when the model uses keras-hub's
    `gelu_approximate` and layer-norm epsilon 1e-12, else to 5e-2 (the measured
    errors are in docs/guides/interop.md); the masked-LM logits,
    whose keras-hub head always uses erf GELU and epsilon 1e-5, to 5e-2.
    Without `model.use_nsp` the backbone's pooler (what `BertTextClassifier`
    reads) is freshly initialized; with it, the next-sentence classifier is
    not carried.

    Everything is written to a temporary sibling of `preset_dir` and renamed at
    the end (`tfeff.convert.staging`): on any failure nothing is left at
    `preset_dir`.

    Args:
        model_dir: a standard BERT model directory (`family: bert`) with
            learned positions: a finished (or switched) two-phase CoRe run, the
            output of `tfeff-convert-core`, or a standard BERT run.
        preset_dir: the preset directory to write.
        overwrite: replace an existing `preset_dir` that holds a keras-hub
            preset (nothing else: see `tfeff.data.files.check_output`).

    Returns:
        `(step, errors)`: the checkpoint's step and the check's relative
        errors per output (`sequence_output`, `mlm_logits`, and `pooled_output`
        with `model.use_nsp`).

    Before anything is read or written, a `model_dir` without `config.yaml`
    raises a FileNotFoundError; a `preset_dir` that is, contains or lies inside
    `model_dir`, a ValueError naming both; an existing `preset_dir` without
    `overwrite`, or one holding anything but a keras-hub preset, a
    FileExistsError. A missing checkpoint or vocabulary raises a
    FileNotFoundError; without keras-hub installed, an ImportError says how to
    install it (`pip install -e '.[hub]'`).

    Raises:
        ConversionError: keras-hub's BERT cannot hold the model (the message
            names the config key): another `family`; `model.relaxed` in a
            directory that holds the relaxed model (merge it with
            `tfeff-convert-core` first); a two-phase run before its switch
            (`core.coarse_steps`); `model.position_embedding: rotary`;
            `model.activation: relu`; a vocabulary without BERT's reserved
            tokens. Also when the check fails.
    """
    keras_hub = import_keras_hub()
    config = model_directory.load_model_dir_config(model_dir)
    recheck = files.check_output(
        preset_dir, {"model directory (model_dir, --model_dir)": model_dir},
        overwrite=overwrite, kind="a keras-hub preset", foreign=_not_a_preset)
    problem = _not_convertible(config, model_dir)
    if problem:
        raise ConversionError(problem)
    bert, _, step, _ = bp.BERT.restore(model_dir, config)
    if config.model.use_nsp:
        logging.info("The next-sentence classifier (nsp_dense) has no place in keras-hub's "
                     "BertMaskedLM and is not written; the pooler is.")
    words, problem = bert_vocabulary(
        os.path.join(model_dir, model_directory.VOCABULARY_FILE), bert.backbone.vocabulary_size)
    if problem:
        raise ConversionError(problem)
    task = _masked_lm(keras_hub, bert, config, words)
    errors, bounds = _check(bert, task)
    bad = {k: v for k, v in errors.items() if not v <= bounds[k]}
    if bad:
        raise ConversionError(
            f"The keras-hub model of {model_dir} does not reproduce the tfeff model: "
            + ", ".join(f"{k} relative error {v:.3g} > {bounds[k]:g}" for k, v in bad.items()))
    logging.info("keras-hub check: relative errors %s",
                 ", ".join(f"{k} {v:.2g}" for k, v in errors.items()))

    with staged_directory(preset_dir, "tfeff.convert.write_keras_hub_preset") as tmp:
        task.save_to_preset(tmp)
        files.move_directory_into_place(tmp, preset_dir, recheck)
    return step, errors

