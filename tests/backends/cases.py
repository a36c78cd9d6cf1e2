"""Backend-neutral computations whose outputs must agree across Keras backends.

Imported by `tests/backends/test_backend_parity.py` under TensorFlow (in the
pytest process) and run as a script under each other backend
(`KERAS_BACKEND=jax|torch python tests/backends/cases.py OUT.npz`), on the
same NumPy inputs and weights; the test compares each with TensorFlow. This
module imports no TensorFlow of its own; run as a script, it makes TensorFlow
unimportable first (`without_tensorflow`).
"""

import sys

import numpy as np

SEED = 0


def inputs():
    rng = np.random.default_rng(SEED)
    return {
        "y_true": rng.normal(size=(3, 5, 16)).astype("float32"),
        "y_pred": (4.0 * rng.normal(size=(3, 5, 16))).astype("float32"),
        "hidden": rng.normal(size=(3, 5, 8)).astype("float32"),
        "kappa": np.array([1e-3, 0.5, 3.0, 40.0, 900.0], "float32"),
        "targets": rng.integers(0, 20, size=(3, 5)).astype("int32"),
        "mask": rng.random((3, 5)) > 0.3,
        "stack": rng.normal(size=(3, 4, 5, 8)).astype("float32"),
    }


def _set_weights(layer, seed, scale=1.0):
    rng = np.random.default_rng(seed)
    layer.set_weights([(scale * rng.normal(size=w.shape)).astype("float32")
                       for w in layer.weights])


def _np(x):
    import keras

    return keras.ops.convert_to_numpy(x)


def _value_and_grad(fn, x):
    """`fn(x)` and d sum(fn(x)) / dx as NumPy, with the backend's own autodiff."""
    import keras

    backend = keras.backend.backend()
    if backend == "jax":
        import jax

        value = jax.jit(fn)(x)
        grad = jax.jit(jax.grad(lambda v: keras.ops.sum(fn(v))))(x)
    elif backend == "tensorflow":
        import tensorflow as tf

        x = tf.constant(x)
        with tf.GradientTape() as tape:
            tape.watch(x)
            value = fn(x)
            total = tf.reduce_sum(value)
        grad = tape.gradient(total, x)
    elif backend == "torch":
        import torch

        with torch.enable_grad():
            x = torch.tensor(x, requires_grad=True)
            value = fn(x)
            value.sum().backward()
        grad = x.grad
    else:
        raise ValueError(f"No gradient helper for backend {backend!r}")
    return keras.ops.convert_to_numpy(value), keras.ops.convert_to_numpy(grad)


def _run(fn):
    """`fn()`, a forward pass: eager on TensorFlow, one jax.jit on JAX (eager JAX
    compiles op by op, seconds per model; both paths trace the same keras.ops code),
    under `torch.no_grad` on PyTorch (no autograd graph is recorded)."""
    import keras

    backend = keras.backend.backend()
    if backend == "jax":
        import jax

        return jax.jit(fn)()
    if backend == "torch":
        import torch

        with torch.no_grad():
            return fn()
    return fn()


def _compiled(fn):
    """`fn` compiled by the backend's XLA compiler (jax.jit; tf.function(jit_compile))."""
    import keras

    backend = keras.backend.backend()
    if backend == "jax":
        import jax

        return jax.jit(fn)
    if backend == "tensorflow":
        import tensorflow as tf

        return tf.function(fn, jit_compile=True)
    return fn


def _jit_compile():
    """`compile(jit_compile=...)` of the compiled train steps: XLA on TensorFlow and JAX.
    On PyTorch True means `torch.compile`, whose tracing of a recurrent model costs
    minutes on a CPU; Keras' default there ("auto") is eager, the path compared."""
    import keras

    return keras.backend.backend() != "torch"


def losses(data):
    import keras

    from tfeff import losses

    out = {}
    for name, fn in losses.DISTANCES.items():
        value, grad = _value_and_grad(lambda p, fn=fn: fn(data["y_true"], p), data["y_pred"])
        out[f"{name}/value"], out[f"{name}/grad"] = value, grad
    value, grad = _value_and_grad(lambda k: losses.log_vmf_normalizer(k, 300), data["kappa"])
    out["log_c300/value"], out["log_c300/grad"] = value, grad
    reduced = losses.VonMisesFisherLoss(regularization1=0.02)(data["y_true"], data["y_pred"])
    out["vmf_loss/reduced"] = keras.ops.convert_to_numpy(reduced)
    return out


