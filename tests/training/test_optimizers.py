"""`make_optimizer`'s optimizers: non-finite updates are skipped, replica gradients are summed
before clipping (so N replicas update as one device)."""

import os

import keras
import numpy as np
import pytest
import tensorflow as tf

from tests.conftest import REPO
from tfeff.config import ConfigError
from tfeff.config import load_config
from tfeff.testing.numerics import assert_close
from tfeff.training import FAMILIES
from tfeff.training import make_strategy
from tfeff.training.optimizers import Adagrad, Adam, AdamW

DEVICES = ["/cpu:0", "/cpu:1"]


def _optimizer(kind, clipnorm=1.0):
    if kind == "adamw":
        return AdamW(0.1, weight_decay=0.1, global_clipnorm=clipnorm)
    if kind == "adagrad":  # ELMo's (bilm-tf): accumulators start at 1.0
        return Adagrad(0.1, initial_accumulator_value=1.0, global_clipnorm=clipnorm)
    return Adam(0.1, global_clipnorm=clipnorm)


def _train(strategy, kind, gradients):
    """Applies one gradient per step; replica r gets `g * (r + 1) / sum(1..R)`, so the
    replicas' sum is `g` whatever their number (each replica is clipped alone by Keras)."""
    with strategy.scope():
        var = keras.Variable(np.array([1.0, -2.0, 3.0], np.float32))
        opt = _optimizer(kind)
        opt.build([var])
    replicas = strategy.num_replicas_in_sync
    share = tf.constant([(r + 1) / (replicas * (replicas + 1) / 2) for r in range(replicas)])

    @tf.function
    def step(g):
        def fn():
            r = tf.distribute.get_replica_context().replica_id_in_sync_group
            opt.apply([g * share[r]], [var])
        strategy.run(fn)

    history = []
    for g in gradients:
        step(tf.constant(g, tf.float32))
        history.append((keras.ops.convert_to_numpy(var).copy(),
                        int(opt.iterations.numpy()), int(opt.non_finite_steps.numpy()),
                        int(opt.last_non_finite_step.numpy())))
    return history


# Roundings per step, of the step's size, of the float64 reference's update (see below), and
# of two replicas against one device. Adam: the global norm (a sum of 3 squares, sqrt) and
# the clipping (~8), the weight decay (3), the moments (7), the bias correction (~8),
# m / (sqrt(v) + eps) (6): ~35; its second step's 1 - beta_2**2 cancels beta_2**2, whose
# power rounds ~4 times (0.998 / 0.002 = 500 times that, halved by the sqrt: 1000; 20 for
# 1 - beta_1**2): 1100 over two steps. Adagrad: the norm and clipping (8), g**2 and the
# accumulation (2), + eps, the sqrt, lr * g and the division (4): 14 a step, 30 over two.
# Two replicas add the shares g/3 and 2g/3 (the shares, products and sum: 3 roundings of
# g), then take the same steps: 2 * (per step + 3).
ROUNDINGS = {"adam": (1100, 76), "adamw": (1100, 76), "adagrad": (30, 34)}


@pytest.mark.numerics
@pytest.mark.parametrize("kind", ["adam", "adamw", "adagrad"])
def test_non_finite_update_is_skipped_and_replicas_equal_one_device(kind):
    grads = [[3.0, -4.0, 12.0], [1.0, np.nan, 0.0], [0.5, 0.5, np.inf], [2.0, 1.0, -1.0]]
    one = _train(make_strategy("default"), kind, grads)
    two = _train(make_strategy("mirrored", DEVICES), kind, grads)
    # Steps 2 and 3 are skipped: weights unchanged, step counter not advanced.
    np.testing.assert_array_equal(one[1][0], one[0][0])
    np.testing.assert_array_equal(one[2][0], one[0][0])
    assert [h[1:] for h in one] == [(1, 0, 0), (1, 1, 2), (1, 2, 2), (2, 2, 2)]
    assert not np.array_equal(one[3][0], one[0][0])
    # Float64 reference of the applied updates (clipping the global gradient), with the
    # roundings of ROUNDINGS; the weights (3) round twice.
    ref = _reference(kind, [grads[0], grads[3]])
    moved = np.abs(ref - [1.0, -2.0, 3.0]).max()
    reference_roundings, replica_roundings = ROUNDINGS[kind]
    assert_close(one[3][0], ref, n=2 + reference_roundings * moved / 3, scale=3.0)
    # Two replicas: what differs is the rounding of values that moved by those steps and
    # the weights' (2).
    for (w1, *c1), (w2, *c2) in zip(one, two):
        assert_close(w2, w1, n=2 + replica_roundings * moved / 3, scale=3.0)
        assert c1 == c2


