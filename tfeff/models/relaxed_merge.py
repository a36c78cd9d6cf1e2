"""CoRe's weight merge: a relaxed `Bert` becomes the standard `Bert` it approximates.

Attention weights are copied (`AnchorMultiHeadAttention` has `MultiHeadAttention`'s
layout), each `FactorizedDense` becomes the `Dense` of kernel A B, every source tensor
is used exactly once and every shape is checked; the outputs are then checked in
float32 at full matrix-product precision (TF32 on recent NVIDIA GPUs alone rounds to
about 1e-3 of the largest output). Training (CoRe's in-process switch) and
`tfeff.convert` (which re-exports `merge_relaxed_bert`) both import it from below.
"""

import contextlib
import logging
import math
import re

import keras
import numpy as np

from tfeff.models.bert import Bert
from tfeff.models.bert_backbone import BertBackbone

# `.../intermediate_dense/kernel` <- `.../intermediate_dense/{input,output}_kernel`
_FACTORIZED = re.compile(r"^(.*/(?:intermediate_dense|output_dense))/kernel$")
# float32's unit roundoff: the check computes in float32 (`float32_compute`).
_FLOAT32_UNIT_ROUNDOFF = 2.0 ** -24
_LAMBDA = 10.0  # the probabilistic bound's (`check_tolerances`)


class ConversionError(ValueError):
    """The relaxed model could not be converted, or the result failed its check."""


def _strip(path, model):
    # A backbone built before its task has no task name in front.
    prefix = f"{model.name}/"
    return path[len(prefix):] if path.startswith(prefix) else path


def _merge_plan(relaxed, standard):
    """`{standard path: (value, [source paths])}`; raises on any unmatched tensor."""
    source = {_strip(v.path, relaxed): v for v in relaxed.weights}
    plan, used = {}, []
    for target in standard.weights:
        key = _strip(target.path, standard)
        match = _FACTORIZED.match(key)
        if key in source:
            value, sources = np.asarray(source[key].numpy()), [key]
        elif match and f"{match.group(1)}/input_kernel" in source:
            a_key, b_key = f"{match.group(1)}/input_kernel", f"{match.group(1)}/output_kernel"
            if b_key not in source:
                raise ConversionError(f"{a_key} has no matching {b_key} in the relaxed model")
            a = np.asarray(source[a_key].numpy(), np.float64)
            b = np.asarray(source[b_key].numpy(), np.float64)
            if a.shape[1] != b.shape[0]:
                raise ConversionError(
                    f"{a_key} {a.shape} and {b_key} {b.shape} do not chain (ranks differ)")
            value, sources = (a @ b).astype(target.dtype), [a_key, b_key]
        else:
            raise ConversionError(f"The standard model's {key} has no source in the relaxed model")
        if tuple(value.shape) != tuple(target.shape):
            raise ConversionError(
                f"Shape mismatch for {key}: relaxed {tuple(value.shape)} vs standard "
                f"{tuple(target.shape)}")
        plan[target.path] = (value, sources)
        used += sources
    duplicates = sorted({k for k in used if used.count(k) > 1})
    unused = sorted(set(source) - set(used))
    if duplicates:
        raise ConversionError(f"Source tensors used more than once: {duplicates}")
    if unused:
        raise ConversionError(f"Source tensors left unused: {unused}")
    return plan


