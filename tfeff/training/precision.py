"""Precision and XLA compilation of a training run: `train.precision`, `train.jit_compile`.

* **Precision** is a Keras dtype policy (`float32`, `mixed_bfloat16`,
  `mixed_float16`). Keras layers take the global policy when they are
  created, and a model's sublayers do not all inherit the model's `dtype`,
  so a model is created and built inside `dtype_policy(precision)`, which
  restores the previous global policy on exit: nothing leaks to later models
  of the same process. Weights stay float32; the losses, softmax
  normalizers and layer norms compute in float32. `mixed_float16` wraps the
  optimizer in `LossScaleOptimizer` (`tfeff.training.optimizers`).
* **XLA.** A layer that cannot be compiled with XLA on this backend says so
  the Keras way, `self.supports_jit = False` (what Keras' own cuDNN LSTM and
  string lookups do), and names the reason in its class attribute
  `jit_unsupported_reason`. `jit_blockers` walks a model's layers for them;
  `resolve_jit_compile` turns `train.jit_compile` into `model.compile`'s
  `jit_compile`: `true` with a blocking layer is a `ConfigError` naming it,
  `auto` compiles only when nothing blocks and logs which it chose.
"""

import contextlib
import logging

import keras

from tfeff import config as config_lib
# What a run trains under, per `train.precision` (the names are Keras' policies).
from tfeff.config.train import PRECISIONS


@contextlib.contextmanager
def dtype_policy(precision):
    """Creates layers under the Keras dtype policy `precision` (e.g. `"mixed_bfloat16"`);
    the global policy in force before is restored on exit, also after an error."""
    if precision not in PRECISIONS:
        raise ValueError(f"Received an invalid value for `precision`, expected one of "
                         f"{PRECISIONS}. Received: precision={precision!r}")
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy(precision)
    try:
        yield
    finally:
        keras.config.set_dtype_policy(previous)


def _layers(model):
    # Keras' own traversal (what `model.compile(jit_compile=...)` checks): the model
    # and every layer it tracks, at any depth.
    return list(model._flatten_layers(include_self=True, recursive=True))


def jit_blockers(model):
    """The layers of `model` that XLA cannot compile here: `[(description, reason)]`.

    A layer blocks when its `supports_jit` is False; the reason is its class's
    `jit_unsupported_reason` (a generic one when it names none, e.g. Keras'
    LSTM running cuDNN).
    """
    blockers, seen = [], set()
    for layer in _layers(model):
        if getattr(layer, "supports_jit", True) or id(layer) in seen:
            continue
        seen.add(id(layer))
        reason = getattr(type(layer), "jit_unsupported_reason", None) or (
            "the layer says it cannot be compiled (supports_jit=False)")
        blockers.append((f"{type(layer).__name__} `{layer.name}`", reason))
    return blockers


def describe_blockers(blockers):
    return "; ".join(f"{what}: {reason}" for what, reason in blockers)


def check_jit_compile(setting, model, label, key="train.jit_compile"):
    """ConfigError when `setting` is True and a layer of `model` blocks XLA (naming it)."""
    blockers = jit_blockers(model)
    if setting is True and blockers:
        raise config_lib.ConfigError(
            f"`{key}: true`, but the {label} model has layers that XLA cannot compile: "
            f"{describe_blockers(blockers)}. Use {key}: auto (compiles when it can, else "
            "runs the step as a tf.function) or false.")
    return blockers


def resolve_jit_compile(setting, model, label, deterministic=False, key="train.jit_compile"):
    """`model.compile`'s `jit_compile` for `train.jit_compile` = `setting` (True, False or
    "auto"), checked against `model`'s layers (`check_jit_compile`); logs the choice.
    `deterministic` (TensorFlow op determinism, which XLA kernels do not honour) makes
    `auto` run without XLA (the config refuses `true` with it)."""
    if setting is False:
        logging.info("%s: the training step runs as a tf.function (%s: false)", label, key)
        return False
    blockers = check_jit_compile(setting, model, label, key)
    if deterministic:
        blockers = blockers + [("train.deterministic: true", "TensorFlow's op determinism "
                                "does not cover XLA kernels")]
    if blockers:  # auto
        logging.info("%s: the training step runs as a tf.function, not XLA (%s: auto; not "
                     "compilable: %s)", label, key, describe_blockers(blockers))
        return False
    logging.info("%s: the training step is compiled with XLA (%s: %s)", label, key,
                 "true" if setting is True else setting)
    return True
