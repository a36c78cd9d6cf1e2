"""tfeff-embed: streaming, length-batched file embedding; bad lines; resume; npy and HDF5."""

import json
import os
import re
import signal
import subprocess
import sys
import time

import keras
import numpy as np
import pytest
import tensorflow as tf

from tests.conftest import REPO
from tests.export.embedder_reference import stack_roundings
from tfeff.export import export_embedder, load_embedder
from tfeff.export.embed_file import embed_file, read_embeddings
from tfeff.models import MaskedElmo
from tfeff.models import MaskedElmoBackbone
from tfeff.testing.numerics import assert_close

VOCAB = ["<pad>", "<unk>", "<s>", "</s>", "[MASK]", "the", "a", "dog", "##s", "run", "cat",
         ".", ",", "sat", "on", "mat", "big"]
LINES = [b"the dogs run .", b"", b"a cat sat on the mat , the big dog sat .",
         b"\xc3\x28 broken bytes", b"   ", b"dogs", b"the " * 100, "caf\u00e9 \u65e5".encode()]
SIZES = {"num_layers": 2, "units": 12, "projection_dim": 4}
# Batches of other lines and sizes round differently: the float32 roundings of the stack
# of the longest line (64 tokens and the boundaries; tests/export/embedder_reference.py).
ROUNDINGS = stack_roundings("masked_elmo", MaskedElmo(MaskedElmoBackbone(len(VOCAB), **SIZES)),
                            66)


@pytest.fixture(scope="module")
def embedder(tmp_path_factory):
    keras.utils.set_random_seed(5)
    model = MaskedElmo(MaskedElmoBackbone(len(VOCAB), **SIZES))
    model.build()
    path = str(tmp_path_factory.mktemp("embedder") / "masked_elmo")
    export_embedder(model, path, vocabulary=VOCAB, max_tokens=64)
    return path


def _write(path, lines):
    path.write_bytes(b"\n".join(lines) + b"\n")
    return str(path)


