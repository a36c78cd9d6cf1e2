"""Writing and reading SavedModel embedders (TensorFlow-only).

`export_embedder` saves an embedder module (`tfeff.export.embedder`) atomically, with its
metadata in `assets.extra/embedder.json` (`read_metadata`); `load_embedder` loads and
checks one (what it takes without tfeff: docs/guides/export.md#loading-an-export).
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

    The SavedModel is written to a temporary sibling, checked on reload against the module,
    then renamed into place: a failed export leaves nothing, and any earlier one as it was.
    `path` is checked first (`check_export_path`), the other arguments as by `embedder_module`.

    Args:
        model: see `embedder_module`.
        path: output directory.
        embedder: see `embedder_module`.
        family: see `embedder_module`.
        vocabulary: see `embedder_module`.
        fasttext_layer: see `embedder_module`.
        vector_mean: see `embedder_module`.
        tokenization: see `embedder_module`.
        lower_case: see `embedder_module`.
        max_tokens: see `embedder_module`.
        subword_pooling: see `embedder_module`.
        extra_files: `{name: source_path}` copied to `assets.extra/`.
        overwrite: replace an existing export (only an export: `check_export_path`).

    Returns:
        The embedder's metadata (also in `assets.extra/embedder.json`).
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
    return metadata


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

    `path` must not be, contain or lie inside an input (a model directory may hold its export);
    an existing `path` is replaced only with `overwrite`, and only an export (`ValueError`,
    `FileExistsError`: `tfeff.data.files.check_output`).

    Args:
        path: the export directory.
        inputs: `{description: path}` of what the export reads; descriptions
            that start with "model directory" may hold `path`.
        overwrite: whether an existing export may be replaced.

    Returns:
        The check again, as a function (see `tfeff.data.files.check_output`).
    """
    return files.check_output(path, inputs, overwrite=overwrite, kind="an export",
                       foreign=_not_an_export,
                       containers=[d for d in inputs if d.startswith("model directory")])


def _check_reload(module, path):
    """The reloaded SavedModel must compute what the module computes.

    The same graph and kernels give the same float32 values, except where a kernel adds in
    an order of its own (GPU atomics in `"mean"` pooling, at most `max_tokens` pieces). Two
    orders of a sum of K terms differ by at most 2 K u of their size (u = 2**-24; Higham,
    *Accuracy and Stability of Numerical Algorithms*, eq. (3.4)): 3e-5 of the largest
    output for K = 256. A lost or mixed-up weight differs by far more.
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
    """ValueError when `meta`'s `num_layers` or `dim` is not what `embed` returns."""
    shape = loaded.signatures["embed"].structured_outputs["layers"].shape
    for key, axis in (("num_layers", 1), ("dim", -1)):
        actual = shape[axis] if shape.rank else None
        if actual is not None and actual != meta[key]:
            raise ValueError(
                f"{os.path.join(path, EXTRA_DIR, METADATA_FILE)} says {key}={meta[key]}, but "
                f"the SavedModel's `embed` returns {actual}: the file does not belong to this "
                "export; export again with tfeff-export.")


# Each signature's input and required outputs (`EmbedderModule.signatures`); `tokenize` is
# checked where present (tfeff-embed names the exports without it).
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
    """Loads an exported embedder (tensorflow-text first where needed) and checks it is one.

    Args:
        path: the export directory (`export_embedder`).

    Returns:
        The loaded SavedModel (signatures `embed`, `embed_tokens`, `tokenize`, maybe `predict`).

    Raises:
        FileNotFoundError: `path` holds no `saved_model.pb`.
        ValueError: naming `path` and what is wrong: a SavedModel that does not load
            (damaged `saved_model.pb` or `variables/`), or that is not a tfeff embedder (a
            signature missing or with other inputs or outputs), or an unreadable
            `assets.extra/embedder.json`.
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
    # What a damaged saved_model.pb (OSError, ValueError), variables file (FileNotFoundError,
    # IndexError, op errors) or graph (KeyError, TypeError, AttributeError) raises.
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
