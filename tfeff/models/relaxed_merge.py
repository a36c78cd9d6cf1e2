"""CoRe's weight merge: a relaxed `Bert` becomes the standard `Bert` it approximates.

Attention weights are copied unchanged (`AnchorMultiHeadAttention` has
`keras.layers.MultiHeadAttention`'s layout); each `FactorizedDense` becomes
the `Dense` of kernel A B (`FactorizedDense.merged`); everything else is
copied. Every source tensor is used exactly once and every shape is
checked. The result is then verified numerically: the standard model's
outputs must equal the relaxed model's outputs computed with exact
attention (`exact_attention=True`), within `rtol` relative to the largest
output; otherwise `ConversionError` is raised and nothing is returned. The
check runs in float32 at full matrix-product precision whatever the models'
dtype policy (a `mixed_bfloat16` model's layers compute in float32 for the
check, then get their policy back) and whatever the device's default (JAX
and TensorFlow multiply float32 matrices in TF32 on recent NVIDIA GPUs, whose
rounding alone is about 1e-3 of the largest output).

It depends only on models and layers, so training (CoRe's in-process
switch) and `tfeff.convert` (the model-directory converter, which re-exports
`merge_relaxed_bert` and `ConversionError`) both import it from below.
"""

import contextlib
import logging
import re

import keras
import numpy as np

from tfeff.models.bert import Bert

# `.../intermediate_dense/kernel` <- `.../intermediate_dense/{input,output}_kernel`
_FACTORIZED = re.compile(r"^(.*/(?:intermediate_dense|output_dense))/kernel$")


class ConversionError(ValueError):
    """The relaxed model could not be converted, or the result failed its check."""


def _strip(path):
    return path.split("/", 1)[1]  # drop the model's own name


def _merge_plan(relaxed, standard):
    """`{standard path: (value, [source paths])}`; raises on any unmatched tensor."""
    source = {_strip(v.path): v for v in relaxed.weights}
    plan, used = {}, []
    for target in standard.weights:
        key = _strip(target.path)
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
    n = min(length or 32, model.max_sequence_length)
    low = min(5, model.vocabulary_size - 1)  # past the reserved ids when there are any
    ids = rng.integers(low, model.vocabulary_size, size=(batch_size, n)).astype("int32")
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
    """float32 matrix products at full precision inside the block (not TF32), on the
    Keras backend in use; the previous setting comes back afterwards."""
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
    """Inside the block `models` (every layer of them) compute in float32; their dtype
    policies come back afterwards. Variables are float32 under every policy tfeff
    trains with, so nothing is copied (building float32 copies costs seconds of eager
    initializers on JAX)."""
    # Keras' own traversal (as tfeff.training.precision's): each model and every layer it
    # tracks, at any depth.
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


def _forward(model, inputs, **kwargs):
    """`model(inputs, training=False, **kwargs)`; on JAX one compiled call (eager JAX
    compiles every op on first use, several times slower for a model this size)."""
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
        # convert_to_numpy: PyTorch's outputs carry autograd state, which np.asarray refuses.
        ref = np.asarray(keras.ops.convert_to_numpy(ref), np.float64)
        cand = np.asarray(keras.ops.convert_to_numpy(candidate[name]), np.float64)
        if name == "sequence_output":
            ref, cand = ref[mask], cand[mask]
        errors[name] = float(np.max(np.abs(ref - cand)) / max(np.max(np.abs(ref)), 1e-30))
    return errors


def merge_relaxed_bert(relaxed, rtol=1e-5, probe=None):
    """Converts CoRe's relaxed `Bert` into a standard `Bert`, verified.

    A `ConversionError` (a `ValueError`) is raised, and nothing returned, when
    `relaxed` is not a relaxed `Bert`, when a tensor or shape does not match,
    or when the outputs differ by more than `rtol`.

    Args:
        relaxed: a built `Bert` with `relaxed` set.
        rtol: the largest accepted relative error (max abs difference over
            max abs value, per output) between the standard model and the
            relaxed one run with exact attention.
        probe: inputs for the check (default: `probe_inputs(relaxed)`).

    Returns:
        The standard `Bert` (same name and settings, `relaxed=None`).
    """
    return merge_and_check(relaxed, rtol, probe)[0]


def merge_and_check(relaxed, rtol=1e-5, probe=None):
    """`merge_relaxed_bert`, also returning the check's relative errors per output."""
    if not isinstance(relaxed, Bert) or not relaxed.is_relaxed:
        raise ConversionError(
            f"merge_relaxed_bert needs a relaxed tfeff Bert, got {type(relaxed).__name__}"
            + ("" if not isinstance(relaxed, Bert) else " with relaxed=None"))
    if not relaxed.built:
        relaxed.build()
    config = relaxed.get_config()
    config["relaxed"] = None
    standard = Bert.from_config(config)
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
    bad = {k: v for k, v in errors.items() if not v <= rtol}
    if bad:
        raise ConversionError(
            "The converted model does not reproduce the relaxed model run with exact attention: "
            + ", ".join(f"{k} relative error {v:.3g} > {rtol:g}" for k, v in bad.items()))
    logging.info("Conversion check passed: %s",
                 ", ".join(f"{k} {v:.2g}" for k, v in errors.items()))
    return standard, errors
