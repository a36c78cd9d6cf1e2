"""The layers' input contracts: rank, mask shapes and time length 0 (tfeff.backend.checks).

Every public layer that takes sequences checks its inputs' rank and its masks'
shapes before the first backend op: a wrong rank or a mask of another shape
raises a `ValueError` that names the layer, the argument and both shapes when
the call is traced (eagerly, in `tf.function`, under XLA, with `keras.Input`),
and a size only known when a TensorFlow graph runs fails there with the same
message. A sequence of time length 0 gives an empty output of the right shape
(and the recurrent layers' initial states as final states), on every backend.
"""

import re
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

import tfeff.layers
from tfeff.layers import AnchorMultiHeadAttention
from tfeff.layers import CausalAnchorAttention
from tfeff.layers import MaskedBiLSTM
from tfeff.layers import ProjectedLSTM
from tfeff.layers import RotaryMultiHeadAttention
from tfeff.layers import ScalarMix
from tests.conftest import REPO
from tests.conftest import backend_env


def _zeros(*shape):
    return np.zeros(shape, "float32")


def _random(*shape, seed=0):
    return np.random.default_rng(seed).normal(size=shape).astype("float32")


# Every public layer that takes sequences: a factory, and how to call it on `x`
# `(batch, time, 8)` (ScalarMix: the stack `(batch, 3, time, 8)`).
SEQUENCE_LAYERS = {
    "MaskedBiLSTM": (lambda: MaskedBiLSTM(8, 4, num_layers=1, use_cudnn=False, name="m"),
                     lambda layer, x, **kw: layer(x, **kw)),
    "ProjectedLSTM": (lambda: ProjectedLSTM(8, 4, name="m"),
                      lambda layer, x, **kw: layer(x, **kw)),
    "AnchorMultiHeadAttention": (
        lambda: AnchorMultiHeadAttention(2, 4, num_anchors=3, name="m"),
        lambda layer, x, **kw: layer(x, x, **kw)),
    "CausalAnchorAttention": (
        lambda: CausalAnchorAttention(2, 4, max_sequence_length=8, num_anchors=2, name="m"),
        lambda layer, x, **kw: layer(x, **kw)),
    "RotaryMultiHeadAttention": (lambda: RotaryMultiHeadAttention(2, 4, name="m"),
                                 lambda layer, x, **kw: layer(x, x, **kw)),
    "ScalarMix": (lambda: ScalarMix(3, layer_norm=True, name="m"),
                  lambda layer, x, **kw: layer(np.stack([x] * 3, axis=1), **kw)),
}
# The other public layers take any rank, as the Keras layers they stand for:
# embeddings (ids of any shape, `keras.layers.Embedding`), the output heads (hidden
# states `(..., dim)` with targets of the same leading shape, checked by
# `softmax_common`) and FactorizedDense (`keras.layers.Dense`'s `min_ndim=2`).
ANY_RANK_LAYERS = {"AdaptiveSoftmax", "AloneEmbedding", "ContinuousOutput",
                   "FactorizedDense", "FastTextEmbedding", "FixedEmbedding", "FullSoftmax",
                   "SampledSoftmax"}


def test_every_public_layer_is_classified():
    """A new layer must say which contract it has: a sequence layer is tested below."""
    public = set(tfeff.layers.__all__) | set(tfeff.layers.TENSORFLOW_ONLY)
    assert set(SEQUENCE_LAYERS) | ANY_RANK_LAYERS == public
    assert not set(SEQUENCE_LAYERS) & ANY_RANK_LAYERS


def _rank_message(name, what, axes, shape):
    return (rf"{name} `m` takes `{what}` of shape \({axes}\), rank \d\..* "
            rf"Received: {what}\.shape={re.escape(str(shape))}")


