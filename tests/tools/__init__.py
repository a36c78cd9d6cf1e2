"""Tests of the scripts under tools/ (which are not a package: `load_tool` imports one)."""

import functools
import importlib.util
import os

from tests.conftest import REPO


@functools.lru_cache(maxsize=None)  # once per process: some tools define absl flags at import
def load_tool(name):
    """The module of `tools/<name>.py`."""
    spec = importlib.util.spec_from_file_location(name, os.path.join(REPO, "tools", f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
