"""The model directory: its layout, its config and checkpoints, and the start of a run.

Every family's training, export and conversion import this module; it imports none of
them. The directory is transactional: every artifact is written to a temporary sibling
and renamed, and the checkpoint index names a checkpoint only once it is complete, so a
run killed at any point leaves a directory that resumes and exports.

Layout of `model_dir`:

    config.yaml               the resolved config (read back by resume and export)
    corpus/{train,heldout}.txt  the generated corpus (synthetic data only)
    vocabulary.txt            word<TAB>count, id order (or WordPiece tokens, no fastText)
    fasttext.bin              trained word vectors (unless fasttext.pretrained)
    vocabulary_vectors.npy    fixed vectors of every vocabulary word
    vocabulary_vectors.mean.npy  the subtracted mean (fasttext.center)
    checkpoints/              tf.train.CheckpointManager checkpoints
    logs/                     TensorBoard scalars (train/*, validation/*)
    eval.json                 held-out top-k accuracy and the unigram baseline
    .tfeff-model-dir          the mark of a directory tfeff made (`check_fingerprints`)
    .tfeff-lock               the lock of the run writing there, with its holder (`claim`)

tfeff writes only into a new or empty directory or one it made (its mark, or, from
before the mark, its own resolved `config.yaml` and only its own file names), and never
through a symbolic link at one of its names (`tfeff.data.files`); a folder of its own
that is a link (`checkpoints/` on another disk) is written into. See
docs/guides/pretraining.md#your-corpus-with-a-demo-config.
"""

import contextlib
import datetime
import hashlib
import json
import logging
import os
import re
import uuid

import keras
import tensorflow as tf

from tfeff import config as config_lib
from tfeff import data as data_lib
from tfeff.data import files
from tfeff.training import checkpoints
from tfeff.training.callbacks import ScalarLogger
from tfeff.training.errors import TrainingError
from tfeff.training.errors import error_detail
from tfeff.training.errors import error_message
from tfeff.training.optimizers import make_optimizer
from tfeff.training.strategy import chief_first
from tfeff.training.strategy import make_strategy
from tfeff.training.strategy import worker_info

CONFIG_FILE = "config.yaml"
VOCABULARY_FILE = "vocabulary.txt"
FASTTEXT_FILE = "fasttext.bin"
VECTORS_FILE = "vocabulary_vectors.npy"
WORDPIECE_CORPUS_FILE = "wordpiece_corpus.txt"  # Masked ELMo's fastText text
EPOCH_FILE = "epoch_windows.json"  # what train.epochs counts, and what it was counted from
CHECKPOINT_DIR = "checkpoints"
EVAL_FILE = "eval.json"
# Sections that may change on resume; the others define the model and its data.
_RESUMABLE_SECTIONS = ("train", "eval")
# Keys of the other sections that change a step's cost, never its numbers (resumable).
_COST_ONLY_KEYS = ("model.adaptive_tail_capacity",)
# Keys that shape only the batches, not the prepared data: may change until the first checkpoint.
_BEFORE_FIRST_CHECKPOINT = ("data.batch_size", "data.max_sequence_length",
                            "data.shuffle_buffer")


def file_path(model_dir, name):
    return os.path.join(model_dir, name)


def corpus_files(data_cfg, model_dir):
    """`(train_files, heldout_files)`: the configured patterns, resolved once
    (`tfeff.data.training_and_heldout_files`, whose `CorpusError`s pass through; training
    files without text are one too: a repeated empty input never yields a batch), or the
    generated corpus."""
    if data_cfg.synthetic is None:
        train_files, heldout_files = data_lib.training_and_heldout_files(
            data_cfg.train_files, data_cfg.heldout_files)
        next(iter(data_lib.text_lines(train_files, "replace")))  # CorpusError if empty
        return train_files, heldout_files
    corpus_dir = file_path(model_dir, "corpus")
    train_files = file_path(corpus_dir, "train.txt")
    heldout_files = file_path(corpus_dir, "heldout.txt")
    if not (tf.io.gfile.exists(train_files) and tf.io.gfile.exists(heldout_files)):
        syn = data_cfg.synthetic
        logging.info("Generating the synthetic corpus in %s", corpus_dir)
        data_lib.write_synthetic_corpus(
            corpus_dir, syn.num_train_sentences, syn.num_heldout_sentences, seed=syn.seed,
            lexicon_size=syn.lexicon_size, paragraph_sentences=syn.paragraph_sentences)
    return train_files, heldout_files