@pytest.mark.parametrize("name", sorted(SEQUENCE_LAYERS))
def test_a_wrong_rank_is_refused_naming_the_layer_argument_and_shapes(name):
    """Rank-2 inputs once gave TensorFlow's bare errors ("Incompatible shapes",
    "Expected input 0 to have rank 3", "axis 3 is out of bounds")."""
    make, call = SEQUENCE_LAYERS[name]
    layer = make()
    what, axes = (("query", "batch, n, query_dim") if "Attention" in name
                  else ("inputs", "batch, time, features"))
    if name == "ScalarMix":  # a list of (batch, time, dim) layers, or their stack
        with pytest.raises(ValueError, match=_rank_message(name, "inputs", "batch, "
                                                            "num_layers, time, dim", (2, 5, 8))):
            layer(_zeros(2, 5, 8))
        with pytest.raises(ValueError, match=_rank_message(name, r"inputs\[0\]",
                                                            "batch, time, dim", (2, 8))):
            layer([_zeros(2, 8)] * 3)
        return
    # Before the first build: a layer built from a wrong rank (MultiHeadAttention's
    # einsums) would fail on later right calls.
    with pytest.raises(ValueError, match=_rank_message(name, what, axes, (2, 8))):
        call(layer, _zeros(2, 8))
    assert tuple(call(layer, _zeros(2, 5, 8)).shape)[:2] == (2, 5)
    message = _rank_message(name, what, axes, (1, 2, 5, 8)) + "|" + _rank_message(
        name, what, axes, (2, 8))
    for run in (lambda: call(layer, _zeros(2, 8)),
                lambda: tf.function(lambda x: call(layer, x))(_zeros(1, 2, 5, 8)),
                lambda: tf.function(lambda x: call(layer, x), jit_compile=True)(_zeros(2, 8))):
        with pytest.raises(ValueError, match=message):
            run()
    with pytest.raises(ValueError, match=_rank_message(name, what, axes, (None, 8))):
        call(make(), keras.Input((8,)))


def test_a_one_sequence_input_gets_the_batch_axis_hint():
    with pytest.raises(ValueError, match=r"One sequence needs a batch axis of size 1 "
                                         r"\(`inputs\[None\]`\)"):
        ProjectedLSTM(8, 4, name="m")(_zeros(5, 3))


@pytest.mark.parametrize("mask_shape", [(2, 1), (1, 5)])
def test_scalar_mix_refuses_a_mask_that_would_broadcast(mask_shape):
    """A `(batch, 1)` or `(1, time)` mask once broadcast: the layer norm's statistics
    counted 1 (or 1 row of) position per row but summed every position."""
    layer = ScalarMix(3, layer_norm=True, name="m")
    x = _random(2, 3, 5, 4)
    mask = np.ones(mask_shape, bool)
    message = (r"ScalarMix `m` needs a `mask` of shape \(batch, time\) equal to its inputs' "
               r"dimensions 0 and 2\. Received: mask\.shape=" + re.escape(str(mask_shape))
               + r", inputs\.shape=\(2, 3, 5, 4\)")
    with pytest.raises(ValueError, match=message):
        layer(x, mask=mask)
    with pytest.raises(ValueError, match=message):  # static shapes: at trace time
        tf.function(lambda a, m: layer(a, mask=m))(x, mask)
    with pytest.raises(ValueError, match=message):
        tf.function(lambda a, m: layer(a, mask=m), jit_compile=True)(x, mask)
    # Sizes unknown while tracing: when the graph runs.
    graph = tf.function(lambda a, m: layer(a, mask=m), input_signature=[
        tf.TensorSpec((None, 3, None, 4)), tf.TensorSpec((None, None), tf.bool)])
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=r"ScalarMix `m` needs a `mask` of shape \(batch, time\)"):
        graph(x, mask)
    full = np.ones((2, 5), bool)
    np.testing.assert_allclose(graph(x, full), layer(x, mask=full), rtol=1e-6, atol=1e-6)


def test_scalar_mix_takes_the_keras_masks_of_listed_layers():
    """Listed layers with Keras masks: Keras passes a list of masks (once a raw
    "Attempt to convert a value (None)" error); the first is used, each is checked."""
    embedding = keras.layers.Embedding(10, 4, mask_zero=True)
    ids = np.array([[1, 2, 3, 0, 0], [1, 2, 0, 0, 0]])
    embedded = embedding(ids)
    layer = ScalarMix(3, layer_norm=True, name="m")
    mixed = layer([embedded, embedded * 2.0, embedded * 3.0])
    expected = layer(keras.ops.stack([embedded, embedded * 2.0, embedded * 3.0], axis=1),
                     mask=ids > 0)
    np.testing.assert_allclose(mixed, expected, rtol=1e-6)
    with pytest.raises(ValueError, match=r"needs a `mask\[1\]` of shape \(batch, time\)"):
        layer.call([embedded] * 3, mask=[ids > 0, np.ones((2, 1), bool), None])


