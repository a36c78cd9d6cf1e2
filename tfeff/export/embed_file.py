"""Embeds a text file (one sentence per line) with an exported embedder: `tfeff-embed`.

Output directory layout (`output_format="npy"`; a line ends at `\\n`, `\\r\\n` or `\\r`):

* `layer_<k>.npy`: float `(total_tokens, dim)`, the tokens of every line in order;
  `offsets.npy`: int64 `(lines + 1,)`, line `i` (0-based) owns rows
  `offsets[i]:offsets[i + 1]` (blank and skipped lines own none, so line numbers never
  shift). Both open with `np.load(..., mmap_mode="r")`. With `output_format="hdf5"`,
  `embeddings.h5` holds the same arrays as datasets (`layer_<k>`, `offsets`).
* `tokens.txt`: line `i`'s tokens as the embedder split and truncated them, space-separated.
* `embeddings.json`: the embedder, input, sizes, layers, the skipped (or replaced) lines
  and the lines cut to the embedder's `max_tokens` (`truncated_lines`, 1-based).

A first pass tokenizes the file to size the outputs, the second embeds and commits it chunk
by chunk in `<output>.partial/` (docs/guides/export.md#embedding-a-file-tfeff-embed).
"""

import array
import errno
import hashlib
import itertools
import json
import logging
import os
import re
import shutil
import sys
import time

import numpy as np
import tensorflow as tf

from tfeff.data import files
from tfeff.data.corpus import CorpusError
from tfeff.export.saved_embedder import check_metadata_matches, load_embedder, read_metadata

FORMATS = ("npy", "hdf5")
INVALID_UTF8 = ("error", "skip", "replace")
PROGRESS_FILE = "progress.json"
METADATA_FILE = "embeddings.json"
HDF5_FILE = "embeddings.h5"
_MAX_REPORTED = 20


def _lines(path, on_invalid_utf8, bad_lines, quiet=False):
    """`(index, text)` per line of `path`; invalid UTF-8 handled as the policy says."""
    with tf.io.gfile.GFile(path, "rb") as f:
        for index, raw in enumerate(files.raw_lines(f)):
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                where = f"{path}:{index + 1}: the line is not valid UTF-8 ({e.reason} at byte {e.start})"
                if on_invalid_utf8 == "error":
                    raise CorpusError(
                        f"{where}. Fix the file, or pass --on_invalid_utf8=skip (embed it as an "
                        "empty line) or =replace (embed it with U+FFFD).") from e
                bad_lines.append(index + 1)
                skip = on_invalid_utf8 == "skip"
                if len(bad_lines) <= _MAX_REPORTED and not quiet:
                    logging.warning("%s; %s", where, "skipped (no tokens)" if skip
                                    else "invalid bytes replaced by U+FFFD")
                text = "" if skip else raw.decode("utf-8", errors="replace")
            yield index, text.strip()


def _chunks(iterable, size):
    items = iter(iterable)
    return iter(lambda: list(itertools.islice(items, size)), [])


def _fingerprint(input_path, embedder_path, settings):
    stat = tf.io.gfile.stat(input_path)
    with tf.io.gfile.GFile(os.path.join(embedder_path, "saved_model.pb"), "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    return {"input": os.path.abspath(input_path), "input_bytes": stat.length,
            "input_mtime_ns": int(stat.mtime_nsec), "embedder": os.path.abspath(embedder_path),
            "embedder_sha256": digest, **settings}


