"""The entry points that take any family's config or model directory: each looks the
family up in `tfeff.training.families` and hands over to it."""

from tfeff.training import model_directory
from tfeff.training.families import get_family


def pretrain(config, model_dir, strategy="default", devices=None, verbose="auto",
             restore_fallback=False, callbacks=()):
    """Prepares the data, trains (resuming from the latest checkpoint), evaluates.

    The family of `config` (`ElmoConfig`, `BertConfig`, `MaskedElmoConfig`)
    does the work (`Family.pretrain`); checkpointing, exact resume,
    preemption and fault handling are `tfeff.training.fault_tolerance`'s.

    Args:
        config: an `ElmoConfig`, `BertConfig` or `MaskedElmoConfig`. With
            `train.epochs`, its `train.steps` is set from the corpus (and
            written so into the directory's `config.yaml`).
        model_dir: output directory (created; resumed when it holds a run).
        strategy: `"default"`, `"mirrored"` or `"multi_worker"`.
        devices: device list for `"mirrored"`.
        verbose: `"auto"`: progress against `train.steps` with the time elapsed
            and left, one line redrawn in place when stdout is a terminal, else
            one log line per `train.log_every` steps; `0`, `1`, `2`: Keras' own.
        restore_fallback: restore the newest readable checkpoint when the
            latest is corrupted (else `CheckpointError`).
        callbacks: more Keras callbacks for `model.fit`.

    Returns:
        dict with `step`, `history` (metric lists; BERT: per phase),
        `train_seconds`, `preempted` (stopped by SIGTERM after saving),
        `eval` (the family's held-out results; chief only, not after a
        preemption) and, for a CoRe two-phase run, `switch`.

    A fault (non-finite loss with `train.on_nan: stop`, out of memory, a
    missing corpus file, a full or unwritable disk, an unreadable checkpoint)
    raises `tfeff.training.errors.TrainingError` from the family's run; the
    directory stays resumable.
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
        model_dir: the model directory the corpus, vocabulary and vectors are
            written to (or found in).

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
        vectors_path: the model's fixed vectors (`vocabulary_vectors.npy`), or
            None when it uses none.

    Returns:
        The Keras model; its `build()` without arguments creates every
        variable.
    """
    return get_family(config).build_model(config, vocabulary_size, vectors_path)


def restore_model(model_dir, config=None, strategy=None, with_optimizer=False):
    """Builds the model of any family's `model_dir` and restores its latest checkpoint.

    A directory without config, vocabulary, vectors or checkpoint raises
    `FileNotFoundError`.

    Args:
        model_dir: a tfeff model directory.
        config: its config; None reads `config.yaml` from `model_dir`.
        strategy: the `tf.distribute` strategy to build the model under; None
            for the default one.
        with_optimizer: also restore the optimizer (to continue training).

    Returns:
        `RestoredModel(model, optimizer_or_None, step, config)` (a named tuple).
    """
    if config is None:
        config = model_directory.load_model_dir_config(model_dir)
    return get_family(config).restore(model_dir, config, strategy, with_optimizer)