def test_attention_masks_and_inputs_must_match_their_sequences():
    x = _random(2, 5, 8)
    layers = [AnchorMultiHeadAttention(2, 4, num_anchors=3, name="m"),
              AnchorMultiHeadAttention(2, 4, num_anchors=3, exact=True, name="m"),
              RotaryMultiHeadAttention(2, 4, name="m")]
    for layer in layers:
        layer(x, x)
        for what in ("value_mask", "key_mask"):
            with pytest.raises(ValueError, match=rf"`m` needs a `{what}` of shape \(batch, "
                                                 rf"time\) equal to the first two dimensions "
                                                 rf"of `(value|key)`\. Received: {what}\.shape"
                                                 rf"=\(2, 1\)"):
                layer(x, x, **{what: np.ones((2, 1), bool)})
        with pytest.raises(ValueError, match=r"needs `value` of shape \(batch, s, value_dim\), "
                                             r"with the batch size of `query`"):
            layer(x, x[:1])
        with pytest.raises(ValueError, match=r"needs `key` of shape \(batch, s, key_dim\), with "
                                             r"the batch size and length s of `value`"):
            layer(x, x, key=x[:, :3])
    with pytest.raises(ValueError, match=r"needs a `query_mask` of shape \(batch, time\)"):
        layers[0](x, x, query_mask=np.ones((1, 5), bool))
    graph = tf.function(lambda q, m: layers[0](q, q, query_mask=m), input_signature=[
        tf.TensorSpec((None, None, 8)), tf.TensorSpec((None, None), tf.bool)])
    with pytest.raises(tf.errors.InvalidArgumentError, match="needs a `query_mask` of shape"):
        graph(x, np.ones((2, 1), bool))


def test_masked_bi_lstm_refuses_initial_states_of_another_batch():
    """A state of batch 1 once broadcast over the batch (the portable path's matmuls)."""
    layer = MaskedBiLSTM(6, 4, num_layers=1, use_cudnn=False, name="m")
    states = [np.zeros((1, d), "float32") for d in (4, 6, 4, 6)]
    with pytest.raises(ValueError, match=r"MaskedBiLSTM `m` needs `initial_state\[0\]` of shape "
                                         r"\(batch, 4\), one row per sequence"):
        layer(_zeros(2, 3, 8), initial_state=states)
    states = [np.zeros((2, d), "float32") for d in (4, 4, 4, 6)]
    with pytest.raises(ValueError, match=r"`initial_state\[1\]` of shape \(batch, 6\)"):
        layer(_zeros(2, 3, 8), initial_state=states)


@pytest.mark.parametrize("projection_dim", [4, None])
def test_masked_bi_lstm_of_time_length_zero_gives_empty_outputs_and_initial_states(
        projection_dim):
    """Time length 0 once failed in a gather (portable path: "indices[0,0] = 0 is not in
    [0, 0)") or in Keras' LSTM (without projection). It is a batch of fully padded rows:
    empty sequences, and the initial states as final states."""
    width = 2 * (projection_dim or 6)
    layer = MaskedBiLSTM(6, projection_dim, num_layers=2, use_cudnn=False, return_state=True,
                         return_all_layers=True, name="m")
    dims = [projection_dim or 6, 6] * 4
    states = [_random(2, d, seed=i) for i, d in enumerate(dims)]
    x = _zeros(2, 0, width)
    # A graph traced for length 0 (one traced for an unknown length has no branch for it).
    spec = [tf.TensorSpec((None, 0, width)), tf.TensorSpec((None, 0), tf.bool)]
    graph = tf.function(lambda a, m, *s: layer(a, mask=m, initial_state=list(s)),
                        input_signature=spec + [tf.TensorSpec((None, d)) for d in dims])
    for outputs in (layer(x, initial_state=states),
                    layer(x, mask=np.zeros((2, 0), bool), initial_state=states),
                    graph(x, np.zeros((2, 0), bool), *states)):
        assert tuple(outputs[0].shape) == (2, 3, 0, width)
        for state, initial in zip(outputs[1:], states):
            np.testing.assert_array_equal(state, initial)
    plain = MaskedBiLSTM(6, projection_dim, num_layers=1, use_cudnn=False, name="p")
    assert tuple(plain(x).shape) == (2, 0, width)