def _differences(a, b, prefix=""):
    out = []
    for key in sorted(set(a) | set(b)):
        full = f"{prefix}.{key}" if prefix else key
        va, vb = a.get(key), b.get(key)
        if isinstance(va, dict) and isinstance(vb, dict):
            out += _differences(va, vb, full)
        elif va != vb:
            out.append(f"{full}: {va!r} -> {vb!r}")
    return out


MARK_FILE = ".tfeff-model-dir"
LOCK_FILE = ".tfeff-lock"
# Every name tfeff writes at the top of a model directory (how one from before the mark is told).
OWNED_NAMES = (CONFIG_FILE, "corpus", VOCABULARY_FILE, FASTTEXT_FILE, VECTORS_FILE,
               data_lib.mean_path(VECTORS_FILE), WORDPIECE_CORPUS_FILE, CHECKPOINT_DIR,
               "logs", EVAL_FILE, "coarse", MARK_FILE, LOCK_FILE, EPOCH_FILE)
# What `prepare_data` derives from the `data` and `fasttext` sections (and reuses).
DERIVED_DATA = ("corpus", VOCABULARY_FILE, FASTTEXT_FILE, VECTORS_FILE,
                data_lib.mean_path(VECTORS_FILE), WORDPIECE_CORPUS_FILE)
# The config sections each derived file is made from (another section's change leaves it).
_MADE_FROM = {"corpus": ("data",), VOCABULARY_FILE: ("data", "family"),
              FASTTEXT_FILE: ("data", "fasttext", "family"),
              VECTORS_FILE: ("data", "fasttext", "family"),
              data_lib.mean_path(VECTORS_FILE): ("data", "fasttext", "family"),
              WORDPIECE_CORPUS_FILE: ("data", "family")}
_CHECKPOINT_INDEX = re.compile(r"^ckpt-(\d+)\.index$")


def _checkpoint_files(model_dir):
    """The index files of every checkpoint in `model_dir` (any phase's)."""
    written = tf.io.gfile.glob(os.path.join(model_dir, CHECKPOINT_DIR, "ckpt-*.index")) + \
        tf.io.gfile.glob(os.path.join(model_dir, "*", CHECKPOINT_DIR, "ckpt-*.index"))
    return {p for p in written if _CHECKPOINT_INDEX.match(os.path.basename(p))}


def _checkpoint_steps(model_dir):
    return [int(_CHECKPOINT_INDEX.match(os.path.basename(p)).group(1))
            for p in _checkpoint_files(model_dir)]


def _checkpoint_stamps(model_dir):
    """`{index file: modification time}` of every checkpoint in `model_dir` (one written
    since is new or has a new time)."""
    stamps = {}
    for path in _checkpoint_files(model_dir):
        with contextlib.suppress(tf.errors.NotFoundError):  # rotated out meanwhile
            stamps[path] = tf.io.gfile.stat(path).mtime_nsec
    return stamps


def _optimizer_name(train):
    if train.get("optimizer", "adam") == "adagrad":
        return "Adagrad"
    return "AdamW" if train.get("weight_decay") else "Adam"


def _optimizer_change(saved_train, new_train):
    """A change of train.* that changes the optimizer a checkpoint holds, or None."""
    before, after = _optimizer_name(saved_train), _optimizer_name(new_train)
    if before == after:
        return None
    keys = [k for k in ("optimizer", "weight_decay")
            if saved_train.get(k) != new_train.get(k)]
    return ("; ".join(f"train.{k}: {saved_train.get(k)!r} -> {new_train.get(k)!r}" for k in keys)
            + f" (switches the optimizer from {before} to {after}, whose state the checkpoints "
            "hold; a non-zero weight_decay may change to another non-zero value)")


def _precision_change(saved_train, new_train):
    """A change of train.precision, or None: a run keeps the precision it started with."""
    before = saved_train.get("precision", "float32")
    after = new_train.get("precision", "float32")
    if before == after:
        return None
    return (f"train.precision: {before!r} -> {after!r} (a run keeps the precision it "
            "started with: mixed_float16's loss scale is part of the optimizer the "
            "checkpoints hold, and the trained weights are tuned to their precision's "
            "rounding; start a new model_dir to train in another precision)")


