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
