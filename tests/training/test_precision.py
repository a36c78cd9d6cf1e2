"""`train.precision` and `train.jit_compile`: XLA equals TensorFlow's graph step, mixed
precision keeps its sensitive parts in float32, and the layers XLA cannot compile are named.

The models are tiny (one layer, a few units, short sequences) and built from the demo
configs through their family, so each test checks the model a run would train.
"""

import os

import keras
import numpy as np
import pytest
import tensorflow as tf

from tests.conftest import REPO
from tfeff import layers as tfeff_layers
from tfeff import losses as tfeff_losses
from tfeff.config import ConfigError
from tfeff.config import load_config
from tfeff.testing.numerics import assert_close
from tfeff.training import get_family
from tfeff.training import precision

VOCABULARY = 60
# Tiny sizes for the demo config of any family: each key the config has is set (no
# family names: a new family's demo shrinks too). Dropout off: the same step twice.
TINY = {"model.num_layers": 1, "model.units": 8, "model.projection_dim": 16,
        "model.hidden_dim": 16, "model.num_heads": 2, "model.intermediate_dim": 32,
        "model.dropout_rate": 0.0, "model.use_cudnn": False, "model.mask_accumulation": 2,
        "model.adaptive_cutoffs": [20, 40], "model.num_sampled": 20, "fasttext.dim": 8,
        "data.max_sequence_length": 8, "data.batch_size": 4,
        "data.max_predictions_per_seq": 2}
_MISSING = object()


def _has(config, key):
    for part in key.split("."):
        config = getattr(config, part, _MISSING)
    return config is not _MISSING


def _yaml(value):
    return str(value).lower() if isinstance(value, bool) else str(value)


def present(config, settings):
    """`key=value` overrides of `settings` for the keys `config` has."""
    return [f"{key}={_yaml(value)}" for key, value in settings.items() if _has(config, key)]


def tiny_config(demo, *overrides):
    path = os.path.join(REPO, "configs", f"demo_{demo}.yaml")
    return load_config(path, present(load_config(path), TINY) + list(overrides))


def tiny_model(config):
    """The family's model of `config` at `VOCABULARY` ids (random fixed vectors), built."""
    family = get_family(config)
    vectors = None
    if family.uses_vectors(config):
        vectors = np.random.default_rng(1).normal(
            size=(VOCABULARY, config.fasttext.dim)).astype("float32")
        vectors[0] = 0.0
    keras.utils.set_random_seed(0)
    with precision.dtype_policy(config.train.precision):
        model = family.build_model(config, VOCABULARY, vectors)
        model.build()
    return model


def tiny_batch(config, seed=0):
    """The family's example batch of `config`'s shape (`Family.example_batch`)."""
    d = config.data
    return get_family(config).example_batch(config, VOCABULARY, batch_size=d.batch_size,
                                            length=d.max_sequence_length, seed=seed)


def loss_and_gradients(model, batch):
    """The training loss of `batch` and its dense gradients, as Keras' step computes them."""
    with tf.GradientTape() as tape:
        y_pred = model(batch, training=True)
        loss = model.compute_loss(x=batch, y_pred=y_pred, training=True)
    grads = tape.gradient(loss, model.trainable_variables)
    return loss, [tf.convert_to_tensor(g) for g in grads]


# One model per family (CoRe's relaxed BERT: anchor attention, factorized feed-forward),
# about 5 s each; the other compilable ELMo output layers and the standard BERT run with
# `make test-slow`. With each, the roundings (tfeff/testing/numerics.py) of its loss's longest path
# at the TINY sizes: an LSTM step (gates: a dot of 16 + 16, sigmoids and tanh, the cell,
# the projection: a dot of 8: ~55) on a path of 8 steps and the layer (~500), the output
# and the loss (a softmax over 60 or vMF, the mean of 64 targets: ~150); masked ELMo two
# mask sets of 8 steps (~1050); a transformer layer (projections 16, scores 8, softmax over
# 8, context 8, output 16, two layer norms of ~40, feed-forward 16 and 32, gelu: ~220), the
# embeddings' layer norm, the head (~80 or vMF) and the loss (log-softmax over 60: ~70).
_SLOW = pytest.mark.slow
XLA_MODELS = [
    pytest.param("elmo_c", (), 650, id="elmo_c"),
    pytest.param("bert_core", ("core.coarse_steps=0", "core.plateau_patience=0"), 450,
                 id="bert_relaxed"),
    pytest.param("masked_elmo", (), 1050, id="masked_elmo"),
    pytest.param("elmo_a", (), 650, id="elmo_a", marks=_SLOW),
    pytest.param("elmo_sub", (), 650, id="elmo_sub", marks=_SLOW),
    pytest.param("bert", (), 450, id="bert", marks=_SLOW),
    pytest.param("transformer_lm", ("model.num_anchors=2",), 450, id="transformer_lm_anchors",
                 marks=_SLOW),
]


