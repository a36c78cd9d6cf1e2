"""Word-vector files are validated before use: a truncated or corrupt fastText `.bin`
(which the fastText library loads without complaint) or `.vec` is an error naming it.

The damaged files are cut from a real fastText model trained on the small corpus.
"""

import os
import struct

import fasttext
import numpy as np
import pytest

from tfeff.data import WordVectors, WordVectorsError, check_fasttext_model

HEADER_BYTES = 8 + 12 * 4 + 8 + 4 * 3 + 8 * 2  # magic, version, args, dictionary sizes


def _layout(path):
    """Offsets of the input matrix data, the output header and the output data."""
    model = fasttext.load_model(path)
    rows, dim = model.get_input_matrix().shape
    out_rows = model.get_output_matrix().shape[0]
    size = os.path.getsize(path)
    output_data = size - 4 * out_rows * dim
    output_header = output_data - 17  # bool + two int64
    input_data = output_header - 4 * rows * dim
    return dict(rows=rows, dim=dim, nwords=len(model.words), out_rows=out_rows,
                input_data=input_data, output_header=output_header, output_data=output_data,
                size=size)


def _write(tmp_path, name, data):
    path = str(tmp_path / name)
    with open(path, "wb") as f:
        f.write(data)
    return path


def test_a_complete_model_passes_and_reports_its_header(fasttext_model):
    path, model = fasttext_model
    info = check_fasttext_model(path)
    args = model.f.getArgs()
    assert info == dict(nwords=len(model.words), bucket=args.bucket, dim=model.get_dimension(),
                        minn=args.minn, maxn=args.maxn, quantized=False)
    assert WordVectors(path).dim == model.get_dimension()


@pytest.mark.parametrize("where", ["header", "dictionary", "input", "output_header",
                                   "output", "last_byte"])
def test_a_truncated_model_is_rejected_naming_the_file(where, fasttext_model, tmp_path):
    path, _ = fasttext_model
    data = open(path, "rb").read()
    lay = _layout(path)
    cut = {"header": 30, "dictionary": HEADER_BYTES + 40,
           "input": lay["input_data"] + 4 * lay["dim"] * (lay["rows"] // 2),
           "output_header": lay["output_header"] + 5,
           "output": lay["output_data"] + 100, "last_byte": lay["size"] - 1}[where]
    broken = _write(tmp_path, f"cut-{where}.bin", data[:cut])
    # What the library alone does with such a file: no error.
    if where in ("input", "output"):
        loaded = fasttext.load_model(broken)
        assert loaded.get_dimension() == lay["dim"]
    with pytest.raises(WordVectorsError) as e:
        check_fasttext_model(broken)
    assert str(e.value).startswith(f"{broken}: ") and "not a complete fastText .bin" in str(e.value)
    assert f"{cut} bytes" in str(e.value) or f"byte {cut}" in str(e.value), str(e.value)
    with pytest.raises(WordVectorsError, match=broken):
        WordVectors(broken)


def test_trailing_bytes_and_wrong_magic_are_rejected(fasttext_model, tmp_path):
    path, _ = fasttext_model
    data = open(path, "rb").read()
    longer = _write(tmp_path, "longer.bin", data + b"\0" * 8)
    with pytest.raises(WordVectorsError, match=r"longer.bin: the file is \d+ bytes, its header "
                                                r"says \d+ \(trailing bytes\)"):
        check_fasttext_model(longer)
    other = _write(tmp_path, "other.bin", b"not a model at all\n" * 20)
    with pytest.raises(WordVectorsError, match="other.bin: wrong magic number"):
        check_fasttext_model(other)
    with pytest.raises(FileNotFoundError, match="fastText model not found"):
        check_fasttext_model(str(tmp_path / "absent.bin"))


def _patched(data, offset, raw):
    data = bytearray(data)
    data[offset:offset + len(raw)] = raw
    return bytes(data)


def test_corrupt_values_of_the_right_size_are_rejected(fasttext_model, tmp_path):
    path, _ = fasttext_model
    data = open(path, "rb").read()
    lay = _layout(path)
    row_bytes = 4 * lay["dim"]
    nan = _write(tmp_path, "nan.bin", _patched(
        data, lay["input_data"] + 7 * row_bytes + 8, struct.pack("<f", float("nan"))))
    with pytest.raises(WordVectorsError, match="nan.bin: row 7 of the input matrix is not finite"):
        check_fasttext_model(nan)
    inf = _write(tmp_path, "inf.bin", _patched(
        data, lay["output_data"] + 4, struct.pack("<f", float("inf"))))
    with pytest.raises(WordVectorsError, match="inf.bin: the output matrix has non-finite"):
        check_fasttext_model(inf)
    words = _write(tmp_path, "words.bin", _patched(
        data, lay["input_data"], bytes(lay["nwords"] * row_bytes)))
    with pytest.raises(WordVectorsError, match=f"words.bin: all {lay['nwords']} word vectors "
                                               r"of the input matrix are identical \(zeros\)"):
        check_fasttext_model(words)
    blank = _write(tmp_path, "blank.bin", _patched(
        data, lay["output_data"], bytes(lay["out_rows"] * row_bytes)))
    with pytest.raises(WordVectorsError, match="blank.bin: the output matrix is all zeros"):
        check_fasttext_model(blank)
    # Sizes alone still catch a header whose matrix shape disagrees with its dictionary.
    shape = _write(tmp_path, "shape.bin", _patched(
        data, lay["input_data"] - 16, struct.pack("<q", lay["rows"] - 1)))
    with pytest.raises(WordVectorsError, match=rf"shape.bin: the input matrix is "
                                               rf"{lay['rows'] - 1} x {lay['dim']}"):
        check_fasttext_model(shape)


def test_one_zero_word_vector_is_legitimate_and_logged(fasttext_model, tmp_path, caplog):
    path, _ = fasttext_model
    data = open(path, "rb").read()
    lay = _layout(path)
    one = _write(tmp_path, "one.bin", _patched(data, lay["input_data"] + 4 * lay["dim"] * 5,
                                               bytes(4 * lay["dim"])))
    check_fasttext_model(one)
    assert f"1 of {lay['nwords']} word vectors are all zero" in caplog.text


def test_vec_files_are_checked_against_their_header(tmp_path):
    good = tmp_path / "good.vec"
    good.write_text("2 3\nthe 0.1 0.2 0.3\ncat 1 2 3\n", encoding="utf-8")
    vectors = WordVectors(str(good))
    np.testing.assert_array_equal(vectors.vector("cat"), [1, 2, 3])
    short = tmp_path / "short.vec"
    short.write_text("3 3\nthe 0.1 0.2 0.3\ncat 1 2 3\n", encoding="utf-8")
    with pytest.raises(WordVectorsError, match=r"short.vec: the header says 3 vectors, the "
                                               r"file holds 2 \(truncated\?\)"):
        WordVectors(str(short))
    nan = tmp_path / "nan.vec"
    nan.write_text("2 3\nthe 0.1 nan 0.3\ncat 1 2 3\n", encoding="utf-8")
    with pytest.raises(WordVectorsError, match=r"nan.vec:2: the vector of 'the' is not finite"):
        WordVectors(str(nan))
    cut = tmp_path / "cut.vec"
    cut.write_text("2 3\nthe 0.1 0.2 0.3\ncat 1 2\n", encoding="utf-8")
    with pytest.raises(WordVectorsError, match="cut.vec:3: expected a word and 3 numbers"):
        WordVectors(str(cut))
