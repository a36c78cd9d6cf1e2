"""Docstrings do not drift from signatures (STYLE.md: "what even they get wrong")."""

import inspect
import re

import pytest

import tfeff.layers
import tfeff.models

PUBLIC = [getattr(m, n) for m in (tfeff.layers, tfeff.models) for n in m.__all__]
# The models' docstrings show no doctest: a model needs a config-sized vocabulary and
# batch to say anything (their examples are the demo configs and examples/). Layers
# run in a line or two, so each layer's `Example:` is run here.
LAYERS = [getattr(tfeff.layers, n) for n in tfeff.layers.__all__]


def _documented_args(cls):
    doc = inspect.getdoc(cls) or ""
    match = re.search(r"^Args:\n(.*?)(?:\n\S|\Z)", doc, re.S | re.M)
    assert match, f"{cls.__name__} has no Args: section"
    names = set()
    for line in match.group(1).splitlines():
        entry = re.match(r"^    ([\w*, ]+):", line)  # `    name:` or `    a, b:`
        if entry:
            names |= {n.strip().lstrip("*") for n in entry.group(1).split(",")}
    return names


@pytest.mark.parametrize("cls", PUBLIC, ids=lambda c: c.__name__)
def test_args_section_matches_the_constructor(cls):
    params = set(inspect.signature(cls.__init__).parameters) - {"self"}
    documented = _documented_args(cls)
    assert documented == params, (
        f"undocumented: {sorted(params - documented)}, not arguments: {sorted(documented - params)}"
    )


@pytest.mark.parametrize("cls", LAYERS, ids=lambda c: c.__name__)
def test_layer_examples_run(cls):
    """Every layer docstring has an `Example:` whose doctest passes."""
    import doctest

    import keras
    import numpy as np

    doc = inspect.getdoc(cls)
    assert "Example:" in doc and ">>>" in doc, cls.__name__
    test = doctest.DocTestParser().get_doctest(
        cls.__doc__, {"np": np, "keras": keras, cls.__name__: cls}, cls.__name__, None, 0)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    runner.run(test)
    assert runner.failures == 0, (cls.__name__, runner.failures)
    # Only examples that need external files (a fastText .bin) may be skipped.
    assert runner.tries > 0 or "from_fasttext(" in doc, cls.__name__