def continuous_output(data):
    import keras

    from tfeff.layers.continuous_output import ContinuousOutput

    layer = ContinuousOutput(16, loss="vmf", name="out")
    layer.build((None, None, 8))
    _set_weights(layer, SEED + 1)
    predicted = layer(data["hidden"])
    return {"predictions": keras.ops.convert_to_numpy(predicted),
            "vmf_position_loss": keras.ops.convert_to_numpy(
                layer.position_loss(data["y_true"], predicted))}


def softmax_layers(data):
    """FullSoftmax (values, loss, distribution, argmax, gradient) and SampledSoftmax's
    exact path on the same weights."""
    from tfeff.layers.full_softmax import FullSoftmax
    from tfeff.layers.sampled_softmax import SampledSoftmax

    out = {}
    full = FullSoftmax(20, name="full")
    full.build((None, 8))
    _set_weights(full, SEED + 2)
    log_probs, loss = full(data["hidden"], data["targets"], mask=data["mask"],
                           return_loss=True)
    out["full/target_log_probs"], out["full/loss"] = _np(log_probs), _np(loss)
    out["full/log_prob"] = _np(full.log_prob(data["hidden"]))
    out["full/predict"] = _np(full.predict(data["hidden"]))
    value, grad = _value_and_grad(
        lambda h: full(h, data["targets"], mask=data["mask"], return_loss=True)[0],
        data["hidden"])
    out["full/grad_hidden"] = grad
    sampled = SampledSoftmax(20, 5, name="sampled", seed=0)
    sampled.build((None, 8))
    _set_weights(sampled, SEED + 2)
    log_probs, loss = sampled(data["hidden"], data["targets"], return_loss=True,
                              training=False)
    out["sampled_exact/target_log_probs"], out["sampled_exact/loss"] = (_np(log_probs),
                                                                       _np(loss))
    return out


def adaptive_softmax(data):
    """AdaptiveSoftmax: the gathered tails (TensorFlow, eager PyTorch) against the
    static-shape path (JAX), with a capacity that fits (compacted rows), one that overflows
    (every row), and none; and the static path itself on every backend (PyTorch takes it
    under `torch.compile`)."""
    from tfeff.layers.adaptive_softmax import AdaptiveSoftmax

    rng = np.random.default_rng(SEED + 9)
    hidden = rng.normal(size=(4, 6, 16)).astype("float32")
    # Ids 0-29: shortlist [0, 8), tail 0 [8, 16), tail 1 [16, 30); tail 1 holds 3 of 24.
    targets = rng.integers(0, 16, size=(4, 6)).astype("int32")
    targets[0, 1], targets[2, 3], targets[3, 5] = 17, 29, 20
    mask = np.ones((4, 6), bool)
    mask[1, 4:] = False
    out = {}
    for name, capacity in (("fits", 0.25), ("overflows", 0.05), ("none", None)):
        layer = AdaptiveSoftmax(30, [8, 16], div_value=2.0, head_bias=True,
                                tail_capacity=capacity, name="adaptive")
        layer.build((None, 16))
        _set_weights(layer, SEED + 10, scale=0.5)
        log_probs, loss = _run(lambda layer=layer: layer(hidden, targets, mask=mask,
                                                         return_loss=True))
        out[f"{name}/target_log_probs"], out[f"{name}/loss"] = _np(log_probs), _np(loss)
        static = _run(lambda layer=layer: layer._static_target_log_probs(hidden, targets,
                                                                         mask)[0])
        out[f"{name}/static_target_log_probs"] = _np(static)
        _, grad = _value_and_grad(
            lambda h, layer=layer: layer(h, targets, mask=mask, return_loss=True)[0], hidden)
        out[f"{name}/grad_hidden"] = grad
        # Compiled (jax.jit / XLA): the static path's cond and capacity must trace.
        compiled = _compiled(lambda h, layer=layer: layer(h, targets, mask=mask,
                                                          return_loss=True)[0])
        out[f"{name}/compiled_target_log_probs"] = _np(compiled(hidden))
    out["log_prob"] = _np(layer.log_prob(hidden))
    out["predict"] = _np(layer.predict(hidden))
    return out


