"""`tfeff-convert-core`'s library function: a relaxed BERT model directory -> a standard one.

The merge itself lives in `tfeff.models.relaxed_merge`; this module re-exports it.
"""

import os
import shutil

import tensorflow as tf

from tfeff import config as config_lib
from tfeff.convert.staging import staged_directory
from tfeff.data import files
from tfeff.models.relaxed_merge import ConversionError
from tfeff.models.relaxed_merge import merge_and_check
from tfeff.models.relaxed_merge import merge_relaxed_bert
from tfeff.training.families import bert as bp
from tfeff.training import model_directory

__all__ = ["ConversionError", "convert_model_dir", "merge_relaxed_bert"]


def convert_model_dir(model_dir, output_dir, rtol=None):
    """Converts a relaxed BERT model directory into a standard one (`tfeff-convert-core`).

    `output_dir` gets `config.yaml` without `model.relaxed`, the vocabulary, the generated
    corpus, and a checkpoint of the standard model at the relaxed model's step with a fresh
    optimizer, which `tfeff-pretrain` continues. It is staged (`tfeff.convert.staging`); one
    that is, contains or lies inside `model_dir` raises a ValueError.

    Args:
        model_dir: a relaxed BERT model directory: `model.relaxed` set and no
            `core.coarse_steps` (e.g. a two-phase run's `coarse/`).
        output_dir: the standard model directory to write; absent or empty.
        rtol: the check's largest relative error (the standard model against the relaxed
            one with exact attention); default: `check_tolerances`' float32 bound.

    Returns:
        `(step, errors)`: the step and the check's relative errors.

    Raises:
        FileNotFoundError: `model_dir` has no `config.yaml` (or no checkpoint).
        FileExistsError: `output_dir` exists and is not empty.
        ConversionError: `model_dir` holds no relaxed BERT, or the merge fails its check.
    """
    config_path = os.path.join(model_dir, model_directory.CONFIG_FILE)
    # Inside the relaxed directory the output would count as its checkpoints.
    files.check_not_an_input(output_dir, {"model directory (model_dir, --model_dir)": model_dir})
    if not tf.io.gfile.exists(config_path):
        raise FileNotFoundError(f"{model_dir} is not a tfeff model directory (no config.yaml)")
    config = config_lib.load_config(config_path, saved=True)
    if config.family != "bert":
        raise ConversionError(f"{model_dir} holds a {config.family!r} model, not a relaxed BERT")
    if config.two_phase:
        raise ConversionError(
            f"{model_dir} is a two-phase CoRe run whose checkpoints hold the standard model; "
            f"its relaxed model is in {os.path.join(model_dir, bp.COARSE_DIR)}")
    if config.model.relaxed is None:
        raise ConversionError(f"{model_dir} holds a standard BERT (model.relaxed is not set)")
    if tf.io.gfile.exists(output_dir) and tf.io.gfile.listdir(output_dir):
        raise FileExistsError(f"{output_dir} exists and is not empty")
    relaxed, _, step, _ = bp.BERT.restore(model_dir, config)
    standard, errors = merge_and_check(relaxed, rtol=rtol)

    with staged_directory(output_dir, "tfeff.convert.convert_model_dir") as tmp:
        std_config = bp.standard_config(config)
        config_lib.write_yaml(std_config, os.path.join(tmp, model_directory.CONFIG_FILE))
        shutil.copy(os.path.join(model_dir, model_directory.VOCABULARY_FILE),
                    os.path.join(tmp, model_directory.VOCABULARY_FILE))
        corpus = os.path.join(model_dir, "corpus")
        if config.data.synthetic is not None and os.path.isdir(corpus):
            shutil.copytree(corpus, os.path.join(tmp, "corpus"))
        bp.save_converted(standard, std_config, tmp, step)
        if os.path.isdir(output_dir):
            os.rmdir(output_dir)  # empty, checked above
        os.rename(tmp, output_dir)
    return step, errors
