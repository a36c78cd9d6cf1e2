"""Dynamic-shape row selection: compute on the rows that need it, only.

TensorFlow runs tensors whose size is known only at run time (`tf.where`,
`tf.boolean_mask`, `tf.gather`, a `tf.cond` that skips an empty selection,
`tf.scatter_nd` back; XLA gives them a bounded size), and so does eager
PyTorch (`torch.nonzero`, `index_select`, `index_add`). JAX compiles static
shapes, and so does `torch.compile` at its best, so their layers mask instead;
the functions here are the dynamic side of that choice, in one place:

* `compact_rows(keep, *tensors)`: the rows where `keep` is True (TensorFlow),
  or everything with `keep` as a mask (other backends): what a loss over
  selected positions calls before an output head.
* `adaptive_target_log_probs` and `adaptive_predict`: `AdaptiveSoftmax`'s
  tails on the rows whose targets (or best head entries) fall in them, on
  TensorFlow and eager PyTorch (`selects_rows`). The layer passes its pieces
  in (its head, tail and full log-probabilities as callables, its cluster
  bounds); nothing here knows the layer.

TensorFlow and PyTorch are imported only inside the functions that use them.
"""

import keras


def dynamic_shapes():
    """Whether the backend computes on rows selected at run time (TensorFlow)."""
    return keras.backend.backend() == "tensorflow"


def selects_rows(x):
    """Whether an adaptive softmax can select the rows of tensor `x` at run time.

    True on TensorFlow, and on PyTorch for a concrete tensor outside
    `torch.compile`: there the eager step selects rows as
    `torch.nn.AdaptiveLogSoftmaxWithLoss` does, one host sync per tail for its
    row count. False on JAX, while Keras traces shapes on PyTorch's meta
    device, and under `torch.compile`, which then traces shapes that do not
    change from batch to batch (a row count read at run time would make a new
    shape for every batch; Keras' `ops.cond` is a Python branch on PyTorch, so
    the static path is not free of graph breaks either).
    """
    backend = keras.backend.backend()
    if backend == "tensorflow":
        return True
    if backend != "torch":
        return False
    import torch

    return (isinstance(x, torch.Tensor) and x.device.type != "meta"
            and not torch.compiler.is_compiling())


def compact_rows(keep, *tensors):
    """`(tensors..., mask)`: the rows of `tensors` where bool `keep` is True.

    On TensorFlow the rows are gathered (`tf.boolean_mask`: `(k, ...)`, k the
    number of kept rows) and the mask is None; elsewhere the tensors come back
    unchanged with `keep` as their mask. Either way a per-position loss summed
    over the result is the sum over the kept positions.
    """
    if not dynamic_shapes():
        return (*tensors, keep)
    import tensorflow as tf

    return (*(tf.boolean_mask(t, keep) for t in tensors), None)


def adaptive_target_log_probs(head_log_probs, tail_log_probs, bounds, x, t, keep):
    """An adaptive softmax's target log-probabilities `(n,)` of rows `x` `(n, input_dim)`.

    The head runs on every row; tail i runs only on the rows whose kept
    target falls in it (gathered), and not at all when there are none.

    Args:
        head_log_probs: `x (n, input_dim) -> (n, shortlist + clusters)`, the
            head's log-softmax (shortlist classes, then one entry per cluster).
        tail_log_probs: `(i, rows (k, input_dim)) -> (k, size_i)`, log
            p(class | cluster i).
        bounds: the cutoffs then the vocabulary size: tail i holds the classes
            `[bounds[i], bounds[i + 1])`, the shortlist `[0, bounds[0])`.
        x: float `(n, input_dim)` rows.
        t: int32 `(n,)` targets.
        keep: bool `(n,)`, the rows whose target counts.
    """
    if keras.backend.backend() == "torch":
        return _adaptive_target_log_probs_torch(head_log_probs, tail_log_probs, bounds,
                                                x, t, keep)
    import tensorflow as tf

    cutoffs, shortlist_size = bounds[:-1], bounds[0]
    n = tf.shape(t)[0]
    head = head_log_probs(x)  # (n, head_size)
    # 0 for the shortlist, i + 1 for tail i.
    cluster = tf.searchsorted(tf.constant(cutoffs, tf.int32), t, side="right")
    head_column = tf.where(cluster == 0, t, shortlist_size + cluster - 1)
    log_probs = tf.gather(head, head_column, batch_dims=1)  # (n,)
    for i in range(len(cutoffs)):
        rows = tf.where(tf.logical_and(keep, cluster == i + 1))[:, 0]  # (k,)

        def tail_part(i=i, rows=rows):
            lp = tail_log_probs(i, tf.gather(x, rows))  # (k, size_i)
            relative = tf.gather(t, rows) - bounds[i]
            return tf.gather(lp, relative, batch_dims=1)  # (k,)

        part = tf.cond(tf.size(rows) > 0, tail_part, lambda: tf.zeros([0], tf.float32))
        log_probs += tf.scatter_nd(rows[:, None], part, [n])
    return log_probs