def mixing_layers(data):
    """ScalarMix (with layer norm, masked) and FactorizedDense."""
    from tfeff.layers.factorized_dense import FactorizedDense
    from tfeff.layers.scalar_mix import ScalarMix

    mix = ScalarMix(4, layer_norm=True, name="mix")
    mix.build(data["stack"].shape)
    _set_weights(mix, SEED + 3)
    dense = FactorizedDense(6, 3, activation="gelu", name="factorized")
    dense.build((None, None, 8))
    _set_weights(dense, SEED + 4)
    return {"scalar_mix": _np(mix(data["stack"], mask=data["mask"])),
            "factorized_dense": _np(dense(data["hidden"]))}


def bert(data):
    """Standard and CoRe-relaxed BERT (anchor attention, factorized FFNs): outputs and the
    masked-LM + NSP loss on the same weights and batch; the relaxed one merged."""
    from tfeff.models import Bert
    from tfeff.models import BertBackbone
    from tfeff.models.relaxed_merge import probe_inputs

    out = {}
    for name, relaxed in (("standard", None), ("relaxed", {"num_anchors": 3, "ffn_rank": 4})):
        backbone = BertBackbone(40, num_layers=2, hidden_dim=16, num_heads=2,
                                intermediate_dim=24, max_sequence_length=20, dropout_rate=0.0,
                                relaxed=relaxed, name="bert_backbone")
        model = Bert(backbone, use_nsp=True, name="bert")
        model.build()
        _set_weights(model, SEED + 5)
        batch = probe_inputs(model, batch_size=3, length=14, seed=SEED)
        p = batch["masked_positions"].shape[1]
        rng = np.random.default_rng(SEED + 6)
        batch["masked_ids"] = rng.integers(5, 40, size=(3, p)).astype("int32")
        batch["masked_weights"] = np.ones((3, p), "float32")
        batch["nsp_labels"] = np.array([0, 1, 0], "int32")
        def forward(model=model, batch=batch):
            outputs = model(batch, training=False)
            return outputs, model.compute_loss(x=batch, y_pred=outputs)

        outputs, loss = _run(forward)
        for key in ("sequence_output", "mlm_logits", "nsp_logits"):
            value = _np(outputs[key])
            if key == "sequence_output":  # padded positions are not outputs
                value = value * batch["padding_mask"][..., None]
            out[f"{name}/{key}"] = value
        out[f"{name}/loss"] = _np(loss)
    # CoRe's merge on this backend (its check at full float32 matmul precision): the
    # standard model it returns scores as on the others.
    from tfeff.models.relaxed_merge import merge_relaxed_bert

    merged = merge_relaxed_bert(model)
    out["merged/mlm_logits"] = _np(_run(lambda: merged(batch, training=False))["mlm_logits"])
    return out


def elmo(data):
    """ELMo-C (fixed table in, continuous vMF out) and a subword ELMo with a tied full
    softmax: outputs, the representation stack and the loss. On TensorFlow the softmax
    loss gathers the predictable rows, elsewhere it masks them: the same number."""
    from tfeff.models import ElmoBackbone
    from tfeff.models import ElmoLM

    rng = np.random.default_rng(SEED + 7)
    table = rng.normal(size=(30, 6)).astype("float32")
    ids = rng.integers(2, 30, size=(3, 7)).astype("int32")
    ids[:, 0], ids[1, 5:], ids[2, 3] = 2, 0, 1  # <s>, padding, an <unk> target
    out = {}
    for name, backbone_kwargs, kwargs in (
            ("elmo_c", dict(embedding_table=table), dict(output_loss="vmf")),
            ("subword", dict(vocabulary_size=30, input_embedding="trainable",
                             token_embedding_dim=8), dict(output_layer="full", tie_output=True))):
        backbone = ElmoBackbone(num_layers=2, units=12, projection_dim=8, dropout_rate=0.0,
                                name="elmo_backbone", **backbone_kwargs)
        model = ElmoLM(backbone, seed=0, name="elmo", **kwargs)
        model.build()
        # Weights of a trained network's scale: N(0, 1) recurrences are chaotic, and
        # float32 rounding differences grow through them.
        _set_weights(model, SEED + 8, scale=0.3)
        def forward(model=model):
            outputs = model(ids, training=False)
            stack, _, _ = model.backbone.encode(model.backbone.token_embedding(ids), ids > 0)
            return (outputs["forward"], outputs["backward"], stack,
                    model.compute_loss(x=ids, y_pred=outputs, training=False))

        for key, value in zip(("forward", "backward", "stack", "loss"), _run(forward)):
            out[f"{name}/{key}"] = _np(value)
    return out


