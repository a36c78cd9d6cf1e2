"""`run_layer_test`: the standard checks every public layer's tests run.

In the spirit of Keras' own `run_layer_test` (keras/src/testing/test_case.py),
for tfeff's layers and their contracts:

1. build and call eagerly; a symbolic call (`keras.Input`) gives the same
   output structure and shapes;
2. `get_config` is JSON-safe and `from_config` reproduces it;
3. a `.keras` file of a functional model round-trips through
   `keras.saving.load_model` with the default `safe_mode=True`, with equal
   outputs;
4. a stock `compile(optimizer=..., loss=...)` + `fit` on a fixed batch makes
   the loss fall by at least 10% (`FIT_DECREASE`; output layers called with
   targets add their own loss: `compile` gets no loss and the targets are a
   model input);
5. under `mixed_float16` the variables stay float32 and the outputs stay
   within `mixed_n` float16 roundings of the float32 layer's on the same weights;
6. eager, `tf.function` and `tf.function(jit_compile=True)` give outputs within
   `xla_n` float32 roundings of each other in inference and training mode, every
   random state reset before each run; a layer with `supports_jit=False` must
   fail to compile in at least one mode (so the flag is not a stale claim) and
   makes Keras' `jit_compile="auto"` resolve to False.

Checks 5 and 6 compare implementations (grappler's and XLA's fusions, other kernels,
float16): the caller derives `mixed_n` and `xla_n` from the layer's computation, and
`scale` where the terms are larger than the outputs (tfeff/testing/numerics.py).
"""

import functools
import json

import keras
import numpy as np
import tensorflow as tf
# Private, but it is the function `compile(jit_compile="auto")` asks; on a CPU "auto"
# resolves to False for every model, so the public path cannot show the flag's effect.
from keras.src.trainers.trainer import model_supports_jit

from tfeff.testing.numerics import assert_close


def _as_tuple(inputs):
    return tuple(inputs) if isinstance(inputs, (tuple, list)) else (inputs,)


def _numpy(structure):
    return [keras.ops.convert_to_numpy(x) for x in keras.tree.flatten(structure)]


def _symbolic(array):
    array = np.asarray(array)
    dtype = "string" if array.dtype.kind in "OUS" else array.dtype.name
    return keras.Input(shape=array.shape[1:], batch_size=None, dtype=dtype)


def _compare(actual, expected, check, what):
    """`check(a, e, err_msg=what)` on each pair of flattened outputs."""
    assert len(actual) == len(expected), what
    for a, e in zip(actual, expected):
        assert a.shape == e.shape, (what, a.shape, e.shape)
        check(a.astype(np.float64), e.astype(np.float64), err_msg=what)


def _rounding_check(n, dtype, scale, layer):
    """`assert_close` with `n` roundings in `dtype`; `scale` a number, None (each output's
    largest value) or a function of the float32 layer, and so may `n` be."""
    if n is None:
        raise ValueError(f"{layer.name}: pass the {dtype} roundings of the layer's computation "
                         "(`xla_n` / `mixed_n`, tfeff/testing/numerics.py)")
    n, scale = (v(layer) if callable(v) else v for v in (n, scale))
    return functools.partial(assert_close, n=n, dtype=dtype, scale=scale)


def run_layer_test(layer_cls, init_kwargs, inputs, tmp_path, *, targets=None, call_kwargs=None,
                   expected_num_weights=None, expected_num_trainable_weights=None,
                   fit=True, fit_loss="mse", fit_epochs=15, learning_rate=0.02,
                   mixed_precision=True, mixed_n=None, xla=True, xla_training=True,
                   xla_n=None, scale=None):
    """Runs the standard checks on `layer_cls(**init_kwargs)`; returns its outputs.

    Args:
        layer_cls: the layer class.
        init_kwargs: constructor arguments (must be what `get_config` holds).
        inputs: one array or a tuple of arrays, passed positionally; the batch
            dimension comes first.
        tmp_path: a directory for the `.keras` file.
        targets: for the softmax output layers, int targets passed as the
            second positional argument: the layer then adds its loss, and
            `fit` compiles no loss.
        call_kwargs: extra keyword arguments of every call (not arrays).
        expected_num_weights / expected_num_trainable_weights: counts.
        fit: run the `fit` check (needs trainable weights).
        fit_loss: the compiled loss of the `fit` check (ignored with `targets`).
        mixed_precision: run the `mixed_float16` check.
        mixed_n: its bound: the float16 roundings along the layer's longest path
            (`tfeff/testing/numerics.py`; float32 accumulation of sums adds none).
        xla: run the eager / `tf.function` / XLA check.
        xla_training: include training mode in it (False where the layer's
            training-mode randomness comes from Keras' own `Dropout`, whose
            draws differ under XLA on the TensorFlow backend).
        xla_n: its bound: the float32 roundings along the layer's longest path
            (a sum of K terms counts K). `xla_n` and `mixed_n` may be functions of
            the layer (where they depend on its weights).
        scale: the magnitude of the values those roundings are of, where it exceeds
            the outputs' (dot products of random signs, cancelling log-softmaxes):
            a number or a function of the layer; None: each output's largest value.

    Returns:
        The eager outputs on `inputs`, as a list of NumPy arrays.
    """
    call_kwargs = dict(call_kwargs or {})
    args = _as_tuple(inputs) + (() if targets is None else (np.asarray(targets),))
    args = tuple(tf.constant(a) for a in args)

    # 1. Build, call, symbolic call.
    layer = layer_cls(**init_kwargs)
    outputs = layer(*args, **call_kwargs)
    assert layer.built
    eager = _numpy(outputs)
    symbolic_inputs = [_symbolic(a) for a in args]
    symbolic = layer(*symbolic_inputs, **call_kwargs)
    symbolic_flat = keras.tree.flatten(symbolic)
    assert len(symbolic_flat) == len(eager)
    for s, e in zip(symbolic_flat, eager):
        assert len(s.shape) == e.ndim, (s.shape, e.shape)
        assert all(d is None or d == n for d, n in zip(s.shape, e.shape)), (s.shape, e.shape)
    if expected_num_weights is not None:
        assert len(layer.weights) == expected_num_weights
    if expected_num_trainable_weights is not None:
        assert len(layer.trainable_weights) == expected_num_trainable_weights

    # 2. Config round trip.
    config = layer.get_config()
    json.dumps(config)
    clone = layer_cls.from_config(config)
    assert clone.get_config() == config

    # 3. `.keras` round trip with the default safe_mode.
    model = keras.Model(symbolic_inputs, symbolic)
    path = str(tmp_path / f"{layer.name}.keras")
    model.save(path)
    reloaded = keras.saving.load_model(path)
    # The same kernels on the same machine: equal up to a stray rounding.
    _compare(_numpy(reloaded(list(args) if len(args) > 1 else args[0])), eager,
             functools.partial(np.testing.assert_allclose, atol=1e-6, rtol=1e-6),
             ".keras round trip")

    # 4. Stock compile + fit.
    if fit:
        _check_fit(layer_cls, config, args, targets is not None, call_kwargs, fit_loss,
                   fit_epochs, learning_rate, eager)

    # 5. Mixed precision.
    if mixed_precision:
        mixed = layer_cls.from_config({**config, "dtype": "mixed_float16"})
        mixed(*args, **call_kwargs)
        mixed.set_weights(layer.get_weights())
        assert all(w.dtype == "float32" for w in mixed.weights)
        _compare(_numpy(mixed(*args, **call_kwargs)), eager,
                 _rounding_check(mixed_n, "float16", scale, layer), "mixed_float16")

    # 6. Eager, tf.function and XLA agree.
    if xla:
        check_xla(layer, args, call_kwargs, _rounding_check(xla_n, "float32", scale, layer),
                  training_modes=(False, True) if xla_training else (False,))
    return eager