def _gradient_scale(path, gradients):
    """The size of the terms of the gradient of `path` (`gradients`: path -> gradient).

    Its own largest value, except for attention's query and key: their gradient goes
    through the softmax's Jacobian p (dL/dp - sum p dL/dp), which cancels terms of the size
    of the value projection's gradient (dL/dp_j = dL/dcontext . v_j) down to 1e-2 of it.
    """
    own = float(np.max(np.abs(gradients[path])))
    layer, projection, weight = (path.rsplit("/", 2) + ["", ""])[:3]
    if projection in ("query", "key"):
        return max(own, float(np.max(np.abs(gradients[f"{layer}/value/{weight}"]))))
    return own


@pytest.mark.numerics
@pytest.mark.parametrize("demo, overrides, n", XLA_MODELS)
def test_xla_loss_and_gradients_equal_eager(demo, overrides, n):
    config = tiny_config(demo, *overrides)
    model = tiny_model(config)
    assert not precision.jit_blockers(model), demo
    batch = tiny_batch(config)
    # The same random draws (e.g. the relaxed attention's anchors) in both runs.
    state = [(v, v.numpy()) for v in model.non_trainable_variables]
    eager_loss, eager_grads = loss_and_gradients(model, batch)
    for v, value in state:
        v.assign(value)
    xla_loss, xla_grads = tf.function(loss_and_gradients, jit_compile=True)(model, batch)
    assert np.isfinite(float(eager_loss)) and float(eager_loss) > 0
    assert_close(float(xla_loss), float(eager_loss), n=n, err_msg="loss")
    assert len(xla_grads) == len(eager_grads) == len(model.trainable_variables)
    # A gradient: the path forward and back, and a weight's sum over the 64 rows.
    gradients = {v.path: g.numpy() for v, g in zip(model.trainable_variables, eager_grads)}
    for v, a in zip(model.trainable_variables, xla_grads):
        assert_close(a.numpy(), gradients[v.path], n=2 * n + 64,
                     scale=_gradient_scale(v.path, gradients), err_msg=v.path)
    assert any(float(tf.reduce_max(tf.abs(g))) > 1e-4 for g in eager_grads)  # not all zero


@pytest.mark.parametrize("demo", ["elmo_sampled", "elmo_fixed"])
def test_layers_xla_cannot_compile_are_named_before_any_data(demo, tmp_path):
    config = tiny_config(demo, "train.jit_compile=true")
    family = get_family(config)
    with pytest.raises(ConfigError, match=r"`train.jit_compile: true`, but the ELMo model has "
                       r"layers that XLA cannot compile: SampledSoftmax `(fixed_)?sampled_softmax"
                       r"`: TensorFlow's candidate sampler has no XLA kernel\. Use "
                       r"train.jit_compile: auto"):
        family.check_compilation(config)
    # The built model says the same; `auto` falls back to a tf.function, `false` is false.
    model = tiny_model(config)
    assert [what for what, _ in precision.jit_blockers(model)] == [
        f"SampledSoftmax `{model.output_head.name}`"]
    assert precision.resolve_jit_compile("auto", model, "ELMo") is False
    assert precision.resolve_jit_compile(False, model, "ELMo") is False
    # The binary's path: nothing is written before the check.
    from tfeff.training import pretrain

    model_dir = tmp_path / "m"
    with pytest.raises(ConfigError, match="SampledSoftmax"):
        pretrain(config, str(model_dir), verbose=0)
    assert not model_dir.exists() or not os.listdir(model_dir)