def masked_bilstm(data):
    """MaskedBiLSTM's portable path (right-padded rows, an empty row, given initial
    states): every layer, the final states, and the gradient wrt the input; and the
    variant without projection (Keras LSTMs)."""
    from tfeff.layers.masked_bi_lstm import MaskedBiLSTM

    rng = np.random.default_rng(SEED + 11)
    x = rng.normal(size=(3, 6, 8)).astype("float32")
    mask = np.arange(6)[None, :] < np.array([6, 4, 0])[:, None]
    states = [rng.normal(size=(3, d)).astype("float32") for d in (4, 10, 4, 10) * 2]
    layer = MaskedBiLSTM(10, 4, num_layers=2, use_cudnn=False, return_state=True,
                         return_all_layers=True, name="masked_bilstm")
    layer.build(x.shape)
    _set_weights(layer, SEED + 12, scale=0.3)
    stack, *final = _run(lambda: layer(x, mask=mask, initial_state=states))
    out = {"stack": _np(stack)}
    out.update({f"state_{i}": _np(s) for i, s in enumerate(final)})
    _, grad = _value_and_grad(lambda v: layer(v, mask=mask)[0][:, -1], x)
    out["grad_input"] = grad
    compiled = _compiled(lambda v: layer(v, mask=mask)[0])
    out["compiled_stack"] = _np(compiled(x))
    plain = MaskedBiLSTM(4, None, num_layers=1, use_cudnn=False, name="plain")
    plain.build(x.shape)
    _set_weights(plain, SEED + 13, scale=0.3)
    out["plain"] = _np(_run(lambda: plain(x, mask=mask)))
    return out


def masked_elmo(data):
    """Masked ELMo on a training batch of 2 mask sets with carried (TBPTT) states: the
    sets' outputs and loss, the stored states, and one SGD update of `train_on_batch`
    (TensorFlow's own set-by-set train_step against Keras' step elsewhere)."""
    import keras

    from tfeff.models import MaskedElmo
    from tfeff.models import MaskedElmoBackbone

    rng = np.random.default_rng(SEED + 14)
    b, k, p, n, vocabulary = 3, 2, 2, 7, 30
    ids = rng.integers(5, vocabulary, size=(b, n)).astype("int32")
    ids[1, 5:] = 0
    positions = np.stack([rng.choice(5, p * k, replace=False) for _ in range(b)])
    positions = positions.reshape(b, k, p).astype("int32")
    masked = np.repeat(ids[:, None], k, axis=1)
    np.put_along_axis(masked, positions, 4, axis=2)
    batch = {"masked_token_ids": masked, "masked_positions": positions,
             "masked_ids": np.take_along_axis(ids[:, None].repeat(k, 1), positions, 2),
             "masked_weights": np.ones((b, k, p), "float32"),
             "padding_mask": (ids > 0).astype("int32"), "reset": np.array([0, 1, 0], "int32")}
    backbone = MaskedElmoBackbone(vocabulary, num_layers=2, units=10, projection_dim=4,
                                  dropout_rate=0.0, use_cudnn=False, name="masked_elmo_backbone")
    model = MaskedElmo(backbone, tbptt_batch_size=b, name="masked_elmo")
    model.build()
    _set_weights(model, SEED + 15, scale=0.3)
    outputs = model(batch, training=True)  # also stores set 0's final states
    out = {"masked_output": _np(outputs["masked_output"]),
           "loss": _np(model.compute_loss(x=batch, y_pred=outputs, training=True)),
           "stored_state": _np(model.carried_states[1])}
    model.compile(optimizer=keras.optimizers.SGD(0.5), jit_compile=_jit_compile())
    out["train_loss"] = np.asarray(model.train_on_batch(batch))
    out["updated_kernel"] = _np(model.backbone.encoder.cells[1][0]["kernel"])
    out["updated_embedding"] = _np(model.backbone.token_embedding.embeddings)
    return out


