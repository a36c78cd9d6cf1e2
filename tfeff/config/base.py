"""Strict conversion between nested dataclasses, dicts and YAML.

Unknown keys are rejected with their dotted name (and the closest valid key), values are
type-checked, and each dataclass can `validate()` its own values; overrides are
`dotted.key=value` strings (`apply_overrides`). PyYAML's safe loader is changed twice: a
key given twice in one mapping is an error naming both lines (PyYAML would keep the last),
and `1e-3` or `5E4` is a number, as in YAML 1.2 (PyYAML reads a string).
"""

import contextlib
import contextvars
import dataclasses
import difflib
import math
import os
import re
import reprlib
import types
import typing

import yaml

# YAML 1.2's float (PyYAML's 1.1 pattern reads `1e-3` as a string); `.inf`/`.nan` refused later.
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

    yaml_implicit_resolvers = _Loader.yaml_implicit_resolvers


def load_yaml(text):
    """Parses YAML text with the strict loader (duplicate keys refused)."""
    return yaml.load(text, Loader=_Loader)  # noqa: S506 (a SafeLoader subclass)


# Configs are kilobytes of YAML; PyYAML takes seconds and gigabytes over megabytes.
MAX_CONFIG_BYTES = 1 << 20
_MAX_MESSAGE = 2000


class ConfigError(ValueError):
    """A configuration problem; the message names the key (and the file).

    Args:
        message: what is wrong, naming the key (and the file); over `_MAX_MESSAGE`
            characters, its start and end are kept.
        *args: more arguments, kept as `ValueError` keeps them.
    """

    def __init__(self, message, *args):
        message = str(message)
        if len(message) > _MAX_MESSAGE:
            half = _MAX_MESSAGE // 2
            message = (f"{message[:half]} [... {len(message) - 2 * half:,} characters left "
                       f"out ...] {message[-half:]}")
        super().__init__(message, *args)


_SHOWN = reprlib.Repr()
_SHOWN.maxlevel, _SHOWN.maxstring, _SHOWN.maxother, _SHOWN.maxlong = 2, 60, 60, 40
_SHOWN.maxlist = _SHOWN.maxtuple = _SHOWN.maxdict = _SHOWN.maxset = 4


def shown(value):
    """`repr(value)` for a message, shortened without building a huge repr (an alias bomb)."""
    return _SHOWN.repr(value)


def clipped(text, limit=120):
    """`text` (an override, a key) cut to `limit` characters for a message."""
    text = str(text)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text):,} characters)"


def _kind(value):
    """What a value is, without its content: `a list of 9 items`, `a mapping of 2 keys`."""
    if isinstance(value, dict):
        return f"a mapping of {len(value)} key{'s' * (len(value) != 1)}"
    if isinstance(value, (list, tuple)):
        return f"a list of {len(value)} item{'s' * (len(value) != 1)}"
    return f"{type(value).__name__} {shown(value)}"


def _is_dataclass_type(tp):
    return isinstance(tp, type) and dataclasses.is_dataclass(tp)


def _unwrap_optional(tp):
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return args[0], True
    return tp, False


_SCALAR_TYPES = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}


def _convert(value, tp, key):
    tp, optional = _unwrap_optional(tp)
    if value is None:
        if optional:
            return None
        raise ConfigError(f"`{key}` must not be empty (null).")
    if _is_dataclass_type(tp):
        if not isinstance(value, dict):
            raise ConfigError(f"`{key}` must be a mapping (a section), got {_kind(value)}")
        return from_dict(tp, value, prefix=key)
    origin = typing.get_origin(tp)
    if origin in (list, tuple):
        (item_type,) = typing.get_args(tp)[:1] or (typing.Any,)
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"`{key}` must be a list, got {_kind(value)}")
        return [_convert(v, item_type, f"{key}[{i}]") for i, v in enumerate(value)]
    if tp in _SCALAR_TYPES and isinstance(value, (dict, list, tuple)):
        # Before any formatting: a structure's repr may be enormous (a YAML alias bomb).
        raise ConfigError(f"`{key}` must be {_SCALAR_TYPES[tp]}, got {_kind(value)}")
    if tp in (bool, str):
        if not isinstance(value, tp):
            raise ConfigError(f"`{key}` must be {_SCALAR_TYPES[tp]}, got {shown(value)}")
        return value
    if tp is int:
        if isinstance(value, float) and math.isfinite(value) and value.is_integer():
            return int(value)  # 1e5 steps
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"`{key}` must be an integer, got {shown(value)}")
        return value
    if tp is float:
        if isinstance(value, str) and _NUMBER_TEXT.match(value):
            value = float(value)  # a quoted "1e-3"
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"`{key}` must be a number, got {shown(value)}")
        if not math.isfinite(value):
            raise ConfigError(f"`{key}` must be a finite number, got {shown(value)}")
        return float(value)
    if isinstance(value, (dict, list, tuple)):  # a Union of scalars (jit_compile)
        raise ConfigError(f"`{key}` must be a single value, got {_kind(value)}")
    return value


