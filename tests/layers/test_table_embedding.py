"""`TableEmbedding`: under a mixed policy, the gather and the table's gradient stay in
the table's float32 on every backend and call path, the rows come out in the compute
dtype.

The gradient is checked through the real training step (`train_on_batch`, SGD with
learning rate 1 on a zero table, so the table afterwards is minus the gradient) of a
subclassed model under `mixed_bfloat16`: on JAX the trainer calls the model's `call`
directly, the path in which `keras.layers.Embedding` reads its table in bfloat16 and
accumulates the gradient of a frequent row by bfloat16 scatter-adds (measured with this
script: row 0's gradient 512 instead of 3,754). Each other backend runs in its own
subprocess (`KERAS_BACKEND` is read once).
"""

import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

from tests.conftest import REPO
from tests.conftest import backend_env
from tfeff.testing.numerics import assert_close

OTHER_BACKENDS = ("jax", "torch")


def gradient_case():
    """`(ids, upstream)`: 4,096 ids of which about 90% are 0, and an upstream gradient of
    positive values exact in bfloat16 (multiples of 1/16 in [0.5, 1.5])."""
    rng = np.random.default_rng(0)
    ids = rng.choice(3, size=(8, 512), p=[0.9, 0.05, 0.05]).astype("int32")
    upstream = (np.round(rng.uniform(0.5, 1.5, (8, 512, 8)) * 16) / 16).astype("float32")
    return ids, upstream


def trained_gradient():
    """The table's gradient from one training step, the rows' dtype and the table's."""
    import keras
    from keras import ops

    from tfeff.layers.embedding_common import TableEmbedding

    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy("mixed_bfloat16")
    try:
        class Lookup(keras.Model):
            def __init__(self):
                super().__init__()
                self.table = TableEmbedding(3, 8, embeddings_initializer="zeros")

            def call(self, ids):
                return self.table(ids)

        ids, upstream = gradient_case()
        model = Lookup()
        rows = model(ids[:1])
        model.compile(optimizer=keras.optimizers.SGD(1.0),
                      loss=lambda target, out: ops.sum(ops.cast(out, "float32") * target))
        model.train_on_batch(ids, upstream)
        gradient = -ops.convert_to_numpy(model.table.embeddings)
        dtype = keras.backend.standardize_dtype
        return {"gradient": gradient.tolist(), "rows_dtype": dtype(rows.dtype),
                "table_dtype": dtype(model.table.embeddings.dtype)}
    finally:
        keras.config.set_dtype_policy(previous)


@pytest.fixture(scope="module")
def gradients():
    processes = {
        backend: subprocess.Popen(
            [sys.executable, "-m", "tests.layers.test_table_embedding"], cwd=REPO,
            env=backend_env(backend), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for backend in OTHER_BACKENDS}
    try:
        out = {"tensorflow": trained_gradient()}
    finally:
        done = {backend: p.communicate() for backend, p in processes.items()}
    for backend, (stdout, stderr) in done.items():
        assert processes[backend].returncode == 0, stderr[-3000:]
        out[backend] = json.loads(stdout.strip().splitlines()[-1])
    return out


@pytest.mark.numerics
@pytest.mark.parametrize("backend", ["tensorflow", *OTHER_BACKENDS])
def test_the_table_gradient_accumulates_in_float32(gradients, backend):
    ids, upstream = gradient_case()
    expected = np.zeros((3, 8))
    np.add.at(expected, ids.ravel(), upstream.reshape(-1, 8).astype("float64"))
    result = gradients[backend]
    assert (result["rows_dtype"], result["table_dtype"]) == ("bfloat16", "float32")
    # Row r's gradient is a float32 sum of count(r) positive terms (the upstream values
    # are exact in bfloat16, so the cast back to float32 adds nothing); the SGD update of a
    # zero table is exact. Bound: count(r) roundings of the sum's magnitude. A bfloat16
    # accumulation stalls near 512 for row 0 (spacing 4 there against terms below 1.5).
    for row in range(3):
        n = int((ids == row).sum())
        assert_close(np.asarray(result["gradient"])[row], expected[row], n=n,
                     scale=expected[row].max(), err_msg=f"{backend}, row {row}")


def test_every_model_embeds_ids_through_table_embedding():
    """No model of tfeff creates a `keras.layers.Embedding` of its own (the class above
    is the one place that does)."""
    offenders = []
    for folder, _, files in os.walk(os.path.join(REPO, "tfeff")):
        for name in files:
            path = os.path.join(folder, name)
            if not name.endswith(".py") or path.endswith("embedding_common.py"):
                continue
            with open(path, encoding="utf-8") as f:
                for number, line in enumerate(f, 1):
                    if re.search(r"\blayers\.Embedding\(", line):
                        offenders.append(f"{os.path.relpath(path, REPO)}:{number}")
    assert not offenders, offenders


if __name__ == "__main__":
    print(json.dumps(trained_gradient()))