def resolve_config(config, model_dir):
    """Checks `config` against `<model_dir>/config.yaml` (ConfigError) and writes it.

    Resuming may change `train` and `eval` (and `model.adaptive_tail_capacity`), but not
    the optimizer (Adam, AdamW, Adagrad) or `train.precision`. Without a checkpoint any
    corrected config is taken, unless prepared data (`DERIVED_DATA`) made from a changed
    setting is there: the error names those files. In a directory this process holds
    (`claim`), `release` puts the replaced file back if the run wrote no checkpoint and
    changed no data setting.
    """
    path = file_path(model_dir, CONFIG_FILE)
    previous, data_changed = None, False
    if tf.io.gfile.exists(path):
        saved = config_lib.load_config(path, saved=True)
        saved_dict, new_dict = config_lib.to_dict(saved), config_lib.to_dict(config)
        steps = _checkpoint_steps(model_dir)
        frozen = [k for k in sorted(set(saved_dict) | set(new_dict))
                  if k not in _RESUMABLE_SECTIONS]
        diffs = [d for d in _differences(
            {k: saved_dict.get(k) for k in frozen}, {k: new_dict.get(k) for k in frozen},
        ) if d.split(":")[0] not in _COST_ONLY_KEYS]
        if steps:
            for change in (_optimizer_change, _precision_change):
                refused = change(saved_dict.get("train", {}), new_dict.get("train", {}))
                diffs += [refused] if refused else []
            if diffs:
                raise config_lib.ConfigError(
                    f"{model_dir} was created with a different config and holds checkpoints "
                    f"up to step {max(steps)}; these keys differ (only train.* and eval.* may "
                    "change on resume, and of train.* neither the optimizer nor the "
                    "precision): " + "; ".join(diffs))
            if not config.train.epochs and config.train.steps < max(steps):
                logging.warning(
                    "train.steps=%d is below step %d, which %s has already reached: nothing "
                    "more is trained (config.yaml keeps the config its checkpoints were "
                    "trained with)", config.train.steps, max(steps), model_dir)
        else:
            stale = [d for d in diffs if d.split(":")[0] not in _BEFORE_FIRST_CHECKPOINT
                     and d.split(".")[0].split(":")[0] in ("data", "fasttext", "family")]
            data_changed = bool(stale)
            given = {os.path.realpath(p) for c in (saved_dict, new_dict)
                     for p in (c.get("fasttext") or {}).get("pretrained", "").split(",") if p}
            sections = {d.split(".")[0].split(":")[0] for d in stale}
            derived = [name for name in DERIVED_DATA
                       if sections & set(_MADE_FROM[name])
                       and tf.io.gfile.exists(file_path(model_dir, name))
                       and os.path.realpath(file_path(model_dir, name)) not in given
                       # corpus/ is tfeff's only when it was generated (synthetic data)
                       and (name != "corpus" or saved_dict["data"].get("synthetic"))]
            if derived:
                stale = [d for d in stale if d.split(".")[0].split(":")[0]
                         in {s for n in derived for s in _MADE_FROM[n]}]
                raise config_lib.ConfigError(
                    f"{model_dir} has no checkpoint yet, but it holds data prepared with its "
                    f"old config ({', '.join(derived)}) that the new one would reuse although "
                    f"these keys differ: {'; '.join(stale)}. Remove those files to have them "
                    "made anew (they are derived from the corpus), or use a new model_dir.")
        with tf.io.gfile.GFile(path) as f:
            previous = f.read()
    key = _held_key(model_dir)
    if previous is not None and not data_changed and key in _HELD and key not in _REPLACED:
        _REPLACED[key] = (path, previous, _checkpoint_stamps(model_dir))
    config_lib.write_yaml(config, path)


def load_model_dir_config(model_dir):
    """The config written into `model_dir` (FileNotFoundError if there is none)."""
    path = file_path(model_dir, CONFIG_FILE)
    if not tf.io.gfile.exists(path):
        raise FileNotFoundError(f"{model_dir} is not a tfeff model directory (no {CONFIG_FILE})")
    return config_lib.load_config(path, saved=True)


@contextlib.contextmanager
def building_model(label, restoring=False):
    """Turns running out of memory while building a model (or its optimizer) into a
    `TrainingError`; `restoring`: a trained model (export, conversion), not one to shrink."""
    try:
        yield
    except (tf.errors.ResourceExhaustedError, MemoryError) as e:
        detail = error_detail(e)
        fix = ("use a machine with more memory (or free some)" if restoring else
               "make it smaller (the model.* sizes, e.g. model.units or model.hidden_dim) or "
               "use a device with more memory; nothing was trained or saved")
        raise TrainingError(f"out of memory while building the {label} model ({detail}): its "
                            f"weights do not fit in this device's memory; {fix}.") from e


