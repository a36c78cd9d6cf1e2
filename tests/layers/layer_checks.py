"""The standard layer checks every layer test runs (after keras' run_layer_test)."""

import json

import keras
import numpy as np


def run_layer_checks(layer, inputs, tmp_path, call_kwargs=None, expected_weights=None):
    """Config round trip, .keras save/load with equal outputs, weight count.

    Returns the layer's output on `inputs`.
    """
    call_kwargs = call_kwargs or {}
    outputs = keras.ops.convert_to_numpy(layer(inputs, **call_kwargs))
    config = layer.get_config()
    json.dumps(config)  # JSON-safe
    clone = layer.__class__.from_config(config)
    assert clone.get_config() == config
    if expected_weights is not None:
        assert len(layer.weights) == expected_weights
    model_in = keras.Input(shape=np.shape(inputs)[1:], dtype=np.asarray(inputs).dtype
                           if not isinstance(inputs, list) else "string")
    model = keras.Model(model_in, layer(model_in, **call_kwargs))
    path = str(tmp_path / f"{layer.name}.keras")
    model.save(path)
    reloaded = keras.saving.load_model(path)
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(reloaded(inputs)), outputs, rtol=1e-6, atol=1e-6
    )
    return outputs


def run_output_layer_checks(layer, hidden, targets, tmp_path, fit_steps=30, call_kwargs=None):
    """The standard checks for output layers called as `layer(hidden, targets) -> (lp, loss)`.

    Config round trip, `.keras` save/load with equal outputs, mixed precision
    (float32 log-probabilities close to the float32 layer's) and a `fit`
    run on a fixed batch whose loss must fall. Returns `(log_probs, loss)`.
    """
    call_kwargs = call_kwargs or {}
    hidden = np.asarray(hidden, np.float32)
    targets = np.asarray(targets, np.int32)
    log_probs, loss = layer(hidden, targets, **call_kwargs)
    log_probs = keras.ops.convert_to_numpy(log_probs)
    config = layer.get_config()
    json.dumps(config)
    clone = layer.__class__.from_config(config)
    assert clone.get_config() == config

    h_in = keras.Input(shape=hidden.shape[1:], dtype="float32")
    t_in = keras.Input(shape=targets.shape[1:], dtype="int32")
    model = keras.Model([h_in, t_in], layer(h_in, t_in, **call_kwargs)[0])
    path = str(tmp_path / f"{layer.name}.keras")
    model.save(path)
    reloaded = keras.saving.load_model(path)
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(reloaded([hidden, targets])), log_probs, rtol=1e-6, atol=1e-6
    )

    mixed = layer.__class__.from_config({**config, "dtype": "mixed_float16"})
    mixed(hidden, targets, **call_kwargs)
    mixed.set_weights(layer.get_weights())
    mixed_lp, mixed_loss = mixed(hidden, targets, **call_kwargs)
    assert mixed_lp.dtype == "float32" and mixed_loss.dtype == "float32"
    np.testing.assert_allclose(keras.ops.convert_to_numpy(mixed_lp), log_probs, atol=5e-2)

    fresh = layer.__class__.from_config(config)

    class Head(keras.Model):
        def __init__(self):
            super().__init__()
            self.dense = keras.layers.Dense(hidden.shape[-1], activation="tanh")
            self.out = fresh

        def call(self, inputs, training=False):
            return self.dense(inputs[0])

        def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
            return self.out(y_pred, x[1], training=training)[1]

    head = Head()
    head.compile(optimizer=keras.optimizers.Adam(0.02))
    history = head.fit(
        [hidden, targets], epochs=fit_steps, batch_size=len(hidden), verbose=0, shuffle=False
    )
    losses = history.history["loss"]
    assert losses[-1] < 0.8 * losses[0], losses
    return log_probs, keras.ops.convert_to_numpy(loss)