class _Progress:
    """A one-line progress bar on stderr (lines done, rate, time left)."""

    def __init__(self, total, enabled, start=0):
        self.total, self.enabled, self.start = total, enabled, start
        self.t0, self.last = time.time(), 0.0

    def update(self, done, force=False):
        now = time.time()
        if not self.enabled or (now - self.last < 0.5 and not force):
            return
        self.last = now
        rate = (done - self.start) / max(now - self.t0, 1e-9)
        left = (self.total - done) / rate if rate > 0 else float("inf")
        width = 30
        filled = int(width * done / max(self.total, 1))
        sys.stderr.write(f"\r[{'=' * filled}{'.' * (width - filled)}] {done}/{self.total} lines"
                         f"  {rate:.0f} lines/s  ETA {left:.0f}s ")
        if done >= self.total:
            sys.stderr.write("\n")
        sys.stderr.flush()


def _reserve(path):
    """Allocates the blocks of the memory-mapped file `path` now: a full disk fails here,
    naming it, instead of with SIGBUS when a write through the map finds no block."""
    try:
        with open(path, "r+b") as f:
            os.posix_fallocate(f.fileno(), 0, os.fstat(f.fileno()).st_size)
    except OSError as e:
        if e.errno in (errno.EOPNOTSUPP, errno.EINVAL):  # a file system without it
            return
        raise OSError(e.errno, f"cannot reserve {os.path.getsize(path):,} bytes for {path} "
                      f"({e.strerror}): free space, then rerun") from e


class _Writer:
    """The per-layer arrays of the partial directory (npy memmaps or HDF5 datasets)."""

    def __init__(self, directory, output_format, layers, total, dim, dtype, create):
        self.layers = layers
        self.h5 = None
        if output_format == "hdf5":
            import h5py

            self.h5 = h5py.File(os.path.join(directory, HDF5_FILE), "w" if create else "r+")
            if create:
                for k in layers:
                    self.h5.create_dataset(f"layer_{k}", (total, dim), dtype=dtype,
                                           chunks=(min(total, 1024), dim) if total else None)
            self.arrays = {k: self.h5[f"layer_{k}"] for k in layers}
        else:
            mode = "w+" if create else "r+"
            self.arrays = {
                k: np.lib.format.open_memmap(os.path.join(directory, f"layer_{k}.npy"), mode=mode,
                                             dtype=dtype, shape=(total, dim) if create else None)
                for k in layers}
            if create:
                for k in layers:
                    _reserve(os.path.join(directory, f"layer_{k}.npy"))

    def write(self, start, vectors):
        """`vectors` `(layers_all, n, dim)` -> rows `start:start + n` of every kept layer."""
        n = vectors.shape[1]
        for k in self.layers:
            self.arrays[k][start:start + n] = vectors[k]

    def flush(self):
        for a in [self.h5] if self.h5 is not None else self.arrays.values():
            a.flush()

    def close(self):
        self.flush()
        if self.h5 is not None:
            self.h5.close()
        self.arrays = {}


_EMBED_FILE = re.compile(r"(layer_\d+\.npy|offsets\.npy|tokens\.txt|progress\.json|"
                         + re.escape(METADATA_FILE) + "|" + re.escape(HDF5_FILE)
                         + r")(\.tmp-[0-9a-f]{8})?")


def _not_embed_output(path, finished=True):
    """None when the directory `path` holds only files an embed job writes (and, when
    `finished`, its `embeddings.json`); else what it is instead."""
    if not os.path.isdir(path):
        return "a file, not a directory"
    names = sorted(os.listdir(path))
    other = [name for name in names if not _EMBED_FILE.fullmatch(name)]
    if other:
        more = ", ..." if len(other) > 5 else ""
        return f"it holds {', '.join(other[:5])}{more}, which tfeff-embed does not write"
    if finished and METADATA_FILE not in names:
        return f"it has no {METADATA_FILE}"
    return None


def _write_json(path, value):
    files.write_text_atomic(path, json.dumps(value, indent=2, sort_keys=True) + "\n")


