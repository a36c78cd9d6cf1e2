"""tfeff.bin.quiet: the libraries' chatter is dropped from a binary's stderr, nothing else."""

import os
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
    its newline and the process ending at once: every kept line arrives, in order."""
    lines = [line for pair in zip(CHATTER, KEPT) for line in pair] + KEPT[len(CHATTER):]
    script = textwrap.dedent(f"""
        import os, sys
        from tfeff.bin import quiet
        argv = {["--verbosity", verbosity] if verbosity else []!r}
        print(quiet.install(argv), flush=True)
        lines = {lines!r}
        for line in lines[:-1]:
            os.write(2, (line + "\\n").encode())
        os.write(2, lines[-1].encode())
    """)
    r = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True,
                       text=True, timeout=60, env=dict(os.environ, PYTHONPATH=REPO))
    assert r.returncode == 0, r.stderr
    assert r.stdout == ("False\n" if verbosity else "True\n")
    assert r.stderr.split("\n") == (lines if verbosity else KEPT)
