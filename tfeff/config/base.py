"""Strict conversion between nested dataclasses, dicts and YAML.

Unknown keys are rejected with their full dotted name (and the closest valid
key), values are type-checked, and each dataclass can `validate()` its own
values. Overrides are `dotted.key=value` strings whose value is parsed as YAML.
"""

import dataclasses
import difflib
import os
import types
import typing

import yaml


class ConfigError(ValueError):
    """A configuration problem; the message names the key (and the file)."""


def _is_dataclass_type(tp):
    return isinstance(tp, type) and dataclasses.is_dataclass(tp)


def _unwrap_optional(tp):
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return args[0], True
    return tp, False


def _convert(value, tp, key):
    tp, optional = _unwrap_optional(tp)
    if value is None:
        if optional:
            return None
        raise ConfigError(f"`{key}` must not be empty (null).")
    if _is_dataclass_type(tp):
        if not isinstance(value, dict):
            raise ConfigError(f"`{key}` must be a mapping, got {type(value).__name__}: {value!r}")
        return from_dict(tp, value, prefix=key)
    origin = typing.get_origin(tp)
    if origin in (list, tuple):
        (item_type,) = typing.get_args(tp)[:1] or (typing.Any,)
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"`{key}` must be a list, got {value!r}")
        return [_convert(v, item_type, f"{key}[{i}]") for i, v in enumerate(value)]
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"`{key}` must be true or false, got {value!r}")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"`{key}` must be an integer, got {value!r}")
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"`{key}` must be a number, got {value!r}")
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(f"`{key}` must be a string, got {value!r}")
        return value
    return value


def from_dict(cls, data, prefix=""):
    """Builds dataclass `cls` from a dict, strictly."""
    if not isinstance(data, dict):
        raise ConfigError(f"`{prefix or 'config'}` must be a mapping, got {data!r}")
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    for key in data:
        if key not in names:
            full = f"{prefix}.{key}" if prefix else str(key)
            close = difflib.get_close_matches(str(key), names, n=1)
            hint = f" Did you mean `{(prefix + '.' if prefix else '') + close[0]}`?" if close else ""
            raise ConfigError(
                f"Unknown config key `{full}`.{hint} Valid keys here: {', '.join(names)}"
            )
    kwargs = {}
    for name in names:
        if name in data:
            full = f"{prefix}.{name}" if prefix else name
            kwargs[name] = _convert(data[name], hints[name], full)
    obj = cls(**kwargs)
    validate = getattr(obj, "validate", None)
    if validate is not None:
        validate(prefix)
    return obj


def to_dict(obj):
    return dataclasses.asdict(obj)


def apply_overrides(data, overrides):
    """Applies `a.b=value` strings to a nested dict (values parsed as YAML)."""
    for override in overrides or []:
        if "=" not in override:
            raise ConfigError(f"Override `{override}` is not of the form key.sub=value.")
        key, raw = override.split("=", 1)
        key = key.strip()
        try:
            value = yaml.safe_load(raw)
        except yaml.YAMLError as e:
            raise ConfigError(f"Override `{override}`: the value is not valid YAML ({e}).") from e
        node = data
        parts = key.split(".")
        for i, part in enumerate(parts[:-1]):
            if node.get(part) is None:
                node[part] = {}
            node = node[part]
            if not isinstance(node, dict):
                raise ConfigError(
                    f"Override `{override}`: `{'.'.join(parts[: i + 1])}` is not a section."
                )
        node[parts[-1]] = value
    return data


def _gfile():
    """TensorFlow's file API (local paths, gs://, ...), or None where TensorFlow is not
    installed (a JAX or PyTorch machine: local files only)."""
    try:
        import tensorflow as tf
    except ImportError:
        return None
    return tf.io.gfile


def read_yaml(path):
    gfile = _gfile()
    exists, open_text = ((gfile.exists, gfile.GFile) if gfile is not None
                         else (os.path.exists, lambda p: open(p, encoding="utf-8")))
    if not exists(path):
        raise ConfigError(f"Config file not found: {path}")
    with open_text(path) as f:
        try:
            data = yaml.safe_load(f)
        except yaml.YAMLError as e:
            raise ConfigError(f"{path}: not valid YAML: {e}") from e
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a mapping of sections.")
    return data


def write_yaml(obj, path):
    from tfeff.data import files  # TensorFlow's gfile: model directories may be remote

    files.write_text_atomic(path, yaml.safe_dump(to_dict(obj), sort_keys=False))


def positive(value, key, allow_zero=False):
    if value < 0 or (value == 0 and not allow_zero):
        raise ConfigError(
            f"`{key}` must be {'non-negative' if allow_zero else 'positive'}, got {value!r}"
        )


def one_of(value, choices, key):
    if value not in choices:
        raise ConfigError(f"`{key}` must be one of {tuple(choices)}, got {value!r}")


def join(prefix, name):
    return f"{prefix}.{name}" if prefix else name
