import keras
import numpy as np
import pytest
import tensorflow as tf

from tests.models.float64 import float64_models
from tests.models.lm_roundings import assert_normalized
from tests.models.lm_roundings import assert_same_update
from tests.models.lm_roundings import head_roundings
from tests.models.lm_roundings import lstm_roundings
from tfeff.data.masked_elmo_dataset import mask_sets
from tfeff.models import MaskedElmo
from tfeff.models import MaskedElmoBackbone
from tfeff.testing.numerics import assert_close
from tfeff.training import make_strategy

VOCAB = 40
SMALL = dict(num_layers=2, units=12, projection_dim=4, dropout_rate=0.0, use_cudnn=False)
# `MaskedElmo`'s own arguments (the output's and the state carrying); the rest are the
# backbone's.
TASK_KEYS = ("output_layer", "output_loss", "embedding_table", "adaptive_cutoffs",
             "adaptive_div_value", "adaptive_tail_capacity", "tbptt_batch_size")
# Training compared in float64 (float64_models): float32 only in the output layer, a mask
# set's loss from the logits' cast on (8-dim features, 40 ids, the mean over 4 x 9 targets
# at most), the step's loss and gradient that forward and back, the mean over the 3 mask
# sets; the float64 rest adds under one.
SET_LOSS_ROUNDINGS = head_roundings(8, VOCAB, 4 * 9) + 1
STEP_ROUNDINGS = 2 * SET_LOSS_ROUNDINGS + 3


def _batch(seed=0, rows=4, time=9, num_sets=3, reset=None):
    rng = np.random.default_rng(seed)
    ids = rng.integers(5, VOCAB, size=(rows, time)).astype(np.int32)
    lengths = np.array([time, time - 3, 2, time][:rows])
    ids[np.arange(time)[None, :] >= lengths[:, None]] = 0
    batch = mask_sets(ids, lengths, rng, num_sets, VOCAB, 2, mask_rate=0.25)
    batch["padding_mask"] = (ids > 0).astype(np.int32)
    batch["reset"] = np.ones(rows, np.int32) if reset is None else np.asarray(reset, np.int32)
    return {k: tf.constant(v) for k, v in batch.items()}


def _model(strategy=None, **kwargs):
    keras.utils.set_random_seed(0)
    task = {k: v for k, v in kwargs.items() if k in TASK_KEYS}
    sizes = {**SMALL, **{k: v for k, v in kwargs.items() if k not in TASK_KEYS}}
    with (strategy or tf.distribute.get_strategy()).scope():
        model = MaskedElmo(MaskedElmoBackbone(VOCAB, **sizes), **task)
        model.build()
        model.compile(optimizer=keras.optimizers.SGD(1.0), jit_compile=False)
    return model


def _numpy(variables):
    return [keras.ops.convert_to_numpy(v).copy() for v in variables]


def _gradient(model, batch, k):
    """The gradient of mask set k's loss alone (from zero states)."""
    with tf.GradientTape() as tape:
        loss, _ = model.set_loss(batch, k, None, training=True)
    return [tf.convert_to_tensor(g).numpy() for g in
            tape.gradient(loss, model.trainable_variables)]


def test_paper_size_parameter_count():
    model = MaskedElmo(MaskedElmoBackbone(28745, num_layers=2, units=4096, projection_dim=384))
    model.build()
    # Embedding 28,745 x 768, four LSTMP directions of 20,463,616, layer norms, softmax bias.
    assert model.count_params() == 28745 * 768 + 4 * 20_463_616 + 2 * 2 * 2 * 384 + 28745
    assert abs(model.count_params() - 104e6) / 104e6 < 0.01


