"""TransformerLM: exact causality, the loss against a float64 NumPy reference, the
embedding stack, `.keras` round trips, training, anchor attention, and JAX."""

import json
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf
from scipy.special import erf

from tests.conftest import REPO
from tests.conftest import backend_env
from tests.models import transformer_lm_backend
from tests.models.float64 import float64_models
from tests.models.float64 import tf_gelu_roundings
from tests.models.lm_roundings import assert_normalized
from tests.models.lm_tasks import language_model
from tfeff.models.from_config import transformer_lm as transformer_lm_from_config
from tfeff.models.language_model import direction_pairs
from tfeff.models.transformer_lm import TransformerLM
from tfeff.models.transformer_lm_backbone import reverse_padded
from tfeff.testing.numerics import assert_close

TINY = dict(num_layers=2, hidden_dim=8, num_heads=2, intermediate_dim=12, max_sequence_length=10,
            dropout_rate=0.0)
# <s> w w w </s> rows, right-padded, one <unk> (id 1) target.
IDS = np.array([[2, 5, 9, 1, 7, 3, 0, 0],
                [2, 6, 4, 8, 11, 5, 10, 3],
                [2, 7, 3, 0, 0, 0, 0, 0]], "int32")


OTHER_BACKENDS = ("jax", "torch")


@pytest.fixture(scope="module", autouse=True)
def backend_runs(tmp_path_factory):
    """The JAX and PyTorch subprocesses (tests/models/transformer_lm_backend.py), started
    with the module so that they work while the TensorFlow tests do;
    `test_other_backends_match_tensorflow_and_train` collects them."""
    runs = {}
    for backend in OTHER_BACKENDS:
        out = tmp_path_factory.mktemp(backend) / f"{backend}.npz"
        runs[backend] = (subprocess.Popen(
            [sys.executable, "-m", "tests.models.transformer_lm_backend", str(out)],
            env=backend_env(backend), cwd=REPO, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True), out)
    yield runs
    for process, _ in runs.values():
        if process.poll() is None:
            process.kill()
            process.communicate()


def _table(tmp_path=None, vocabulary_size=12, dim=6, seed=1):
    table = np.random.default_rng(seed).normal(size=(vocabulary_size, dim)).astype("float32")
    table[:2] = 0  # <pad>, <unk>
    if tmp_path is None:
        return table
    path = str(tmp_path / "vectors.npy")
    np.save(path, table)
    return path


def _model(**kwargs):
    options = {**TINY, "input_embedding": "trainable", "output_layer": "full", "seed": 0,
               **kwargs}
    model = language_model(TransformerLM, 12, **options)
    model.build()
    return model


def _np(x):
    return keras.ops.convert_to_numpy(x)


def _top_roundings(model, n):
    """float32 roundings of a TransformerLM's top layer on `n` tokens along the longest
    path, counted as tfeff.models.relaxed_merge.rounding_counts counts a BERT's: the token
    layer (projection, layer norm), then per layer the attention (with the rotation, or
    the anchors' scores, softmaxes and product, where used) and the FFN."""
    backbone = model.backbone
    d, f, k, m = backbone.hidden_dim, backbone.intermediate_dim, \
        backbone.hidden_dim // backbone.num_heads, backbone.num_anchors
    norm = 2 * d + 8
    token = backbone.token_projection.kernel.shape[0] + 1 + norm
    rotary = 5 * n + 8 if backbone.position_embedding_type == "rotary" else 0
    anchors = 3 * k + 2 * m + n + 23 if m else 0
    attention = (d + 1) + rotary + anchors + (k + 1) + (n + 6) + n + (d + 1) + 1 + norm
    ffn = (d + 1) + 8 + (f + 1) + 1 + norm
    return token + backbone.num_layers * (attention + ffn)


# -- causality -----------------------------------------------------------------------------

CAUSAL_VARIANTS = {
    "learned": {},
    "rotary": {"position_embedding": "rotary"},
    "anchors_random": {"position_embedding": "rotary", "num_anchors": 3},
    "anchors_strided": {"num_anchors": 4, "anchor_selection": "strided"},
    "forward_only": {"bidirectional": False},
}


@pytest.mark.numerics
@pytest.mark.parametrize("variant", [
    # Strided anchors (18 s) under `make test-slow`: the default suite checks the anchors
    # with the default, random selection.
    pytest.param(name, marks=pytest.mark.slow) if name == "anchors_strided" else name
    for name in sorted(CAUSAL_VARIANTS)])
