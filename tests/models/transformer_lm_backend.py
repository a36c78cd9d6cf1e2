"""TransformerLM cases compared across Keras backends (tests/models/test_transformer_lm.py).

Imported by the test under TensorFlow, and run as a script on another backend
(`KERAS_BACKEND=jax` or `torch`: `python -m tests.models.transformer_lm_backend OUT.npz`): the
same ids, fixed vectors and weights, so the outputs, the embedding stack and the
loss must agree: computed in float64 (`keras_x64`), to float64 rounding but for the
parts that compute in float32 whatever the model's dtype (`float32_roundings`). The script
also trains one model a few `fit` steps on that backend, in float32 (`fit/loss`, the
loss per epoch). It imports no TensorFlow of its own.
"""

import sys

import numpy as np

TINY = dict(num_layers=2, hidden_dim=8, num_heads=2, intermediate_dim=12, max_sequence_length=10,
            dropout_rate=0.0, seed=0)
IDS = np.array([[2, 5, 9, 1, 7, 3, 0, 0],
                [2, 6, 4, 8, 11, 5, 10, 3],
                [2, 7, 3, 0, 0, 0, 0, 0]], "int32")
CASES = {
    "continuous_strided_anchors": dict(output_layer="continuous", input_embedding="fixed",
                                       num_anchors=3, anchor_selection="strided"),
    "tied_forward_random_anchors": dict(output_layer="full", input_embedding="trainable",
                                        tie_output=True, position_embedding="rotary",
                                        bidirectional=False, num_anchors=3),
    "sampled_learned": dict(output_layer="sampled", num_sampled=5, input_embedding="trainable"),
}


def table():
    values = np.random.default_rng(1).normal(size=(12, 6)).astype("float32")
    values[:2] = 0
    return values


def model(name):
    from tests.models.lm_tasks import language_model
    from tfeff.models.transformer_lm import TransformerLM

    lm = language_model(TransformerLM, 12, embedding_table=table(), **TINY, **CASES[name])
    lm.build()
    rng = np.random.default_rng(5)
    lm.set_weights([(0.3 * rng.normal(size=w.shape)).astype("float32") for w in lm.weights])
    return lm


def _run(fn):
    """`fn()` eagerly, or in one jax.jit on JAX (eager JAX compiles op by op)."""
    import keras

    if keras.backend.backend() == "jax":
        import jax

        return jax.jit(fn)()
    return fn()


def float32_roundings(name):
    """`{"features": n, "loss": n}`: the float32 roundings along the longest path of case
    `name`'s float64 outputs (the stack's are the features'), the float64 rest adding
    under one (tfeff/testing/numerics.py's count)."""
    from tests.models.float64 import tf_gelu_roundings

    case, n = CASES[name], IDS.shape[1]
    k, m = TINY["hidden_dim"] // TINY["num_heads"], case.get("num_anchors", 0)
    # Rotation in float32 (tfeff.models.relaxed_merge.rounding_counts' 5 n + 8). Anchor
    # attention scores in float32: the queries' cast and normalization over the head size
    # k (k + 6), their scores against the m anchors and softmax, the anchors' against the
    # n keys and softmax. TensorFlow's GELU has a float32 constant (tf_gelu_roundings).
    rotary = 5 * n + 8 if case.get("position_embedding") == "rotary" else 0
    anchors = 3 * k + m + n + 23 if m else 0
    features = TINY["num_layers"] * (
        rotary + anchors + tf_gelu_roundings(TINY["intermediate_dim"])) + 1
    # The loss in float32: the logits' cast and bias, a log-softmax over 12 ids (22) or
    # the continuous loss of 6-dim vectors (about 30), the sum over 13 targets per
    # direction, the division, the sum of the directions.
    return {"features": features, "loss": features + 2 + 30 + 13 + 2}


def run_cases():
    """`{case/key: array}` of every case on the current backend, in float64."""
    import keras

    from tests.models.float64 import float64_models
    from tfeff.testing.numerics import keras_x64

    out = {}
    with keras_x64(), float64_models():
        for name in CASES:
            lm = model(name)

            def forward(lm=lm):
                outputs = lm(IDS)
                return (outputs, lm.embedding_layers(IDS, IDS > 0),
                        lm.compute_loss(x=IDS, y_pred=outputs, training=False))

            outputs, stack, loss = _run(forward)
            for direction, value in outputs.items():
                out[f"{name}/{direction}"] = keras.ops.convert_to_numpy(value)
            out[f"{name}/stack"] = keras.ops.convert_to_numpy(stack)
            out[f"{name}/loss"] = keras.ops.convert_to_numpy(loss)
    return out


def fit_losses():
    """The loss per epoch of a few `fit` steps (anchors drawn afresh while training)."""
    import keras

    keras.utils.set_random_seed(0)
    lm = model("tied_forward_random_anchors")
    lm.compile(optimizer=keras.optimizers.Adam(0.02))
    rng = np.random.default_rng(0)
    ids = np.zeros((64, 8), "int32")
    for row in ids:  # <s> counting words </s>: learnable
        length, start = rng.integers(3, 7), rng.integers(0, 8)
        row[:length + 2] = [2, *(4 + (start + np.arange(length)) % 8), 3]
    history = lm.fit(ids, batch_size=16, epochs=4, shuffle=False, verbose=0)
    return np.array(history.history["loss"])


if __name__ == "__main__":
    import keras

    results = {"backend": np.array(keras.backend.backend()), "fit/loss": fit_losses()}
    results.update(run_cases())
    np.savez(sys.argv[1], **results)
