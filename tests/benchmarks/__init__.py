"""Tests of the benchmarks and studies (`benchmarks/`)."""

import io
import os
import tarfile


def write_tar(path, members):
    """A .tar.gz at `path` holding `members`, `{name: bytes}` (any name, `../` too)."""
    with tarfile.open(path, "w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def tensorflow_free_env(directory):
    """The environment of a process in which TensorFlow cannot be imported (as on the GPU
    machines), on the CPU, one thread per op; its `sitecustomize` is written in `directory`."""
    guard = directory / "guard"
    guard.mkdir()
    (guard / "sitecustomize.py").write_text("import sys\nsys.modules['tensorflow'] = None\n")
    return {**os.environ, "PYTHONPATH": str(guard), "JAX_PLATFORMS": "cpu",
            "OMP_NUM_THREADS": "1"}