def test_outputs_never_see_the_other_side(variant):
    """Forward output t is bit-identical when any id after t changes, backward output t
    when any id before t changes; and the same (to rounding) when the other side is cut
    off (its length and padding do not leak either)."""
    model = _model(**CAUSAL_VARIANTS[variant])
    ids = IDS[1:2]  # one full row of 8
    n = ids.shape[1]
    base = {k: _np(v) for k, v in model(ids).items()}
    stack = _np(model.embedding_layers(ids, ids > 0))
    h = model.backbone.hidden_dim
    rng = np.random.default_rng(0)
    for t in range(n):
        after, before = ids.copy(), ids.copy()
        after[0, t + 1:] = (ids[0, t + 1:] - 4 + rng.integers(1, 8, size=n - t - 1)) % 8 + 4
        before[0, :t] = (ids[0, :t] - 4 + rng.integers(1, 8, size=t)) % 8 + 4
        assert ((after != ids).sum(), (before != ids).sum()) == (n - t - 1, t)
        out = {k: _np(v) for k, v in model(after).items()}
        np.testing.assert_array_equal(out["forward"][0, t], base["forward"][0, t])
        new_stack = _np(model.embedding_layers(after, after > 0))
        np.testing.assert_array_equal(new_stack[0, :, t, :h], stack[0, :, t, :h])
        if model.backbone.bidirectional:
            out = {k: _np(v) for k, v in model(before).items()}
            np.testing.assert_array_equal(out["backward"][0, t], base["backward"][0, t])
            new_stack = _np(model.embedding_layers(before, before > 0))
            np.testing.assert_array_equal(new_stack[0, :, t, h:], stack[0, :, t, h:])
        else:
            assert set(out) == {"forward"}
        # The prefix alone (padded to the same width): forward outputs at <= t unchanged,
        # to float32 rounding (another padding mask: not the same roundings everywhere,
        # AVX2 kernels differ by a few ulps; a leak would differ by far more).
        prefix = np.where(np.arange(n) <= t, ids, 0)
        assert_close(_np(model(prefix)["forward"])[0, :t + 1], base["forward"][0, :t + 1],
                     n=_top_roundings(model, n))
        if model.backbone.bidirectional:
            suffix = np.zeros_like(ids)
            suffix[0, :n - t] = ids[0, t:]  # the ids from t on, shifted to the front
            assert_close(_np(model(suffix)["backward"])[0, :n - t], base["backward"][0, t:],
                         n=_top_roundings(model, n))


def test_reverse_padded_reverses_each_rows_tokens_only():
    x = np.arange(3 * 5 * 2, dtype="float32").reshape(3, 5, 2)
    lengths = np.array([5, 2, 0])
    out = _np(reverse_padded(x, lengths))
    np.testing.assert_array_equal(out[0], x[0, ::-1])
    np.testing.assert_array_equal(out[1], np.concatenate([x[1, 1::-1], x[1, 2:]]))
    np.testing.assert_array_equal(out[2], x[2])
    np.testing.assert_array_equal(_np(reverse_padded(out, lengths)), x)


def test_left_padded_ids_are_refused():
    model = _model()
    with pytest.raises(ValueError, match="right-padded"):
        model(np.array([[0, 2, 5, 3]], "int32"))


# -- the loss against NumPy -------------------------------------------------------------------

def _w(variable):
    return np.asarray(_np(variable), np.float64)


def _layer_norm(x, norm, epsilon):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + epsilon) * _w(norm.gamma) + _w(norm.beta)


def _rotate(x, wavelength=10000.0):
    """RoFormer's rotate-half rotation of `x` `(n, heads, dim)` by positions 0..n-1."""
    n, _, dim = x.shape
    half = dim // 2
    angles = np.arange(n)[:, None] * wavelength ** (-np.arange(0, dim, 2) / dim)[None, :]
    cos, sin = np.cos(angles)[:, None, :], np.sin(angles)[:, None, :]
    x1, x2 = x[..., :half], x[..., half:]
    return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)


