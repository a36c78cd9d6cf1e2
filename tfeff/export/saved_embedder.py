"""Writing and reading SavedModel embedders (TensorFlow-only).

`export_embedder` saves an embedder module (`tfeff.export.embedder`) atomically,
with its metadata in `assets.extra/embedder.json` (`read_metadata`); export
paths are checked first (`check_export_path`).

Loading: plain `tf.saved_model.load(path)`; no tfeff needed. WordPiece
embedders use tensorflow-text ops, so `import tensorflow_text` must come
first (`load_embedder` does it; `assets.extra/embedder.json` says whether it
is needed).
"""

import json
import os
import shutil

import numpy as np
import tensorflow as tf

from tfeff.data import files
from tfeff.export.embedder import FORMAT_VERSION
from tfeff.export.embedder import embedder_module
from tfeff.training import model_directory

EXTRA_DIR = "assets.extra"
METADATA_FILE = "embedder.json"
_PROBE = ["a b c", "", "  ", "Zürich 日本 ??"]
# Files of a model directory's layout: an export never replaces a directory holding one.
_MODEL_DIRECTORY_FILES = {model_directory.CONFIG_FILE, model_directory.CHECKPOINT_DIR,
                          model_directory.VOCABULARY_FILE, model_directory.FASTTEXT_FILE,
                          model_directory.VECTORS_FILE}


def export_embedder(model, path, *, embedder=None, family=None, vocabulary=None,
                    fasttext_layer=None, vector_mean=None, tokenization=None, lower_case=False,
                    max_tokens=None, subword_pooling="first", extra_files=None,
                    overwrite=False):
    """Writes a SavedModel embedder of `model` to `path`, atomically.

    The SavedModel is written to a temporary sibling, reloaded, and its
    signatures are checked against the in-memory module on probe sentences
    (empty ones included); only then is it renamed into place. A failed export
    leaves no partial directory and never touches an existing one unless
    `overwrite` is set and the new export succeeded.

    Args:
        model: an `ElmoLM`, any model with `embedding_layers` (`MaskedElmo`,
            `Bert` standard or relaxed, ...: see `TokenIdsEmbedderModule`), or a
            `FastTextEmbedding` (fastText vectors alone, one layer).
        path: output directory.
        embedder: which module embeds (one of `EMBEDDERS`); None picks by the model.
        family: the `family` of the metadata (`"token_ids"` modules; default:
            the model's class name in snake case).
        vocabulary: the model's vocabulary (a `Vocabulary`, its file, or a list
            of tokens in id order); needed by every model except ELMo with the
            fixed fastText input.
        fasttext_layer: `FastTextEmbedding` of an ELMo's fixed input vectors.
        vector_mean: the mean subtracted from the fixed vectors (`fasttext.center`).
        tokenization: one of `TOKENIZATIONS`, as in pre-training: ElmoLM
            `"word"` or `"wordpiece"` (ELMo-Sub, `data.tokenization`); Masked
            ELMo and BERT `"bert"`. Default: the model's `embedding_tokenization`,
            else `"word"`.
        lower_case: `"bert"` tokenization: as `data.lower_case` in pre-training.
        max_tokens: longest input in model tokens (boundaries excluded); longer
            sentences keep their leading whole words that fit. Default 256;
            BERT's default and maximum is `max_sequence_length - 2`.
        subword_pooling: WordPiece models: `"first"`, `"mean"` or `"none"`.
        extra_files: `{name: source_path}` copied to `assets.extra/`.
        overwrite: replace an existing export (only an export: see
            `check_export_path`).

    Returns:
        The embedder's metadata (also in `assets.extra/embedder.json`).

    The path is checked first (`check_export_path`): a `path` that is,
    contains or lies inside a file the export reads raises `ValueError`; an
    existing `path` raises `FileExistsError` when `overwrite` is off, or when
    it is not an export (e.g. a model directory). The arguments are then
    checked as by `embedder_module`.
    """
    sources = dict(extra_files or {})
    if isinstance(vocabulary, (str, os.PathLike)):
        sources["vocabulary"] = vocabulary
    recheck = check_export_path(
        path, {f"file {name!r}": source for name, source in sources.items()}, overwrite)
    module = embedder_module(
        model, embedder=embedder, family=family, vocabulary=vocabulary,
        fasttext_layer=fasttext_layer, vector_mean=vector_mean,
        tokenization=tokenization, lower_case=lower_case, max_tokens=max_tokens,
        subword_pooling=subword_pooling)
    metadata = module.metadata()
    with files.exclusive_output(path, "tfeff-export"):
        _write_export(module, path, metadata, extra_files, recheck)
    return metadata