def restore_latest(model_dir, config, build, strategy=None, with_optimizer=False):
    """Builds `build()` (and its optimizer) under `strategy`, restores the latest checkpoint
    (`checkpoints.restore_newest`, safe beside a run still training there) and returns
    `(model, optimizer_or_None, step)`."""
    directory = file_path(model_dir, CHECKPOINT_DIR)
    latest = checkpoints.choose_checkpoint(directory)
    if latest is None:
        raise FileNotFoundError(f"{model_dir} has no checkpoint yet: run tfeff-pretrain first")
    strategy = strategy or tf.distribute.get_strategy()
    with strategy.scope(), building_model(config.family, restoring=True):
        model = build()
        model.build()
        optimizer = None
        if with_optimizer:
            optimizer = make_optimizer(config.train, config.data.batch_size)
            optimizer.build(model.trainable_variables)
        latest = checkpoints.restore_newest(checkpoints.make_checkpoint(model, optimizer),
                                            directory, latest, model_dir)
    return model, optimizer, checkpoints.checkpoint_step(latest)


# The locks this process holds: real path -> [open lock file, claims].
_HELD = {}
# The config.yaml a run replaced in a directory it holds (`resolve_config`): real path ->
# (path, its text before, `_checkpoint_stamps` then); put back by `release`.
_REPLACED = {}
_PROBE_PREFIX = ".tfeff-write-test-"


def _is_local(path):
    return "://" not in path


def _held_key(model_dir):
    return os.path.realpath(model_dir) if _is_local(model_dir) else model_dir


def _own_config(path):
    """Whether `path` is a config.yaml that tfeff wrote: no comment, every section of the
    resolved config and nothing it does not hold (an older tfeff's may lack newer keys)."""
    import yaml

    try:
        with tf.io.gfile.GFile(path) as f:
            text = f.read()
        written = yaml.safe_load(text)
        resolved = config_lib.to_dict(config_lib.load_config(path, saved=True))
    except Exception:  # noqa: BLE001 (any file that does not load is not tfeff's)
        return False
    if "#" in text or not isinstance(written, dict) or set(written) != set(resolved):
        return False

    def within(a, b):
        if isinstance(a, dict) and isinstance(b, dict):
            return set(a) <= set(b) and all(within(a[k], b[k]) for k in a)
        return a == b

    return within(written, resolved)


def _listing(names):
    return ", ".join(names[:8]) + (f" and {len(names) - 8} more" if len(names) > 8 else "")


def check_ownership(model_dir):
    """Raises FileExistsError naming the entries of `model_dir` when it is not a directory
    tfeff may write into (module docstring); marks a new or older tfeff directory."""
    mark = file_path(model_dir, MARK_FILE)
    if tf.io.gfile.exists(mark):
        return
    entries = sorted(tf.io.gfile.listdir(model_dir)) if tf.io.gfile.isdir(model_dir) else []
    # The lock file, and the write probes of the workers of a multi-worker run.
    entries = [e.rstrip("/") for e in entries if e.rstrip("/") != LOCK_FILE
               and not e.startswith(_PROBE_PREFIX)]
    foreign = [e for e in entries if e not in OWNED_NAMES]
    if entries and foreign:
        raise FileExistsError(
            f"{model_dir} holds files tfeff did not write ({_listing(foreign)}): "
            "tfeff-pretrain writes into a new or empty directory, or one it made; give "
            "another --model_dir (the config, the corpus and other inputs can stay where they "
            "are)")
    if entries and not _own_config(file_path(model_dir, CONFIG_FILE)):
        raise FileExistsError(
            f"{model_dir} holds {_listing(entries)} but is not a directory tfeff made "
            f"(no {MARK_FILE}, no config.yaml written by tfeff): give a new or empty "
            f"--model_dir, or copy {MARK_FILE} along with files copied from a model "
            "directory")
    files.write_text_atomic(mark, json.dumps(
        {"made_by": "tfeff", "since": datetime.datetime.now(datetime.timezone.utc)
         .isoformat(timespec="seconds")}) + "\n")