def _reference_stack(model, direction, token):
    """One stack on one sequence's token layer `(n, d)` (already in its reading order)."""
    eps = model.backbone.layer_norm_epsilon
    n = len(token)
    x = token
    if model.backbone.position_embedding(direction) is not None:
        x = x + _w(model.backbone.position_embedding(direction).embeddings)[:n]
    causal = np.tril(np.ones((n, n), bool))
    for layer in model.backbone.stack_layers(direction):
        att = layer.self_attention
        q = np.einsum("nd,dhk->nhk", x, _w(att.query_dense.kernel)) + _w(att.query_dense.bias)
        k = np.einsum("nd,dhk->nhk", x, _w(att.key_dense.kernel)) + _w(att.key_dense.bias)
        v = np.einsum("nd,dhk->nhk", x, _w(att.value_dense.kernel)) + _w(att.value_dense.bias)
        if model.backbone.position_embedding_type == "rotary":
            q, k = _rotate(q), _rotate(k)
        scores = np.einsum("nhk,mhk->hnm", q, k) / np.sqrt(q.shape[-1])
        scores = np.where(causal[None], scores, -np.inf)
        p = np.exp(scores - scores.max(-1, keepdims=True))
        p /= p.sum(-1, keepdims=True)
        attended = np.einsum("hnm,mhk,hkd->nd", p, v, _w(att.output_dense.kernel))
        x = _layer_norm(x + attended + _w(att.output_dense.bias), layer.attention_norm, eps)
        hidden = x @ _w(layer.intermediate_dense.kernel) + _w(layer.intermediate_dense.bias)
        hidden = hidden * 0.5 * (1.0 + erf(hidden / np.sqrt(2.0)))  # GELU (erf)
        ffn = hidden @ _w(layer.output_dense.kernel) + _w(layer.output_dense.bias)
        x = _layer_norm(x + ffn, layer.output_norm, eps)
    return x


def _reference_loss(model, ids):
    """The model's loss in float64 NumPy, one sentence at a time (no padding anywhere),
    and the largest magnitude of its logits."""
    table = _w(model.backbone.token_embedding.embeddings)
    projection = model.backbone.token_projection
    head = model.output_head
    totals = {d: [0.0, 0] for d in model.backbone.directions}
    largest = 0.0
    for row in ids:
        tokens = row[row > 0]
        token = table[tokens] @ _w(projection.kernel) + _w(projection.bias)
        token = _layer_norm(token, model.backbone.embeddings_norm,
                            model.backbone.layer_norm_epsilon)
        for direction in model.backbone.directions:
            ordered = tokens if direction == "forward" else tokens[::-1]
            hidden = _reference_stack(
                model, direction, token if direction == "forward" else token[::-1])
            logits = hidden[:-1] @ _w(head.embeddings).T + _w(head.bias)
            largest = max(largest, np.abs(logits).max())
            log_probs = logits - np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(
                -1, keepdims=True)) - logits.max(-1, keepdims=True)
            targets = ordered[1:]
            keep = targets >= 2
            totals[direction][0] -= log_probs[np.arange(len(targets)), targets][keep].sum()
            totals[direction][1] += keep.sum()
    return sum(total / count for total, count in totals.values()), largest


def _assert_reference_loss(model, position_embedding):
    """The model (float64) against `_reference_loss`. Computed in float32 whatever the
    model's dtype: the rotation (rounding_counts' 5 n + 8 per layer), and the loss from the
    logits on: their cast and bias, a log-softmax over V ids (V + 10), the sum over 13
    targets and its division, the sum of the directions; TensorFlow's GELU has a float32
    constant (tf_gelu_roundings), and the float64 rest adds under one. Each target's
    loss, log-sum-exp minus a logit, is up to twice the largest logit and log V, per
    direction."""
    loss = float(model.compute_loss(x=IDS, y_pred=model(IDS), training=False))
    expected, largest = _reference_loss(model, IDS)
    v, n = model.backbone.vocabulary_size, IDS.shape[1]
    rotary = 5 * n + 8 if position_embedding == "rotary" else 0
    stack = model.backbone.num_layers * (
        rotary + tf_gelu_roundings(model.backbone.intermediate_dim)) + 1
    assert_close(loss, expected, n=stack + 2 + v + 10 + 13 + 3,
                 scale=len(model.backbone.directions) * (2 * largest + np.log(v)))
    # `direction_loss="mean"`: the directions' mean (ELMo's bilm-tf), one division more.
    model.direction_loss = "mean"
    mean = float(model.compute_loss(x=IDS, y_pred=model(IDS), training=False))
    model.direction_loss = "sum"
    assert_close(mean, expected / len(model.backbone.directions), n=stack + 2 + v + 10 + 13 + 4,
                 scale=2 * largest + np.log(v))