def test_other_sequence_layers_of_time_length_zero_give_empty_outputs():
    """Random anchors once failed on no positions ("Biases must be 1D: [0,2]", a Keras
    `ops.add` of an empty uint32 hash); an empty scan failed on PyTorch (backend test).
    Eagerly and in a graph traced for length 0."""
    x = _zeros(2, 0, 8)
    spec = tf.TensorSpec((None, 0, 8))
    for layer, call, width in (
            (ProjectedLSTM(8, 4, go_backwards=True), lambda l, a: l(a), 4),
            (AnchorMultiHeadAttention(2, 4, num_anchors=3), lambda l, a: l(a, a), 8),
            (AnchorMultiHeadAttention(2, 4, num_anchors=3, anchor_selection="strided"),
             lambda l, a: l(a, a, training=True), 8),
            (CausalAnchorAttention(2, 4, max_sequence_length=8, num_anchors=2),
             lambda l, a: l(a, training=True), 8),
            (RotaryMultiHeadAttention(2, 4), lambda l, a: l(a, a), 8),
            (ScalarMix(3, layer_norm=True), lambda l, a: l([a] * 3, mask=a[..., 0] > 0), 8)):
        assert tuple(call(layer, x).shape) == (2, 0, width), layer.name
        graph = tf.function(lambda a: call(layer, a), input_signature=[spec])
        assert tuple(graph(x).shape) == (2, 0, width), layer.name
    scores = AnchorMultiHeadAttention(2, 4, num_anchors=3)(
        x, _zeros(2, 5, 8), return_attention_scores=True)[1]
    assert tuple(scores.shape) == (2, 2, 0, 5)


# Run under JAX and PyTorch (TensorFlow unimportable): the recurrent layers on time
# length 0 (the paths that failed there; Masked ELMo and ElmoLM run them) and the shape
# checks, eagerly and under `jax.jit`. One process per backend, both at once; each
# prints one line per check.
_BACKEND_SCRIPT = """
import sys
sys.modules["tensorflow"] = None
import keras
import numpy as np
from tfeff.layers import MaskedBiLSTM, ProjectedLSTM, ScalarMix

def refusal(call):
    try:
        call()
    except ValueError as e:
        return " ".join(str(e).split())
    return "no error"

x = np.zeros((2, 0, 8), "float32")
states = [np.full((2, d), i, "float32") for i, d in enumerate((4, 8, 4, 8))]
for use_cudnn in (False, "auto"):
    out = MaskedBiLSTM(8, 4, num_layers=1, use_cudnn=use_cudnn, return_state=True)(
        x, initial_state=states)
    print(tuple(out[0].shape), all(np.array_equal(keras.ops.convert_to_numpy(s), i)
                                   for s, i in zip(out[1:], states)))
print(tuple(MaskedBiLSTM(8, None, num_layers=1)(np.zeros((2, 0, 16), "float32")).shape))
print(tuple(ProjectedLSTM(8, 4)(np.zeros((2, 0, 3), "float32")).shape))
print(refusal(lambda: ProjectedLSTM(8, 4, name="m")(np.zeros((2, 3), "float32"))))
mix = ScalarMix(3, layer_norm=True, name="mix")
stack = np.ones((2, 3, 5, 4), "float32")
print(refusal(lambda: mix(stack, mask=np.ones((2, 1), bool))))
if keras.backend.backend() == "jax":
    import jax
    print(refusal(lambda: jax.jit(lambda a, m: mix(a, mask=m))(stack, np.ones((1, 5), bool))))
else:
    print(refusal(lambda: mix(stack, mask=np.ones((1, 5), bool))))
"""


# A subprocess run: under `slow` for the default suite's time budget (the mechanism is
# also checked in process there).
@pytest.mark.slow
@pytest.mark.parametrize("backend", ["jax", "torch"])
def test_the_contracts_hold_on_the_other_backends(backend, other_backend_lines):
    """Time length 0 failed on every backend, each with its own error (JAX: "Cannot do
    a non-empty jnp.take() from an empty axis"; PyTorch: "Expected sequence length to be
    larger than 0 in RNN", and an empty scan's "not enough values to unpack")."""
    returncode, lines, err = other_backend_lines[backend]
    assert returncode == 0, err[-3000:]
    assert lines[:4] == ["(2, 0, 8) True", "(2, 0, 8) True", "(2, 0, 16)", "(2, 0, 4)"], lines
    assert lines[4].startswith("ProjectedLSTM `m` takes `inputs` of shape (batch, time, "
                               "features), rank 3."), lines[4]
    assert lines[4].endswith("Received: inputs.shape=(2, 3)"), lines[4]
    for line, shape in zip(lines[5:7], ("(2, 1)", "(1, 5)")):
        assert ("ScalarMix `mix` needs a `mask` of shape (batch, time) equal to its inputs' "
                f"dimensions 0 and 2. Received: mask.shape={shape}") in line, line
    assert len(lines) == 7, lines


@pytest.fixture(scope="module")
def other_backend_lines():
    processes = {backend: subprocess.Popen(
        [sys.executable, "-c", _BACKEND_SCRIPT], env=backend_env(backend), cwd=REPO,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for backend in ("jax", "torch")}
    done = {}
    for backend, process in processes.items():
        out, err = process.communicate(timeout=600)
        done[backend] = (process.returncode, out.strip().split("\n"), err)
    return done
