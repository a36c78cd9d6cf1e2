"""Every documented `python -m benchmarks.<name>` and `python -m tools.<name>` command names
a module that exists, flags that module defines and a preset it has; every module follows
the harness' conventions (absl flags defined by `define_flags()`, `--output_dir`, presets
named from `harness.PRESETS`).

Read from the sources (the modules' syntax trees), not by importing them: the modules
import Keras and TensorFlow, and a documented command that names a renamed flag fails
here in milliseconds instead of in a reader's terminal after minutes of set-up.
"""

import ast
import functools
import glob
import os
import re

import pytest

from benchmarks import harness
from tests.conftest import REPO

PACKAGES = ("benchmarks", "tools")
# What absl's app.run adds to every program.
ABSL_FLAGS = {"help", "helpshort", "helpfull", "helpxml", "verbosity", "v", "logtostderr",
              "alsologtostderr", "log_dir", "only_check_args", "flagfile", "undefok"}
# Where commands are documented: the docs, the README, the Makefile, the results'
# README and the modules' own docstrings.
SOURCES = (["README.md", "Makefile", os.path.join("results", "gpu", "README.md")]
           + [os.path.relpath(p, REPO) for p in glob.glob(os.path.join(REPO, "docs", "**", "*.md"),
                                                         recursive=True)]
           + [os.path.relpath(p, REPO) for package in PACKAGES
              for p in glob.glob(os.path.join(REPO, package, "*.py"))])
# `python -m benchmarks.x ...`, continued over backslash-newlines, up to the end of the
# line, a closing backtick or a table cell.
COMMAND = re.compile(r"(?:python3?|\$\(PY\)|\$\(BENCH_PYTHON\)|\.venv/bin/python)\s+-m\s+"
                     r"((?:benchmarks|tools)\.\w+)((?:\\\\?\n|[^\n`|])*)")


def _module_path(module):
    return os.path.join(REPO, *module.split(".")) + ".py"


def _programs():
    """The modules that run as programs: those with an `if __name__ == "__main__":`."""
    return sorted(f"{package}.{os.path.basename(p)[:-3]}" for package in PACKAGES
                  for p in glob.glob(os.path.join(REPO, package, "*.py"))
                  if "\nif __name__ == \"__main__\":" in open(p, encoding="utf-8").read())


@functools.lru_cache(maxsize=None)  # one parse per module, not per command
def _interface(module):
    """`(flag names, preset names or None, has define_flags)` of a module's source."""
    tree = ast.parse(open(_module_path(module), encoding="utf-8").read())
    names, presets, shared, defines = set(), None, False, False
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == "define_flags":
            defines = True
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            owner = getattr(node.func.value, "id", None)
            if owner == "flags" and node.func.attr.startswith("DEFINE"):
                names.add(node.args[0].value)
            if owner == "harness" and node.func.attr == "define_flags":
                shared = True
                names.add("output_dir")
                if node.args:
                    names.add("preset")
        if (isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == "PRESETS"
                and isinstance(node.value, ast.Dict)):
            presets = [key.value for key in node.value.keys]
    return names, presets, defines, shared


def _joined_prose(text):
    """Markdown with the line breaks of its paragraphs made spaces (a command in a
    sentence may wrap), those of its code blocks kept; every offset unchanged."""
    parts = re.split(r"(^```.*?^```)", text, flags=re.M | re.S)
    return "".join(part if part.startswith("```") else re.sub(r"\n(?![\n#*|-])", " ", part)
                   for part in parts)


def _documented():
    """`[(where, module, arguments)]` of every documented command."""
    found = []
    for source in SOURCES:
        original = open(os.path.join(REPO, source), encoding="utf-8").read()
        text = _joined_prose(original) if source.endswith(".md") else original
        for match in COMMAND.finditer(text):
            line = original.count("\n", 0, match.start()) + 1
            found.append((f"{source}:{line}", match.group(1), match.group(2)))
    return found


def test_no_command_runs_a_module_by_its_path():
    """`python benchmarks/x.py` fails (`benchmarks` is a package, imported from the
    repository root): every command says `python -m benchmarks.x`. The results folders'
    READMEs may quote the command a past measurement was made with."""
    by_path = re.compile(r"(?:python3?|\$\(PY\))\s+((?:benchmarks|tools)/\w+\.py)")
    found = []
    for source in SOURCES:
        if source.startswith("results"):
            continue
        original = open(os.path.join(REPO, source), encoding="utf-8").read()
        text = _joined_prose(original) if source.endswith(".md") else original
        found += [f"{source}:{original.count(chr(10), 0, m.start()) + 1}: {m.group(1)}"
                  for m in by_path.finditer(text)]
    assert not found, found


def test_the_documented_commands_are_found():
    documented = {module for _, module, _ in _documented()}
    # The harness and the runner are libraries; the rest are documented somewhere.
    assert documented >= set(_programs()), set(_programs()) - documented


@pytest.mark.parametrize("where, module, arguments", _documented(),
                         ids=lambda value: value if ":" in str(value) else "")
def test_a_documented_command_names_real_flags_and_presets(where, module, arguments):
    assert os.path.exists(_module_path(module)), f"{where}: no module {module}"
    names, presets, _, _ = _interface(module)
    for flag, value in re.findall(r"--(\w+)(?:[= ]+(?!--)([^\s\\]+))?", arguments):
        name = flag[2:] if flag.startswith("no") and flag[2:] in names else flag
        assert name in names | ABSL_FLAGS, f"{where}: {module} has no --{flag}"
        if name == "preset" and not value.startswith("$"):
            assert value in presets, f"{where}: {module} has no preset {value!r}"


@pytest.mark.parametrize("module", _programs())
def test_every_program_defines_its_flags_when_run_and_follows_the_conventions(module):
    names, presets, defines, shared = _interface(module)
    source = open(_module_path(module), encoding="utf-8").read()
    main_block = source[source.index("\nif __name__ == \"__main__\":"):]
    # Flags defined at import would collide when two of them meet in one process.
    assert defines and "define_flags()" in main_block, module
    assert "sys.path" not in source and "import tests" not in source \
        and "from tests" not in source, module
    assert "argparse" not in source, module
    if module.startswith("benchmarks."):
        assert shared, f"{module}: its --output_dir (and --preset) come from the harness"
        assert not names & {"results", "results_dir", "out", "work_dir"}, module
    if presets is not None:
        assert set(presets) <= set(harness.PRESETS), (module, presets)
