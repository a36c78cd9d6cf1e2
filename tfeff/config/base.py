"""Strict conversion between nested dataclasses, dicts and YAML.

Unknown keys are rejected with their full dotted name (and the closest valid
key), values are type-checked, and each dataclass can `validate()` its own
values. Overrides are `dotted.key=value` strings whose value is parsed as YAML.

YAML is read with two changes to PyYAML's safe loader: a key given twice in one
mapping is an error naming the key and both lines (PyYAML would silently keep
the last, e.g. a whole second `train:` section), and numbers in exponent form
without a decimal point (`1e-3`, `5E4`) are numbers, as in YAML 1.2 and as a
user means them (PyYAML reads them as strings).
"""

import dataclasses
import difflib
import math
import os
import re
import types
import typing

import yaml

# YAML 1.2's float, plus `.inf`/`.nan` (refused later, by key); PyYAML's 1.1
# pattern needs a "." in the mantissa, so `1e-3` would be the string "1e-3".
_FLOAT = re.compile(r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
    |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
    |\.[0-9_]+(?:[eE][-+]?[0-9]+)?
    |[-+]?\.(?:inf|Inf|INF)
    |\.(?:nan|NaN|NAN))$""", re.X)
# What a number given as a string may look like (a quoted "1e-3" in a file).
_NUMBER_TEXT = re.compile(r"^\s*[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?\s*$")


class _Loader(yaml.SafeLoader):
    """PyYAML's safe loader; duplicate keys refused, `1e-3` read as a number."""

    def construct_mapping(self, node, deep=False):
        seen = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue  # `<<: *anchor`: merged below, and overridden keys are legitimate
            key = self.construct_object(key_node, deep=deep)
            try:
                first = seen.get(key)
            except TypeError:  # an unhashable key: PyYAML's own error follows
                break
            if first is not None:
                raise yaml.constructor.ConstructorError(
                    None, None,
                    f"the key `{key}` is given twice (lines {first} and "
                    f"{key_node.start_mark.line + 1}); a second one would silently replace "
                    "the first", key_node.start_mark)
            seen[key] = key_node.start_mark.line + 1
        return super().construct_mapping(node, deep=deep)


# Resolvers are per class: copy the base class's table before changing it.
_Loader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:float"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()}
_Loader.add_implicit_resolver("tag:yaml.org,2002:float", _FLOAT, list("-+0123456789."))


class _Dumper(yaml.SafeDumper):
    """PyYAML's safe dumper, quoting every string `_Loader` would read as a number."""


_Dumper.yaml_implicit_resolvers = _Loader.yaml_implicit_resolvers


def load_yaml(text):
    """Parses YAML text with the strict loader (duplicate keys refused)."""
    return yaml.load(text, Loader=_Loader)  # noqa: S506 (a SafeLoader subclass)


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
        if isinstance(value, float) and math.isfinite(value) and value.is_integer():
            return int(value)  # 1e5 steps
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"`{key}` must be an integer, got {value!r}")
        return value
    if tp is float:
        if isinstance(value, str) and _NUMBER_TEXT.match(value):
            value = float(value)  # a quoted "1e-3"
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"`{key}` must be a number, got {value!r}")
        if not math.isfinite(value):
            raise ConfigError(f"`{key}` must be a finite number, got {value!r}")
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
            value = load_yaml(raw)
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


def _read_bytes(path):
    """The bytes of `path` (a remote path, `gs://...`, through TensorFlow's gfile; a local
    one without importing TensorFlow); ConfigError naming the path when it is missing, a
    directory or unreadable."""
    gfile = _gfile() if "://" in str(path) else None
    if gfile is None and "://" in str(path):
        raise ConfigError(f"{path}: a remote path needs TensorFlow's file systems "
                          "(pip install tensorflow)")
    exists, isdir = ((gfile.exists, gfile.isdir) if gfile is not None
                     else (os.path.exists, os.path.isdir))
    if not exists(path):
        raise ConfigError(f"Config file not found: {path}")
    if isdir(path):
        raise ConfigError(f"{path} is a directory, not a YAML config file")
    try:
        if gfile is None:
            with open(path, "rb") as f:
                return f.read()
        with gfile.GFile(path, "rb") as f:
            return f.read()
    except Exception as e:  # OSError, or TensorFlow's OpError (no TensorFlow import here)
        if not isinstance(e, OSError) and type(e).__module__.split(".")[0] != "tensorflow":
            raise
        message = getattr(e, "message", None) or str(e)
        raise ConfigError(f"{path}: cannot read the config file ({message})") from e


def read_yaml(path):
    raw = _read_bytes(path)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw[:e.start].count(b"\n") + 1
        raise ConfigError(f"{path}:{line}: the config file is not UTF-8 text (byte "
                          f"0x{raw[e.start]:02x} at offset {e.start})") from e
    try:
        data = load_yaml(text)
    except yaml.MarkedYAMLError as e:  # one line: the file, the line, the problem
        where = f"{path}:{e.problem_mark.line + 1}" if e.problem_mark else path
        context = f"{e.context}, " if e.context else ""
        raise ConfigError(f"{where}: not valid YAML: {context}{e.problem}") from e
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML: {e}") from e
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a mapping of sections.")
    return data


def write_yaml(obj, path):
    """Writes a config dataclass to a YAML file, atomically.

    Args:
        obj: a config dataclass (`to_dict` gives what is written).
        path: the file to write (any `tf.io.gfile` path: model directories
            may be remote).
    """
    from tfeff.data import files  # TensorFlow's gfile: model directories may be remote

    files.write_text_atomic(path, yaml.dump(to_dict(obj), Dumper=_Dumper, sort_keys=False))


def positive(value, key, allow_zero=False):
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(f"`{key}` must be a finite number, got {value!r}")
    if value < 0 or (value == 0 and not allow_zero):
        raise ConfigError(
            f"`{key}` must be {'non-negative' if allow_zero else 'positive'}, got {value!r}"
        )


def fraction_or_none(value, key):
    """Refuses a value that is neither None nor in (0, 1]."""
    if value is not None and not 0 < value <= 1:
        raise ConfigError(f"`{key}` must be null or in (0, 1], got {value!r}")


def one_of(value, choices, key):
    if value not in choices:
        raise ConfigError(f"`{key}` must be one of {tuple(choices)}, got {value!r}")


def join(prefix, name):
    return f"{prefix}.{name}" if prefix else name
