"""Dynamic-shape row selection: compute on the rows that need it, only.

TensorFlow and eager PyTorch run tensors whose size is known only at run time; JAX and
`torch.compile` want static shapes, so their layers mask instead. TensorFlow and PyTorch
are imported only inside the functions that use them.
"""

import keras


def dynamic_shapes():
    """Whether the backend computes on rows selected at run time (TensorFlow)."""
    return keras.backend.backend() == "tensorflow"


def selects_rows(x):
    """Whether an adaptive softmax can select the rows of tensor `x` at run time (on PyTorch,
    a concrete one outside `torch.compile`, where each batch would make a new shape)."""
    backend = keras.backend.backend()
    if backend == "tensorflow":
        return True
    if backend != "torch":
        return False
    import torch

    return (isinstance(x, torch.Tensor) and x.device.type != "meta"
            and not torch.compiler.is_compiling())


def compact_rows(keep, *tensors):
    """`(tensors..., mask)`: the rows of `tensors` where bool `keep` is True, gathered
    with mask None on TensorFlow, else unchanged with `keep` as their mask."""
    if not dynamic_shapes():
        return (*tensors, keep)
    import tensorflow as tf

    return (*(tf.boolean_mask(t, keep) for t in tensors), None)


def adaptive_target_log_probs(head_log_probs, tail_log_probs, bounds, x, t, keep):
    """An adaptive softmax's target log-probabilities `(n,)` of rows `x` `(n, input_dim)`:
    the head on every row, tail i only on the kept rows whose target falls in it.

    Args:
        head_log_probs: `x -> (n, shortlist + clusters)`, the head's log-softmax.
        tail_log_probs: `(i, rows (k, input_dim)) -> (k, size_i)`, log p(class | cluster i).
        bounds: the cutoffs then the vocabulary size (tail i: `[bounds[i], bounds[i + 1])`).
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
    """An adaptive softmax's most probable class `inputs.shape[:-1]` of rows `x`: a row
    whose best head entry is a shortlist class keeps it (a tail class has at most its
    cluster's probability); only the other rows get their tails computed.

    Args:
        head_log_probs: `x -> (n, shortlist + clusters)`, the head's log-softmax.
        full_log_prob: `rows (k, input_dim) -> (k, vocabulary_size)`.
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
        lambda: tf.argmax(full_log_prob(tf.gather(x, rows)), axis=-1, output_type=tf.int32),
        lambda: tf.zeros([0], tf.int32))
    best = tf.tensor_scatter_nd_update(best, rows[:, None], rest)
    return tf.reshape(best, tf.shape(inputs)[:-1])


def _adaptive_target_log_probs_torch(head_log_probs, tail_log_probs, bounds, x, t, keep):
    """`adaptive_target_log_probs` in eager PyTorch: an empty tail is skipped."""
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