def _write_export(module, path, metadata, extra_files, recheck):
    """`export_embedder`'s writing, through a temporary sibling of `path`."""
    tmp = files.temporary_sibling(path)
    try:
        tf.saved_model.save(module, tmp, signatures=module.signatures())
        extra = os.path.join(tmp, EXTRA_DIR)
        tf.io.gfile.makedirs(extra)
        for name, source in (extra_files or {}).items():
            tf.io.gfile.copy(source, os.path.join(extra, name), overwrite=True)
        with tf.io.gfile.GFile(os.path.join(extra, METADATA_FILE), "w") as f:
            f.write(json.dumps(metadata, indent=2, sort_keys=True) + "\n")
        _check_reload(module, tmp)
        files.move_directory_into_place(tmp, path, recheck)
    finally:
        if tf.io.gfile.exists(tmp):
            shutil.rmtree(tmp, ignore_errors=True)


def _not_an_export(path):
    """None when `path` is an embedder `export_embedder` wrote, else what it is instead."""
    if not tf.io.gfile.isdir(path):
        return "a file, not a directory"
    names = {name.rstrip("/") for name in tf.io.gfile.listdir(path)}
    found = sorted(names & _MODEL_DIRECTORY_FILES)
    if found:
        return f"it holds {', '.join(found)}: a model directory"
    if "saved_model.pb" not in names:
        return "it has no saved_model.pb"
    if not tf.io.gfile.exists(os.path.join(path, EXTRA_DIR, METADATA_FILE)):
        return f"it has no {EXTRA_DIR}/{METADATA_FILE}"
    return None


def check_export_path(path, inputs, overwrite):
    """Refuses an export path that would destroy an input or what is not an export.

    `path` must not be, contain or lie inside an input (a model directory may
    hold its export: `runs/demo/export`); an existing `path` is replaced only
    with `overwrite` and only when it is an export `export_embedder` wrote
    (`saved_model.pb` and `assets.extra/embedder.json`, no model-directory
    files), never a model directory or anything else.

    Args:
        path: the export directory.
        inputs: `{description: path}` of what the export reads; descriptions
            that start with "model directory" may hold `path`.
        overwrite: whether an existing export may be replaced.

    Returns:
        The check again, as a function (see `tfeff.data.files.check_output`).

    A refused path raises `ValueError` or `FileExistsError`, as
    `tfeff.data.files.check_output` does.
    """
    return files.check_output(path, inputs, overwrite=overwrite, kind="an export",
                       foreign=_not_an_export,
                       containers=[d for d in inputs if d.startswith("model directory")])


