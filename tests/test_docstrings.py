"""Docstrings do not drift from signatures (docs/contributing/style.md).

Every public name (`__all__`) of the API modules below is checked against its code:

- `Args:` names exactly the parameters: a function's own, a class's `__init__`'s
  (a dataclass's fields). `*args` and `**kwargs` are documented with their stars
  (`**kwargs: base `Layer` arguments.`). A function or constructor without
  parameters has no `Args:` section. A class whose `__init__` is inherited from a
  builtin (an exception class: `ConfigError`, `CorpusError`...) documents none. A
  NamedTuple documents its fields under `Attributes:` instead (griffe sees no
  constructor in one, and would reject its `Args:`).
- One entry per name, `    name: text`: `a, b: ...` is refused, because griffe (the
  API pages) cannot parse it.
- A function that returns a value (a `return <expr>` other than `return None` in its
  own body) has a `Returns:` section, a generator a `Yields:` section, and a function
  that returns nothing has neither. Classes are not checked for these (a layer's
  docstring may describe what calling it returns).
- `Raises:` has one `ExceptionClass: when` per line, and its classes are exactly those
  the function raises itself: `raise Name(...)`, `raise Name`, `raise module.Name(...)`
  in its own body (not in nested functions or classes; a bare `raise` re-raises and is
  ignored). Exceptions that escape from callees are not listed. For a class, the same
  rule applies to its `__init__`, together with the `__init__` of each tfeff class it
  extends (`ElmoLM`'s is `LanguageModel`'s too); a dataclass's generated one raises
  nothing: configs are checked by their `validate()`.

Non-callables in `__all__` (the registries and constants `DISTANCES`, `LOSSES`,
`FAMILIES`, `SPECIALS`, `EMBEDDERS`) have no signature to drift from and are left out
of the parametrization: they are described in the module docstring and the API pages.
"""

import ast
import dataclasses
import doctest
import inspect
import re
import textwrap

import pytest

import tfeff.config
import tfeff.convert
import tfeff.data
import tfeff.export
import tfeff.layers
import tfeff.losses
import tfeff.models
import tfeff.training

MODULES = (
    tfeff.layers,
    tfeff.losses,
    tfeff.models,
    tfeff.data,
    tfeff.config,
    tfeff.training,
    tfeff.export,
    tfeff.convert,
)


def _public():
    params = []
    for module in MODULES:
        for name in module.__all__:
            obj = getattr(module, name)
            if not callable(obj):
                continue  # a constant or registry: no signature (see the module docstring)
            params.append(pytest.param(obj, id=f"{module.__name__}.{name}"))
    return params


PUBLIC = _public()
# Each public layer's and model's `Example:` is run here (a model's at a tiny size).
LAYERS = [getattr(tfeff.layers, n) for n in tfeff.layers.__all__]
MODELS = [getattr(tfeff.models, n) for n in tfeff.models.__all__
          if inspect.isclass(getattr(tfeff.models, n))]  # not `load_model`

_HEADER = re.compile(r"^([A-Z][\w ]*):\s*$")
_ARG = re.compile(r"^    (\*{0,2}[A-Za-z_]\w*):(?:\s|$)")
_EXCEPTION = re.compile(r"^    ([A-Za-z_][\w.]*):(?:\s|$)")


def _label(obj):
    return f"{obj.__module__}.{obj.__qualname__}"


def _docstring(obj):
    # A class's own docstring only: `inspect.getdoc` would inherit the base class's,
    # and a dataclass without one gets its signature as `__doc__`.
    doc = obj.__dict__.get("__doc__") if inspect.isclass(obj) else obj.__doc__
    assert doc and not (dataclasses.is_dataclass(obj) and doc.startswith(obj.__name__ + "(")), (
        f"{_label(obj)} has no docstring")
    return inspect.cleandoc(doc)


def _sections(obj):
    """Maps each section header of `obj`'s docstring (`Args`, `Raises`...) to its lines."""
    sections, current = {}, None
    for line in _docstring(obj).splitlines():
        header = _HEADER.match(line)
        if header:
            current = header.group(1)
            assert current not in sections, f"{_label(obj)} has two `{current}:` sections"
            sections[current] = []
        elif line and not line[0].isspace():
            current = None  # back to prose
        elif current is not None:
            sections[current].append(line)
    return sections


def _entries(obj, section, pattern, what):
    """The names of a section's entries: lines indented by 4; deeper lines continue one."""
    names = []
    for line in _sections(obj).get(section, []):
        if not line.strip() or line.startswith(" " * 5):
            continue
        entry = pattern.match(line)
        assert entry, (
            f"{_label(obj)}: `{section}:` line {line.strip()!r} is not `    {what}: text`"
            " (one entry per line)")
        names.append(entry.group(1))
    duplicates = sorted({n for n in names if names.count(n) > 1})
    assert not duplicates, f"{_label(obj)}: `{section}:` lists {duplicates} more than once"
    return names


def _is_named_tuple(obj):
    return inspect.isclass(obj) and issubclass(obj, tuple) and hasattr(obj, "_fields")


def _callable_of(obj):
    """The function whose signature and body a docstring describes, or None."""
    if inspect.isclass(obj):
        init = obj.__init__
        return init if inspect.isfunction(init) else None  # builtin: Exception, tuple
    return inspect.unwrap(obj)