def test_auto_compiles_a_model_that_can_and_determinism_turns_it_off():
    model = tiny_model(tiny_config("elmo_sub"))
    assert precision.resolve_jit_compile("auto", model, "ELMo") is True
    assert precision.resolve_jit_compile(True, model, "ELMo") is True
    assert precision.resolve_jit_compile("auto", model, "ELMo", deterministic=True) is False
    # CoRe's two phases are both checked (relaxed, then standard).
    core = tiny_config("bert_core", "train.jit_compile=true")
    assert core.two_phase
    probes = get_family(core).probe_models(core)
    assert [m.backbone.is_relaxed for m in probes] == [True, False]
    get_family(core).check_compilation(core)


def test_dtype_policy_scope_builds_mixed_models_and_restores_the_global_policy():
    before = keras.config.dtype_policy().name
    with pytest.raises(RuntimeError, match="inside"):
        with precision.dtype_policy("mixed_bfloat16"):
            assert keras.config.dtype_policy().name == "mixed_bfloat16"
            raise RuntimeError("inside")
    assert keras.config.dtype_policy().name == before == "float32"
    model = tiny_model(tiny_config("elmo_c", "train.precision=mixed_bfloat16"))
    assert keras.config.dtype_policy().name == "float32"
    layers = list(model._flatten_layers(include_self=True, recursive=True))
    trained = [layer for layer in layers if layer.weights]
    assert trained and all(layer.dtype_policy.name == "mixed_bfloat16" for layer in trained)
    assert all(w.dtype == "float32" for w in model.weights)  # weights stay float32
    with pytest.raises(ValueError, match="precision='float64'"):
        with precision.dtype_policy("float64"):
            pass


# -- the numerically sensitive parts stay float32 under mixed_bfloat16

def _bf16(x):
    return tf.cast(tf.constant(x, tf.float32), tf.bfloat16)


@pytest.mark.numerics
@pytest.mark.parametrize("loss", ["cosine", "l2", "vmf"])
def test_continuous_losses_and_the_vmf_normalizer_compute_in_float32(loss):
    """The continuous output's per-position loss of bfloat16 predictions is float32 and
    equals the float32 loss of the same (bfloat16-rounded) values bit for bit; the vMF
    normalizer of a bfloat16 kappa is computed in float64 and rounded once to float32."""
    rng = np.random.default_rng(0)
    with precision.dtype_policy("mixed_bfloat16"):
        head = tfeff_layers.ContinuousOutput(16, loss=loss)
        head.build((None, 16))
    y_true, y_pred = _bf16(rng.normal(size=(8, 16))), _bf16(3 * rng.normal(size=(8, 16)))
    out = head.position_loss(y_true, y_pred)
    assert out.dtype == tf.float32
    reference = {"cosine": tfeff_losses.cosine_distance, "l2": tfeff_losses.l2_distance,
                 "vmf": tfeff_losses.vmf_nll}[loss](tf.cast(y_true, tf.float32),
                                                    tf.cast(y_pred, tf.float32))
    # The same function of the same float32 values on the same kernels.
    np.testing.assert_array_equal(out.numpy(), reference.numpy())
    kappa = _bf16([0.5, 40.0, 300.0])
    log_c = tfeff_losses.log_vmf_normalizer(tf.cast(kappa, tf.float32), 16)
    assert log_c.dtype == tf.float32
    exact = tfeff_losses.log_vmf_normalizer(tf.cast(kappa, tf.float64), 16).numpy()
    assert_close(log_c.numpy(), exact, n=1)  # the float64 value, rounded to float32


# TensorFlow picks oneDNN's bfloat16 matrix product from the CPU's own features (AVX-512
# BF16 here); where `ONEDNN_MAX_CPU_ISA` caps oneDNN below AVX-512 (`make test-isa`
# emulating an older CPU), oneDNN lacks that kernel and the process dies (a segmentation
# fault; `TF_ENABLE_ONEDNN_OPTS=0` runs it). An artifact of the emulation: a CPU without
# AVX-512 never takes that path.
_ONEDNN_BELOW_AVX512 = os.environ.get("ONEDNN_MAX_CPU_ISA", "").upper() in (
    "SSE41", "AVX", "AVX2", "AVX2_VNNI", "AVX2_VNNI_2")