def _reference(kind, grads, lr=0.1, b1=0.9, b2=0.999, eps=1e-7, wd=0.1):
    """The weights after `grads`, in float64: Adam and AdamW (Kingma & Ba, Algorithm 1, in
    its efficient form; Loshchilov & Hutter's decoupled decay) or Adagrad (Duchi et al.:
    `a += g**2; w -= lr * g / sqrt(a)`, Keras adding eps under the root, a from 1.0)."""
    w = np.array([1.0, -2.0, 3.0])
    m = v = np.zeros(3)
    accumulator = np.ones(3)
    for t, g in enumerate(grads, 1):
        g = np.asarray(g, np.float64)
        g = g * min(1.0, 1.0 / np.linalg.norm(g))
        if kind == "adagrad":
            accumulator = accumulator + g * g
            w = w - lr * g / np.sqrt(accumulator + eps)
            continue
        if kind == "adamw":
            w = w - w * wd * lr
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        alpha = lr * np.sqrt(1 - b2 ** t) / (1 - b1 ** t)
        w = w - alpha * m / (np.sqrt(v) + eps)
    return w


# The learning rate: warmup, the four decays, the batch-size scaling, against closed forms.

PEAK, WARMUP, TOTAL, FLOOR = 2e-3, 10, 110, 0.1


def _closed_form(decay, step, warmup=WARMUP, rate=0.5, every=20):
    """The documented rate at `step`, in float64: `peak * (step + 1) / warmup` in warmup,
    then the decay over `progress = (step - warmup) / (total - warmup)`, held past the end."""
    if step < warmup:
        return PEAK * (step + 1) / warmup
    progress = min((step - warmup) / (TOTAL - warmup), 1.0)
    floor = PEAK * FLOOR
    return {
        "cosine": floor + (PEAK - floor) * (1 + np.cos(np.pi * progress)) / 2,
        "linear": PEAK - (PEAK - floor) * progress,
        "exponential": max(PEAK * rate ** ((step - warmup) / every), floor),
        "constant": PEAK,
    }[decay]


# First step, last warmup step, end of warmup, mid-decay, last step, past the end.
STEPS = (0, WARMUP - 1, WARMUP, 40, 60, TOTAL, TOTAL + 50)


# The schedule in float32 against its float64 closed form: the constants' roundings (peak,
# floor, pi: 3), progress (2), cos (4) and the terms of floor + (peak - floor) * ... (4);
# the exponential's rate ** periods moves by |log rate| * periods (< 6) times the periods'
# 2 roundings: at most 16 roundings of values of the peak's size.
SCHEDULE_ROUNDINGS = 16


@pytest.mark.numerics
@pytest.mark.parametrize("decay", ["cosine", "linear", "exponential", "constant"])
@pytest.mark.parametrize("warmup", [WARMUP, 0])
def test_warmup_and_decay_follow_their_closed_forms(decay, warmup):
    from tfeff.training.optimizers import WarmupDecay

    schedule = WarmupDecay(PEAK, warmup, TOTAL, decay=decay, final_fraction=FLOOR,
                           decay_rate=0.5, decay_steps=20)
    got = [float(schedule(step)) for step in STEPS]
    want = [_closed_form(decay, step, warmup) for step in STEPS]
    assert_close(got, want, n=SCHEDULE_ROUNDINGS, scale=PEAK)
    # Landmarks, spelled out: the peak is reached at the last warmup step, the floor at the end.
    assert got[STEPS.index(WARMUP - 1 if warmup else 0)] == pytest.approx(PEAK)
    if decay in ("cosine", "linear"):
        assert got[-2] == got[-1] == pytest.approx(PEAK * FLOOR)
    # A schedule saved with a model comes back the same.
    again = WarmupDecay.from_config(schedule.get_config())
    assert [float(again(step)) for step in STEPS] == got


def _rnmt(step, base, n, p, s, e):
    """Li et al.'s RNMT+ rate in float64 (ELMo-C's released schedule, decay in steps)."""
    if step >= e:
        return base / 2
    return base * min(1 + step * (n - 1) / p, n, n * (2 * n) ** ((s - step) / (e - s)))


