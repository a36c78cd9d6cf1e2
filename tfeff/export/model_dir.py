"""Export from a model directory: restore the latest checkpoint and write an embedder."""

import tensorflow as tf

from tfeff.export.embedder import embedder_module
from tfeff.export.saved_embedder import check_export_path
from tfeff.export.saved_embedder import export_embedder
from tfeff.layers import FastTextEmbedding
from tfeff.training import model_directory
from tfeff.training.families import get_family


def model_dir_embedder(model_dir, max_tokens=None, subword_pooling="first"):
    """The module `export_model_dir` would write, unexported: its Keras model (`module.model`)
    is live, for fine-tuning the encoder.

    Args:
        model_dir: a tfeff model directory (`config.yaml` and checkpoints).
        max_tokens: see `embedder_module`.
        subword_pooling: see `embedder_module`.

    Returns:
        `(module, extra_files, step)`: the `EmbedderModule`, the files an
        export copies beside it (`{name: path}`), and the checkpoint's step.
    """
    model, options, extra_files, step = _restore(model_dir, max_tokens, subword_pooling)
    return embedder_module(model, **options), extra_files, step


def _restore(model_dir, max_tokens, subword_pooling):
    config = model_directory.load_model_dir_config(model_dir)
    family = get_family(config)
    model, _, step, _ = family.restore(model_dir, config)
    options, extra_files = family.embedder_options(config, model_dir)
    options.update(max_tokens=max_tokens, subword_pooling=subword_pooling)
    return model, options, extra_files, step


def export_model_dir(model_dir, output, overwrite=False, max_tokens=None,
                     subword_pooling="first"):
    """Exports the latest checkpoint of any tfeff model directory as a SavedModel embedder.

    Every family exports, tokenized as in training (`config.yaml`). `output` is checked
    before any work (`check_export_path`: `ValueError`, `FileExistsError`).

    Args:
        model_dir: a tfeff model directory (`config.yaml` and checkpoints).
        output: the export directory to write.
        overwrite: replace an existing export (only an export).
        max_tokens: see `embedder_module`.
        subword_pooling: see `embedder_module`.

    Returns:
        The exported checkpoint's step.
    """
    config = model_directory.load_model_dir_config(model_dir)
    pretrained = getattr(getattr(config, "fasttext", None), "pretrained", "") or None
    check_export_path(output, {"model directory (model_dir)": model_dir,
                               "fastText file (fasttext.pretrained)": pretrained}, overwrite)
    model, options, extra_files, step = _restore(model_dir, max_tokens, subword_pooling)
    export_embedder(model, output, extra_files=extra_files, overwrite=overwrite, **options)
    return step


def export_fasttext(fasttext_path, output, overwrite=False, max_tokens=None):
    """Exports fastText vectors alone as a one-layer embedder (the context-free baseline);
    `output` is checked as by `export_model_dir`.

    Args:
        fasttext_path: a fastText `.bin` model (with subwords) or a `.vec` file.
        output: the export directory to write.
        overwrite: replace an existing export (only an export).
        max_tokens: longest input in words; None: the default (256).

    Returns:
        The embedder's metadata (as `export_embedder`).

    Raises:
        FileNotFoundError: `fasttext_path` does not exist.
    """
    if not tf.io.gfile.exists(fasttext_path):
        raise FileNotFoundError(f"fastText model not found: {fasttext_path}")
    check_export_path(output, {"fastText file (fasttext_path, --fasttext)": fasttext_path},
                      overwrite)
    return export_embedder(FastTextEmbedding.from_file(fasttext_path, name="fasttext"), output,
                           max_tokens=max_tokens, overwrite=overwrite)
