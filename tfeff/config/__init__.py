"""Typed, strict experiment configs: dataclasses per model family, YAML files, overrides."""

import copy
import dataclasses
import re

from tfeff.config import base
from tfeff.config.alone import AloneConfig
from tfeff.config.base import ConfigError
from tfeff.config.base import write_yaml
from tfeff.config.bert import BertConfig
from tfeff.config.bert import BertDataConfig
from tfeff.config.bert import BertEvalConfig
from tfeff.config.bert import BertModelConfig
from tfeff.config.bert import CoreConfig
from tfeff.config.bert import RelaxedConfig
from tfeff.config.elmo import DataConfig
from tfeff.config.elmo import ElmoConfig
from tfeff.config.elmo import ElmoModelConfig
from tfeff.config.elmo import EvalConfig
from tfeff.config.elmo import FastTextConfig
from tfeff.config.elmo import SyntheticCorpusConfig
from tfeff.config.masked_elmo import MaskedElmoConfig
from tfeff.config.masked_elmo import MaskedElmoDataConfig
from tfeff.config.masked_elmo import MaskedElmoEvalConfig
from tfeff.config.masked_elmo import MaskedElmoModelConfig
from tfeff.config.transformer_lm import TransformerLMConfig
from tfeff.config.transformer_lm import TransformerLMModelConfig
from tfeff.config.train import TrainConfig

FAMILIES = {"bert": BertConfig, "elmo": ElmoConfig, "masked_elmo": MaskedElmoConfig,
            "transformer_lm": TransformerLMConfig}


def _validate_all(obj, prefix=""):
    for field in dataclasses.fields(obj):
        value = getattr(obj, field.name)
        if dataclasses.is_dataclass(value):
            _validate_all(value, base.join(prefix, field.name))
    if hasattr(obj, "validate"):
        obj.validate(prefix)


def config_from_dict(data, overrides=None):
    """Builds the family's config from a dict (`family` selects the dataclass).

    Args:
        data: the config as nested dicts (a parsed YAML file), with `family`; not changed.
        overrides: optional `key.sub=value` strings applied first (`base.apply_overrides`).

    Returns:
        The validated config dataclass of the family (`FAMILIES`).

    Raises:
        ConfigError: `family` is unknown (or, naming the key, a bad override, key or value).
    """
    data = base.apply_overrides(copy.deepcopy(data), overrides, schema=_family_config)
    cls = _family_config(data)
    if cls is None:
        raise ConfigError(f"`family` must be one of {tuple(FAMILIES)}, got "
                          f"{base.shown(data.get('family'))}")
    config = base.from_dict(cls, data)
    _validate_all(config)
    return config


def _family_config(data):
    """The config dataclass of `data`'s `family`, or None when it names none."""
    family = data.get("family") if isinstance(data, dict) else None
    return FAMILIES.get(family) if isinstance(family, str) else None


def load_config(path, overrides=None, saved=False):
    """Reads a YAML config, applies `key.sub=value` overrides, validates it.

    Args:
        path: the YAML file (local, or any `tf.io.gfile` path where TensorFlow is installed).
        overrides: optional `key.sub=value` strings, as `config_from_dict` applies them.
        saved: the file is a model directory's `config.yaml`, which tfeff wrote: keys a run
            would ignore are not refused (`tfeff.config.base.reading_saved_config`).

    Returns:
        The validated config dataclass of the file's `family`.

    Raises:
        ConfigError: a missing or invalid file, naming the key and the file (or override).
    """
    data = base.read_yaml(path)
    try:
        if saved:
            with base.reading_saved_config():
                return config_from_dict(data, overrides)
        return config_from_dict(data, overrides)
    except ConfigError as e:
        overrides = list(overrides or [])
        if overrides and _builds(data):  # valid alone: an override broke it
            blamed = _override_of(str(e), overrides)
            if blamed is not None:
                raise ConfigError(f"override `{base.clipped(blamed)}` (applied to {path}): "
                                  f"{e}") from e
            listed = ", ".join(f"`{base.clipped(o)}`" for o in overrides[:8])
            listed += f" and {len(overrides) - 8} more" if len(overrides) > 8 else ""
            raise ConfigError(f"{path} with the overrides {listed}: {e}") from e
        raise ConfigError(f"{path}: {e}") from e


def _override_of(message, overrides):
    """The last of `overrides` whose key is, or is above or below, one `message` names."""
    named = re.findall(r"`([A-Za-z_][\w.]*)", message)
    for override in reversed(overrides):
        key = override.split("=", 1)[0].strip()
        if any(key == n or key.startswith(n + ".") or n.startswith(key + ".") for n in named):
            return override
    return None


def _builds(data):
    try:
        config_from_dict(data)
    except ConfigError:
        return False
    return True


def to_dict(config):
    """The config as nested dicts (`dataclasses.asdict`), as YAML files hold it.

    Args:
        config: a config dataclass (any section, or a whole family config).

    Returns:
        A dict of plain values and nested dicts.
    """
    return dataclasses.asdict(config)


__all__ = [
    "AloneConfig",
    "BertConfig",
    "BertDataConfig",
    "BertEvalConfig",
    "BertModelConfig",
    "CoreConfig",
    "ConfigError",
    "DataConfig",
    "ElmoConfig",
    "ElmoModelConfig",
    "EvalConfig",
    "FAMILIES",
    "FastTextConfig",
    "MaskedElmoConfig",
    "MaskedElmoDataConfig",
    "MaskedElmoEvalConfig",
    "MaskedElmoModelConfig",
    "RelaxedConfig",
    "SyntheticCorpusConfig",
    "TrainConfig",
    "TransformerLMConfig",
    "TransformerLMModelConfig",
    "config_from_dict",
    "load_config",
    "to_dict",
    "write_yaml",
]