@pytest.mark.numerics
def test_rnmt_follows_chen_et_al_as_li_et_al_train_elmo_c():
    """From the base rate up to n times it over the warmup, held, then down to half the
    base rate at the decay's end and held there; through make_optimizer, n is the batch
    over `base_batch_size`."""
    from tfeff.config.elmo import TrainConfig
    from tfeff.training.optimizers import WarmupDecay
    from tfeff.training.optimizers import make_optimizer

    base, n, p, s, e = 1e-4, 4.0, 100, 300, 900
    schedule = WarmupDecay(base * n, p, 1000, decay="rnmt", decay_start=s, decay_end=e,
                           replicas=n)
    steps = (0, 1, 50, p, 200, s, 450, 600, e - 1, e, 5000)
    got = [float(schedule(t)) for t in steps]
    # float32 against float64: the constants, the warmup's 3 operations, the exponent's
    # 3 and exp's ~4 times |log 2n| (< 3) of its argument: 16 roundings at the peak's size.
    assert_close(got, [_rnmt(t, base, n, p, s, e) for t in steps], n=16, scale=base * n)
    by_step = dict(zip(steps, got))
    assert by_step[0] == pytest.approx(base)
    assert by_step[p] == by_step[200] == by_step[s] == pytest.approx(n * base)
    assert by_step[e] == by_step[5000] == pytest.approx(base / 2)
    assert by_step[450] > by_step[600] > by_step[e - 1] > base / 2
    assert [float(WarmupDecay.from_config(schedule.get_config())(t)) for t in steps] == got
    with pytest.raises(ValueError, match="decay='rnmt' needs 0 <= decay_start < decay_end"):
        WarmupDecay(1e-3, 10, 100, decay="rnmt", decay_start=50, decay_end=50)
    # A batch below the base one would make the warmup fall, below zero after 2 warmups.
    with pytest.raises(ValueError, match="replicas >= 1"):
        WarmupDecay(1e-3, 10, 100, decay="rnmt", decay_start=50, decay_end=60, replicas=0.5)
    with pytest.raises(ConfigError, match=r"`train.decay: rnmt` needs `data.batch_size` >= "
                                          r"`train.base_batch_size`.*got 8 < 128"):
        load_config(os.path.join(REPO, "configs", "elmo_c.yaml"), ["data.batch_size=8"])
    train = TrainConfig(steps=1000, learning_rate=base, base_batch_size=32, warmup_steps=p,
                        decay="rnmt", decay_start_step=s, decay_end_step=e)
    optimizer = make_optimizer(train, 128)
    variable = keras.Variable(np.zeros(3, np.float32))
    optimizer.build([variable])
    for t in (0, p, e):
        optimizer.iterations.assign(t)
        assert_close(float(optimizer.learning_rate), _rnmt(t, base, 4.0, p, s, e), n=16,
                     scale=base * n)


@pytest.mark.numerics
@pytest.mark.parametrize("batch_size,weight_decay", [(64, 0.0), (8, 0.01)])
def test_make_optimizer_scales_the_peak_with_the_batch_and_follows_the_config(batch_size,
                                                                              weight_decay):
    """The optimizer the training binary builds: peak `learning_rate * batch / base_batch_size`,
    the config's warmup, steps and decay, read at the optimizer's own step counter."""
    from tfeff.config.elmo import TrainConfig
    from tfeff.training.optimizers import make_optimizer

    train = TrainConfig(steps=TOTAL, learning_rate=1e-3, base_batch_size=32,
                        warmup_steps=WARMUP, decay="linear", final_learning_rate_fraction=FLOOR,
                        weight_decay=weight_decay)
    optimizer = make_optimizer(train, batch_size)
    assert type(optimizer) is (AdamW if weight_decay else Adam)
    assert optimizer.global_clipnorm == train.clipnorm
    # Adam's epsilon: Keras' for Adam, BERT's for AdamW, unless the config names one.
    assert optimizer.epsilon == (1e-6 if weight_decay else 1e-7)
    train.adam_epsilon = 1e-8
    assert make_optimizer(train, batch_size).epsilon == 1e-8
    train.adam_epsilon = 0.0
    peak = 1e-3 * batch_size / 32
    variable = keras.Variable(np.zeros(3, np.float32))
    optimizer.build([variable])
    for step in STEPS:
        optimizer.iterations.assign(step)
        want = _closed_form("linear", step) * peak / PEAK
        assert_close(float(optimizer.learning_rate), want, n=SCHEDULE_ROUNDINGS + 2,
                     scale=peak, err_msg=str(step))  # and the peak's scaling: 2


def _no_decay_expected(model):
    """Layer normalizations' scales and offsets (found by the layers that own them) and
    biases (`bias`, `mlm_bias`, ...): what BERT's recipe leaves undecayed."""
    expected = {id(v) for v in model.trainable_variables
                if v.name == "bias" or v.name.endswith("_bias")}
    for layer in model._flatten_layers(include_self=False, recursive=True):
        if isinstance(layer, keras.layers.LayerNormalization):
            expected |= {id(v) for v in layer.trainable_weights}
    return expected


def _demo_model(name, overrides):
    """The model of the family's first demo config, and that config."""
    from tests.training.test_families import DEMOS
    from tfeff.config import load_config

    config = load_config(DEMOS[name][0], overrides)
    family = FAMILIES[name]
    size = family.probe_vocabulary_size(config)
    vectors = (np.zeros((size, config.fasttext.dim), "float32")
               if family.uses_vectors(config) else None)
    return config, family.build_model(config, size, vectors)


