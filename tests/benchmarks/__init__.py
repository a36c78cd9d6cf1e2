"""Tests of the benchmarks and studies (`benchmarks/`)."""

import io
import tarfile


def write_tar(path, members):
    """A .tar.gz at `path` holding `members`, `{name: bytes}` (any name, `../` too)."""
    with tarfile.open(path, "w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