# The `fit` check's required fall: the last epoch's loss below this share of the first's.
FIT_DECREASE = 0.9


def _check_fit(layer_cls, config, args, endpoint, call_kwargs, fit_loss, epochs,
               learning_rate, eager):
    fresh = layer_cls.from_config(config)
    symbolic_inputs = [_symbolic(a) for a in args]
    first = symbolic_inputs[0]
    if endpoint:
        # The user's own encoder under the output layer; targets are an input.
        hidden = keras.layers.Dense(first.shape[-1], activation="tanh")(first)
        out = fresh(hidden, *symbolic_inputs[1:], **call_kwargs)
    else:
        out = fresh(*symbolic_inputs, **call_kwargs)
    model = keras.Model(symbolic_inputs, out)
    assert model.trainable_weights, "nothing to fit: pass fit=False"
    model.compile(optimizer=keras.optimizers.Adam(learning_rate),
                  loss=None if endpoint else fit_loss)
    x = [np.asarray(a) for a in args]
    x = x if len(x) > 1 else x[0]
    if endpoint:
        y = None
    else:
        rng = np.random.default_rng(0)
        y = [rng.normal(size=e.shape).astype("float32") for e in eager]
        y = y if len(y) > 1 else y[0]
    history = model.fit(x, y, epochs=epochs, batch_size=len(np.asarray(args[0])),
                        verbose=0, shuffle=False)
    losses = history.history["loss"]
    # A fixed batch the layer can fit: the loss falls by more than noise would.
    assert np.all(np.isfinite(losses)) and losses[-1] < FIT_DECREASE * losses[0], losses


def _random_state(layer):
    return [v.numpy() for v in layer.variables]


def _restore(layer, state):
    for v, value in zip(layer.variables, state):
        v.assign(value)


def check_xla(layer, args, call_kwargs, check, training_modes=(False, True)):
    """Eager, `tf.function` and `jit_compile=True` outputs agree, `check(actual, expected,
    err_msg=...)` (see module docstring)."""
    state = _random_state(layer)

    def run(training, mode):
        _restore(layer, state)

        def call(*a):
            return keras.tree.flatten(layer(*a, training=training, **call_kwargs))

        if mode == "eager":
            out = call(*args)
        else:
            out = tf.function(call, jit_compile=(mode == "xla"))(*args)
        return _numpy(out)

    supports_jit = getattr(layer, "supports_jit", True)
    jit_failures = 0
    for training in training_modes:
        eager = run(training, "eager")
        _compare(run(training, "function"), eager, check, f"tf.function, training={training}")
        if supports_jit:
            _compare(run(training, "xla"), eager, check, f"jit_compile=True, training={training}")
        else:
            try:
                run(training, "xla")
            except tf.errors.OpError:  # XLA's compile errors (unsupported op, dynamic shape)
                jit_failures += 1
    _restore(layer, state)
    if not supports_jit:
        assert jit_failures, f"{layer.name}: supports_jit=False but XLA compiled every mode"
        assert not model_supports_jit(_Holder(layer))


class _Holder(keras.Model):
    """A model that only holds `layer` (for Keras' `model_supports_jit`)."""

    def __init__(self, layer):
        super().__init__()
        self.held = layer

    def call(self, inputs):
        return inputs