def from_dict(cls, data, prefix=""):
    """Builds dataclass `cls` from a dict, strictly."""
    if not isinstance(data, dict):
        raise ConfigError(f"`{prefix or 'config'}` must be a mapping, got {_kind(data)}")
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    for key in data:
        if key not in names:
            key = clipped(key, 80)
            close = difflib.get_close_matches(key, names, n=1)
            hint = f" Did you mean `{join(prefix, close[0])}`?" if close else ""
            raise ConfigError(
                f"Unknown config key `{join(prefix, key)}`.{hint} Valid keys here: "
                f"{', '.join(names)}")
    obj = cls(**{name: _convert(data[name], hints[name], join(prefix, name))
                 for name in names if name in data})
    if hasattr(obj, "validate"):
        obj.validate(prefix)
    return obj


def key_type(cls, parts):
    """The type of the dotted key `parts` in dataclass `cls` (Optional unwrapped), or None."""
    tp = cls
    for part in parts:
        tp = _unwrap_optional(tp)[0]
        tp = typing.get_type_hints(tp).get(part) if _is_dataclass_type(tp) else None
        if tp is None:
            return None
    return _unwrap_optional(tp)[0]


def override_value(raw, tp):
    """The value of an override `key=raw` for a key of type `tp` (None: unknown): a string
    key's is `raw` stripped (a path such as `{a,b}.txt`; a quoted one is YAML's), else YAML."""
    text = raw.strip()
    if tp is str and not text.startswith(("'", '"')):
        return text
    return load_yaml(raw)


def _merged(section, value):
    """`value` merged into the mapping `section` (a new dict, recursively), or `value`."""
    if not (isinstance(section, dict) and isinstance(value, dict)):
        return value
    return {**section, **{k: _merged(section.get(k), v) for k, v in value.items()}}


def apply_overrides(data, overrides, schema=None):
    """Applies `key.sub=value` strings (`override_value`) in order to `data`, and returns it.

    A mapping given for a section is merged into it (`model={units: 48}`). `schema(data)`
    gives the config dataclass that `data` builds (the keys' types), or None (all YAML).
    """
    for override in overrides or []:
        if "=" not in override:
            raise ConfigError(f"Override `{clipped(override)}` is not of the form key.sub=value.")
        key, raw = override.split("=", 1)
        parts = key.strip().split(".")
        root = schema(data) if schema is not None else None
        try:
            value = override_value(raw, key_type(root, parts) if root is not None else None)
        except (yaml.YAMLError, ValueError) as e:
            raise ConfigError(f"Override `{clipped(override)}`: the value is not valid YAML "
                              f"({clipped(' '.join(str(e).split()), 300)}).") from e
        node = data
        for i, part in enumerate(parts[:-1]):
            if node.get(part) is None:
                node[part] = {}
            elif isinstance(node[part], dict):
                node[part] = dict(node[part])  # not a section aliased elsewhere (`*anchor`)
            node = node[part]
            if not isinstance(node, dict):
                raise ConfigError(f"Override `{clipped(override)}`: "
                                  f"`{'.'.join(parts[: i + 1])}` is not a section.")
        node[parts[-1]] = _merged(node.get(parts[-1]), value)
    return data


def _gfile():
    """TensorFlow's file API (gs://, ...), or None where TensorFlow is not installed."""
    try:
        import tensorflow as tf
    except ImportError:
        return None
    return tf.io.gfile


