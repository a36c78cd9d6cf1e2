import json
import os
import re
import subprocess
import sys

import pytest

from tests.conftest import REPO

DEMO = os.path.join(REPO, "configs", "demo_elmo_c.yaml")


def _run(args, tmp_path):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    return subprocess.run([sys.executable, "-m", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=120)


# Config messages are tested in-process (tests/config); through the binary, one config
# error (test_pretrain_refuses_a_nan_learning_rate_by_name) and one corpus error.
@pytest.mark.parametrize("extra, message", [
    (["--override", "data.synthetic=null", "--override", "data.train_files=/no/such/*.txt"],
     "No file matches the corpus pattern `/no/such/\\*.txt`"),
])
def test_pretrain_exits_nonzero_with_a_clear_message(extra, message, tmp_path):
    r = _run(["tfeff.bin.pretrain", "--config", DEMO, "--model_dir", str(tmp_path / "m"), *extra],
             tmp_path)
    assert r.returncode == 1
    assert re.search(message, r.stderr), r.stderr[-2000:]
    # Said once, among tfeff's own lines: none of TensorFlow's C++ chatter (which
    # TF_CPP_MIN_LOG_LEVEL does not silence) came through the filter.
    assert len(re.findall(message, r.stderr)) == 1, r.stderr[-2000:]
    assert not re.search(r"\.cc:\d+\]|absl::InitializeLog|cuInit", r.stderr), r.stderr[-2000:]


@pytest.mark.parametrize("binary, usage, flag_names", [
    ("pretrain", "tfeff-pretrain --config configs/demo_elmo_c.yaml --model_dir runs/demo",
     ["config", "model_dir", "override", "strategy", "on_nan", "restore_fallback",
      "deterministic"]),
    ("export", "tfeff-export --model_dir runs/demo --output runs/demo/export",
     ["model_dir", "fasttext", "output", "overwrite", "max_tokens"]),
    ("embed", "tfeff-embed --embedder runs/demo/export --input sentences.txt",
     ["embedder", "input", "output", "format", "layers"]),
    ("convert_core", "tfeff-convert-core --model_dir runs/relaxed --output_dir runs/standard",
     ["model_dir", "output_dir", "keras_hub_preset", "overwrite", "rtol"]),
    ("evaluate", "tfeff-evaluate --embedder elmo=runs/demo/export",
     ["embedder", "tagging", "tag_column", "classification", "probe", "seeds", "epochs",
      "output", "overwrite"]),
])
def test_help_shows_the_binarys_own_flags_and_an_example_without_importing_tensorflow(
        binary, usage, flag_names):
    r = subprocess.run([sys.executable, "-X", "importtime", "-m", f"tfeff.bin.{binary}",
                        "--help"], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr[-2000:]
    assert usage in r.stdout
    for name in flag_names:
        assert re.search(rf"^  --(\[no\])?{name}\b", r.stdout, re.M), (name, r.stdout)
    assert "--verbosity" not in r.stdout  # absl's flags only with --helpfull
    imported = {line.rsplit("|", 1)[-1].strip() for line in r.stderr.splitlines()
                if line.startswith("import time:")}
    assert imported and not {m for m in imported if m.split(".")[0] in (
        "tensorflow", "keras", "jax", "torch", "tensorflow_text")}, sorted(imported)[:20]


def test_pretrain_reports_invalid_utf8_with_file_and_line(tmp_path):
    corpus = tmp_path / "c.txt"
    corpus.write_bytes(b"a b c\nd e\n\xc3\x28 broken\n")
    r = _run(["tfeff.bin.pretrain", "--config", DEMO, "--model_dir", str(tmp_path / "m"),
              "--override", "data.synthetic=null", "--override", f"data.train_files={corpus}"],
             tmp_path)
    assert r.returncode == 1
    assert f"{corpus}:3: the line is not valid UTF-8" in r.stderr
    assert not os.path.exists(tmp_path / "m" / "vocabulary.txt")


def test_export_of_missing_directory_exits_nonzero(tmp_path):
    r = _run(["tfeff.bin.export", "--model_dir", str(tmp_path / "none"), "--output",
              str(tmp_path / "o")], tmp_path)
    assert r.returncode == 1 and "not a tfeff model directory" in r.stderr
    assert not os.path.exists(tmp_path / "o")


def test_export_takes_exactly_one_source_and_names_a_missing_fasttext_file(tmp_path):
    r = _run(["tfeff.bin.export", "--output", str(tmp_path / "o")], tmp_path)
    assert r.returncode != 0 and "exactly one of --model_dir and --fasttext" in r.stderr
    r = _run(["tfeff.bin.export", "--fasttext", str(tmp_path / "ft.bin"), "--output",
              str(tmp_path / "o")], tmp_path)
    assert r.returncode == 1 and f"fastText model not found: {tmp_path / 'ft.bin'}" in r.stderr
    assert not os.path.exists(tmp_path / "o")


def _truncated_copy(fasttext_model, tmp_path):
    path, _ = fasttext_model
    data = open(path, "rb").read()
    cut = str(tmp_path / "trunc.bin")
    with open(cut, "wb") as f:
        f.write(data[:len(data) * 2 // 5])  # fastText itself loads this without complaint
    return cut


def test_a_truncated_fasttext_file_is_refused_by_export_and_pretrain(fasttext_model, tmp_path):
    cut = _truncated_copy(fasttext_model, tmp_path)
    r = _run(["tfeff.bin.export", "--fasttext", cut, "--output", str(tmp_path / "o")], tmp_path)
    assert r.returncode == 1, r.stderr[-2000:]
    assert re.search(rf"error: {re.escape(cut)}: the file is \d+ bytes, shorter than its input "
                     r"matrix needs", r.stderr), r.stderr[-2000:]
    assert sorted(os.listdir(tmp_path)) == ["trunc.bin"]  # no export, no temporary
    model_dir = tmp_path / "m"
    r = _run(["tfeff.bin.pretrain", "--config", DEMO, "--model_dir", str(model_dir),
              "--override", f"fasttext.pretrained={cut}", "--override", "fasttext.dim=32"],
             tmp_path)
    assert r.returncode == 1, r.stderr[-2000:]
    assert f"error: {cut}: the file is" in r.stderr, r.stderr[-2000:]
    assert not model_dir.exists()  # refused before anything was written


# Two logical CPUs, then the binary itself: MirroredStrategy takes both as replicas.
_TWO_DEVICES = """
import sys
import tensorflow as tf
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
from tfeff.bin.pretrain import run
sys.argv = ["tfeff-pretrain", *sys.argv[1:]]
run()
"""


def test_a_global_batch_that_does_not_split_over_the_replicas_is_refused(tmp_path):
    model_dir = tmp_path / "m"
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    r = subprocess.run([sys.executable, "-c", _TWO_DEVICES, "--config", DEMO, "--model_dir",
                        str(model_dir), "--strategy", "mirrored",
                        "--override", "data.batch_size=15"],
                       cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 1, r.stderr[-2000:]
    assert ("error: `data.batch_size`=15 is the global batch and must divide evenly by the "
            "number of replicas (2)") in r.stderr, r.stderr[-2000:]
    assert not model_dir.exists()  # refused before any work


def test_export_refuses_max_tokens_0(tmp_path, fasttext_model):
    path, _ = fasttext_model
    r = _run(["tfeff.bin.export", "--fasttext", path, "--output", str(tmp_path / "o"),
              "--max_tokens", "0"], tmp_path)
    assert r.returncode == 1
    assert "--max_tokens must be a positive integer" in r.stderr, r.stderr[-2000:]
    assert not os.listdir(tmp_path)


@pytest.mark.parametrize("error, line", [
    ("op", "error: FailedPreconditionError: /some/dir; Is a directory"),
    ("memory", "error: out of memory: Unable to allocate 8.0 EiB"),
    # A read-only output, a full disk: the user's, not a bug (once a traceback).
    ("permission", "error: PermissionError: [Errno 13] Permission denied: '/ro/out'"),
    ("full", "error: OSError: [Errno 28] No space left on device: '/full/out'"),
])
def test_environment_errors_are_one_line_and_exit_1(error, line, capsys):
    import errno

    import tensorflow as tf

    from tfeff.bin import common

    def fail():
        if error == "op":
            raise tf.errors.FailedPreconditionError(None, None, "/some/dir; Is a directory\n"
                                                    "\tdetails TensorFlow adds")
        if error == "permission":
            raise PermissionError(errno.EACCES, "Permission denied", "/ro/out")
        if error == "full":
            raise OSError(errno.ENOSPC, "No space left on device", "/full/out")
        raise MemoryError("Unable to allocate 8.0 EiB")

    with pytest.raises(SystemExit) as exit_:
        common.run_main(fail)
    assert exit_.value.code == 1
    assert capsys.readouterr().err.strip() == line

    def bug():
        raise KeyError("a bug")

    def os_bug():  # an OSError that is not about the user's files
        raise OSError(errno.EBADF, "Bad file descriptor")

    def shape_bug():
        raise tf.errors.InvalidArgumentError(None, None, "Incompatible shapes")

    with pytest.raises(KeyError):  # a bug keeps its traceback
        common.run_main(bug)
    with pytest.raises(OSError):
        common.run_main(os_bug)
    with pytest.raises(tf.errors.InvalidArgumentError):
        common.run_main(shape_bug)


def test_pretrain_refuses_a_nan_learning_rate_by_name(tmp_path):
    r = _run(["tfeff.bin.pretrain", "--config", DEMO, "--model_dir", str(tmp_path / "m"),
              "--on_nan", "skip", "--override", "train.learning_rate=.nan"], tmp_path)
    assert r.returncode == 1 and "Traceback" not in r.stderr
    # The override is named, not the file (which is fine).
    assert ("error: override `train.learning_rate=.nan` (applied to " + DEMO + "): "
            "`train.learning_rate` must be a finite number, got nan") in r.stderr
    assert not os.path.exists(tmp_path / "m")


# Every path flag of every binary.
_PATH_FLAGS = {"pretrain": ["config", "model_dir"],
               "export": ["model_dir", "fasttext", "output"],
               "embed": ["embedder", "input", "output"],
               "convert_core": ["model_dir", "output_dir", "keras_hub_preset", "hf_dir"],
               "evaluate": ["output"]}
_CHECK_FLAGS = """
import json, sys
from absl import flags
from tfeff.bin import common
out = {}
for binary, names in json.loads(sys.argv[1]).items():
    module = __import__(f"tfeff.bin.{binary}", fromlist=["x"])
    for name in names:
        for value in ("", "  "):
            try:
                setattr(flags.FLAGS, name, value)  # runs the flag's validators
                out[f"{binary} --{name}={value!r}"] = None
            except flags.IllegalFlagValueError as e:
                out[f"{binary} --{name}={value!r}"] = str(e)
    for flag in flags.FLAGS.get_key_flags_for_module(module):  # the next may reuse names
        delattr(flags.FLAGS, flag.name)
print(json.dumps(out))
"""


def test_every_path_flag_refuses_an_empty_value_before_anything_runs(tmp_path):
    """`--model_dir=` (an unset variable) once made the current directory the model
    directory and overwrote the user's files there. Through tfeff-pretrain, in a folder
    holding the user's config: exit 1 naming the flag, nothing touched. Every other path
    flag of every binary (their own definitions, imported in one process) refuses an empty
    and a blank value with the same message."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=REPO)
    (tmp_path / "config.yaml").write_text("# the user's own\n")
    run = subprocess.Popen([sys.executable, "-m", "tfeff.bin.pretrain", "--config", DEMO,
                            "--model_dir="], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    checked = subprocess.run([sys.executable, "-c", _CHECK_FLAGS, json.dumps(_PATH_FLAGS)],
                             cwd=REPO, env=env, capture_output=True, text=True, timeout=180)
    _, stderr = run.communicate(timeout=180)
    assert run.returncode == 1, stderr[-2000:]
    assert "--model_dir is empty: give a path" in stderr and "Traceback" not in stderr
    assert sorted(os.listdir(tmp_path)) == ["config.yaml"]
    assert (tmp_path / "config.yaml").read_text() == "# the user's own\n"
    assert checked.returncode == 0, checked.stderr[-3000:]
    results = json.loads(checked.stdout.strip().splitlines()[-1])
    assert len(results) == 2 * sum(map(len, _PATH_FLAGS.values()))
    for case, message in results.items():
        flag = case.split()[1].split("=")[0]
        assert message is not None and f"{flag} is empty: give a path" in message, (case,
                                                                                     message)


@pytest.mark.parametrize("rtol", ["nan", "-1e-3"])
def test_convert_core_refuses_an_rtol_that_is_not_a_positive_number(rtol, tmp_path):
    r = _run(["tfeff.bin.convert_core", "--model_dir", str(tmp_path), "--output_dir",
              str(tmp_path / "o"), f"--rtol={rtol}"], tmp_path)
    assert r.returncode == 1 and "--rtol must be a finite number above 0" in r.stderr
    assert "Traceback" not in r.stderr and not (tmp_path / "o").exists()
