"""Shared pieces of the softmax output layers (`keras.ops`; not a public layer).

Every softmax output layer of tfeff has the same contract
(`SoftmaxOutputMixin.call`):

* `layer(inputs, targets)` -> `target_log_probs`: the log probability of
  each target, shaped like `targets` (0 where ignored), and the mean negative
  log-likelihood over the targets that are not ignored is added with
  `add_loss`. That is what lets a model end in the layer and train under a
  stock `model.compile(optimizer=...)` / `model.fit(...)` with no `loss`
  (the targets are a model input, as in Keras' "endpoint layer" pattern).
* `layer(inputs, targets, return_loss=True)` -> `(target_log_probs, loss)`,
  with nothing added: for models that assemble their own loss.
* Targets where `mask` is False are ignored; without `mask`, the Keras mask
  of `inputs` (e.g. an encoder's padding from `Embedding(mask_zero=True)`)
  is used.
* `layer(inputs)` -> the full log-distribution `(..., vocabulary_size)`
  (inference), as `log_prob(inputs)`.
* `log_prob(inputs)` -> the full distribution; `predict(inputs)` -> the most
  probable class `(...)`. Both build the layer from `inputs` when it was
  never called.
* The output-head contract (`tfeff.layers.output_head`), which
  `ContinuousOutput` answers too: `features(hidden)` is `hidden`,
  `per_position_loss(features, targets, mask, training)` is
  `-target_log_probs`, `ranking_scores(features)` is `log_prob(features)`.

`targets` (and `mask`) must have the shape of `inputs` without its last
axis: where the shapes are known (eager calls, tracing, symbolic
`keras.Input`s), another shape raises `ValueError` naming the layer and
both shapes.

Targets that are not ignored must be in `[0, vocabulary_size)`. On the
TensorFlow backend, eagerly and inside a `tf.function`, an out-of-range id
raises `InvalidArgumentError` naming the layer and `vocabulary_size`; on
another backend, eager (concrete) targets raise `ValueError` with the same
message. Compiled code cannot check: under XLA (`jit_compile=True`)
TensorFlow compiles assertions out and XLA's gather clamps the index, and
under `jax.jit` the targets are abstract: the loss then silently uses another
class, so check ids in the input pipeline when compiling.

Log-softmaxes are computed in float32 whatever the compute dtype, so the
layers work under `mixed_float16` / `mixed_bfloat16` policies.
"""

import keras
import numpy as np
from keras import ops

from tfeff.backend.checks import check_ids
from tfeff.layers.output_head import OutputHead


def flatten_inputs(layer, inputs, targets, mask):
    """Flattens to `(n, dim)`, `(n,)` and a bool `(n,)` of kept targets.

    Kept targets are checked against `[0, layer.vocabulary_size)`.
    """
    dtype = keras.backend.standardize_dtype(targets.dtype)
    if "int" not in dtype:
        raise ValueError(
            f"{type(layer).__name__} `{layer.name}` takes integer class ids as `targets`, not "
            f"{dtype} (a float id such as 3.7 would silently become class 3). Received: "
            f"targets.dtype={dtype}")
    dim = inputs.shape[-1]
    x = ops.reshape(inputs, (-1, dim))
    t = ops.reshape(ops.cast(targets, "int32"), (-1,))
    keep = ops.ones_like(t, dtype="bool")
    if mask is not None:
        keep = ops.logical_and(keep, ops.reshape(ops.cast(mask, "bool"), (-1,)))
    if layer.ignore_index is not None:
        keep = ops.logical_and(keep, ops.not_equal(t, layer.ignore_index))
    # Ignored targets may hold any value (e.g. -100): point them at class 0.
    t = ops.where(keep, t, ops.zeros_like(t))
    return x, check_ids(layer, t, "targets"), keep


def finish(target_log_probs, keep, targets):
    """Zeroes ignored entries, reshapes like `targets`, and returns the mean NLL."""
    keep_f = ops.cast(keep, "float32")
    target_log_probs = target_log_probs * keep_f
    count = ops.sum(keep_f)
    loss = -ops.sum(target_log_probs) / ops.maximum(count, 1.0)
    return ops.reshape(target_log_probs, ops.shape(targets)), loss


def _static_shape(x):
    """The shape of `x` as a tuple (None for unknown sizes), or None if its rank is unknown."""
    shape = getattr(x, "shape", None)
    if shape is None:
        return tuple(np.shape(x))
    if getattr(shape, "rank", 0) is None:  # a TensorShape of unknown rank
        return None
    return tuple(None if d is None else int(d) for d in shape)


def check_targets_shape(layer, inputs, targets, mask=None):
    """Raises ValueError unless `targets` and `mask` have the shape of `inputs[..., 0]`.

    Sizes unknown on either side (None) are not compared.
    """
    inputs_shape = _static_shape(inputs)
    if inputs_shape is None:
        return
    expected = inputs_shape[:-1]
    for what, value in (("targets", targets), ("mask", mask)):
        shape = None if value is None else _static_shape(value)
        if shape is None:
            continue
        if len(shape) != len(expected) or any(
                a is not None and b is not None and a != b for a, b in zip(shape, expected)):
            raise ValueError(
                f"{type(layer).__name__} `{layer.name}`: `{what}` must have the shape of "
                f"`inputs` without its last axis, {expected}. Received: "
                f"inputs.shape={inputs_shape}, {what}.shape={shape}")