def probe_inputs(model, batch_size=4, length=None, seed=0):
    """A fixed random batch (some rows padded) that exercises every output of `model`."""
    rng = np.random.default_rng(seed)
    encoder = model.backbone
    n = min(length or 32, encoder.max_sequence_length)
    low = min(5, encoder.vocabulary_size - 1)  # past the reserved ids when there are any
    ids = rng.integers(low, encoder.vocabulary_size, size=(batch_size, n)).astype("int32")
    lengths = np.linspace(n, max(2, n // 3), batch_size).astype(int)
    mask = np.arange(n)[None, :] < lengths[:, None]
    ids = np.where(mask, ids, 0).astype("int32")
    p = max(1, int(lengths.min()) // 2)
    positions = np.stack([rng.choice(length, size=p, replace=False) for length in lengths])
    return {
        "token_ids": ids,
        "segment_ids": (rng.random((batch_size, n)) < 0.5).astype("int32") * mask,
        "padding_mask": mask.astype("int32"),
        "masked_positions": positions.astype("int32"),
    }


@contextlib.contextmanager
def exact_float32_matmuls():
    """float32 matrix products at full precision (not TF32) inside the block."""
    backend = keras.backend.backend()
    if backend == "jax":
        import jax

        with jax.default_matmul_precision("highest"):
            yield
    elif backend == "torch":
        import torch

        saved = torch.get_float32_matmul_precision()
        torch.set_float32_matmul_precision("highest")
        try:
            yield
        finally:
            torch.set_float32_matmul_precision(saved)
    elif backend == "tensorflow":
        import tensorflow as tf

        saved = tf.config.experimental.tensor_float_32_execution_enabled()
        tf.config.experimental.enable_tensor_float_32_execution(False)
        try:
            yield
        finally:
            tf.config.experimental.enable_tensor_float_32_execution(saved)
    else:
        yield


@contextlib.contextmanager
def float32_compute(*models):
    """Inside the block every layer of `models` computes in float32. Variables are
    float32 under every policy tfeff trains with, so nothing is copied (float32 copies
    cost seconds of eager initializers on JAX)."""
    layers = [layer for model in models
              for layer in model._flatten_layers(include_self=True, recursive=True)]
    saved = [layer.dtype_policy for layer in layers]
    try:
        for layer in layers:
            layer.dtype_policy = "float32"
        yield
    finally:
        for layer, policy in zip(layers, saved):
            layer.dtype_policy = policy


def rounding_counts(model, length):
    """`{output: n}`: how many roundings each output of the `Bert` `model` goes through,
    along its longest path from the weights, on sequences of `length` tokens.

    As in Higham's first-order bound (tfeff/testing/numerics.py): a sum or dot product of
    K terms counts K, an elementwise operation 1, a library function 4, a chain the sum
    (layer norm: no amplification). About 600 for the tests' 2-layer BERT of width 16,
    1.1e5 for BERT-base on 32 tokens."""
    encoder = model.backbone
    d, f, n = encoder.hidden_dim, encoder.intermediate_dim, length
    # A factorized dense's second product (over its rank), or the merged kernel's rounding.
    r = max((encoder.relaxed or {}).get("ffn_rank", 0), 1)
    norm = 2 * d + 8  # layer norm: the mean's and the variance's sums, rsqrt, 4 elementwise
    embeddings = 2 + norm  # token + segment (+ position), normalized
    if encoder.input_embedding == "alone":  # the table's FFN: filter product, two dots, ReLU
        table = encoder.token_embedding
        embeddings += table.base_dim + table.intermediate_dim + 3
    # Rotary angles m * theta in float32 (theta from a power: ~5 roundings of angles up to
    # n), their cos and sin, the rotation's products and sum.
    rotary = 5 * n + 8 if encoder.position_embedding_type == "rotary" else 0
    attention = ((d + 1) + rotary  # projection with bias, rotation
                 + (d // encoder.num_heads + 1)  # scores over the head size, scaled
                 + (n + 6) + n  # softmax (shift, exp, sum over n, divide), times values
                 + (d + 1) + 1 + norm)  # output projection, residual, layer norm
    ffn = (d + r + 1) + 8 + (f + r + 1) + 1 + norm  # dense, GELU, dense, residual, norm
    sequence = embeddings + encoder.num_layers * (attention + ffn)
    # Masked-LM head: dense, GELU, layer norm, scores against the table, bias.
    counts = {"sequence_output": sequence, "mlm_logits": sequence + (d + 1) + 8 + norm + d + 1}
    if model.use_nsp:
        counts["pooled_output"] = sequence + (d + 1) + 4  # dense, tanh
        counts["nsp_logits"] = counts["pooled_output"] + d + 1
    return counts


def check_tolerances(model, length):
    """`{output: largest relative error}` float32 rounding puts between two implementations
    of the `Bert` `model` on `length` tokens: 2 * lambda * sqrt(n) * u, with n from
    `rounding_counts`, u = 2**-24 and lambda = 10.

    Higham & Mary (SIAM J. Sci. Comput. 41(5), 2019, Theorem 2.4): with independent,
    mean-zero rounding errors, n roundings err by at most lambda * sqrt(n) * u (first
    order) with probability at least 1 - 2 exp(-lambda**2 / 2), 1 - 4e-22 here; the worst
    case n * u is too loose at BERT-base's n (1.3e-2). About 3e-5 for the tests' 2-layer
    BERT of width 16 and 4e-4 for BERT-base on 32 tokens, against errors seen of 1e-7 and
    1e-6 on a CPU, while a wrong or misplaced tensor, or a kernel 0.1% off, changes more.
    """
    return {name: 2 * _LAMBDA * math.sqrt(n) * _FLOAT32_UNIT_ROUNDOFF
            for name, n in rounding_counts(model, length).items()}


def _forward(model, inputs, **kwargs):
    """`model(inputs, training=False, **kwargs)`; on JAX one compiled call."""
    if keras.backend.backend() != "jax":
        return model(inputs, training=False, **kwargs)
    import jax

    def call(trainable, non_trainable, x):
        return model.stateless_call(trainable, non_trainable, x, training=False, **kwargs)[0]

    return jax.jit(call)([v.value for v in model.trainable_variables],
                         [v.value for v in model.non_trainable_variables], inputs)


def compare_outputs(reference, candidate, padding_mask):
    """Max relative error (max |a - b| / max |a|) per output, real positions only."""
    errors = {}
    mask = np.asarray(padding_mask, bool)
    for name, ref in reference.items():
        # PyTorch's outputs carry autograd state, which np.asarray refuses.
        ref = np.asarray(keras.ops.convert_to_numpy(ref), np.float64)
        cand = np.asarray(keras.ops.convert_to_numpy(candidate[name]), np.float64)
        if name == "sequence_output":
            ref, cand = ref[mask], cand[mask]
        errors[name] = float(np.max(np.abs(ref - cand)) / max(np.max(np.abs(ref)), 1e-30))
    return errors


def merge_relaxed_bert(relaxed, rtol=None, probe=None):
    """Converts CoRe's relaxed `Bert` into a standard `Bert`, verified.

    Raises `ConversionError` (a `ValueError`) when `relaxed` is not a relaxed `Bert`,
    a tensor or shape does not match, or the outputs differ by more than the tolerance.

    Args:
        relaxed: a built `Bert` with `relaxed` set.
        rtol: the largest accepted relative error (max abs difference over max abs
            value, per output) between the standard model and the relaxed one run
            with exact attention, in float32. Default: `check_tolerances`, which
            rounding reaches on no hardware, unlike a number read off one machine.
        probe: inputs for the check (default: `probe_inputs(relaxed)`).

    Returns:
        The standard `Bert` (same name and settings, `relaxed=None`).
    """
    return merge_and_check(relaxed, rtol, probe)[0]


def merge_and_check(relaxed, rtol=None, probe=None):
    """`merge_relaxed_bert`, also returning the check's relative errors per output."""
    if not isinstance(relaxed, Bert) or not relaxed.backbone.is_relaxed:
        raise ConversionError(
            f"merge_relaxed_bert needs a relaxed tfeff Bert, got {type(relaxed).__name__}"
            + ("" if not isinstance(relaxed, Bert) else " with relaxed=None"))
    if not relaxed.built:
        relaxed.build()
    config = relaxed.backbone.get_config()
    config["relaxed"] = None
    standard = Bert(BertBackbone.from_config(config), use_nsp=relaxed.use_nsp, name=relaxed.name,
                    dtype=relaxed.dtype_policy)
    standard.build()
    plan = _merge_plan(relaxed, standard)
    for target in standard.weights:
        target.assign(plan[target.path][0])
    logging.info("Merged %d relaxed tensors into %d standard ones",
                 sum(len(s) for _, s in plan.values()), len(plan))

    probe = probe_inputs(relaxed) if probe is None else probe
    with exact_float32_matmuls(), float32_compute(relaxed, standard):
        expected = _forward(relaxed, probe, exact_attention=True)
        actual = _forward(standard, probe)
    errors = compare_outputs(expected, actual, probe["padding_mask"])
    bounds = (check_tolerances(relaxed, np.shape(probe["token_ids"])[1]) if rtol is None
              else dict.fromkeys(errors, rtol))
    bad = {k: v for k, v in errors.items() if not v <= bounds[k]}
    if bad:
        raise ConversionError(
            "The converted model does not reproduce the relaxed model run with exact attention: "
            + ", ".join(f"{k} relative error {v:.3g} > {bounds[k]:.3g}" for k, v in bad.items()))
    logging.info("Conversion check passed: %s",
                 ", ".join(f"{k} {v:.2g}" for k, v in errors.items()))
    return standard, errors
