"""Test set-up: quiet TensorFlow, two logical CPU devices, shared small artifacts."""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import pytest  # noqa: E402
import tensorflow as tf  # noqa: E402

_cpus = tf.config.list_physical_devices("CPU")
tf.config.set_logical_device_configuration(
    _cpus[0], [tf.config.LogicalDeviceConfiguration()] * 2
)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# What a subprocess on another Keras backend needs beside KERAS_BACKEND: JAX on the CPU
# (no accelerator probing), PyTorch with one thread per op (its default pool spins on
# cores busy with the suite's own processes: seconds per small op), or with the count
# `make test-isa` sets in TFEFF_TEST_THREADS.
_BACKEND_ENV = {"tensorflow": {}, "jax": {"JAX_PLATFORMS": "cpu"},
                "torch": {"OMP_NUM_THREADS": os.environ.get("TFEFF_TEST_THREADS", "1")}}


def backend_env(backend, **extra):
    """The environment of a subprocess that runs Keras on `backend`."""
    return {**os.environ, "KERAS_BACKEND": backend, **_BACKEND_ENV[backend], **extra}


@pytest.fixture(scope="session")
def small_corpus(tmp_path_factory):
    """A small synthetic corpus (train, held-out) shared by data/fastText tests."""
    from tfeff.data import write_synthetic_corpus

    d = tmp_path_factory.mktemp("corpus")
    return write_synthetic_corpus(str(d), 3000, 200, seed=1, lexicon_size=300)


@pytest.fixture(scope="session")
def fasttext_model(small_corpus, tmp_path_factory):
    """A real fastText model trained on the small corpus, plus odd words appended."""
    from tfeff.data import train_fasttext

    d = tmp_path_factory.mktemp("ft")
    extra = d / "extra.txt"
    extra.write_text(
        open(small_corpus[0], encoding="utf-8").read()
        + "café naïve Zürich 日本語 東京 🙂 emoji🙂s a é x\n" * 20,
        encoding="utf-8",
    )
    path = str(d / "ft.bin")
    train_fasttext(str(extra), path, dim=32, minn=2, maxn=5, bucket=20000, epoch=3)
    import fasttext

    return path, fasttext.load_model(path)


@pytest.fixture(scope="session")
def fasttext_export(fasttext_model, tmp_path_factory):
    """`fasttext_model` exported as an embedder (`export_fasttext`: the cheapest real
    export), once per process for the tests that read an export. Read only: a test that
    changes an export, or needs one at a path of its own, copies it first."""
    from tfeff.export import export_fasttext

    path = str(tmp_path_factory.mktemp("fasttext_export") / "ft")
    export_fasttext(fasttext_model[0], path)
    return path


_END_TO_END = "tests/bin/test_demo_configs.py"
_DEMO_RUNS_SELECTED = pytest.StashKey[bool]()


def pytest_collection_modifyitems(config, items):
    """The end-to-end tests of every demo config go last: their runs start with the
    session (`_start_demo_runs`) and overlap the in-process tests."""
    last = [item for item in items if item.nodeid.startswith(_END_TO_END)]
    items[:] = [item for item in items if not item.nodeid.startswith(_END_TO_END)] + last
    config.stash[_DEMO_RUNS_SELECTED] = bool(last)


@pytest.fixture(scope="session")
def demo_runs(tmp_path_factory):
    """Every demo config through `tfeff-pretrain` and `tfeff-export`, started on demand
    (tests/demo_runs.py); shared by the end-to-end tests and `trained_dir`, and by the
    session's pytest-xdist workers (each run once, in the session's own folder)."""
    from tests.demo_runs import DemoRuns

    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):  # the workers' folders are in the session's
        root = root.parent
    root = root / "demo_runs"
    root.mkdir(exist_ok=True)
    runs = DemoRuns(str(root))
    yield runs
    runs.close()


@pytest.fixture(scope="session", autouse=True)
def _start_demo_runs(request):
    """Starts every demo run at the beginning of a session that holds the end-to-end
    tests, so that the subprocesses work while the other tests do."""
    if request.config.stash.get(_DEMO_RUNS_SELECTED, False):
        from tests.demo_runs import CONFIGS

        request.getfixturevalue("demo_runs").start(CONFIGS)


def _train_losses(log_dir):
    """The `train/loss` scalars that the run wrote for TensorBoard, in step order."""
    points = []
    for path in sorted(tf.io.gfile.glob(os.path.join(log_dir, "events.out.tfevents.*"))):
        for event in tf.compat.v1.train.summary_iterator(path):
            for value in event.summary.value:
                if value.tag == "train/loss":
                    points.append((event.step, float(tf.make_ndarray(value.tensor))))
    return [loss for _, loss in sorted(points)]


@pytest.fixture(scope="session")
def trained_dir(demo_runs):
    """The bundled ELMo-C demo config, unchanged, trained once per session through
    `tfeff-pretrain` (about 3 minutes on 2 cores, beside the other demo runs). Shared
    by training and export tests; none of them writes to it. Returns `(model_dir,
    results)`, `results["history"]["loss"]` read from the run's TensorBoard scalars."""
    run = demo_runs.get("demo_elmo_c")
    rc, _, stderr = run["pretrain"]
    assert rc == 0, stderr[-3000:]
    model_dir = run["model_dir"]
    return model_dir, {"history": {"loss": _train_losses(os.path.join(model_dir, "logs"))}}