def adaptive_predict(head_log_probs, full_log_prob, shortlist_size, inputs, x):
    """An adaptive softmax's most probable class `inputs.shape[:-1]` of rows `x`.

    A row whose best head entry is a shortlist class has it as its argmax (a
    tail class has at most its cluster's probability); only the other rows
    get their tails computed.

    Args:
        head_log_probs: `x (n, input_dim) -> (n, shortlist + clusters)`, the
            head's log-softmax.
        full_log_prob: `rows (k, input_dim) -> (k, vocabulary_size)`, the full
            log-distribution.
        shortlist_size: the number of shortlist classes (the first cutoff).
        inputs: `(..., input_dim)`, whose leading shape the result takes.
        x: `inputs` flattened to rows `(n, input_dim)`.
    """
    if keras.backend.backend() == "torch":
        return _adaptive_predict_torch(head_log_probs, full_log_prob, shortlist_size,
                                       inputs, x)
    import tensorflow as tf

    best = tf.argmax(head_log_probs(x), axis=-1, output_type=tf.int32)
    rows = tf.where(best >= shortlist_size)[:, 0]
    rest = tf.cond(
        tf.size(rows) > 0,
        lambda: tf.argmax(full_log_prob(tf.gather(x, rows)), axis=-1,
                          output_type=tf.int32),
        lambda: tf.zeros([0], tf.int32),
    )
    best = tf.tensor_scatter_nd_update(best, rows[:, None], rest)
    return tf.reshape(best, tf.shape(inputs)[:-1])


def _adaptive_target_log_probs_torch(head_log_probs, tail_log_probs, bounds, x, t, keep):
    """`adaptive_target_log_probs` in eager PyTorch, as `AdaptiveLogSoftmaxWithLoss`
    computes it: each tail on its own rows, skipped (after one host sync) when empty."""
    import torch

    cutoffs, shortlist_size = bounds[:-1], bounds[0]
    t = t.long()
    head = head_log_probs(x)  # (n, head_size)
    cluster = torch.zeros_like(t)  # 0 for the shortlist, i + 1 for tail i
    for cutoff in cutoffs:  # (comparisons with Python ints: no tensor copied to the device)
        cluster += t >= cutoff
    head_column = torch.where(cluster == 0, t, shortlist_size + cluster - 1)
    log_probs = head.gather(1, head_column[:, None])[:, 0]  # (n,)
    for i in range(len(cutoffs)):
        rows = torch.nonzero(keep & (cluster == i + 1))[:, 0]  # (k,)
        if rows.numel() == 0:
            continue
        lp = tail_log_probs(i, x.index_select(0, rows))  # (k, size_i)
        relative = t.index_select(0, rows) - bounds[i]
        log_probs = log_probs.index_add(0, rows, lp.gather(1, relative[:, None])[:, 0])
    return log_probs


def _adaptive_predict_torch(head_log_probs, full_log_prob, shortlist_size, inputs, x):
    """`adaptive_predict` in eager PyTorch."""
    import torch

    best = head_log_probs(x).argmax(-1).int()
    rows = torch.nonzero(best >= shortlist_size)[:, 0]
    if rows.numel():
        best = best.index_copy(0, rows, full_log_prob(x.index_select(0, rows)).argmax(-1).int())
    return best.reshape(inputs.shape[:-1])
