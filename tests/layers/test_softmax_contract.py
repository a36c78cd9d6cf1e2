"""The call contract shared by the softmax output layers (`softmax_common`), and the
output-head contract (`tfeff.layers.output_head`) that `ContinuousOutput` answers too."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from tests.layers.softmax_reference import log_prob_bound
from tests.layers.softmax_reference import normalization_roundings
from tfeff.layers import AdaptiveSoftmax
from tfeff.layers import ContinuousOutput
from tfeff.layers import FixedEmbedding
from tfeff.layers import FullSoftmax
from tfeff.layers import SampledSoftmax
from tfeff.testing.numerics import assert_close

V, D = 20, 6
FACTORIES = {
    "adaptive": lambda: AdaptiveSoftmax(V, [4, 10], div_value=2.0, name="adaptive"),
    "full": lambda: FullSoftmax(V, name="full"),
    "sampled": lambda: SampledSoftmax(V, num_sampled=5, seed=1, name="sampled"),
}


def _data(seed=0):
    rng = np.random.default_rng(seed)
    return (rng.normal(size=(3, 4, D)).astype("float32"),
            rng.integers(0, V, size=(3, 4)).astype("int32"))


@pytest.mark.numerics
@pytest.mark.parametrize("kind", sorted(FACTORIES))
def test_targets_add_the_mean_nll_and_return_loss_adds_nothing(kind):
    layer = FACTORIES[kind]()
    x, t = _data()
    log_probs = layer(x, t)
    assert len(layer.losses) == 1
    full = layer.log_prob(x).numpy()
    expected = np.take_along_axis(full, t[..., None], -1)[..., 0]
    # The targets' path against the full distribution's (adaptive: tails on other rows),
    # float32 both; the loss also sums 12 and divides, both ways.
    bound = log_prob_bound(layer, x)
    mean = dict(n=bound["n"] + 13, scale=bound["scale"])
    assert_close(log_probs.numpy(), expected, **bound)
    assert_close(layer.losses[0].numpy(), -expected.mean(), **mean)
    log_probs2, loss = layer(x, t, return_loss=True)
    assert layer.losses == []  # a new call clears; return_loss adds nothing
    assert_close(log_probs2.numpy(), expected, **bound)
    assert_close(loss.numpy(), -expected.mean(), **mean)
    # No targets: the full distribution.
    np.testing.assert_allclose(layer(x).numpy(), full, atol=1e-6)
    with pytest.raises(ValueError, match="return_loss=True` needs `targets"):
        layer(x, return_loss=True)


@pytest.mark.numerics
@pytest.mark.parametrize("kind", sorted(FACTORIES))
def test_log_prob_and_predict_before_any_call_build_the_layer(kind):
    x, _ = _data(1)
    layer = FACTORIES[kind]()
    log_probs = layer.log_prob(x).numpy()
    assert layer.built and log_probs.shape == (3, 4, V)
    assert_close(np.exp(log_probs).sum(-1), np.ones((3, 4)), n=normalization_roundings(V),
                 scale=1.0)
    fresh = FACTORIES[kind]()
    best = fresh.predict(x).numpy()
    assert fresh.built and best.shape == (3, 4)
    np.testing.assert_array_equal(best, fresh.log_prob(x).numpy().argmax(-1))
    unknown = FACTORIES[kind]()
    traced = tf.function(unknown.log_prob, input_signature=[tf.TensorSpec([None, None])])
    with pytest.raises(ValueError, match="last dimension is unknown"):
        traced.get_concrete_function()


@pytest.mark.parametrize("kind", sorted(FACTORIES))
@pytest.mark.parametrize("bad", [V, V + 3, -1])
def test_out_of_range_targets_name_the_vocabulary_size(kind, bad):
    layer = FACTORIES[kind]()
    x, t = _data(2)
    t[1, 2] = bad
    message = (f"targets must be < vocabulary_size={V}" if bad >= V
               else "targets must be >= 0")
    with pytest.raises(tf.errors.InvalidArgumentError, match=message):
        layer(x, t)
    # The same check inside a tf.function (graph mode).
    with pytest.raises(tf.errors.InvalidArgumentError, match=message):
        tf.function(lambda a, b: layer(a, b, return_loss=True))(x, t)


def test_ignored_and_masked_targets_are_not_checked():
    layer = FullSoftmax(V, ignore_index=-100)
    x, t = _data(3)
    t[0, 0] = -100
    mask = np.ones(t.shape, bool)
    mask[2, 3] = False
    t[2, 3] = V + 50
    log_probs, _ = layer(x, t, mask=mask, return_loss=True)
    assert log_probs.numpy()[0, 0] == 0 and log_probs.numpy()[2, 3] == 0


@pytest.mark.numerics
def test_a_keras_mask_on_the_inputs_ignores_padded_targets():
    """An encoder with `mask_zero=True` masks its padding: those targets add no loss."""
    ids = np.array([[3, 4, 0, 0], [5, 6, 7, 0]], "int32")
    targets = np.array([[4, 5, 19, 19], [6, 7, 8, 19]], "int32")
    tokens = keras.Input((4,), dtype="int32")
    target_in = keras.Input((4,), dtype="int32")
    hidden = keras.layers.Embedding(V, D, mask_zero=True)(tokens)
    log_probs = FullSoftmax(V, name="masked_full")(hidden, target_in)
    model = keras.Model([tokens, target_in], log_probs)
    out = model([ids, targets]).numpy()
    np.testing.assert_array_equal(out == 0, ids == 0)
    model.compile(optimizer="sgd")
    loss = model.evaluate([ids, targets], verbose=0)
    # The same log-probabilities, reduced by the layer (a masked sum of 8, a division)
    # and by NumPy (a float32 mean of 5).
    assert_close(loss, -out[ids != 0].mean(), n=15, scale=float(np.abs(out).max()))


@pytest.mark.parametrize("kind", sorted(FACTORIES))
def test_targets_and_mask_of_another_shape_name_the_layer_and_both_shapes(kind):
    layer = FACTORIES[kind]()
    x, t = _data(4)  # (3, 4, D), (3, 4)
    for what, kwargs in (("targets", dict(targets=t[:, :3])), ("targets", dict(targets=t[:2])),
                         ("targets", dict(targets=t[..., None])),
                         ("mask", dict(targets=t, mask=np.ones((3, 3), bool)))):
        message = (rf"{type(layer).__name__} `{kind}`: `{what}` must have the shape of `inputs` "
                   rf"without its last axis, \(3, 4\). Received: inputs.shape=\(3, 4, {D}\), "
                   rf"{what}.shape=\(\d, \d(, 1)?\)")
        with pytest.raises(ValueError, match=message):
            layer(x, **kwargs)
    # Symbolic inputs: the model is refused when it is built.
    hidden, targets = keras.Input((4, D)), keras.Input((3,), dtype="int32")
    with pytest.raises(ValueError, match=r"`targets` must have the shape.*\(None, 3\)"):
        FACTORIES[kind]()(hidden, targets)


TABLE = np.random.default_rng(9).normal(size=(V, 3))
TABLE[0] = 0.0  # a padding row
HEADS = {**FACTORIES, "continuous": lambda: ContinuousOutput(
    3, loss="cosine", target_embedding=FixedEmbedding(TABLE.astype("float32")),
    name="continuous")}


def _unit(x):
    return x / np.maximum(np.linalg.norm(x, axis=-1, keepdims=True), 1e-12)


@pytest.mark.numerics
@pytest.mark.parametrize("kind", sorted(HEADS))
def test_every_head_answers_the_output_head_contract(kind):
    """features -> per_position_loss / ranking_scores / log_prob, the same calls for every
    head, against float64 NumPy: the target NLL of the full distribution (softmax heads;
    SampledSoftmax outside training) or 1 - cos with the target's fixed vector, 0 where
    masked; scores are the log-probabilities or the cosines with every vector."""
    head = HEADS[kind]()
    hidden, t = _data(5)
    mask = np.random.default_rng(6).random(t.shape) > 0.3
    t[~mask] = V + 7  # masked targets may hold anything
    features = head.features(hidden)
    scores = keras.ops.convert_to_numpy(head.ranking_scores(features)).astype(np.float64)
    assert scores.shape == (3, 4, V)
    loss = keras.ops.convert_to_numpy(head.per_position_loss(features, t, mask=mask))
    assert loss.dtype == np.float32 and loss.shape == t.shape
    safe_t = np.where(mask, t, 0)
    if kind == "continuous":
        kernel, bias = (keras.ops.convert_to_numpy(w).astype(np.float64)
                        for w in head.projection.weights)
        predicted = hidden.astype(np.float64) @ kernel + bias
        # float32 always. The projection: a sum of 6 and the bias, of terms T.
        terms = np.abs(hidden) @ np.abs(kernel) + np.abs(bias)
        assert_close(features, predicted, n=7, scale=float(terms.max()))
        cosines = _unit(predicted) @ _unit(TABLE).T
        expected = 1.0 - np.take_along_axis(cosines, safe_t[..., None], -1)[..., 0]
        # Cosines: the features' 7 roundings relative to their norm (at most R times T),
        # two normalizations (a sum of 3 squares, rsqrt, the product: ~8 each), the
        # table's cast to float32, a dot of 3, 1 - cos: of values up to 1.
        ratio = np.linalg.norm(terms, axis=-1) / np.linalg.norm(predicted, axis=-1)
        bound = dict(n=int(np.ceil(7 * ratio.max())) + 21, scale=1.0)
        assert_close(scores, cosines, **bound)
        with pytest.raises(ValueError, match="no distribution over the vocabulary"):
            head.log_prob(features)
    else:
        np.testing.assert_array_equal(features, hidden)  # a softmax scores the hidden states
        log_probs = keras.ops.convert_to_numpy(head.log_prob(features)).astype(np.float64)
        assert_close(np.exp(log_probs).sum(-1), np.ones((3, 4)), n=normalization_roundings(V),
                     scale=1.0)
        np.testing.assert_array_equal(scores, log_probs)
        expected = -np.take_along_axis(log_probs, safe_t[..., None], -1)[..., 0]
        # The targets' path against the full distribution's, float32 both.
        bound = log_prob_bound(head, hidden)
    assert_close(loss, np.where(mask, expected, 0.0), **bound)


@pytest.mark.parametrize("kind", sorted(FACTORIES))
def test_float_targets_are_refused_by_name(kind):
    """A float target (3.7) was once cast to class 3 silently."""
    layer = FACTORIES[kind]()
    x, t = _data()
    with pytest.raises(ValueError, match=rf"`{kind}` takes integer class ids as `targets`, "
                                         r"not float32 \(a float id such as 3.7"):
        layer(x, t.astype("float32") + 0.7)