def claim(model_dir, what="tfeff-pretrain"):
    """Takes `model_dir` for this process (counted: as many `release` calls give it back):
    checks it (`check_ownership`) and locks it with the kernel's `flock` on `.tfeff-lock`
    (a killed run holds nothing; remote directories are not locked). FileExistsError when
    the directory is not tfeff's or another process writes there."""
    key = _held_key(model_dir)
    if key in _HELD:  # this process holds it already (an API call inside another)
        _HELD[key][1] += 1
        return
    tf.io.gfile.makedirs(model_dir)
    handle = None
    if _is_local(model_dir):
        lock_path = file_path(model_dir, LOCK_FILE)
        made = not os.path.lexists(lock_path)
        try:
            handle = files.lock(lock_path, what)
        except files.LockHeldError as e:
            raise FileExistsError(
                f"{model_dir} is in use by {e}: one run writes a model directory at a time. "
                "Wait for it to end or stop it (a killed run holds nothing)") from None
        try:
            check_ownership(model_dir)
            sweep_leftovers(model_dir)
        except BaseException:
            if made:  # a refused directory is left as it was
                with contextlib.suppress(OSError):
                    os.remove(lock_path)
            handle.close()
            raise
    else:
        check_ownership(model_dir)
    _HELD[key] = [handle, 1]


# What a killed run leaves: temporaries of tfeff's files and checkpoint index, TensorFlow's
# half-written checkpoints. Not other names' (an export has its own lock), nor write probes
# (another worker's may be in use).
_LEFTOVER = re.compile(
    r"^(?:(?:" + "|".join(re.escape(n) for n in OWNED_NAMES + (checkpoints.INDEX_FILE,))
    + r")\.tmp-[0-9a-f]{8}(?:\.txt|\.old)?|ckpt-\d+_temp.*)$")


def sweep_leftovers(model_dir):
    """Removes what a killed run left in `model_dir` and its checkpoint folders (under
    the caller's lock); returns their names."""
    swept = []
    for folder in (model_dir, file_path(model_dir, CHECKPOINT_DIR),
                   file_path(model_dir, "coarse"),
                   os.path.join(model_dir, "coarse", CHECKPOINT_DIR)):
        if not tf.io.gfile.isdir(folder):
            continue
        for name in (entry.rstrip("/") for entry in tf.io.gfile.listdir(folder)):
            if _LEFTOVER.match(name):
                path = os.path.join(folder, name)
                files.remove_path(path)  # a link is removed, not what it points to
                swept.append(os.path.relpath(path, model_dir))
    if swept:
        logging.info("Removed what an interrupted run left in %s: %s", model_dir,
                     ", ".join(sorted(swept)))
    return swept


# The prepared files a run's checkpoints rest on: their SHA-256 is kept in the mark.
FINGERPRINTED = (VOCABULARY_FILE, VECTORS_FILE)
# Digests read in this process, by local (path, inode, size, mtime): a paper-size
# vocabulary's vectors are gigabytes. Remote files are read each time.
_DIGESTS = {}


def _sha256(path):
    key = None
    if os.path.exists(path):
        stat = os.stat(path)
        key = (os.path.realpath(path), stat.st_ino, stat.st_size, stat.st_mtime_ns)
    if key is None or key not in _DIGESTS:
        digest = hashlib.sha256()
        with tf.io.gfile.GFile(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 22), b""):
                digest.update(block)
        if key is None:
            return digest.hexdigest()
        _DIGESTS[key] = digest.hexdigest()
    return _DIGESTS[key]


def check_fingerprints(model_dir, made_now, record=True):
    """Checks the `FINGERPRINTED` files of `model_dir` against its mark (ValueError naming
    those changed since), then records them (if `record`); `made_now`: names this run
    made (unchecked before the first checkpoint)."""
    mark = file_path(model_dir, MARK_FILE)
    try:
        with tf.io.gfile.GFile(mark) as f:
            data = json.load(f)
    except (tf.errors.OpError, OSError, ValueError):
        data = {"made_by": "tfeff"}
    recorded = dict(data.get("files") or {})
    steps = _checkpoint_steps(model_dir)
    changed = []
    for name in FINGERPRINTED:
        path = file_path(model_dir, name)
        if not tf.io.gfile.exists(path):
            recorded.pop(name, None)
            continue
        digest = _sha256(path)
        if (name not in made_now or steps) and recorded.get(name, digest) != digest:
            changed.append(name)
        recorded[name] = digest
    if changed:
        raise ValueError(
            f"{', '.join(file_path(model_dir, n) for n in changed)} changed since tfeff made "
            "it: the model's ids and vectors are tied to the file as it was. Put the "
            "original back; or, before the first checkpoint, delete it to have it made anew; "
            "or train in a new --model_dir")
    if record and recorded != data.get("files"):
        files.write_text_atomic(mark, json.dumps({**data, "files": recorded}, indent=1) + "\n")