def _check_reload(module, path):
    """The reloaded SavedModel must compute what the module computes.

    It runs the module's own graph on the same weights in the same process: the same
    operations on the same kernels, so the same float32 values, except where a kernel
    adds in an order of its own (on GPUs, the atomic adds of `unsorted_segment_mean`:
    `"mean"` pooling of a word's pieces, at most `max_tokens`). Two orders of a sum of K
    terms differ by at most 2 K u of their size (u = 2**-24, float32's unit roundoff;
    Higham, *Accuracy and Stability of Numerical Algorithms*, eq. (3.4)): the bound is
    2 * max_tokens * u times the output's largest value, 3e-5 of it for the default
    256. A reload that lost or mixed up a weight or the tokenizer differs by far more.
    """
    loaded = tf.saved_model.load(path)
    if set(loaded.signatures) != set(module.signatures()):
        raise RuntimeError(f"The exported embedder lost signatures: {sorted(loaded.signatures)}")
    probe = tf.constant(_PROBE)
    got = loaded.signatures["embed"](sentences=probe)
    want = module.embed(probe)
    for key in ("layers", "mask", "tokens"):
        a, b = got[key].numpy(), want[key].numpy()
        if a.dtype.kind == "f" and a.shape == b.shape:
            bound = 2 * module.max_tokens * 2.0**-24 * float(np.max(np.abs(b), initial=0.0))
            same = bool(np.all(np.abs(a.astype(np.float64) - b) <= bound))
        else:
            same = np.array_equal(a, b)
        if a.shape != b.shape or not same:
            raise RuntimeError(f"The exported embedder failed its reload check ({key!r}).")
    if got["mask"].numpy()[1:3].any():
        raise RuntimeError("The exported embedder gives tokens for empty sentences.")
    none = loaded.signatures["embed"](sentences=tf.constant([], tf.string))
    if none["layers"].shape[:3] != (0, module.num_layers, 0) or none["mask"].shape != (0, 0):
        raise RuntimeError("The exported embedder fails on an empty batch.")


def read_metadata(path, required=False):
    """`assets.extra/embedder.json` of an export (`{}` for exports older than it).

    Args:
        path: the export directory.
        required: refuse an export without it (instead of `{}`).

    Returns:
        The metadata as a dict (see `EmbedderModule.metadata`).

    Raises:
        ValueError: naming the file, when it is missing (`required`), is not JSON,
            lacks a key, or was written by a newer tfeff (`format_version`).
    """
    meta = os.path.join(path, EXTRA_DIR, METADATA_FILE)
    if not tf.io.gfile.exists(meta):
        if required:
            raise ValueError(
                f"{path} has no {EXTRA_DIR}/{METADATA_FILE}: it is not an export of this "
                "tfeff (or one older than that file); export it again with tfeff-export.")
        return {}
    try:
        with tf.io.gfile.GFile(meta) as f:
            data = json.load(f)
    except (ValueError, UnicodeDecodeError) as e:
        raise ValueError(f"{meta} is not valid JSON ({e}): export again with tfeff-export.") \
            from e
    version = data.get("format_version") if isinstance(data, dict) else None
    if not isinstance(version, int) or isinstance(version, bool):
        raise ValueError(f"{meta} has no integer `format_version`: not a tfeff export's "
                         "metadata; export again with tfeff-export.")
    if version > FORMAT_VERSION:
        raise ValueError(f"{meta} says format_version {version}, but this tfeff reads exports "
                         f"up to format_version {FORMAT_VERSION}: upgrade tfeff, or export "
                         "again with this one.")
    for key, kind in (("num_layers", int), ("dim", int)):
        value = data.get(key)
        if not isinstance(value, kind) or isinstance(value, bool) or value <= 0:
            raise ValueError(f"{meta}: `{key}` must be a positive integer. Received: "
                             f"{key}={value!r}; export again with tfeff-export.")
    return data


def check_metadata_matches(path, meta, loaded):
    """Raises ValueError naming `embedder.json` when its `num_layers` or `dim` is not what
    the SavedModel's `embed` signature returns (its static shape)."""
    shape = loaded.signatures["embed"].structured_outputs["layers"].shape
    for key, axis in (("num_layers", 1), ("dim", -1)):
        actual = shape[axis] if shape.rank else None
        if actual is not None and actual != meta[key]:
            raise ValueError(
                f"{os.path.join(path, EXTRA_DIR, METADATA_FILE)} says {key}={meta[key]}, but "
                f"the SavedModel's `embed` returns {actual}: the file does not belong to this "
                "export; export again with tfeff-export.")