@pytest.mark.numerics
@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_weight_decay_spares_biases_and_layer_norms_of_every_family(name):
    """One AdamW step with zero gradients moves only what weight decay touches: every
    kernel and embedding shrinks by `lr * weight_decay`, no bias or layer-norm variable moves."""
    from tfeff.training.optimizers import make_optimizer

    config, model = _demo_model(name, ["train.weight_decay=0.1"])
    model.build()
    variables = model.trainable_variables
    for v in variables:  # nonzero everywhere, so a decayed variable always moves
        v.assign(np.random.default_rng(0).uniform(0.5, 1.0, v.shape).astype(v.dtype))
    before = [keras.ops.convert_to_numpy(v).copy() for v in variables]
    optimizer = make_optimizer(config.train, config.data.batch_size)
    optimizer.build(variables)
    lr = float(optimizer.learning_rate)  # the rate of step 0, the step applied
    optimizer.apply([keras.ops.zeros_like(v) for v in variables], variables)
    spared = _no_decay_expected(model)
    assert spared, name  # every family has biases or layer norms
    for v, w in zip(variables, before):
        now = keras.ops.convert_to_numpy(v)
        if id(v) in spared:
            np.testing.assert_array_equal(now, w, err_msg=v.path)
        else:
            # w - w * (lr * weight_decay) in float32: 3 roundings of w (and 2 here).
            assert_close(now, w * (1 - 0.1 * lr), n=3, err_msg=v.path)


@pytest.mark.numerics
@pytest.mark.parametrize("clipnorm", [None, 1.0])
@pytest.mark.parametrize("kind", ["adam", "adamw", "adagrad"])
def test_sparse_gradient_with_repeated_rows_updates_as_its_dense_equivalent(kind, clipnorm):
    """A gather's gradient lists a row once per occurrence: row 1 three times here. The
    update squares the gradient, so its parts must be summed first (Keras alone adds
    1 + 9 + 1 to the second moment where the row's gradient squared is 9), and so does
    the global norm the gradient is clipped by."""
    values = tf.constant([[1.0, -1.0], [2.0, 0.5], [3.0, 1.0], [-1.0, 2.0]])
    sparse = tf.IndexedSlices(values, tf.constant([1, 3, 1, 1]), tf.constant([4, 2]))
    dense = tf.convert_to_tensor(sparse)
    np.testing.assert_array_equal(dense[1], [3.0, 2.0])

    def run(gradient):
        variable = keras.Variable(np.arange(8, dtype=np.float32).reshape(4, 2))
        optimizer = _optimizer(kind, clipnorm)
        optimizer.build([variable])
        step = tf.function(lambda g: optimizer.apply([g], [variable]))
        for _ in range(3):
            step(gradient)
        return keras.ops.convert_to_numpy(variable)

    sparse_result, dense_result = run(sparse), run(dense)
    assert not np.array_equal(dense_result, np.arange(8).reshape(4, 2))
    # Untouched rows stay; the repeated row's three parts are summed in another order
    # (2 roundings of the gradient), then both sides take the same steps (ROUNDINGS per
    # step, of the step's size 0.1 against the weights' 7), and the weights round (3).
    np.testing.assert_array_equal(sparse_result[[0, 2]], dense_result[[0, 2]])
    assert_close(sparse_result, dense_result, n=3 + 3 * (2 + ROUNDINGS[kind][1]) * 0.1 / 7,
                 scale=7.0)


def test_adagrad_follows_the_config_and_refuses_adams_keys():
    """`train.optimizer: adagrad` builds Adagrad with the config's initial accumulator and
    clipping; Adam's epsilon and AdamW's weight decay would have no effect and are refused."""
    from tfeff.config.elmo import TrainConfig
    from tfeff.training.optimizers import make_optimizer

    train = TrainConfig(optimizer="adagrad", adagrad_initial_accumulator=1.0, clipnorm=10.0,
                        decay="constant", warmup_steps=0, learning_rate=0.2,
                        base_batch_size=384)
    train.validate("train")
    optimizer = make_optimizer(train, 384)
    assert type(optimizer) is Adagrad and optimizer.global_clipnorm == 10.0
    variable = keras.Variable(np.zeros(3, np.float32))
    optimizer.build([variable])
    np.testing.assert_array_equal(optimizer._accumulators[0].numpy(), np.ones(3))
    assert float(optimizer.learning_rate) == pytest.approx(0.2, rel=1e-7)
    for key, value in (("adam_epsilon", 1e-6), ("weight_decay", 0.01)):
        refused = TrainConfig(optimizer="adagrad", **{key: value})
        with pytest.raises(ConfigError, match=rf"`train.{key}` is Adam's: it has no effect "
                                              r"with `train.optimizer: adagrad`"):
            refused.validate("train")
    with pytest.raises(ConfigError, match=r"train.optimizer"):
        TrainConfig(optimizer="sgd").validate("train")