def _cli(*args, **kwargs):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    return subprocess.run([sys.executable, "-m", "tfeff.bin.embed", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300, **kwargs)


def _one_at_a_time(embedder_path, lines):
    """Each line embedded alone (batch of one): the reference for batched output."""
    loaded = load_embedder(embedder_path)
    out = []
    for raw in lines:
        try:
            text = raw.decode("utf-8").strip()
        except UnicodeDecodeError:
            text = ""
        e = loaded.signatures["embed"](sentences=tf.constant([text]))
        m = e["mask"].numpy()[0]
        out.append(e["layers"].numpy()[0][:, m])
    return out


def test_invalid_utf8_fails_with_the_line_number_and_leaves_nothing(embedder, tmp_path):
    source = _write(tmp_path / "in.txt", LINES)
    r = _cli("--embedder", embedder, "--input", source, "--output", str(tmp_path / "out"))
    assert r.returncode == 1
    assert f"{source}:4: the line is not valid UTF-8" in r.stderr and "--on_invalid_utf8" in r.stderr
    assert sorted(os.listdir(tmp_path)) == ["in.txt"]


@pytest.mark.numerics
def test_skip_embeds_every_other_line_in_place_and_reports_the_bad_one(embedder, tmp_path):
    source = _write(tmp_path / "in.txt", LINES)
    out = str(tmp_path / "out")
    r = _cli("--embedder", embedder, "--input", source, "--output", out,
             "--on_invalid_utf8=skip", "--batch_size=3", "--chunk_lines=5")
    assert r.returncode == 0, r.stderr[-3000:]
    assert f"{source}:4: the line is not valid UTF-8" in r.stderr and "skipped" in r.stderr
    meta = json.load(open(os.path.join(out, "embeddings.json")))
    assert meta["skipped_lines"] == [4] and meta["lines"] == len(LINES)
    reference = _one_at_a_time(embedder, LINES)
    tokens = open(os.path.join(out, "tokens.txt"), encoding="utf-8").read().split("\n")[:-1]
    assert len(tokens) == len(LINES)
    for k in range(3):
        vectors, offsets = read_embeddings(out, k)
        assert offsets[-1] == len(vectors) == sum(r.shape[1] for r in reference)
        for i, ref in enumerate(reference):
            assert_close(vectors[offsets[i]:offsets[i + 1]], ref[k], n=ROUNDINGS,
                         err_msg=f"line {i + 1}, layer {k}")
    counts = np.diff(read_embeddings(out, 0)[1])
    assert counts[1] == counts[3] == counts[4] == 0  # blank, invalid, whitespace-only
    assert counts[6] == 64  # truncated to the embedder's max_tokens
    assert tokens[0] == "the dogs run ." and tokens[3] == "" and len(tokens[6].split()) == 64
    assert not os.path.exists(out + ".partial")


@pytest.mark.numerics
def test_hdf5_with_chosen_layers_and_float16_equals_npy(embedder, tmp_path):
    lines = [ln for ln in LINES if b"\xc3\x28" not in ln]
    source = _write(tmp_path / "in.txt", lines)
    npy = embed_file(embedder, source, str(tmp_path / "npy"), batch_size=2, chunk_lines=3)
    h5 = embed_file(embedder, source, str(tmp_path / "h5"), output_format="hdf5",
                    layers=[2, 0], dtype="float16")
    assert h5["layers"] == [0, 2] and h5["tokens"] == npy["tokens"] > 0
    import h5py

    with h5py.File(tmp_path / "h5" / "embeddings.h5", "r") as f:
        assert sorted(f) == ["layer_0", "layer_2"] and f["layer_2"].dtype == np.float16
    for k in (0, 2):
        a, offsets = read_embeddings(str(tmp_path / "npy"), k)
        b, offsets_b = read_embeddings(str(tmp_path / "h5"), k)
        np.testing.assert_array_equal(offsets, offsets_b)
        # Other batches (float32: ROUNDINGS * 2**-24 = 0.4 * 2**-11), then float16's
        # rounding: 2 roundings of float16.
        assert_close(b, a, n=2, dtype="float16")
    with pytest.raises(FileExistsError, match="overwrite"):
        embed_file(embedder, source, str(tmp_path / "npy"))
    with pytest.raises(ValueError, match=r"layers.*\[0, 3\)"):
        embed_file(embedder, source, str(tmp_path / "x"), layers=[3])
    assert not os.path.exists(tmp_path / "x") and not os.path.exists(tmp_path / "x.partial")
    # A file of blank lines gives empty arrays and one empty row per line.
    blank = _write(tmp_path / "blank.txt", [b"", b"  "])
    for fmt in ("npy", "hdf5"):
        meta = embed_file(embedder, blank, str(tmp_path / f"blank_{fmt}"), output_format=fmt)
        vectors, offsets = read_embeddings(str(tmp_path / f"blank_{fmt}"), 1)
        assert meta["lines"] == 2 and vectors.shape == (0, 8) and offsets.tolist() == [0, 0, 0]


@pytest.mark.numerics
def test_killed_run_resumes_and_equals_an_uninterrupted_one(embedder, tmp_path):
    rng = np.random.default_rng(0)
    words = [w.encode() for w in VOCAB[5:]]
    lines = [b" ".join(rng.choice(words, size=rng.integers(1, 30))) for _ in range(2000)]
    source = _write(tmp_path / "in.txt", lines)
    out = str(tmp_path / "out")
    args = ["--embedder", embedder, "--input", source, "--output", out, "--chunk_lines=100",
            "--batch_size=16"]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    proc = subprocess.Popen([sys.executable, "-m", "tfeff.bin.embed", *args], cwd=REPO, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    progress = os.path.join(out + ".partial", "progress.json")
    done = 0
    deadline = time.time() + 240
    while time.time() < deadline and proc.poll() is None:
        try:
            done = json.load(open(progress))["lines_done"]
        except (OSError, ValueError):
            done = 0
        if done >= 100:
            break
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert 100 <= done < len(lines), done  # killed part-way through
    assert not os.path.exists(out)  # only the partial directory exists
    resumed = _cli(*args)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "Resuming" in resumed.stderr
    fresh = embed_file(embedder, source, str(tmp_path / "fresh"), batch_size=16, chunk_lines=100)
    assert json.load(open(os.path.join(out, "embeddings.json")))["tokens"] == fresh["tokens"]
    # The same chunks and batches, two processes (whose kernels may split sums by threads).
    for k in range(3):
        assert_close(read_embeddings(out, k)[0], read_embeddings(str(tmp_path / "fresh"), k)[0],
                     n=ROUNDINGS, err_msg=f"layer {k}")
    assert open(os.path.join(out, "tokens.txt")).read() == \
        open(tmp_path / "fresh" / "tokens.txt").read()


def test_a_second_writer_of_one_output_is_refused_at_once_naming_the_first(embedder, tmp_path):
    """Two runs on one --output once mixed their arrays (one float16, one float32 under a
    float32 `embeddings.json`). While another writer holds the output's lock (here this
    test, through its own open file, as another process would), embed_file refuses naming
    it and touches nothing; once it is free the run writes the output and removes its lock
    file."""
    from tfeff.data import files

    text = _write(tmp_path / "in.txt", [b"the dogs run .", b"a cat"])
    output = str(tmp_path / "out")
    held = files.lock(output + ".lock", "tfeff-embed")
    try:
        with pytest.raises(FileExistsError, match=re.escape(
                f"{output} is being written by tfeff-embed (pid {os.getpid()} on ")):
            embed_file(embedder, text, output)
    finally:
        held.close()
    assert sorted(os.listdir(tmp_path)) == ["in.txt", "out.lock"]
    embed_file(embedder, text, str(tmp_path / "new" / "nested" / "out"))  # parents made
    embed_file(embedder, text, output)
    assert sorted(os.listdir(tmp_path)) == ["in.txt", "new", "out"]


def test_every_line_ending_convention_embeds_the_same_lines(embedder, tmp_path):
    """A lone-CR (classic Mac OS) or CRLF input embeds line for line as its LF twin."""
    lines = [ln for ln in LINES if b"\xc3\x28" not in ln]
    outputs = {}
    for name, ending in (("lf", b"\n"), ("crlf", b"\r\n"), ("cr", b"\r")):
        source = tmp_path / f"{name}.txt"
        source.write_bytes(ending.join(lines) + ending)
        outputs[name] = embed_file(embedder, str(source), str(tmp_path / name))
    for name in ("crlf", "cr"):
        assert outputs[name]["lines"] == outputs["lf"]["lines"] == len(lines)
        assert outputs[name]["tokens"] == outputs["lf"]["tokens"]
        assert ((tmp_path / name / "tokens.txt").read_text()
                == (tmp_path / "lf" / "tokens.txt").read_text())
        np.testing.assert_array_equal(read_embeddings(str(tmp_path / name), 1)[1],
                                      read_embeddings(str(tmp_path / "lf"), 1)[1])


def test_lines_cut_to_max_tokens_are_reported_and_recorded(embedder, tmp_path, caplog):
    """A 100-word line and the embedder's max_tokens of 64: once cut without a word."""
    source = _write(tmp_path / "in.txt", [ln for ln in LINES if b"\xc3\x28" not in ln])
    with caplog.at_level("WARNING"):
        meta = embed_file(embedder, source, str(tmp_path / "out"))
    assert meta["truncated_lines"] == [6]  # "the " * 100, the 6th line here
    assert json.loads((tmp_path / "out" / "embeddings.json").read_text())[
        "truncated_lines"] == [6]
    assert (f"1 line(s) of {source} are longer than the embedder's max_tokens (64 tokens)"
            in caplog.text)
    assert len((tmp_path / "out" / "tokens.txt").read_text().splitlines()[5].split()) == 64


def test_an_export_whose_metadata_is_missing_newer_or_wrong_is_refused(embedder, tmp_path):
    """tfeff-embed once ran into KeyError, IndexError or a broadcast error (no
    embedder.json, a wrong num_layers) or used a future format unchecked: a ValueError
    naming the file (one line from the binary), nothing written."""
    import shutil

    text = _write(tmp_path / "in.txt", [b"the dogs run ."])
    cases = {"missing": (lambda meta: None, "has no assets.extra/embedder.json"),
             "newer": (lambda meta: {**meta, "format_version": 99},
                       "says format_version 99, but this tfeff reads exports up to"),
             "layers": (lambda meta: {**meta, "num_layers": 5},
                        "says num_layers=5, but the SavedModel's `embed` returns 3")}
    for name, (change, message) in cases.items():
        copy = tmp_path / name
        shutil.copytree(embedder, copy)
        path = copy / "assets.extra" / "embedder.json"
        meta = change(json.loads(path.read_text()))
        if meta is None:
            path.unlink()
        else:
            path.write_text(json.dumps(meta))
        with pytest.raises(ValueError, match=re.escape(message)):
            embed_file(str(copy), text, str(tmp_path / f"out_{name}"))
        assert not os.path.exists(tmp_path / f"out_{name}")


def test_the_arrays_are_given_their_disk_blocks_before_any_write(tmp_path):
    """A memory-mapped output is a sparse file: on a full disk a write through the map
    found no block and the process died of SIGBUS. Its blocks are now allocated when it
    is made (a full disk then fails there with ENOSPC, one line)."""
    from tfeff.export.embed_file import _reserve

    path = tmp_path / "layer_0.npy"
    array = np.lib.format.open_memmap(path, mode="w+", dtype="float32", shape=(1 << 16, 16))
    del array
    size = os.path.getsize(path)
    assert os.stat(path).st_blocks * 512 < size // 2  # sparse: (almost) nothing allocated
    _reserve(str(path))
    assert os.stat(path).st_blocks * 512 >= size
    assert os.path.getsize(path) == size