@pytest.mark.numerics
@pytest.mark.skipif(_ONEDNN_BELOW_AVX512, reason="TensorFlow's bfloat16 matmul crashes with "
                    "ONEDNN_MAX_CPU_ISA below AVX-512")
@pytest.mark.parametrize("layer", ["full", "adaptive", "sampled"])
def test_softmax_log_sum_exp_is_float32_under_mixed_bfloat16(layer):
    """Target log-probabilities and the full log-distribution come out float32, and equal
    a float64 log-softmax of the layer's own (bfloat16) logits: a bfloat16 log-sum-exp
    over 300 classes would be off by about 1e-2."""
    vocabulary, dim = 300, 32
    with precision.dtype_policy("mixed_bfloat16"):
        head = {"full": lambda: tfeff_layers.FullSoftmax(vocabulary),
                "adaptive": lambda: tfeff_layers.AdaptiveSoftmax(vocabulary, [100, 200]),
                "sampled": lambda: tfeff_layers.SampledSoftmax(vocabulary, 20, seed=0)}[layer]()
        head.build((None, dim), (None,))
    rng = np.random.default_rng(0)
    x = _bf16(4 * rng.normal(size=(6, dim)))
    targets = tf.constant(rng.integers(0, vocabulary, size=(6,)), tf.int32)
    log_probs = head.log_prob(x)
    assert log_probs.dtype == tf.float32
    target_log_probs = head(x, targets, training=False)
    assert target_log_probs.dtype == tf.float32
    # Both paths take the same bfloat16 logits (the same rows times the same weights) and
    # differ by a float32 log-softmax: max, subtraction, exp, a sum of up to 300, log,
    # subtraction (adaptive: two over at most 102): 310 roundings of the log-sum-exp's
    # size. A bfloat16 log-sum-exp would be off by 2**-8 of it.
    scale = float(np.abs(log_probs.numpy()).max())
    assert_close(target_log_probs.numpy(),
                 np.take_along_axis(log_probs.numpy(), targets.numpy()[:, None], 1)[:, 0],
                 n=310, scale=scale)
    sampled, _ = head(x, targets, training=True, return_loss=True)
    assert sampled.dtype == tf.float32
    # The full distribution normalizes in float32: probabilities sum to 1 (to float32: an
    # error d in every log-probability moves the sum by at most d).
    assert_close(np.exp(log_probs.numpy().astype("float64")).sum(-1), 1.0, n=310,
                 scale=scale)
    if layer == "full":
        logits = tf.cast(tf.matmul(x, tf.cast(head.embeddings, tf.bfloat16),
                                   transpose_b=True), tf.float64)
        logits += tf.cast(head.bias, tf.float64)
        exact = (logits - tf.reduce_logsumexp(logits, -1, keepdims=True)).numpy()
        # The same bfloat16 logits, the bias added and the log-softmax in float32.
        assert_close(log_probs.numpy(), exact, n=311, scale=scale)


