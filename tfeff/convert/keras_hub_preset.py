"""A standard BERT model directory -> a keras-hub preset (`BertMaskedLM` with its preprocessor).

`write_keras_hub_preset(model_dir, preset_dir)` writes, with keras-hub's own
`save_to_preset`, what `keras_hub.models.BertMaskedLM.from_preset(preset_dir)` loads: the
backbone (`to_keras_hub`), the masked-LM head (tfeff's `mlm_dense`, `mlm_norm`, `mlm_bias`
are keras-hub's `MaskedLMHead` intermediate dense, layer norm and bias; keras-hub's fixed
erf GELU and epsilon 1e-5 make its logits approximate), the preprocessor and the tokenizer
(tfeff's vocabulary, ids 0-4 named `[PAD] [UNK] [CLS] [SEP] [MASK]`). The files and the
tokenizers' agreement: docs/guides/interop.md#a-preset-from-a-model-directory.
"""

import logging
import os

import numpy as np

from tfeff.convert.hf_bert import bert_vocabulary
from tfeff.convert.hf_bert import _not_only
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

# What `save_to_preset` writes for a BertMaskedLM: a directory holding more is not replaced.
_PRESET_FILES = frozenset({"config.json", "model.weights.h5", "metadata.json", "task.json",
                           "task.weights.h5", "preprocessor.json", "tokenizer.json", "assets"})
# The check's bound where keras-hub's model is not the same function (erf GELU, the head's
# epsilon: 1e-4 to 1e-2 apart); a wrong weight moves the outputs by far more than 5e-2.
_APPROXIMATE_RTOL = 5e-2


def _not_convertible(config, model_dir):
    """Why keras-hub's BERT cannot hold the model of `model_dir`, or None."""
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
    theirs = {**task.backbone(inputs, training=False),
              "mlm_logits": task({**inputs, "mask_positions": x["masked_positions"]},
                                 training=False)}
    names = ["sequence_output", "mlm_logits"] + (["pooled_output"] if bert.use_nsp else [])
    errors = compare_outputs({k: ours[k] for k in names}, theirs, x["padding_mask"])
    exact = exact_in_keras_hub(bert)
    rounding = check_tolerances(bert, np.shape(x["token_ids"])[1])
    bounds = {name: rounding[name] if exact and name != "mlm_logits" else _APPROXIMATE_RTOL
              for name in errors}
    return errors, bounds


def write_keras_hub_preset(model_dir, preset_dir, overwrite=False):
    """Writes a standard BERT model directory as a keras-hub preset
    (docs/guides/interop.md#a-preset-from-a-model-directory),
    staged (`tfeff.convert.staging`): a failure leaves nothing at `preset_dir`.

    Before anything is written, the keras-hub model is compared with the tfeff model: the
    sequence (and pooled) output must agree to float32 rounding (`check_tolerances`, about
    4e-4 for BERT-base) when the model uses keras-hub's activation and epsilon, else to 5e-2;
    the masked-LM logits to 5e-2. Without `model.use_nsp` the pooler is freshly initialized.

    Args:
        model_dir: a standard BERT model directory (`family: bert`) with learned positions.
        preset_dir: the preset directory to write.
        overwrite: replace an existing `preset_dir` that holds a keras-hub preset (only).

    Returns:
        `(step, errors)`: the checkpoint's step and the check's relative errors per output
        (`sequence_output`, `mlm_logits`, and `pooled_output` with `model.use_nsp`).

    First, a `model_dir` without `config.yaml` raises a FileNotFoundError; a `preset_dir`
    that is, contains or lies inside `model_dir`, a ValueError; an existing one without
    `overwrite`, or holding other files, a FileExistsError; a missing checkpoint or
    vocabulary, a FileNotFoundError; no keras-hub, an ImportError.

    Raises:
        ConversionError: keras-hub's BERT cannot hold the model (`family`, `model.relaxed`,
            a two-phase run before its switch, `model.position_embedding: rotary`,
            `model.activation: relu`, no BERT vocabulary: named), or the check fails.
    """
    keras_hub = import_keras_hub()
    config = model_directory.load_model_dir_config(model_dir)
    recheck = files.check_output(
        preset_dir, {"model directory (model_dir, --model_dir)": model_dir},
        overwrite=overwrite, kind="a keras-hub preset",
        foreign=lambda path: _not_only(path, _PRESET_FILES, {"config.json", "tokenizer.json"},
                                      "a keras-hub preset does not"))
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