@pytest.mark.numerics
@pytest.mark.parametrize("position_embedding", ["learned", "rotary"])
def test_loss_equals_a_float64_numpy_reference(position_embedding):
    with float64_models():
        model = _model(position_embedding=position_embedding)
        forward = _model(position_embedding=position_embedding, bidirectional=False)
    # Weights of a trained model's scale, so that every part matters.
    rng = np.random.default_rng(3)
    model.set_weights([(0.4 * rng.normal(size=w.shape)).astype("float32")
                       for w in model.weights])
    _assert_reference_loss(model, position_embedding)
    # Forward-only: the forward direction's term alone.
    forward.set_weights([w for w, v in zip(model.get_weights(), model.weights)
                         if "backward" not in v.path])
    _assert_reference_loss(forward, position_embedding)


VARIANTS = {
    "continuous": {"output_layer": "continuous", "input_embedding": "fixed"},
    "continuous_vmf": {"output_layer": "continuous", "output_loss": "vmf"},
    "full": {},
    "adaptive": {"output_layer": "adaptive", "adaptive_cutoffs": [6, 9],
                 "adaptive_div_value": 2.0},
    "sampled": {"output_layer": "sampled", "num_sampled": 5},
    "fixed": {"output_layer": "fixed", "num_sampled": 5, "input_embedding": "fixed"},
    "tied": {"tie_output": True, "token_embedding_dim": 6},
    "alone_tied": {"input_embedding": "alone", "tie_output": True,
                   "alone": {"intermediate_dim": 8, "seed": 1, "dropout_rate": 0.0}},
}


@pytest.mark.numerics
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_every_output_layer_gives_the_mean_target_loss_and_gradients(variant):
    model = _model(embedding_table=_table(), **VARIANTS[variant])
    out = model(IDS)
    loss = float(model.compute_loss(x=IDS, y_pred=out, training=False))
    head = model.output_head
    expected, largest = 0.0, 0.0
    for direction, features, targets in direction_pairs({k: _np(v) for k, v in out.items()},
                                                        IDS):
        # A real token predicts each target: not <pad>/<unk>, and not the backward </s>
        # (read first, never predicted) from the padding after it.
        source = IDS[:, :-1] if direction == "forward" else IDS[:, 1:]
        keep = (targets >= 2) & (source > 0)
        if model.is_continuous:
            per = head.position_loss(_table()[targets], features)
        else:
            log_probs = _np(model.log_prob(features))
            largest = max(largest, np.abs(log_probs).max())
            per = -np.take_along_axis(log_probs, targets[..., None], -1)[..., 0]
        per = np.asarray(per, np.float64)
        largest = max(largest, np.abs(per).max())
        expected += per[keep].mean()
    # float32, from the same features by another path: the logits (a product over the
    # hidden size, bias) and a log-softmax over V = 12 (two levels, adaptive: V + 20
    # roundings of terms up to max|log p|), or the continuous loss of 6-dim vectors (about
    # 30); the mean over 13 targets; the sum of the two directions.
    assert_close(loss, expected, n=model.backbone.hidden_dim + 2 + 12 + 20 + 13 + 2,
                 scale=2 * largest)
    counts = {d: float(c) for d, (_, c) in model.direction_losses(IDS, out).items()}
    # Per direction 5 + 7 + 2 targets less one <unk> (the backward one read backwards).
    assert counts == {"forward": 13.0, "backward": 13.0}
    if not model.is_continuous:
        assert_normalized(_np(model.log_prob(out["forward"])))
    else:
        with pytest.raises(ValueError, match="no distribution"):
            model.log_prob(out["forward"])
    with tf.GradientTape() as tape:
        train_loss = model.compute_loss(x=IDS, y_pred=model(IDS, training=True))
    grads = tape.gradient(train_loss, model.trainable_weights)
    assert np.isfinite(float(train_loss))
    missing = [w.path for w, g in zip(model.trainable_weights, grads) if g is None]
    assert missing == [] or (variant == "adaptive" and all("tail" in m for m in missing)), missing
    if variant.endswith("tied"):
        paths = [w.path for w in model.weights]
        assert len(paths) == len(set(paths)) and not any("full_softmax/emb" in p for p in paths)