def _parameters(obj):
    if _is_named_tuple(obj):
        return set(obj._fields)
    func = _callable_of(obj)
    if func is None:
        return set()
    stars = {inspect.Parameter.VAR_POSITIONAL: "*", inspect.Parameter.VAR_KEYWORD: "**"}
    params = list(inspect.signature(func).parameters.values())
    if inspect.isclass(obj):
        params = params[1:]  # self
    return {stars.get(p.kind, "") + p.name for p in params}


def _function_node(func):
    """The AST of `func`'s definition, or None for generated code (dataclass `__init__`)."""
    try:
        source = textwrap.dedent(inspect.getsource(func))
    except (OSError, TypeError):
        return None
    node = ast.parse(source).body[0]
    assert isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)), func
    return node


def _own_nodes(node):
    """The nodes of a function's own body: nested functions, lambdas and classes excluded."""
    stack = list(node.body)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            continue
        yield node
        stack.extend(ast.iter_child_nodes(node))


def _raised(func):
    """The exception classes a function raises itself, by their last dotted name."""
    node = _function_node(func) if func is not None else None
    raised = set()
    for child in _own_nodes(node) if node is not None else ():
        if isinstance(child, ast.Raise) and child.exc is not None:
            exc = child.exc.func if isinstance(child.exc, ast.Call) else child.exc
            if isinstance(exc, ast.Name):
                raised.add(exc.id)
            elif isinstance(exc, ast.Attribute):
                raised.add(exc.attr)
    return raised


@pytest.mark.parametrize("obj", PUBLIC)
def test_args_name_exactly_the_parameters(obj):
    section = "Attributes" if _is_named_tuple(obj) else "Args"
    params = _parameters(obj)
    has_args = section in _sections(obj)
    documented = set(_entries(obj, section, _ARG, "name"))
    assert has_args or not params, (
        f"{_label(obj)} has no `{section}:` section; its parameters: {sorted(params)}")
    assert not has_args or params, (
        f"{_label(obj)} takes no parameters but has an `{section}:` section")
    missing, extra = sorted(params - documented), sorted(documented - params)
    assert not missing, f"{_label(obj)}: `{section}:` lacks the parameters {missing}"
    assert not extra, f"{_label(obj)}: `{section}:` names {extra}, which are not parameters"


@pytest.mark.parametrize("obj", PUBLIC)
def test_returns_or_yields_iff_the_function_returns(obj):
    if inspect.isclass(obj):
        return  # see the module docstring
    node = _function_node(inspect.unwrap(obj))
    assert node is not None, f"{_label(obj)}: no source"
    own = list(_own_nodes(node))
    generator = any(isinstance(n, (ast.Yield, ast.YieldFrom)) for n in own)
    returns = any(
        isinstance(n, ast.Return) and n.value is not None
        and not (isinstance(n.value, ast.Constant) and n.value.value is None)
        for n in own)
    sections = _sections(obj)
    if generator:
        assert "Yields" in sections, f"{_label(obj)} is a generator without a `Yields:` section"
        assert "Returns" not in sections, (
            f"{_label(obj)} is a generator: `Returns:` should be `Yields:`")
    else:
        assert "Yields" not in sections, (
            f"{_label(obj)} is no generator but has a `Yields:` section")
        assert returns <= ("Returns" in sections), (
            f"{_label(obj)} returns a value but has no `Returns:` section")
        assert ("Returns" in sections) <= returns, (
            f"{_label(obj)} returns nothing but has a `Returns:` section")


@pytest.mark.parametrize("obj", PUBLIC)
def test_raises_lists_exactly_what_the_body_raises(obj):
    entries = _entries(obj, "Raises", _EXCEPTION, "ExceptionClass")
    documented = {name.rsplit(".", 1)[-1] for name in entries}
    raised = _raised(_callable_of(obj))
    for base in obj.__mro__[1:] if inspect.isclass(obj) else ():
        if base.__module__.startswith("tfeff.") and "__init__" in vars(base):
            raised |= _raised(base.__init__)
    where = f"{_label(obj)}{'.__init__' if inspect.isclass(obj) else ''}"
    missing, extra = sorted(raised - documented), sorted(documented - raised)
    assert not missing, f"{where} raises {missing} without a `Raises:` entry"
    assert not extra, f"{where}: `Raises:` lists {extra}, which its own body does not raise"


@pytest.mark.parametrize("cls", LAYERS + MODELS, ids=lambda c: c.__name__)
def test_layer_and_model_examples_run(cls):
    """Every layer and model docstring has an `Example:` whose doctest passes (with the
    public models in scope: a task's example builds its backbone)."""
    import keras
    import numpy as np

    doc = inspect.getdoc(cls)
    assert "Example:" in doc and ">>>" in doc, cls.__name__
    models = {name: getattr(tfeff.models, name) for name in tfeff.models.__all__}
    test = doctest.DocTestParser().get_doctest(
        cls.__doc__, {"np": np, "keras": keras, **models, cls.__name__: cls}, cls.__name__,
        None, 0)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    runner.run(test)
    assert runner.failures == 0, (cls.__name__, runner.failures)
    # Only examples that need external files (a fastText .bin) may be skipped.
    assert runner.tries > 0 or "from_fasttext(" in doc, cls.__name__