def _read_json(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def _tokenize_pass(embedder, input_path, directory, on_invalid_utf8, batch_size):
    """Pass 1: offsets.npy and tokens.txt; `(lines, bad lines, truncated lines)`."""
    bad, truncated = [], []
    counts = array.array("q")  # 8 bytes per line, whatever the file size
    with open(os.path.join(directory, "tokens.txt"), "w", encoding="utf-8") as out:
        for chunk in _chunks(_lines(input_path, on_invalid_utf8, bad), batch_size * 16):
            result = embedder.signatures["tokenize"](sentences=tf.constant([t for _, t in chunk]))
            tokens, mask = result["tokens"].numpy(), result["mask"].numpy()
            if "truncated" in result:  # exports older than this output do not say
                truncated += [i + 1 for (i, _), cut in zip(chunk, result["truncated"].numpy())
                              if cut]
            for row_tokens, row_mask in zip(tokens, mask):
                kept = [t.decode("utf-8") for t, m in zip(row_tokens, row_mask) if m]
                counts.append(len(kept))
                out.write(" ".join(kept) + "\n")
    offsets = np.zeros(len(counts) + 1, np.int64)
    np.cumsum(np.frombuffer(counts, np.int64), out=offsets[1:])
    np.save(os.path.join(directory, "offsets.npy"), offsets)
    return len(counts), bad, truncated


def embed_file(embedder_path, input_path, output, *, output_format="npy", layers=None,
               batch_size=32, chunk_lines=4096, on_invalid_utf8="error", dtype="float32",
               resume=True, overwrite=False, progress=None):
    """Embeds every line of `input_path` with the exported embedder at `embedder_path`.

    Args:
        embedder_path: a `tfeff-export` SavedModel directory.
        input_path: UTF-8 text, one sentence per line (a regular file).
        output: the output directory (layout: the module docstring).
        output_format: `"npy"` or `"hdf5"`.
        layers: indices of the layers to write (default all).
        batch_size: sentences per `embed` call.
        chunk_lines: lines read, embedded and committed at a time.
        on_invalid_utf8: `"error"` (stop), `"skip"` (embed the line as empty) or `"replace"`.
        dtype: `"float32"` or `"float16"` for the stored vectors.
        resume: continue an interrupted run of the same job in `<output>.partial`.
        overwrite: replace an `output` that an earlier `embed_file` wrote (nothing else).
        progress: show a progress bar (default: when stderr is a terminal).

    Returns:
        The metadata written to `embeddings.json`.

    Raises:
        ValueError: bad settings; `input_path` is not a regular file; `output` or
            `<output>.partial` is, contains or lies inside the embedder or the input.
        FileNotFoundError: `input_path` does not exist.
        FileExistsError: `output` exists without `overwrite`, or it or `<output>.partial`
            holds what `embed_file` does not write.
    """
    if output_format not in FORMATS:
        raise ValueError(f"`output_format` must be one of {FORMATS}. Received: {output_format!r}")
    if on_invalid_utf8 not in INVALID_UTF8:
        raise ValueError(
            f"`on_invalid_utf8` must be one of {INVALID_UTF8}. Received: {on_invalid_utf8!r}")
    if dtype not in ("float32", "float16"):
        raise ValueError(f"`dtype` must be float32 or float16. Received: {dtype!r}")
    for name, value in (("batch_size", batch_size), ("chunk_lines", chunk_lines)):
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"`{name}` must be a positive integer. Received: {value!r}")
    if not tf.io.gfile.exists(input_path):
        raise FileNotFoundError(f"Input file not found: {input_path}")
    if tf.io.gfile.isdir(input_path) or ("://" not in input_path
                                         and not os.path.isfile(input_path)):
        raise ValueError(f"The input {input_path} is not a regular file (input_path, --input): "
                         "pass a UTF-8 text file, one sentence per line.")
    inputs = {"embedder (embedder_path, --embedder)": embedder_path,
              "input file (input_path, --input)": input_path}
    recheck = files.check_output(output, inputs, overwrite=overwrite,
                                 kind="a tfeff-embed output", foreign=_not_embed_output)
    partial = output.rstrip("/") + ".partial"
    files.check_output(partial, inputs, overwrite=True,
                       kind="an unfinished tfeff-embed output (<output>.partial)",
                       foreign=lambda path: _not_embed_output(path, finished=False))
    if output_format == "hdf5":
        try:
            import h5py  # noqa: F401
        except ImportError as e:
            raise ValueError("output_format='hdf5' needs h5py (pip install h5py)") from e
    meta = read_metadata(embedder_path, required=True)
    embedder = load_embedder(embedder_path)
    if "embed" in embedder.signatures:
        check_metadata_matches(embedder_path, meta, embedder)
    if "tokenize" not in embedder.signatures:
        raise ValueError(
            f"{embedder_path} has no `tokenize` signature: it was exported by an older "
            "tfeff; export it again with tfeff-export.")
    num_layers = meta["num_layers"]
    layers = list(range(num_layers)) if layers is None else sorted(set(int(k) for k in layers))
    if not layers or layers[0] < 0 or layers[-1] >= num_layers:
        raise ValueError(f"`layers` must be indices in [0, {num_layers}). Received: {layers}")

    # A second run on the same output would share its .partial: refused at once.
    with files.exclusive_output(output, "tfeff-embed"):
        return _embed_locked(embedder, meta, input_path, embedder_path, output, partial,
                             recheck, output_format, layers, dtype, on_invalid_utf8,
                             batch_size, chunk_lines, resume, progress)