@pytest.mark.numerics
def test_layer_norms_normalize_in_float32_under_mixed_bfloat16():
    """Each model's layer norms run under the mixed policy and normalize in float32:
    inputs with a large common offset (1000 + noise of 0.5) keep their variance, which
    bfloat16 arithmetic (8 bits of mantissa: steps of 4 at 1000) would lose."""
    norms = []
    for demo in ("elmo_c", "bert", "masked_elmo"):
        model = tiny_model(tiny_config(demo, "train.precision=mixed_bfloat16"))
        found = [layer for layer in model._flatten_layers(include_self=False, recursive=True)
                 if isinstance(layer, keras.layers.LayerNormalization)]
        assert found, demo
        norms += found
    assert all(n.dtype_policy.name == "mixed_bfloat16" for n in norms)
    norm = norms[0]
    rng = np.random.default_rng(0)
    x32 = 1000.0 + 0.5 * rng.normal(size=(4, norm.gamma.shape[0]))
    x = tf.cast(tf.cast(x32, tf.float32), tf.bfloat16)
    out = norm(x)
    assert out.dtype == tf.bfloat16
    xf = tf.cast(x, tf.float64).numpy()
    expected = (xf - xf.mean(-1, keepdims=True)) / np.sqrt(xf.var(-1, keepdims=True)
                                                          + norm.epsilon)
    expected = expected * norm.gamma.numpy() + norm.beta.numpy()
    # The output's rounding to bfloat16 (1), and the float32 normalization: means and
    # variances of 16 values of 1000 (~40 roundings of 1000) divided by a deviation of
    # 0.5, 40 * 2**-24 * 2000 = 1.2 * 2**-8: 2 roundings of bfloat16 at the output's size
    # (at least 1). bfloat16 arithmetic would lose the deviation altogether.
    assert_close(tf.cast(out, tf.float32).numpy(), expected, n=2, dtype="bfloat16",
                 scale=max(1.0, float(np.abs(expected).max())))


def test_mixed_bfloat16_training_tracks_float32():
    """Twenty Adam steps of a tiny ELMo-C on a fixed set of batches: the bfloat16 loss
    curve stays within 0.03 (absolute; the loss starts near 1) of float32's at every
    step. bfloat16 keeps 8 bits of mantissa (relative rounding 2**-9 = 0.002 per
    operation); the weights and the loss are float32, so the curves differ by the
    rounding of the activations, a few 0.001 per step that does not compound here. A
    broken mixed model (a bfloat16 loss or weights, a lost update) moves it by more
    than 0.03, and both curves must fall."""
    curves = {}
    for policy in ("float32", "mixed_bfloat16"):
        config = tiny_config("elmo_c", f"train.precision={policy}")
        model = tiny_model(config)
        model.compile(optimizer=keras.optimizers.Adam(0.01), jit_compile=False)
        curves[policy] = [float(model.train_on_batch(tiny_batch(config, seed=step % 4)))
                          for step in range(20)]
    f32, bf16 = np.array(curves["float32"]), np.array(curves["mixed_bfloat16"])
    assert f32[-4:].mean() < 0.9 * f32[:4].mean() and bf16[-4:].mean() < 0.9 * bf16[:4].mean()
    np.testing.assert_allclose(bf16, f32, atol=0.03)
    assert not np.array_equal(bf16, f32)  # the policy did change the arithmetic


# -- through the pretraining entry point (a few steps of tiny models on a tiny corpus)

CORPUS = ["data.synthetic.num_train_sentences=400", "data.synthetic.num_heldout_sentences=40",
          "data.synthetic.lexicon_size=100", "data.wordpiece_vocabulary_size=200",
          "train.warmup_steps=1", "train.log_every=2", "train.checkpoint_every=2",
          "train.validation_steps=0"]
EVAL = {"eval.max_targets": 50, "eval.max_batches": 1, "data.shuffle_buffer": 100}


def run_config(demo, *overrides):
    return tiny_config(demo, *CORPUS, *present(tiny_config(demo), EVAL), *overrides)


# Each family once per mixed precision, CoRe with its two phases and the merge between
# them. XLA compilation costs 5-30 s per model here: the default suite trains without it
# (the XLA step is checked against eager above, and by the float16 resume below), the
# compiled runs are `make test-slow`'s.
_CORE = ("core.coarse_steps=2", "core.plateau_patience=0")
RUNS = [  # ELMo: the float16 resume below
    pytest.param("bert_core", "mixed_float16", False, _CORE, id="core-fp16"),
    pytest.param("masked_elmo", "mixed_bfloat16", False, (), id="masked_elmo-bf16"),
    pytest.param("elmo_sub", "mixed_float16", True, (), id="elmo-fp16-xla", marks=_SLOW),
    pytest.param("bert_core", "mixed_bfloat16", "auto", _CORE, id="core-bf16-auto",
                 marks=_SLOW),
    pytest.param("masked_elmo", "mixed_float16", True, (), id="masked_elmo-fp16-xla",
                 marks=_SLOW),
]