# -- the embedding stack and the evaluation surface -----------------------------------------------

@pytest.mark.parametrize("bidirectional", [True, False])
def test_embedding_layers(bidirectional):
    model = _model(bidirectional=bidirectional, embedding_table=_table())
    h = model.backbone.hidden_dim
    directions = 2 if bidirectional else 1
    assert (model.embedding_num_layers, model.embedding_dim, model.backbone.vocabulary_size,
            model.max_embedding_tokens) == (3, directions * h, 12, 8)
    stack = _np(model.embedding_layers(IDS, IDS > 0))
    assert stack.shape == (3, 3, 8, directions * h)
    # Layer 0: the token layer (embedding, projection, layer norm), duplicated.
    token = _np(model.backbone.embeddings_norm(model.backbone.token_projection(
        model.backbone.token_embedding(IDS)))) * (IDS > 0)[..., None]
    np.testing.assert_array_equal(stack[:, 0], np.concatenate([token] * directions, -1))
    per_token = stack.transpose(0, 2, 1, 3)  # (batch, time, layers, d)
    assert (per_token[IDS == 0] == 0).all() and (np.abs(per_token[IDS > 0]).sum(-1) > 0).all()
    # The top layer is what the (untied full) softmax scores, per direction: the same
    # computation, bit-identical.
    out = model(IDS)
    np.testing.assert_array_equal(stack[:, -1, :, :h], _np(out["forward"]))
    if bidirectional:
        np.testing.assert_array_equal(stack[:, -1, :, h:], _np(out["backward"]))
        (f, f_out, f_ids), (b, b_out, b_ids) = direction_pairs(out, IDS)
        assert (f, b) == ("forward", "backward")
        np.testing.assert_array_equal(_np(f_out), _np(out["forward"])[:, :-1])
        np.testing.assert_array_equal(f_ids, IDS[:, 1:])
        np.testing.assert_array_equal(_np(b_out), _np(out["backward"])[:, 1:])
        np.testing.assert_array_equal(b_ids, IDS[:, :-1])
    else:
        assert [name for name, _, _ in direction_pairs(out, IDS)] == ["forward"]
    # A given padding mask is honoured the same way.
    np.testing.assert_array_equal(_np(model.embedding_layers(IDS, IDS != 0)), stack)


def test_learned_positions_refuse_longer_sequences():
    model = _model()
    with pytest.raises(ValueError, match="10 learned positions"):
        model(np.full((1, 11), 5, "int32"))
    assert _model(position_embedding="rotary").max_embedding_tokens == 8


# -- saving -------------------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs", [
    dict(output_layer="continuous", input_embedding="fixed", num_anchors=3, seed=7),
    dict(input_embedding="alone", tie_output=True, position_embedding="rotary",
         bidirectional=False, alone={"intermediate_dim": 8, "dropout_rate": 0.0}),
], ids=["continuous_anchors", "alone_tied_forward"])
def test_keras_file_round_trip_gives_identical_outputs(kwargs, tmp_path):
    model = _model(embedding_table=_table(tmp_path), **kwargs)
    rng = np.random.default_rng(5)
    model.set_weights([(0.3 * rng.normal(size=w.shape)).astype("float32")
                       for w in model.weights])
    config = model.get_config()
    json.dumps(config)
    assert TransformerLM.from_config(config).get_config() == config
    path = str(tmp_path / "lm.keras")
    model.save(path)
    loaded = keras.models.load_model(path)
    assert isinstance(loaded, TransformerLM)
    for key, value in model(IDS).items():
        np.testing.assert_array_equal(_np(loaded(IDS)[key]), _np(value))
    np.testing.assert_array_equal(_np(loaded.embedding_layers(IDS, IDS > 0)),
                                  _np(model.embedding_layers(IDS, IDS > 0)))
    np.testing.assert_array_equal(
        float(loaded.compute_loss(x=IDS, y_pred=loaded(IDS), training=False)),
        float(model.compute_loss(x=IDS, y_pred=model(IDS), training=False)))


# -- training -----------------------------------------------------------------------------------

