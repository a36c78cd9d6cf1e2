"""tfeff.bin.quiet: the libraries' chatter is dropped from a binary's stderr, nothing else."""

import os
import re
import subprocess
import sys
import textwrap

import pytest

from tests.conftest import REPO
from tfeff.bin import quiet

# Lines TensorFlow 2.21 and XLA wrote on this machine (no GPU) during one tfeff-pretrain.
CHATTER = [
    "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR",
    "I0000 00:00:1795662139.893078   20627 port.cc:153] oneDNN custom operations are on. You "
    "may see slightly different numerical results due to floating-point round-off errors.",
    "I0000 00:00:1795662139.893451   20627 cudart_stub.cc:31] Could not find cuda drivers on "
    "your machine, GPU will not be used.",
    "To enable the following instructions: AVX2 AVX512F AVX512_VNNI AVX512_BF16 FMA, in other "
    "operations, rebuild TensorFlow with the appropriate compiler flags.",
    "E0000 00:00:1795662140.842350   20627 cuda_platform.cc:52] failed call to cuInit: "
    "INTERNAL: CUDA error: Failed call to cuInit: UNKNOWN ERROR (303)",
    "E0000 00:00:1795662149.211441   20675 util.cc:131] oneDNN supports DT_INT64 only on "
    "platforms with AVX-512. Falling back to the default Eigen-based implementation if present.",
    "W0000 00:00:1795662150.000001   20675 generator_dataset_op.cc:108] Error occurred when "
    "finalizing GeneratorDataset iterator: FAILED_PRECONDITION: Python interpreter state is "
    "not initialized. The process may be terminated.",
]
# What must come through: tfeff's log lines (absl's Python format), an error line of
# the binary, a C++ warning and error the filter does not know, a traceback.
KEPT = [
    "I1126 03:02:22.716261 140525866765184 model_directory.py:95] Generating the synthetic "
    "corpus in /tmp/m/corpus",
    "W1126 03:02:31.911454 140525866765184 callbacks.py:120] step 40: loss is not finite",
    "error: No file matches the corpus pattern `/no/such/*.txt`",
    "E0000 00:00:1795662140.842350   20627 bfc_allocator.cc:485] Allocator (GPU_0_bfc) ran out "
    "of memory trying to allocate 4.00GiB",
    "W0000 00:00:1795662140.842351   20627 gpu_device.cc:2344] Cannot dlopen some GPU "
    "libraries. Skipping registering GPU devices...",
    "Traceback (most recent call last):",
    '  File "x.py", line 1, in <module>',
]


def test_the_known_chatter_is_matched_and_nothing_else():
    for line in CHATTER:
        assert quiet.NOISE.match(line), line
    for line in KEPT:
        assert not quiet.NOISE.match(line), line


@pytest.mark.parametrize("argv, expected", [
    ([], False), (["--config", "a.yaml"], False), (["--verbosity", "1"], True),
    (["--verbosity=0"], False), (["-v", "2"], True), (["-v=1"], True),
    (["--verbosity=-1"], False), (["--verbosity", "x"], True), (["--v=1"], True),
    (["-verbosity=2"], True), (["--flagfile=flags.txt"], True), (["config.yaml", "-v"], False),
])
def test_verbosity_one_or_more_turns_the_filter_off(argv, expected):
    assert quiet.verbose(argv) is expected


@pytest.mark.parametrize("verbosity", [None, "1"])
def test_a_process_stderr_loses_the_chatter_only_and_keeps_its_order(verbosity):
    """Written to file descriptor 2 as C++ writes it, interleaved, the last line without
    its newline and the process ending at once: every kept line arrives, in order; and
    TF_CPP_MIN_LOG_LEVEL is set to 1 only where the filter is on."""
    lines = [line for pair in zip(CHATTER, KEPT) for line in pair] + KEPT[len(CHATTER):]
    script = textwrap.dedent(f"""
        import os, sys
        from tfeff.bin import quiet
        argv = {["--verbosity", verbosity] if verbosity else []!r}
        print(quiet.install(argv), os.environ.get("TF_CPP_MIN_LOG_LEVEL"), flush=True)
        lines = {lines!r}
        for line in lines[:-1]:
            os.write(2, (line + "\\n").encode())
        os.write(2, lines[-1].encode())
    """)
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    r = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True,
                       text=True, timeout=60, env=dict(env, PYTHONPATH=REPO))
    assert r.returncode == 0, r.stderr
    # Filtered, TensorFlow is told to write no C++ INFO line; verbose, nothing is changed.
    assert r.stdout == ("False None\n" if verbosity else "True 1\n")
    assert r.stderr.split("\n") == (lines if verbosity else KEPT)


# What TensorFlow writes while its libraries load and at its first op, whatever
# TF_CPP_MIN_LOG_LEVEL says (the oneDNN notice, no CUDA driver, cuInit, CPU features):
# none of it may reach a binary's stderr (tests/bin/test_evaluate.py checks a run).
TENSORFLOW_LINES = re.compile(r"absl::InitializeLog|\.cc:\d+\]|cuInit|rebuild TensorFlow")
# A user's script: TensorFlow loads the export and runs it, then a line of the script's
# own and an exit status of its own, which must come through the filter.
_SCRIPT = """
import sys
import tensorflow as tf
out = tf.saved_model.load(sys.argv[1]).signatures["embed"](sentences=tf.constant(["a b"]))
print(tuple(out["layers"].shape))
sys.stderr.write("the script's own line\\n")
sys.exit(3)
"""


def test_a_script_run_through_the_filter_shows_none_of_tensorflows_lines(fasttext_export):
    """Without TF_CPP_MIN_LOG_LEVEL, a script run by `python -m tfeff.bin.quiet` imports
    TensorFlow and runs an export: its stderr holds none of TensorFlow's lines, and its
    own line, its stdout and its exit status come through. (A binary's stderr, the same
    filter: tests/bin/test_evaluate.py.)"""
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    r = subprocess.run([sys.executable, "-m", "tfeff.bin.quiet", sys.executable, "-c", _SCRIPT,
                        fasttext_export], cwd=REPO, env=dict(env, PYTHONPATH=REPO),
                       capture_output=True, text=True, timeout=300)
    assert (r.returncode, r.stdout) == (3, "(1, 1, 2, 32)\n"), r.stderr[-3000:]
    assert r.stderr == "the script's own line\n"


def test_the_filter_reports_a_command_it_cannot_run():
    r = subprocess.run([sys.executable, "-m", "tfeff.bin.quiet", "/no/such/program", "x"],
                       cwd=REPO, env=dict(os.environ, PYTHONPATH=REPO), capture_output=True,
                       text=True, timeout=60)
    assert (r.returncode, r.stdout) == (127, "")
    assert r.stderr == "error: cannot run /no/such/program: No such file or directory\n"