@pytest.mark.parametrize("demo, policy, jit, overrides", RUNS)
def test_every_family_pretrains_with_precision_and_jit_compile(demo, policy, jit, overrides,
                                                               tmp_path, caplog):
    from tfeff.training import pretrain
    from tfeff.training import restore_model

    config = run_config(demo, "train.steps=4", f"train.precision={policy}",
                        f"train.jit_compile={str(jit).lower()}", *overrides)
    model_dir = str(tmp_path / "m")
    with caplog.at_level("INFO"):
        results = pretrain(config, model_dir, verbose=0)
    assert results["step"] == 4 and not results["preempted"]
    histories = results["history"].values() if config.family == "bert" else [results["history"]]
    assert all(np.isfinite(h["loss"]).all() for h in histories), results["history"]
    assert f"({policy}); step" in caplog.text
    if jit:
        assert "compiled with XLA" in caplog.text
        assert "runs as a tf.function" not in caplog.text
    else:
        assert "runs as a tf.function (train.jit_compile: false)" in caplog.text
        assert "compiled with XLA" not in caplog.text
    assert load_config(os.path.join(model_dir, "config.yaml")).train.precision == policy
    assert keras.config.dtype_policy().name == "float32"  # nothing leaked
    # The checkpoint restores with its optimizer (float16: the loss scale too).
    restored = restore_model(model_dir, with_optimizer=True)
    assert restored.step == 4
    if policy == "mixed_float16":
        assert isinstance(restored.optimizer, keras.optimizers.LossScaleOptimizer)
        assert any("dynamic_scale" in v.path for v in restored.optimizer.variables)


@pytest.mark.parametrize("jit", [False, pytest.param(True, marks=_SLOW)])
def test_float16_resumes_jit_may_change_and_precision_may_not(jit, tmp_path, caplog):
    """A mixed_float16 ELMo run resumes, loss scale and all (with XLA switched on in the
    `slow` variant); the config may change `train.jit_compile` (the checkpoint is the
    same either way), but another precision is refused once a checkpoint exists, naming
    the key, before anything is written."""
    from tfeff.training import pretrain
    from tfeff.training.model_directory import resolve_config

    model_dir = str(tmp_path / "m")
    first = run_config("elmo_sub", "train.steps=2", "train.precision=mixed_float16")
    pretrain(first, model_dir, verbose=0)
    reader = tf.train.load_checkpoint(os.path.join(model_dir, "checkpoints", "ckpt-2"))
    names = set(reader.get_variable_to_dtype_map())
    scale = [n for n in names if "dynamic_scale" in n]
    assert len(scale) == 1 and reader.get_tensor(scale[0]) >= 1.0, sorted(names)
    with caplog.at_level("INFO"):
        results = pretrain(run_config("elmo_sub", "train.steps=4",
                                      "train.precision=mixed_float16",
                                      f"train.jit_compile={str(jit).lower()}"),
                           model_dir, verbose=0)
    assert results["step"] == 4 and "Restored" in caplog.text
    assert np.isfinite(results["history"]["loss"]).all()
    assert ("compiled with XLA" in caplog.text) == jit
    after = tf.train.load_checkpoint(os.path.join(model_dir, "checkpoints", "ckpt-4"))
    assert set(after.get_variable_to_dtype_map()) == names  # XLA or not: the same checkpoint
    resolve_config(run_config("elmo_sub", "train.steps=4", "train.precision=mixed_float16",
                              f"train.jit_compile={'auto' if jit else 'true'}"), model_dir)
    written = open(os.path.join(model_dir, "config.yaml"), "rb").read()
    for other in ("float32", "mixed_bfloat16"):
        with pytest.raises(ConfigError, match=r"holds checkpoints up to step 4; these keys "
                           rf"differ .*train.precision: 'mixed_float16' -> '{other}' \(a run "
                           "keeps the precision it started with"):
            pretrain(run_config("elmo_sub", "train.steps=6", f"train.precision={other}"),
                     model_dir, verbose=0)
    assert open(os.path.join(model_dir, "config.yaml"), "rb").read() == written