def _counting_sentences(count, seed):
    """<s> a a+1 a+2 ... </s>: words 4..11 counting up (mod 8) from a random start, 3 to 6
    words; right-padded to 8. Next and previous words are certain but for the first."""
    rng = np.random.default_rng(seed)
    ids = np.zeros((count, 8), "int32")
    for row in ids:
        length = rng.integers(3, 7)
        start = rng.integers(0, 8)
        row[:length + 2] = [2, *(4 + (start + np.arange(length)) % 8), 3]
    return ids


# Random anchors train in the default suite on JAX and PyTorch (transformer_lm_backend's
# fit); here under `make test-slow`.
@pytest.mark.parametrize("kwargs", [
    dict(position_embedding="rotary"),
    pytest.param(dict(num_anchors=4, anchor_selection="random"), marks=pytest.mark.slow),
], ids=["standard", "anchors"])
def test_a_few_steps_lower_the_loss_on_a_learnable_task(kwargs):
    keras.utils.set_random_seed(0)
    model = _model(**kwargs)
    train, heldout = _counting_sentences(256, 0), _counting_sentences(64, 1)

    def heldout_loss():
        return float(model.compute_loss(x=heldout, y_pred=model(heldout), training=False))

    before = heldout_loss()
    model.compile(optimizer=keras.optimizers.Adam(0.02), jit_compile=False)
    history = model.fit(train, batch_size=32, epochs=4, shuffle=False, verbose=0)
    after = heldout_loss()
    assert np.isfinite(history.history["loss"]).all()
    # From about 2 ln(12) ~ 5 nats (two directions): most of the certain steps learned.
    assert after < 0.6 * before, (before, after, history.history["loss"])
    if kwargs.get("num_anchors"):
        # The same weights run standard causal attention exactly (CoRe's conversion).
        exact = model(heldout, exact_attention=True)
        anchored = model(heldout)
        assert not np.allclose(_np(exact["forward"]), _np(anchored["forward"]))


# -- the config builder and other backends ---------------------------------------------------

def test_builder_maps_the_config(tmp_path):
    from tfeff.config.transformer_lm import TransformerLMConfig
    from tfeff.config.base import from_dict

    config = from_dict(TransformerLMConfig, {
        "family": "transformer_lm",
        "data": {"synthetic": {}, "max_sequence_length": 12},
        "model": {"num_layers": 1, "hidden_dim": 8, "num_heads": 2, "intermediate_dim": 16,
                  "bidirectional": False, "num_anchors": 2, "position_embedding": "rotary"},
        "train": {"seed": 4}})
    model = transformer_lm_from_config(config, 12, _table(tmp_path))
    backbone = model.backbone
    assert (backbone.num_layers, backbone.hidden_dim, backbone.num_heads,
            backbone.intermediate_dim, backbone.max_sequence_length, backbone.bidirectional,
            backbone.num_anchors, backbone.seed, backbone.position_embedding_type,
            backbone.input_embedding, backbone.name) == (
                1, 8, 2, 16, 12, False, 2, 4, "rotary", "fixed", "transformer_lm_backbone")
    assert (model.seed, model.output_layer_type, model.name) == (
        4, "continuous", "transformer_lm")
    config.model.max_sequence_length = 30
    assert transformer_lm_from_config(
        config, 12, _table(tmp_path)).backbone.max_sequence_length == 30


@pytest.mark.numerics
@pytest.mark.parametrize("backend", OTHER_BACKENDS)
def test_other_backends_match_tensorflow_and_train(backend, backend_runs):
    """tests/models/transformer_lm_backend.py on JAX and PyTorch (outputs, stack, loss of
    three models with the same weights, in float64; a few `fit` steps) against the same
    script's cases here."""
    expected = transformer_lm_backend.run_cases()
    process, out = backend_runs[backend]
    stdout, stderr = process.communicate(timeout=600)
    assert process.returncode == 0, (stdout + stderr)[-4000:]
    other = dict(np.load(out))
    assert str(other.pop("backend")) == backend
    losses = other.pop("fit/loss")
    assert np.isfinite(losses).all() and losses[-1] < losses[0], losses
    assert other.keys() == expected.keys()
    for key, value in expected.items():
        name, output = key.split("/")
        n = transformer_lm_backend.float32_roundings(name)[
            "loss" if output == "loss" else "features"]
        assert_close(other[key], value, n=n, err_msg=key)