def _read_bytes(path):
    """The bytes of `path` (a remote one through TensorFlow's gfile); ConfigError if unreadable."""
    gfile = _gfile() if "://" in str(path) else None
    if gfile is None and "://" in str(path):
        raise ConfigError(f"{path}: a remote path needs TensorFlow's file systems "
                          "(pip install tensorflow)")
    files = gfile or os.path
    if not files.exists(path):
        raise ConfigError(f"Config file not found: {path}")
    if files.isdir(path):
        raise ConfigError(f"{path} is a directory, not a YAML config file")
    try:
        with (open if gfile is None else gfile.GFile)(path, "rb") as f:
            raw = f.read(MAX_CONFIG_BYTES + 1)
    except Exception as e:  # OSError, or TensorFlow's OpError (no TensorFlow import here)
        if not isinstance(e, OSError) and type(e).__module__.split(".")[0] != "tensorflow":
            raise
        message = getattr(e, "message", None) or str(e)
        raise ConfigError(f"{path}: cannot read the config file ({message})") from e
    if len(raw) > MAX_CONFIG_BYTES:
        raise ConfigError(
            f"{path}: the config file is over {MAX_CONFIG_BYTES // (1 << 20)} MiB: a config "
            "is a few kilobytes of YAML (a long list of files goes in a glob, or a "
            "comma-separated one); is this the right file?")
    return raw


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
    except ValueError as e:  # Python's own limits (an integer of over 4,300 digits)
        raise ConfigError(f"{path}: not a usable YAML value: {e}") from e
    if data is not None and not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a mapping of sections.")
    return data or {}


def write_yaml(obj, path):
    """Writes a config dataclass to a YAML file, atomically.

    Args:
        obj: a config dataclass (`tfeff.config.to_dict` gives what is written).
        path: the file to write (any `tf.io.gfile` path: model directories may be remote).
    """
    from tfeff.data import files  # TensorFlow's gfile: model directories may be remote

    files.write_text_atomic(
        path, yaml.dump(dataclasses.asdict(obj), Dumper=_Dumper, sort_keys=False))


def positive(value, key, allow_zero=False):
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(f"`{key}` must be a finite number, got {shown(value)}")
    if value < 0 or (value == 0 and not allow_zero):
        raise ConfigError(
            f"`{key}` must be {'non-negative' if allow_zero else 'positive'}, got {shown(value)}")


def positive_keys(section, prefix, *names, allow_zero=False):
    """`positive` for the keys `names` of the config dataclass `section`."""
    for name in names:
        positive(getattr(section, name), join(prefix, name), allow_zero)


def fraction_or_none(value, key):
    """Refuses a value that is neither None nor in (0, 1]."""
    if value is not None and not 0 < value <= 1:
        raise ConfigError(f"`{key}` must be null or in (0, 1], got {shown(value)}")


def one_of(value, choices, key):
    if value not in choices:
        raise ConfigError(f"`{key}` must be one of {tuple(choices)}, got {shown(value)}")


def join(prefix, name):
    return f"{prefix}.{name}" if prefix else name


# Seeds are given to NumPy (`keras.utils.set_random_seed`), which takes 32 bits.
MAX_SEED = 2**32 - 1


def seed_range(value, key):
    """Refuses a seed outside [0, MAX_SEED]."""
    if not 0 <= value <= MAX_SEED:
        raise ConfigError(f"`{key}` must be an integer in [0, {MAX_SEED}] (a seed), got "
                          f"{shown(value)}")


_READING_SAVED = contextvars.ContextVar("tfeff_reading_saved_config", default=False)


@contextlib.contextmanager
def reading_saved_config():
    """Reads back what tfeff wrote: `only_with` and `TrainConfig.validate_steps` check users'
    configs only, so that a model directory written before such a check still resumes."""
    token = _READING_SAVED.set(True)
    try:
        yield
    finally:
        _READING_SAVED.reset(token)


def checking_requests():
    """False while `reading_saved_config`: see there."""
    return not _READING_SAVED.get()


def only_with(section, prefix, rules):
    """Refuses a key of the config dataclass `section` (dotted name `prefix`) that differs
    from its default where it has no effect: `rules` maps a key to `(choice_key,
    allowed_choices, owner)`, where it applies and whose it is in the message (`Adam's`)."""
    defaults = {f.name: f.default for f in dataclasses.fields(section)}
    for key, (choice_key, allowed, owner) in rules.items():
        value, choice = getattr(section, key), getattr(section, choice_key)
        if choice not in allowed and value != defaults[key]:
            raise ConfigError(
                f"`{join(prefix, key)}` is {owner}: it has no effect with "
                f"`{join(prefix, choice_key)}: {choice}`, got {shown(value)} (leave it out, "
                f"or at its default {shown(defaults[key])})")
