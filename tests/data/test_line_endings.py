"""Every common line-ending convention splits lines, in every reader of text: `\\n`
(Unix), `\\r\\n` (Windows) and a lone `\\r` (classic Mac OS). A lone-CR corpus was once
one sentence of glued words."""

import io

import pytest

from tfeff.data import files
from tfeff.data import text_lines
from tfeff.data.pipeline import line_dataset

TEXT = ["the dog runs .", "a cat sleeps", "", "é ñ 日本 .", "last line"]


def _write(path, ending, final=True):
    end = ending.encode()
    path.write_bytes(end.join(t.encode("utf-8") for t in TEXT) + (end if final else b""))
    return str(path)


@pytest.mark.parametrize("block", [1, 2, 3, 5, 1 << 20])
@pytest.mark.parametrize("ending", ["\n", "\r\n", "\r"])
def test_raw_lines_splits_every_convention_whatever_the_block(ending, block):
    """A `\\r\\n` split across two blocks is one line end, not two."""
    data = ending.join(TEXT).encode("utf-8") + ending.encode()
    assert list(files.raw_lines(io.BytesIO(data), block)) == [t.encode() for t in TEXT]
    # No final line end: the last line still comes out, once.
    data = ending.join(TEXT).encode("utf-8")
    assert list(files.raw_lines(io.BytesIO(data), block)) == [t.encode() for t in TEXT]


def test_mixed_endings_and_a_lone_cr_before_a_newline():
    data = b"a\rb\r\nc\n\rd\r\r\ne"
    assert list(files.raw_lines(io.BytesIO(data), 2)) == [b"a", b"b", b"c", b"", b"d", b"",
                                                         b"e"]


def test_the_corpus_readers_see_the_same_lines_in_every_convention(tmp_path):
    unix = _write(tmp_path / "unix.txt", "\n")
    expected = [t for t in TEXT if t]
    for name, ending in (("windows", "\r\n"), ("mac", "\r")):
        path = _write(tmp_path / f"{name}.txt", ending, final=name == "windows")
        assert list(text_lines(path)) == list(text_lines(unix)) == expected, name
        assert list(text_lines(path, with_location=True))[-1] == (path, 5, "last line")
        lines = [t.decode("utf-8") for t in line_dataset([path]).as_numpy_iterator()]
        assert [t.strip() for t in lines] == expected, name


def test_a_file_ends_its_lines_with_a_lone_cr_when_most_of_its_line_ends_are_one(tmp_path):
    """A classic Mac OS file is read whole and split; a Unix file with a stray `\\r` is
    not read whole (its size could be anything)."""
    from tfeff.data.pipeline import _ends_lines_with_lone_cr

    mac = tmp_path / "mac.txt"
    mac.write_bytes(b"a b\rc d\re f\r")
    unix = tmp_path / "unix.txt"
    unix.write_bytes(b"a b\nc\rd\ne f\ng\n")
    windows = tmp_path / "windows.txt"
    windows.write_bytes(b"a b\r\nc d\r\n")
    assert [_ends_lines_with_lone_cr(str(p)) for p in (mac, unix, windows)] == [
        True, False, False]
