"""AdaptiveSoftmax: Grave et al.'s efficient softmax approximation.

Two implementations of one function: dynamic shapes (`tfeff.backend.dynamic_rows`),
and static ones (`tail_capacity`) that `jax.jit` compiles.
"""

import math

import keras
from keras import ops

from tfeff.backend import dynamic_rows
from tfeff.layers import softmax_common


@keras.saving.register_keras_serializable(package="tfeff")
class AdaptiveSoftmax(softmax_common.SoftmaxOutputMixin, keras.layers.Layer):
    """Adaptive softmax (Grave et al. 2016), with PyTorch's semantics.

    Classes must be ordered by decreasing frequency. `cutoffs` split them
    into a head (the shortlist `[0, cutoffs[0])`) and tail clusters
    `[cutoffs[i], cutoffs[i+1])` (the last ending at `vocabulary_size`). The
    head scores the shortlist plus one logit per cluster; tail `i` scores its
    classes through a projection to `input_dim // div_value**(i+1)` features:

        log p(c) = head_log_softmax[c]                       (c in the shortlist)
        log p(c) = head_log_softmax[shortlist + i]
                   + log_softmax(x P_i K_i)[c - cutoffs[i]]   (c in tail i)

    exactly as `torch.nn.AdaptiveLogSoftmaxWithLoss` (kernels here are
    `(in, out)`, the transpose of PyTorch's `Linear.weight`).

    In training the head runs on every example and tail `i` only on the
    examples whose target falls in it; a tail with no target in the batch is
    skipped, so its weights get a zero gradient. On TensorFlow and eager
    PyTorch the tails gather their rows (under XLA a bounded dimension is
    padded to its bound, so only the skipping is kept); on JAX and under
    `torch.compile` tail `i` runs on `ceil(tail_capacity * n)` of the `n`
    flattened targets, its own first, and on all `n` when a batch holds more
    of them (the same numbers, at full cost; `None`: always all `n`). See
    docs/guides/layers.md#adaptivesoftmax.

    Args:
        vocabulary_size: int, number of classes (`n_classes` in PyTorch).
        cutoffs: increasing ints inside `(0, vocabulary_size)`.
        div_value: float > 0, the projection-size divisor between clusters.
        head_bias: whether the head has a bias (the tails never do).
        ignore_index: targets equal to this value are ignored (no loss, log
            probability 0); None disables.
        kernel_initializer: initializer of every kernel.
        tail_capacity: None, or the fraction in (0, 1] of the rows a tail
            computes on JAX and under `torch.compile` (see above).
        **kwargs: base `Layer` arguments.

    Call arguments:
        inputs: `(..., input_dim)` hidden states.
        targets: optional int `(...)` class ids.
        mask: optional bool `(...)`; False entries are ignored.
        inputs_mask: the Keras mask of `inputs` (filled in by Keras), used
            when `mask` is None.
        training: unused.
        return_loss: return `(target_log_probs, loss)` and add nothing.

    Returns:
        With `targets`, float32 `(...)` log probabilities (0 where ignored) and
        the mean negative log-likelihood added with `add_loss` (or returned,
        with `return_loss=True`); without, the full log-distribution
        `(..., vocabulary_size)`. The contract of every softmax layer:
        `tfeff.layers.softmax_common`.

    Raises:
        ValueError: `vocabulary_size` is not an integer >= 2, `cutoffs` are not
            unique increasing integers inside `(0, vocabulary_size)`,
            `div_value` is not positive, or `tail_capacity` is neither None nor
            in (0, 1].

    Example:

    >>> layer = AdaptiveSoftmax(vocabulary_size=100, cutoffs=[10, 40])
    >>> x = keras.ops.ones((2, 3, 16))
    >>> targets = keras.ops.array([[1, 20, 90], [0, 5, 50]])
    >>> log_probs = layer(x, targets)  # adds the mean NLL to `layer.losses`
    >>> tuple(log_probs.shape), len(layer.losses)
    ((2, 3), 1)
    >>> tuple(layer(x).shape)  # no targets: the full distribution
    (2, 3, 100)
    >>> log_probs, loss = layer(x, targets, return_loss=True)
    >>> tuple(loss.shape)
    ()

    Reference:
        Grave, Joulin, Cissé, Grangier & Jégou, "Efficient softmax
        approximation for GPUs", ICML 2017 (arXiv 2016).
    """

    def __init__(
        self,
        vocabulary_size,
        cutoffs,
        div_value=4.0,
        head_bias=False,
        ignore_index=None,
        kernel_initializer="glorot_uniform",
        tail_capacity=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        softmax_common.validate_vocabulary_size(vocabulary_size)
        if tail_capacity is not None and not 0 < tail_capacity <= 1:
            raise ValueError("Received an invalid value for `tail_capacity`, expected None or "
                             f"a fraction in (0, 1]. Received: tail_capacity={tail_capacity}")
        self.tail_capacity = None if tail_capacity is None else float(tail_capacity)
        self.supports_masking = True  # `mask` marks the targets to ignore
        cutoffs = list(cutoffs)
        if (not cutoffs or any(not isinstance(c, int) for c in cutoffs)
                or cutoffs != sorted(set(cutoffs)) or cutoffs[0] <= 0
                or cutoffs[-1] >= vocabulary_size):
            raise ValueError(
                "Received an invalid value for `cutoffs`, expected unique increasing "
                f"integers inside (0, vocabulary_size={vocabulary_size}). "
                f"Received: cutoffs={cutoffs}")
        if not div_value > 0:
            raise ValueError("Received an invalid value for `div_value`, expected a positive "
                             f"number. Received: div_value={div_value}")
        self.vocabulary_size = vocabulary_size
        self.cutoffs = cutoffs
        self.div_value = float(div_value)
        self.head_bias = bool(head_bias)
        self.ignore_index = ignore_index
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.shortlist_size = cutoffs[0]
        self.num_clusters = len(cutoffs)
        self.head_size = self.shortlist_size + self.num_clusters
        self._bounds = cutoffs + [vocabulary_size]

    def tail_projection_size(self, i, input_dim):
        return int(input_dim // (self.div_value ** (i + 1)))

    def build(self, inputs_shape, targets_shape=None):
        input_dim = int(inputs_shape[-1])
        self.input_dim = input_dim
        self.head_kernel = self.add_weight(name="head_kernel", shape=(input_dim, self.head_size),
                                           initializer=self.kernel_initializer)
        self.head_bias_weight = None
        if self.head_bias:
            self.head_bias_weight = self.add_weight(name="head_bias", shape=(self.head_size,),
                                                    initializer="zeros")
        self.tail_projections, self.tail_kernels = [], []
        for i in range(self.num_clusters):
            hidden = self.tail_projection_size(i, input_dim)
            if hidden < 1:
                raise ValueError(
                    f"Tail {i} would have projection size input_dim // div_value**{i + 1}"
                    f" = {input_dim} // {self.div_value ** (i + 1):g} = 0: lower "
                    f"`div_value` or use fewer cutoffs. Received: div_value={self.div_value}")
            size = self._bounds[i + 1] - self._bounds[i]
            self.tail_projections.append(self.add_weight(
                name=f"tail_{i}_projection", shape=(input_dim, hidden),
                initializer=self.kernel_initializer))
            self.tail_kernels.append(self.add_weight(
                name=f"tail_{i}_kernel", shape=(hidden, size),
                initializer=self.kernel_initializer))
        self.built = True

    def _head_log_probs(self, x):
        logits = ops.matmul(x, ops.cast(self.head_kernel, x.dtype))  # (n, head_size)
        logits = ops.cast(logits, "float32")
        if self.head_bias_weight is not None:
            logits = logits + ops.cast(self.head_bias_weight, "float32")
        return ops.log_softmax(logits, axis=-1)

    def _tail_log_probs(self, i, x):
        """log p(class | cluster i) for rows `x` `(k, input_dim)` -> `(k, size_i)`."""
        hidden = ops.matmul(x, ops.cast(self.tail_projections[i], x.dtype))
        logits = ops.matmul(hidden, ops.cast(self.tail_kernels[i], x.dtype))
        return ops.log_softmax(ops.cast(logits, "float32"), axis=-1)

    def _clusters(self, t):
        """0 for a shortlist target, i + 1 for a target of tail i."""
        cluster = ops.zeros_like(t)
        for cutoff in self.cutoffs:
            cluster = cluster + ops.cast(t >= cutoff, t.dtype)
        return cluster

    def _target_log_probs(self, inputs, targets, mask, training):
        if not dynamic_rows.selects_rows(inputs):
            return self._static_target_log_probs(inputs, targets, mask)
        x, t, keep = softmax_common.flatten_inputs(self, inputs, targets, mask)
        log_probs = dynamic_rows.adaptive_target_log_probs(
            self._head_log_probs, self._tail_log_probs, self._bounds, x, t, keep)
        return softmax_common.finish(log_probs, keep, targets)

    def _static_target_log_probs(self, inputs, targets, mask):
        """The same numbers with static shapes only (JAX, `torch.compile`; see the class)."""
        x, t, keep = softmax_common.flatten_inputs(self, inputs, targets, mask)
        n = x.shape[0]
        if n is None:
            raise ValueError(f"AdaptiveSoftmax `{self.name}` needs a static number of rows "
                             f"off TensorFlow. Received inputs of shape {inputs.shape}")
        cluster = self._clusters(t)
        head_column = ops.where(cluster == 0, t, self.shortlist_size + cluster - 1)
        log_probs = softmax_common.gather_rows(self._head_log_probs(x), head_column)
        capacity = n if self.tail_capacity is None else min(
            n, max(1, math.ceil(self.tail_capacity * n)))
        for i in range(self.num_clusters):
            in_tail = ops.logical_and(keep, cluster == i + 1)
            count = ops.sum(ops.cast(in_tail, "int32"))

            def on_rows(rows=None, i=i, in_tail=in_tail):
                """Tail i's log-probs of the targets at `rows` (None: every row) as `(n,)`."""
                size = self._bounds[i + 1] - self._bounds[i]
                rows_x, rows_t, rows_kept = (x, t, in_tail) if rows is None else (
                    ops.take(a, rows, axis=0) for a in (x, t, in_tail))
                lp = self._tail_log_probs(i, rows_x)  # (k, size)
                relative = ops.clip(rows_t - self._bounds[i], 0, size - 1)
                part = softmax_common.gather_rows(lp, relative)
                part = part * ops.cast(rows_kept, part.dtype)
                return part if rows is None else ops.scatter(ops.expand_dims(rows, -1), part, (n,))

            def run(on_rows=on_rows, in_tail=in_tail, count=count):
                if capacity == n:
                    return on_rows()
                # The tail's rows first (sorting "not in the tail": 0 before 1), then
                # others, masked; more of them than the capacity: every row.
                first = ops.argsort(ops.cast(ops.logical_not(in_tail), "int32"))[:capacity]
                return ops.cond(count <= capacity,
                                lambda: on_rows(ops.cast(first, "int32")),
                                lambda: on_rows())

            log_probs = log_probs + ops.cond(count > 0, run,
                                             lambda: ops.zeros((n,), "float32"))
        return softmax_common.finish(log_probs, keep, targets)

    def _full_log_prob(self, x):
        head = self._head_log_probs(x)
        parts = [head[:, : self.shortlist_size]]
        for i in range(self.num_clusters):
            cluster = head[:, self.shortlist_size + i: self.shortlist_size + i + 1]
            parts.append(cluster + self._tail_log_probs(i, x))
        return ops.concatenate(parts, axis=-1)

    def predict(self, inputs):
        """Most probable class `(...)`, int32.

        On TensorFlow and eager PyTorch only the rows whose head's best entry is
        a cluster get their tails computed (`dynamic_rows.adaptive_predict`).
        """
        inputs, x = self._flat_rows(inputs)
        if dynamic_rows.selects_rows(x):
            return dynamic_rows.adaptive_predict(
                self._head_log_probs, self._full_log_prob, self.shortlist_size, inputs, x)
        # Static shapes: every row's tails.
        best = ops.cast(ops.argmax(self._full_log_prob(x), axis=-1), "int32")
        return ops.reshape(best, ops.shape(inputs)[:-1])

    def get_config(self):
        config = super().get_config()
        config.update({
            "vocabulary_size": self.vocabulary_size,
            "cutoffs": list(self.cutoffs),
            "div_value": self.div_value,
            "head_bias": self.head_bias,
            "ignore_index": self.ignore_index,
            "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
            "tail_capacity": self.tail_capacity,
        })
        return config