# The interface every tfeff embedder exports (`EmbedderModule.signatures`): each
# signature's input and the outputs it must have. `embed` and `embed_tokens` are
# required (every export has them); `tokenize` is checked where present (tfeff-embed
# asks for it and names the exports without it).
_INTERFACE = {"embed": ("sentences", {"layers", "mask", "tokens"}),
              "embed_tokens": ("tokens", {"layers", "mask", "tokens"}),
              "tokenize": ("sentences", {"tokens", "mask"})}
_REQUIRED_SIGNATURES = ("embed", "embed_tokens")


def _signature_problem(loaded):
    """What `loaded` lacks of an embedder's interface (`_INTERFACE`), in words, or None."""
    names = sorted(getattr(loaded, "signatures", None) or {})
    missing = [name for name in _REQUIRED_SIGNATURES if name not in names]
    if missing:
        return (f"it has no {' or '.join(f'`{m}`' for m in missing)} signature (its "
                f"signatures: {', '.join(names) or 'none'})")
    for name, (argument, outputs) in _INTERFACE.items():
        if name not in names:
            continue
        function = loaded.signatures[name]
        _, inputs = function.structured_input_signature
        got = set(function.structured_outputs)
        if set(inputs) != {argument} or not outputs <= got:
            return (f"its `{name}` signature takes {sorted(inputs)} and returns "
                    f"{sorted(got)}, not a tfeff embedder's `{argument}` and "
                    f"{sorted(outputs)}")
    return None


def _empty_file(path):
    try:
        return not tf.io.gfile.isdir(path) and tf.io.gfile.stat(path).length == 0
    except tf.errors.OpError:
        return False


def load_embedder(path):
    """Loads an exported embedder with `tf.saved_model.load`, and checks it is one.

    Imports tensorflow-text first when the embedder's tokenizer needs its ops
    (WordPiece models); a process without tfeff does the same by hand:
    `import tensorflow_text` then `tf.saved_model.load(path)`.

    Args:
        path: the export directory (`export_embedder`).

    Returns:
        The loaded SavedModel, with its `embed`, `embed_tokens`, `tokenize`
        (and, where exported, `predict`) signatures.

    Raises:
        FileNotFoundError: `path` holds no `saved_model.pb`.
        ValueError: naming `path` and what is wrong: a SavedModel that does not
            load (a damaged or truncated `saved_model.pb`, missing or corrupted
            `variables/`), one that is not a tfeff embedder (a signature of the
            interface missing or with other inputs or outputs: another
            program's SavedModel), or an unreadable `assets.extra/embedder.json`
            (`read_metadata`).
    """
    if not tf.io.gfile.exists(os.path.join(path, "saved_model.pb")):
        raise FileNotFoundError(f"{path} is not a SavedModel directory: it has no "
                                "saved_model.pb (give the directory tfeff-export wrote)")
    if "tensorflow_text" in read_metadata(path).get("requires", []):
        import tensorflow_text  # noqa: F401  (registers the tokenizer ops)
    try:
        loaded = tf.saved_model.load(path)
    except PermissionError:
        raise  # the user's environment, reported as such by the binaries
    # What a damaged SavedModel raises: an unparsable or empty saved_model.pb (OSError,
    # ValueError), missing variables (FileNotFoundError), a truncated or corrupted
    # variables file (IndexError, DataLossError and other op errors), a graph that
    # does not fit the objects (KeyError, TypeError, AttributeError).
    except (OSError, ValueError, LookupError, TypeError, AttributeError,
            tf.errors.OpError) as e:
        reason = (getattr(e, "message", None) or str(e)).strip()
        reason = reason.splitlines()[0] if reason else type(e).__name__
        if _empty_file(os.path.join(path, "saved_model.pb")):
            reason = "saved_model.pb is empty"
        raise ValueError(f"{path} does not load as a SavedModel ({reason}): the export is "
                         f"damaged or incomplete; export it again with tfeff-export.") from e
    problem = _signature_problem(loaded)
    if problem:
        raise ValueError(f"{path} is a SavedModel but not a tfeff embedder: {problem}. "
                         "Give a directory that tfeff-export wrote.")
    return loaded
