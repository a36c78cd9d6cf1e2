"""The entry points that take any family's config or model directory: each looks the
family up in `tfeff.training.families` and hands over to it."""

from tfeff.training import model_directory
from tfeff.training.families import get_family


def pretrain(config, model_dir, strategy="default", devices=None, verbose="auto",
             restore_fallback=False, callbacks=()):
    """Prepares the data, trains (resuming from the latest checkpoint), evaluates.

    The family of `config` does the work (`Family.pretrain`). A fault (non-finite loss
    with `train.on_nan: stop`, out of memory, a missing corpus file, a full disk, an
    unreadable checkpoint) raises `tfeff.training.errors.TrainingError`; the directory
    stays resumable.

    Args:
        config: an `ElmoConfig`, `BertConfig` or `MaskedElmoConfig` (`train.epochs` sets steps).
        model_dir: output directory (created; resumed when it holds a run).
        strategy: `"default"`, `"mirrored"` or `"multi_worker"`.
        devices: device list for `"mirrored"`.
        verbose: `"auto"`: progress against `train.steps`, redrawn in place on a
            terminal, else logged every `train.log_every` steps; `0`, `1`, `2`: Keras'.
        restore_fallback: restore the newest readable checkpoint if the latest is corrupted.
        callbacks: more Keras callbacks for `model.fit`.

    Returns:
        dict with `step`, `history` (metric lists; BERT: per phase), `train_seconds`,
        `preempted` (stopped by SIGTERM after saving), `eval` (held-out results; chief
        only, not after a preemption) and, for a CoRe two-phase run, `switch`.
    """
    try:
        return get_family(config).pretrain(config, model_dir, strategy, devices,
                                           verbose=verbose, restore_fallback=restore_fallback,
                                           callbacks=callbacks)
    finally:
        model_directory.release(model_dir)


def prepare_data(config, model_dir):
    """Creates (or reuses) the data of `config` in `model_dir`.

    Args:
        config: a family config (`ElmoConfig`, `BertConfig`, `MaskedElmoConfig`).
        model_dir: the model directory that holds the corpus, vocabulary and vectors.

    Returns:
        The `DataArtifacts`.
    """
    model_directory.claim(model_dir, "tfeff.training.prepare_data")
    try:
        return get_family(config).prepare_data(config, model_dir)
    finally:
        model_directory.release(model_dir)


def build_model(config, vocabulary_size, vectors_path=None):
    """The unbuilt Keras model of `config`.

    Args:
        config: a family config (`ElmoConfig`, `BertConfig`, `MaskedElmoConfig`).
        vocabulary_size: the size of the vocabulary the model reads.
        vectors_path: the model's fixed vectors (`vocabulary_vectors.npy`), or None.

    Returns:
        The Keras model; its `build()` without arguments creates every variable.
    """
    return get_family(config).build_model(config, vocabulary_size, vectors_path)


def restore_model(model_dir, config=None, strategy=None, with_optimizer=False):
    """Builds the model of any family's `model_dir` and restores its latest checkpoint
    (`FileNotFoundError` without config, vocabulary, vectors or checkpoint).

    Args:
        model_dir: a tfeff model directory.
        config: its config; None reads `config.yaml` from `model_dir`.
        strategy: the `tf.distribute` strategy to build under; None for the default.
        with_optimizer: also restore the optimizer (to continue training).

    Returns:
        `RestoredModel(model, optimizer_or_None, step, config)` (a named tuple).
    """
    if config is None:
        config = model_directory.load_model_dir_config(model_dir)
    return get_family(config).restore(model_dir, config, strategy, with_optimizer)
