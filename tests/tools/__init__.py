"""Tests of the scripts under tools/ (which are not a package: `load_tool` imports one)."""

import functools
import importlib.util
import io
import os
import tarfile

from tests.conftest import REPO


@functools.lru_cache(maxsize=None)  # once per process: some tools define absl flags at import
def load_tool(name):
    """The module of `tools/<name>.py`."""
    spec = importlib.util.spec_from_file_location(name, os.path.join(REPO, "tools", f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def write_tar(path, members):
    """A .tar.gz at `path` holding `members`, `{name: bytes}` (any name, `../` too)."""
    with tarfile.open(path, "w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