def anchor_draws(data):
    """`hash_uniform`'s draws (uint32 arithmetic, masked int64 on PyTorch) with a
    Python seed, a negative int32 seed tensor and compiled, and the anchors that
    AnchorMultiHeadAttention chooses at inference and in training (a key from its
    seed generator). Compared bit for bit: the keys say "exact"."""
    from tfeff.layers.anchor_multi_head_attention import AnchorMultiHeadAttention
    from tfeff.backend.hashing import hash_uniform

    index = np.arange(600, dtype="int32").reshape(20, 30)
    seed = (7, 2**33 + 3)
    draws = _run(lambda: (hash_uniform(index, seed),
                          hash_uniform(index, np.array([-5, 2**31 - 1], "int32"))))
    out = {"exact/python_seed": _np(draws[0]), "exact/int32_seed": _np(draws[1]),
           "exact/compiled": _np(_compiled(lambda i: hash_uniform(i, seed))(index))}
    mask = np.arange(12)[None, :] < np.array([12, 7, 2])[:, None]
    layer = AnchorMultiHeadAttention(num_heads=2, key_dim=4, num_anchors=4, seed=11,
                                     name="anchors")
    for mode, training in (("inference", False), ("training", True)):
        indices, valid = _run(lambda training=training: layer.select_anchors(
            mask, training=training))
        valid = _np(valid)
        # Slots beyond a short row's positions are masked; their index is arbitrary.
        out[f"exact/{mode}_anchors"] = np.where(valid, _np(indices), -1)
        out[f"exact/{mode}_valid"] = valid.astype("int32")
    return out


def alone_embedding(data):
    """AloneEmbedding: the filters of ids up to 2**31 (hashed in int64 on TensorFlow, in
    uint32 on JAX), every lookup (binary and real filters), the table, `attend` and its
    gradient; the static-shape unique ids of JAX against tf.unique."""
    from tfeff.layers.alone_embedding import AloneEmbedding

    rng = np.random.default_rng(SEED + 16)
    ids = rng.integers(0, 60, size=(4, 9)).astype("int32")
    ids[0, :4] = 7  # repeats
    far = np.array([0, 1, 2**31 - 1, 123_456_789, 2**30 + 5], "int32")
    out = {}
    for filter_type in ("binary", "real"):
        layers = {}
        for lookup in ("unique", "token", "table"):
            layer = AloneEmbedding(60, 6, 8, 12, num_codebooks=3, codebook_size=37,
                                   filter_type=filter_type, seed=2**33 + 5, lookup=lookup,
                                   table_chunk_size=25, name=f"alone_{lookup}")
            layer.build()
            _set_weights(layer, SEED + 17, scale=0.3)
            layers[lookup] = layer
            out[f"{filter_type}/{lookup}"] = _np(layer(ids))
        layer = layers["table"]
        out[f"{filter_type}/codebooks"] = _np(layer.codebooks)
        out[f"{filter_type}/far_filters"] = _np(layer.filters(far))
        out[f"{filter_type}/table"] = _np(layer.embedding_table())
        value, grad = _value_and_grad(lambda h, layer=layer: layer.attend(h),
                                      data["hidden"][..., :6])
        out[f"{filter_type}/attend"], out[f"{filter_type}/attend_grad"] = value, grad
        out[f"{filter_type}/compiled_unique"] = _np(
            _compiled(lambda v, layer=layers["unique"]: layer(v))(ids))
    return out


CASES = {"losses": losses, "continuous_output": continuous_output,
         "softmax_layers": softmax_layers, "mixing_layers": mixing_layers, "bert": bert,
         "elmo": elmo, "adaptive_softmax": adaptive_softmax, "masked_bilstm": masked_bilstm,
         "masked_elmo": masked_elmo, "anchor_draws": anchor_draws,
         "alone_embedding": alone_embedding}


# The cases that compute in float64 (the vMF normalizer): also run with JAX's x64.
FLOAT64_CASES = ("losses", "continuous_output")


def run_all(names=None):
    data = inputs()
    out = {}
    for case, fn in CASES.items():
        if names is not None and case not in names:
            continue
        for key, value in fn(data).items():
            out[f"{case}/{key}"] = np.asarray(value)
    return out


