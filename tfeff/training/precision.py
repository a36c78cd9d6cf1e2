"""Precision and XLA compilation of a training run: `train.precision`, `train.jit_compile`.

A precision is a Keras dtype policy. Keras layers take the global policy when they are
created, and a model's sublayers do not all inherit its `dtype`, so a model is created
inside `dtype_policy(precision)`. A layer that XLA cannot compile here says so the Keras
way, `supports_jit = False`, with the reason in its class's `jit_unsupported_reason`.
See docs/guides/install.md#precision-and-xla.
"""

import contextlib
import logging

import keras

from tfeff import config as config_lib
# What a run trains under, per `train.precision` (the names are Keras' policies).
from tfeff.config.train import PRECISIONS


@contextlib.contextmanager
def dtype_policy(precision):
    """Creates layers under the Keras dtype policy `precision` (e.g. `"mixed_bfloat16"`),
    restoring the previous global policy on exit."""
    if precision not in PRECISIONS:
        raise ValueError(f"Received an invalid value for `precision`, expected one of "
                         f"{PRECISIONS}. Received: precision={precision!r}")
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy(precision)
    try:
        yield
    finally:
        keras.config.set_dtype_policy(previous)


def jit_blockers(model):
    """The layers of `model` whose `supports_jit` is False: `[(description, reason)]`."""
    blockers, seen = [], set()
    # Keras' own traversal (what `model.compile(jit_compile=...)` checks), at any depth.
    for layer in model._flatten_layers(include_self=True, recursive=True):
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
    "auto"), checked against `model` (`check_jit_compile`); logs the choice. `auto`
    compiles only when nothing blocks and not `deterministic` (XLA ignores TF's op determinism)."""
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
