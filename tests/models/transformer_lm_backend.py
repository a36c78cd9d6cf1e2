"""TransformerLM cases compared across Keras backends (tests/models/test_transformer_lm.py).

Imported by the test under TensorFlow, and run as a script on another backend
(`KERAS_BACKEND=jax` or `torch`: `python -m tests.models.transformer_lm_backend OUT.npz`): the
same ids, fixed vectors and weights, so the outputs, the embedding stack and the
loss must agree. The script also trains one model a few `fit` steps on that backend
(`fit/loss`, the loss per epoch). It imports no TensorFlow of its own.
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
    from tfeff.models.transformer_lm import TransformerLM

    lm = TransformerLM(12, embedding_table=table(), **TINY, **CASES[name])
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


def run_cases():
    """`{case/key: array}` of every case on the current backend."""
    import keras

    out = {}
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