def release(model_dir):
    """Gives back a directory `claim` took (nothing if this process holds none)."""
    key = _held_key(model_dir)
    if key not in _HELD:
        return
    _HELD[key][1] -= 1
    if _HELD[key][1] == 0:
        try:
            _put_back_config(model_dir, _REPLACED.pop(key, None))
        finally:
            handle, _ = _HELD.pop(key)
            if handle is not None:
                handle.close()


def _put_back_config(model_dir, replaced):
    """Puts back the config.yaml a run replaced (`resolve_config`) if it wrote no checkpoint."""
    if replaced is None:
        return
    path, previous, checkpoints_then = replaced
    if set(_checkpoint_stamps(model_dir).items()) - set(checkpoints_then.items()):
        return  # trained under the new config
    if tf.io.gfile.exists(path):
        with tf.io.gfile.GFile(path) as f:
            if f.read() == previous:
                return
    files.write_text_atomic(path, previous)
    logging.info("%s: this run wrote no checkpoint, so %s is left as it was", model_dir,
                 CONFIG_FILE)


def check_writable(directory):
    """Creates `directory` and writes a probe file; TrainingError naming it otherwise."""
    try:
        tf.io.gfile.makedirs(directory)
        probe = os.path.join(directory, f"{_PROBE_PREFIX}{os.getpid()}-{uuid.uuid4().hex[:8]}")
        local = _is_local(directory)  # a local probe is a new file, never through a link
        with (files.open_new(probe) if local else tf.io.gfile.GFile(probe, "w")) as f:
            f.write("ok")
        (os.remove if local else tf.io.gfile.remove)(probe)
    except (OSError, tf.errors.OpError) as e:
        raise TrainingError(f"model_dir {directory} is not writable: {error_message(e)}") from e


def check_batch_size(batch_size, strategy):
    """The global batch must split evenly over the replicas (ConfigError naming both)."""
    replicas = strategy.num_replicas_in_sync
    if batch_size % replicas:
        raise config_lib.ConfigError(
            f"`data.batch_size`={batch_size} is the global batch and must divide evenly by "
            f"the number of replicas ({replicas}); use a multiple of {replicas}, e.g. "
            f"{max(replicas, batch_size - batch_size % replicas)}")


def start_run(config, model_dir, strategy, devices, prepare, check_inputs=None):
    """The shared start of every family's `pretrain`; returns `(strategy, worker_info,
    prepare())`. The strategy comes first (MultiWorkerMirroredStrategy must exist before
    TensorFlow runs an op), and `check_inputs()` runs before anything is written; the
    chief then writes the config and runs `prepare()`, and the other workers read its
    files."""
    strategy = make_strategy(strategy, devices)
    check_batch_size(config.data.batch_size, strategy)
    if check_inputs is not None:
        check_inputs()
    info = worker_info(strategy)
    if config.train.deterministic:
        tf.config.experimental.enable_op_determinism()
    check_writable(model_dir)

    def chief_prepare():
        made_before = set()
        if info.is_chief:
            claim(model_dir)
            check_fingerprints(model_dir, made_now=set(), record=False)
            resolve_config(config, model_dir)
            made_before = {n for n in FINGERPRINTED
                           if tf.io.gfile.exists(file_path(model_dir, n))}
        prepared = prepare()
        if info.is_chief:
            check_fingerprints(model_dir, made_now=set(FINGERPRINTED) - made_before)
        return prepared

    prepared = chief_first(strategy, chief_prepare)
    keras.utils.set_random_seed(config.train.seed)
    return strategy, info, prepared


def chief_loggers(info, model_dir, train_cfg, log_dir=None):
    """The TensorBoard logger, on the chief only (the other workers write no summaries)."""
    if not info.is_chief:
        return []
    return [ScalarLogger(log_dir or file_path(model_dir, "logs"), train_cfg.log_every)]
