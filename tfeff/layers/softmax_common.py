"""Shared pieces of the softmax output layers (`keras.ops`; not a public layer).

Every softmax output layer of tfeff has the same contract
(`SoftmaxOutputMixin.call`; a walk-through: docs/guides/layers.md#softmax-output-layers):

* `layer(inputs, targets)` -> `target_log_probs`, the log probability of
  each target shaped like `targets` (0 where ignored), and the mean negative
  log-likelihood of the targets not ignored is added with `add_loss`, so a
  model ending in the layer trains under a stock `compile(optimizer=...)`.
* `layer(inputs, targets, return_loss=True)` -> `(target_log_probs, loss)`,
  with nothing added.
* Targets where `mask` (by default the Keras mask of `inputs`) is False, or
  equal to `ignore_index`, are ignored.
* `layer(inputs)` and `log_prob(inputs)` -> the full log-distribution
  `(..., vocabulary_size)`; `predict(inputs)` -> the most probable class.
  Both build the layer from `inputs` when it was never called.
* The output-head contract (`tfeff.layers.output_head`).

`targets` (and `mask`) must have the shape of `inputs` without its last
axis (checked where known). Targets not ignored must be in
`[0, vocabulary_size)`: an out-of-range id raises `InvalidArgumentError` on
TensorFlow (eagerly and in a `tf.function`) and `ValueError` on another
backend's concrete targets. Compiled code cannot check (XLA compiles
assertions out and clamps the gather; `jax.jit` targets are abstract): the
loss then silently uses another class, so check ids in the input pipeline.

Log-softmaxes are computed in float32 whatever the compute dtype.
"""

import keras
from keras import ops

from tfeff.backend.checks import static_shape
from tfeff.backend.checks import check_ids
from tfeff.layers.output_head import OutputHead


def flatten_inputs(layer, inputs, targets, mask):
    """Flattens to `(n, dim)`, `(n,)` and a bool `(n,)` of kept targets (checked ids)."""
    dtype = keras.backend.standardize_dtype(targets.dtype)
    if "int" not in dtype:
        raise ValueError(
            f"{type(layer).__name__} `{layer.name}` takes integer class ids as `targets`, not "
            f"{dtype} (a float id such as 3.7 would silently become class 3). Received: "
            f"targets.dtype={dtype}")
    x = ops.reshape(inputs, (-1, inputs.shape[-1]))
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
    loss = -ops.sum(target_log_probs) / ops.maximum(ops.sum(keep_f), 1.0)
    return ops.reshape(target_log_probs, ops.shape(targets)), loss


def check_targets_shape(layer, inputs, targets, mask=None):
    """Raises ValueError unless `targets` and `mask` have the shape of `inputs[..., 0]`
    (sizes unknown on either side are not compared)."""
    inputs_shape = static_shape(inputs)
    if inputs_shape is None:
        return
    expected = inputs_shape[:-1]
    for what, value in (("targets", targets), ("mask", mask)):
        shape = None if value is None else static_shape(value)
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
            f">= 2. Received: vocabulary_size={vocabulary_size}")


def check_frequency_sorted(counts, first_id=0, name="vocabulary"):
    """Raises ValueError unless `counts[first_id:]` is non-increasing (frequency-ordered ids,
    which adaptive softmax clusters and log-uniform sampling assume)."""
    for i in range(first_id + 1, len(counts)):
        if counts[i] > counts[i - 1]:
            raise ValueError(
                f"The {name} is not sorted by decreasing frequency: id {i} has count "
                f"{counts[i]} > {counts[i - 1]} of id {i - 1}. Adaptive softmax and "
                "log-uniform sampling need frequency-ordered ids.")


class SoftmaxOutputMixin(OutputHead):
    """The call contract of the softmax output layers (mix in before `Layer`).

    A layer provides `_target_log_probs(inputs, targets, mask, training)`
    -> `(target_log_probs, loss)` and `_full_log_prob(rows)` `(n, vocabulary_size)`.
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

    def log_prob(self, inputs):
        """Full log-distribution `(..., vocabulary_size)`, float32."""
        inputs, x = self._flat_rows(inputs)
        return ops.reshape(self._full_log_prob(x),
                           tuple(ops.shape(inputs)[:-1]) + (self.vocabulary_size,))

    def call(self, inputs, targets=None, mask=None, training=None, return_loss=False,
             inputs_mask=None):
        # With two tensor arguments Keras passes the inputs' own mask (e.g. from
        # `Embedding(mask_zero=True)`) as `inputs_mask`, not as `mask`.
        if mask is None:
            mask = inputs_mask
        if targets is None:
            if return_loss:
                raise ValueError(f"{type(self).__name__} `{self.name}`: `return_loss=True` "
                                 "needs `targets`.")
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
            return keras.KerasTensor(self.compute_output_shape(inputs.shape), "float32")
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
    """The exact softmax over `_matrix(dtype)` `(vocabulary_size, input_dim)` and `bias`."""

    def logits(self, x):
        """float32 logits `(n, vocabulary_size)` of rows `x` `(n, input_dim)`."""
        logits = ops.cast(ops.matmul(x, ops.transpose(self._matrix(x.dtype))), "float32")
        if self.bias is not None:
            logits = logits + ops.cast(self.bias, "float32")
        return logits

    def _target_log_probs(self, inputs, targets, mask, training):
        x, t, keep = flatten_inputs(self, inputs, targets, mask)
        return finish(gather_rows(self._full_log_prob(x), t), keep, targets)

    def _full_log_prob(self, x):
        return ops.log_softmax(self.logits(x), axis=-1)

    def predict(self, inputs):
        """Most probable class `(...)`, int32."""
        inputs, x = self._flat_rows(inputs)
        best = ops.cast(ops.argmax(self.logits(x), axis=-1), "int32")
        return ops.reshape(best, ops.shape(inputs)[:-1])
