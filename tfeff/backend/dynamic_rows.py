"""TensorFlow's dynamic-shape row selection: compute on the rows that need it, only.

TensorFlow runs tensors whose size is known only at run time (`tf.where`,
`tf.boolean_mask`, `tf.gather`, a `tf.cond` that skips an empty selection,
`tf.scatter_nd` back; XLA gives them a bounded size). Other backends compile
static shapes, so their layers mask instead; the functions here are the
TensorFlow side of that choice, in one place:

* `compact_rows(keep, *tensors)`: the rows where `keep` is True (TensorFlow),
  or everything with `keep` as a mask (other backends): what a loss over
  selected positions calls before an output head.
* `adaptive_target_log_probs` and `adaptive_predict`: `AdaptiveSoftmax`'s
  tails on the rows whose targets (or best head entries) fall in them. The
  layer passes its pieces in (its head, tail and full log-probabilities as
  callables, its cluster bounds); nothing here knows the layer.

TensorFlow is imported only inside the TensorFlow-side functions.
"""

import keras


def dynamic_shapes():
    """Whether the backend computes on rows selected at run time (TensorFlow)."""
    return keras.backend.backend() == "tensorflow"


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