@pytest.mark.numerics
def test_keras_step_on_compute_loss_makes_the_tensorflow_steps_update():
    """The one loss is `compute_loss`. Keras' own step (every backend but TensorFlow)
    differentiates it on all mask sets at once; TensorFlow's `train_step` takes it set by
    set (sparse embedding gradients kept sparse) and applies the mean. Same loss, same
    updated weights and carried states, over two steps; and the update is not any one
    set's (the sets differ)."""
    with float64_models():
        tensorflow_step, keras_step = _model(tbptt_batch_size=4), _model(tbptt_batch_size=4)
    keras_step.set_weights(tensorflow_step.get_weights())
    before = _numpy(keras_step.trainable_variables)
    initial = _numpy(keras_step.weights)
    for seed, reset in ((2, [1, 1, 1, 1]), (3, [0, 1, 0, 0])):
        batch = _batch(seed, reset=reset)
        own = tensorflow_step.train_step(batch)
        generic = keras.Model.train_step(keras_step, batch)
        # In another order (all sets at once, or set by set); the second step's loss also
        # carries the first update's rounding.
        assert_close(float(generic["loss"]), float(own["loss"]),
                     n=SET_LOSS_ROUNDINGS + 3 + (STEP_ROUNDINGS if seed == 3 else 0))
        if seed == 2:  # SGD(1.0): the first update is minus the gradient
            first_update = [b - a for a, b in zip(_numpy(keras_step.trainable_variables),
                                                  before)]
            with float64_models():
                set_gradient = _gradient(_model(tbptt_batch_size=4), batch, 0)
            assert not np.allclose(first_update[0], set_gradient[0], atol=1e-6)
    for a, b, w in zip(_numpy(keras_step.weights), _numpy(tensorflow_step.weights), initial):
        assert_same_update(b, a, w, n=2 * STEP_ROUNDINGS)  # two steps (states: less)
    assert np.abs(_numpy(keras_step.carried_states)[0]).max() > 1e-3
    # Not training: mask set 0 from zero states, as evaluate's test_step.
    batch = _batch(4, reset=[0, 0, 0, 0])
    outputs = keras_step(batch, training=False)
    assert outputs["masked_output"].shape[1] == 1
    loss, _ = keras_step.set_loss(batch, 0, None, training=False)
    # The same computation: bit-identical.
    assert float(keras_step.compute_loss(x=batch, y_pred=outputs, training=False)) == float(loss)


@pytest.mark.numerics
def test_set_loss_is_the_mean_nll_of_the_set(tmp_path):
    model = _model()
    batch = _batch(1)
    loss, outputs = model.set_loss(batch, 1, None, training=False)
    logits = (np.asarray(outputs["masked_output"].numpy(), np.float64)
              @ np.asarray(model.backbone.token_embedding.embeddings.numpy(), np.float64).T
              + model.output_head.bias.numpy())
    log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    ids = batch["masked_ids"].numpy()[:, 1]
    w = batch["masked_weights"].numpy()[:, 1]
    nll = -np.take_along_axis(log_probs, ids[..., None], -1)[..., 0]
    # The model's float32 head from the same features; a target's loss, log-sum-exp minus
    # a logit, is up to 2 max|logit| + log V.
    assert_close(float(loss), (nll * w).sum() / w.sum(), n=head_roundings(8, VOCAB, ids.size),
                 scale=2 * np.abs(logits).max() + np.log(VOCAB))
    assert_normalized(model.log_prob(outputs["masked_output"]).numpy())
    # The masked inputs of set 1 are what the model saw.
    direct = model({"token_ids": batch["masked_token_ids"][:, 1],
                    "padding_mask": batch["padding_mask"],
                    "masked_positions": batch["masked_positions"][:, 1]})
    # The same computation: bit-identical.
    np.testing.assert_array_equal(direct["masked_output"], outputs["masked_output"])


@pytest.mark.numerics
def test_states_are_carried_and_reset_at_document_starts():
    with float64_models():
        model = _model(tbptt_batch_size=4)
    first = _batch(2)
    _, outputs = model.set_loss(first, 0, None, training=False)
    expected = _numpy(outputs["states"])
    model.train_step(first)  # reset everywhere: starts from zeros
    # Carried: the first mask set's final states, computed before the update (in the
    # step's graph, whose kernels may fuse and round otherwise): float64, 2 LSTMP layers
    # over 9 steps, at an LSTM's scale, max(1, the values).
    for var, value in zip(model.carried_states, expected):
        assert_close(keras.ops.convert_to_numpy(var), value, n=lstm_roundings(2, 9, 8, 4, 12),
                     dtype="float64", scale=max(1.0, np.abs(value).max()))
    second = _batch(3, reset=[0, 1, 0, 1])
    initial = _numpy(model.initial_states(second))
    for value, carried in zip(initial, _numpy(model.carried_states)):
        np.testing.assert_array_equal(value[[0, 2]], carried[[0, 2]])  # kept as they are
        assert np.all(value[[1, 3]] == 0)
    # And the next step's loss uses them: it differs from a zero-state start.
    loss_carried, _ = model.set_loss(second, 0, model.initial_states(second), training=False)
    loss_zero, _ = model.set_loss(second, 0, None, training=False)
    assert abs(float(loss_carried) - float(loss_zero)) > 1e-6


@pytest.mark.numerics
def test_two_replicas_equal_one_device():
    results = []
    devices = ["/cpu:0", "/cpu:1"]
    for strategy in (make_strategy("default"), make_strategy("mirrored", devices)):
        with float64_models():
            model = _model(strategy, tbptt_batch_size=4)
        before = _numpy(model.weights)
        batches = [_batch(4), _batch(5, reset=[0, 0, 1, 0])]
        ds = tf.data.Dataset.from_tensor_slices(
            {k: tf.stack([b[k] for b in batches]) for k in batches[0]})
        history = model.fit(ds, epochs=1, verbose=0)
        results.append((history.history["loss"][0], _numpy(model.weights)))
    # On other batch shapes, the gradients summed per replica first; two steps (the mean
    # loss: the second carries the first update).
    assert_close(results[1][0], results[0][0], n=SET_LOSS_ROUNDINGS + 3 + STEP_ROUNDINGS)
    for a, b, w in zip(results[0][1], results[1][1], before):
        assert_same_update(a, b, w, n=2 * STEP_ROUNDINGS)