def _embed_locked(embedder, meta, input_path, embedder_path, output, partial, recheck,
                  output_format, layers, dtype, on_invalid_utf8, batch_size, chunk_lines,
                  resume, progress):
    dim = meta["dim"]
    settings = {"format": output_format, "layers": layers, "dtype": dtype,
                "on_invalid_utf8": on_invalid_utf8}
    fingerprint = _fingerprint(input_path, embedder_path, settings)
    progress_path = os.path.join(partial, PROGRESS_FILE)
    if os.path.islink(partial):  # not a run of its own: the link goes, what it names stays
        files.remove_path(partial)
    state = _read_json(progress_path) if os.path.exists(progress_path) else None
    if state is not None and not (resume and state["fingerprint"] == fingerprint):
        if resume:
            logging.warning("%s belongs to a different input, embedder or settings; starting over",
                            partial)
        state = None
    if state is None:
        shutil.rmtree(partial, ignore_errors=True)
        os.makedirs(partial)
        try:
            lines, bad, truncated = _tokenize_pass(embedder, input_path, partial,
                                                   on_invalid_utf8, batch_size)
            offsets = np.load(os.path.join(partial, "offsets.npy"))
            writer = _Writer(partial, output_format, layers, int(offsets[-1]), dim, dtype,
                             True)
        except BaseException:
            shutil.rmtree(partial, ignore_errors=True)  # nothing embedded yet: nothing kept
            raise
        state = {"fingerprint": fingerprint, "lines": lines, "lines_done": 0,
                 "skipped_lines": bad if on_invalid_utf8 == "skip" else [],
                 "replaced_lines": bad if on_invalid_utf8 == "replace" else [],
                 "truncated_lines": truncated}
        writer.flush()
        _write_json(progress_path, state)
    else:
        offsets = np.load(os.path.join(partial, "offsets.npy"))
        writer = _Writer(partial, output_format, layers, int(offsets[-1]), dim, dtype, False)
        logging.info("Resuming %s at line %d of %d", output, state["lines_done"] + 1,
                     state["lines"])

    bar = _Progress(state["lines"], sys.stderr.isatty() if progress is None else progress,
                    start=state["lines_done"])
    embed = embedder.signatures["embed"]
    try:
        stream = _lines(input_path, "replace", [], quiet=True)  # pass 1 reported bad lines
        skipped = set(state["skipped_lines"])
        for chunk in _chunks(stream, chunk_lines):
            if chunk[-1][0] < state["lines_done"]:
                continue
            chunk = [(i, "" if i + 1 in skipped else t) for i, t in chunk
                     if i >= state["lines_done"]]
            work = [(i, t) for i, t in chunk if offsets[i + 1] > offsets[i]]
            work.sort(key=lambda item: offsets[item[0] + 1] - offsets[item[0]])
            for batch in _chunks(work, batch_size):
                out = embed(sentences=tf.constant([t for _, t in batch]))
                vectors = out["layers"].numpy().astype(dtype, copy=False)
                mask = out["mask"].numpy()
                for row, (i, _) in enumerate(batch):
                    n = int(offsets[i + 1] - offsets[i])
                    if int(mask[row].sum()) != n:
                        raise RuntimeError(
                            f"{input_path}:{i + 1}: the embedder gave {int(mask[row].sum())} "
                            f"tokens, its tokenizer {n}")
                    writer.write(int(offsets[i]), vectors[row][:, mask[row]])
            writer.flush()
            state["lines_done"] = chunk[-1][0] + 1
            _write_json(progress_path, state)
            bar.update(state["lines_done"])
        bar.update(state["lines"], force=True)
    except BaseException:
        logging.warning("%s keeps the %d line(s) embedded so far: rerunning the same command "
                        "resumes from line %d (another input, embedder or setting, or "
                        "--noresume, removes it)", partial, state["lines_done"],
                        state["lines_done"] + 1)
        raise
    finally:
        writer.close()

    result = {
        "embedder": os.path.abspath(embedder_path), "embedder_family": meta.get("family"),
        "input": os.path.abspath(input_path), "lines": state["lines"],
        "tokens": int(offsets[-1]), "dim": dim, "layers": layers, "format": output_format,
        "dtype": dtype, "max_tokens": meta.get("max_tokens"),
        "subword_pooling": meta.get("subword_pooling"),
        "skipped_lines": state["skipped_lines"], "replaced_lines": state["replaced_lines"],
        "truncated_lines": state.get("truncated_lines", []),
        "files": ([HDF5_FILE] if output_format == "hdf5" else
                  [f"layer_{k}.npy" for k in layers]) + ["offsets.npy", "tokens.txt"],
    }
    _write_json(os.path.join(partial, METADATA_FILE), result)
    os.remove(progress_path)
    files.move_directory_into_place(partial, output, recheck)
    cut = result["truncated_lines"]
    if cut:
        logging.warning(
            "%d line(s) of %s are longer than the embedder's max_tokens (%s tokens) and were "
            "embedded up to their last whole word that fits: %s%s (embeddings.json: "
            "truncated_lines; split such lines, or export with a larger --max_tokens)",
            len(cut), input_path, meta.get("max_tokens"), cut[:_MAX_REPORTED],
            " ..." if len(cut) > _MAX_REPORTED else "")
    if state["skipped_lines"] or state["replaced_lines"]:
        what = "skipped" if state["skipped_lines"] else "embedded with U+FFFD"
        lines_ = state["skipped_lines"] or state["replaced_lines"]
        logging.warning("%d line(s) of %s were not valid UTF-8 and were %s: %s%s", len(lines_),
                        input_path, what, lines_[:_MAX_REPORTED],
                        " ..." if len(lines_) > _MAX_REPORTED else "")
    return result


def read_embeddings(output, layer):
    """`(vectors, offsets)` of one layer of a `tfeff-embed` output (memory-mapped npy)."""
    meta = _read_json(os.path.join(output, METADATA_FILE))
    offsets = np.load(os.path.join(output, "offsets.npy"))
    if meta["format"] == "hdf5":
        import h5py

        with h5py.File(os.path.join(output, HDF5_FILE), "r") as f:
            return f[f"layer_{layer}"][...], offsets
    return np.load(os.path.join(output, f"layer_{layer}.npy"), mmap_mode="r"), offsets