def without_tensorflow():
    """Run where TensorFlow is unimportable (the script puts None in `sys.modules`,
    which fails its import): the neutral core imports and builds all three models;
    `import *` gives every other layer; the TensorFlow-only layer raises an ImportError
    naming TensorFlow and the backend, by attribute and by from-import; eager checks
    refuse bad inputs with tfeff's messages. Returns the lines the test compares."""
    import keras

    import tfeff.config  # noqa: F401
    import tfeff.layers
    import tfeff.losses  # noqa: F401
    import tfeff.models

    lines = []
    namespace = {}
    exec("from tfeff.layers import *", namespace)  # noqa: S102 (the star import itself)
    lines.append(str(sorted(name for name in namespace if name[0].isupper())))
    lines.append(str(sorted(tfeff.layers.__all__)))
    for get in (lambda: tfeff.layers.FastTextEmbedding,
                lambda: __import__("tfeff.layers", fromlist=["FastTextEmbedding"])):
        try:
            get()
        except ImportError as e:
            lines.append(f"{type(e).__name__} {' '.join(str(e).split())}")
    from tfeff.models import Bert, BertBackbone, ElmoBackbone, ElmoLM, MaskedElmo
    from tfeff.models import MaskedElmoBackbone

    MaskedElmo(MaskedElmoBackbone(30, num_layers=1, units=8, projection_dim=4,
                                  input_embedding="alone", alone={"intermediate_dim": 8}),
               output_layer="adaptive", adaptive_cutoffs=[10], tbptt_batch_size=2).build()
    Bert(BertBackbone(40, num_layers=1, hidden_dim=16, num_heads=2, intermediate_dim=24,
                      max_sequence_length=20, relaxed={"num_anchors": 3, "ffn_rank": 4})).build()
    ElmoLM(ElmoBackbone(30, input_embedding="trainable", num_layers=1, units=8,
                        projection_dim=4), output_layer="adaptive", adaptive_cutoffs=[10]).build()
    lines.append(f"{keras.backend.backend()} {sorted(tfeff.layers.TENSORFLOW_ONLY)}")

    def refusal(call):
        try:
            call()
        except ValueError as e:
            return " ".join(str(e).split())
        return "no error"

    # Off TensorFlow, eager targets are range-checked in Python, with the same message.
    head = tfeff.layers.FullSoftmax(5, name="head")
    for bad in (5, -1):
        lines.append(refusal(lambda: head(np.ones((2, 3), "float32"), np.array([0, bad]))))
    # SampledSoftmax trains here: negatives with replacement from a SeedGenerator,
    # log-uniform.
    from tfeff.backend.sampling import log_uniform_probability
    from tfeff.backend.sampling import log_uniform_sample

    sampled = tfeff.layers.SampledSoftmax(50, 10, seed=0, name="sampled")
    hidden, targets = np.ones((4, 8), "float32"), np.array([1, 2, 3, 40])
    losses = [float(sampled(hidden, targets, training=True, return_loss=True)[1])
              for _ in "ab"]
    draws = np.asarray(log_uniform_sample(400_000, 50, keras.random.SeedGenerator(1)))
    gap = np.abs(np.bincount(draws, minlength=50) / draws.size
                 - np.asarray(log_uniform_probability(np.arange(50), 50))).max()
    lines.append(f"{losses[0] != losses[1]} {all(np.isfinite(losses))} {0 < gap < 3e-3}")
    alone = tfeff.layers.AloneEmbedding(5, 4, 4, 4, name="alone")
    for lookup in ("unique", "token", "table"):
        alone.lookup = lookup
        lines.append(refusal(lambda: alone(np.array([[0, 5]]))))
    # Eager (concrete) left-padded masks and targets of another shape are refused here too.
    bi = tfeff.layers.MaskedBiLSTM(4, 2, num_layers=1, use_cudnn=False, name="bi")
    lines.append(refusal(lambda: bi(np.ones((2, 3, 4), "float32"),
                                    mask=np.array([[1, 1, 1], [0, 1, 1]]))))
    lines.append(refusal(lambda: head(np.ones((2, 3), "float32"), np.zeros((3,), "int32"))))
    blocked = "tensorflow" in sys.modules and sys.modules["tensorflow"] is None
    lines.append(f"tensorflow: {'unimportable' if blocked else 'importable'}")
    return lines


if __name__ == "__main__":
    # Writes OUT.npz with every case under the backend of KERAS_BACKEND, as
    # "float32/..."; on JAX also the float64 cases with jax_enable_x64 (`keras_x64`), as
    # "x64/..."; and the lines of `without_tensorflow`: TensorFlow is unimportable in this
    # process, so every case also shows that the neutral core runs without it.
    sys.modules["tensorflow"] = None
    import keras

    results = {"backend": np.array(keras.backend.backend()),
               "without_tensorflow": np.array(without_tensorflow())}
    results.update({f"float32/{k}": v for k, v in run_all().items()})
    if keras.backend.backend() == "jax":
        from tfeff.testing.numerics import keras_x64

        with keras_x64():  # jax_enable_x64 (and Keras' float64 types)
            results.update({f"x64/{k}": v for k, v in run_all(FLOAT64_CASES).items()})
    np.savez(sys.argv[1], **results)