@pytest.mark.parametrize("kwargs", [
    {"output_layer": "adaptive", "adaptive_cutoffs": [10, 25], "adaptive_div_value": 2.0},
    {"output_layer": "continuous"},
    # Tied to the full softmax, the ALONE input gathers from the table it computes.
    {"input_embedding": "alone", "alone": {"intermediate_dim": 16, "seed": 3, "lookup": "table"}},
], ids=["adaptive", "continuous", "alone"])
def test_output_layers_and_alone_input_learn(kwargs, tmp_path):
    if kwargs.get("output_layer") == "continuous":
        table = np.random.default_rng(0).normal(size=(VOCAB, 6)).astype("float32")
        np.save(str(tmp_path / "table.npy"), table)
        kwargs = {**kwargs, "embedding_table": str(tmp_path / "table.npy")}
    model = _model(**kwargs)
    model.compile(optimizer=keras.optimizers.Adam(0.02), jit_compile=False)
    batch = _batch(6, num_sets=2)
    ds = tf.data.Dataset.from_tensors(batch).repeat(40)
    first = float(model.test_step(batch)["loss"])
    model.fit(ds, epochs=1, verbose=0)
    model.reset_metrics()
    last = float(model.test_step(batch)["loss"])
    assert last < 0.7 * first
    # A .keras file of the task model (backbone and head inside) round-trips.
    path = str(tmp_path / "masked_elmo.keras")
    model.save(path)
    loaded = keras.models.load_model(path)
    assert isinstance(loaded.backbone, MaskedElmoBackbone)
    assert loaded.get_config() == model.get_config()
    # The same weights and computation: bit-identical.
    assert float(loaded.test_step(batch)["loss"]) == last
    inputs = MaskedElmo.set_inputs(batch, 1)
    np.testing.assert_array_equal(loaded(inputs)["masked_output"], model(inputs)["masked_output"])


def test_argument_errors():
    backbone = MaskedElmoBackbone(VOCAB, **SMALL)
    with pytest.raises(ValueError, match="output_layer"):
        MaskedElmo(backbone, output_layer="sampled")
    with pytest.raises(ValueError, match="embedding_table"):
        MaskedElmo(backbone, output_layer="continuous")
    with pytest.raises(ValueError, match="adaptive_cutoffs"):
        MaskedElmo(backbone, output_layer="adaptive")
    with pytest.raises(ValueError, match="tbptt_batch_size"):
        MaskedElmo(backbone, tbptt_batch_size=0)
    # The task takes its backbone: given the vocabulary size it took before, it names it.
    with pytest.raises(TypeError, match="MaskedElmo takes its backbone, a MaskedElmoBackbone.*of type int"):
        MaskedElmo(VOCAB)


def test_a_left_padded_padding_mask_is_refused():
    model = MaskedElmo(MaskedElmoBackbone(VOCAB, **{**SMALL, "num_layers": 1},
                                          name="melmo_backbone"), name="melmo")
    ids = np.array([[5, 6, 7], [0, 5, 6]], "int32")
    with pytest.raises(ValueError, match=r"MaskedElmoBackbone `melmo_backbone` needs a "
                                         r"right-padded "
                                         r"`padding_mask`.*Row 1 is True at position 1"):
        model({"token_ids": ids, "padding_mask": ids > 0})


def test_the_old_name_of_the_tied_softmax_is_read_as_full(tmp_path):
    """`output_layer="softmax"`, in configs and in the flat configs of models saved before
    the name was `"full"` (as in the other models), still builds the tied softmax."""
    from tfeff.config import load_config

    model = MaskedElmo.from_config({"vocabulary_size": 30, "num_layers": 1, "units": 8,
                                    "projection_dim": 3, "use_cudnn": False,
                                    "output_layer": "softmax", "name": "masked_elmo"})
    assert model.output_layer_type == "full" and model.get_config()["output_layer"] == "full"
    model.build()
    assert model.output_head.embeddings is model.backbone.token_embedding.embeddings
    with pytest.raises(ValueError, match="output_layer"):
        MaskedElmo(MaskedElmoBackbone(30, num_layers=1, units=8, projection_dim=3,
                                      use_cudnn=False), output_layer="softmax")
    config = load_config("configs/demo_masked_elmo.yaml", ["model.output_layer=softmax"])
    assert config.model.output_layer == "full"