def gather_rows(values, ids):
    """`values[i, ids[i]]` for every row i: `(n, k)`, `(n,)` -> `(n,)`."""
    return ops.take_along_axis(values, ops.expand_dims(ids, -1), axis=-1)[:, 0]


def validate_vocabulary_size(vocabulary_size):
    if not isinstance(vocabulary_size, int) or vocabulary_size < 2:
        raise ValueError(
            "Received an invalid value for `vocabulary_size`, expected an integer "
            f">= 2. Received: vocabulary_size={vocabulary_size}"
        )


def check_frequency_sorted(counts, first_id=0, name="vocabulary"):
    """Raises ValueError unless `counts[first_id:]` is non-increasing.

    Adaptive softmax clusters and log-uniform sampling both assume that ids
    are ordered by decreasing frequency.
    """
    previous = None
    for i in range(first_id, len(counts)):
        if previous is not None and counts[i] > previous:
            raise ValueError(
                f"The {name} is not sorted by decreasing frequency: id {i} has count "
                f"{counts[i]} > {previous} of id {i - 1}. Adaptive softmax and "
                "log-uniform sampling need frequency-ordered ids."
            )
        previous = counts[i]


class SoftmaxOutputMixin(OutputHead):
    """The call contract of the softmax output layers (mix in before `Layer`).

    A layer provides `_target_log_probs(inputs, targets, mask, training)`
    -> `(target_log_probs, loss)` and `log_prob(inputs)`; the output-head
    contract (`tfeff.layers.output_head`) follows from them.
    """

    def features(self, hidden):
        """A softmax scores the hidden states themselves: `hidden`, unchanged."""
        return hidden

    def per_position_loss(self, features, targets, mask=None, training=False):
        """Negative log-likelihood of each target, float32 `targets.shape` (0 where ignored)."""
        log_probs, _ = self(features, targets, mask=mask, training=training, return_loss=True)
        return -log_probs

    def ranking_scores(self, features):
        """The log-probabilities `(..., vocabulary_size)` (`log_prob`)."""
        return self.log_prob(features)

    def call(self, inputs, targets=None, mask=None, training=None, return_loss=False,
             inputs_mask=None):
        # With two tensor arguments Keras passes the inputs' own mask (e.g. from
        # `Embedding(mask_zero=True)`) as `inputs_mask`, not as `mask`.
        if mask is None:
            mask = inputs_mask
        if targets is None:
            if return_loss:
                raise ValueError(
                    f"{type(self).__name__} `{self.name}`: `return_loss=True` needs "
                    "`targets`.")
            return self.log_prob(inputs)
        check_targets_shape(self, inputs, targets, mask)
        log_probs, loss = self._target_log_probs(inputs, targets, mask, training)
        if return_loss:
            return log_probs, loss
        self.add_loss(loss)
        return log_probs

    def _flat_rows(self, inputs):
        """`(inputs, rows (n, input_dim))`, building the layer from `inputs` if never called."""
        inputs = ops.convert_to_tensor(inputs)
        if not self.built:
            if inputs.shape[-1] is None:
                raise ValueError(
                    f"{type(self).__name__} `{self.name}` is not built and the inputs' "
                    f"last dimension is unknown ({inputs.shape}): call the layer or "
                    "`build((None, input_dim))` first.")
            self.build(tuple(inputs.shape))
        return inputs, ops.reshape(inputs, (-1, inputs.shape[-1]))

    def compute_output_spec(self, inputs, targets=None, mask=None, training=None,
                            return_loss=False, inputs_mask=None):
        if targets is None:
            return keras.KerasTensor(
                tuple(inputs.shape[:-1]) + (self.vocabulary_size,), "float32")
        check_targets_shape(self, inputs, targets, mask if mask is not None else inputs_mask)
        log_probs = keras.KerasTensor(tuple(targets.shape), "float32")
        if return_loss:
            return log_probs, keras.KerasTensor((), "float32")
        return log_probs

    def compute_output_shape(self, inputs_shape, targets_shape=None):
        if targets_shape is None:
            return tuple(inputs_shape[:-1]) + (self.vocabulary_size,)
        return tuple(targets_shape)

    def compute_mask(self, inputs, targets=None, mask=None, inputs_mask=None):
        return None


class ExactSoftmaxMixin(SoftmaxOutputMixin):
    """`log_prob` and `predict` of layers whose `logits(x)` covers every class."""

    def log_prob(self, inputs):
        """Full log-distribution `(..., vocabulary_size)`, float32."""
        inputs, x = self._flat_rows(inputs)
        out = ops.log_softmax(self.logits(x), axis=-1)
        return ops.reshape(out, tuple(ops.shape(inputs)[:-1]) + (self.vocabulary_size,))

    def predict(self, inputs):
        """Most probable class `(...)`, int32."""
        inputs, x = self._flat_rows(inputs)
        best = ops.cast(ops.argmax(self.logits(x), axis=-1), "int32")
        return ops.reshape(best, ops.shape(inputs)[:-1])
