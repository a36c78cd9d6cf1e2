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
  tails on the rows whose targets (or best head entries) fall in them.
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


def adaptive_target_log_probs(layer, x, t, keep):
    """`AdaptiveSoftmax`'s target log-probabilities `(n,)` of rows `x` `(n, input_dim)`.

    The head runs on every row; tail i runs only on the rows whose kept
    target falls in it (gathered), and not at all when there are none.
    """
    import tensorflow as tf

    n = tf.shape(t)[0]
    head = layer._head_log_probs(x)  # (n, head_size)
    # 0 for the shortlist, i + 1 for tail i.
    cluster = tf.searchsorted(tf.constant(layer.cutoffs, tf.int32), t, side="right")
    head_column = tf.where(cluster == 0, t, layer.shortlist_size + cluster - 1)
    log_probs = tf.gather(head, head_column, batch_dims=1)  # (n,)
    for i in range(layer.num_clusters):
        rows = tf.where(tf.logical_and(keep, cluster == i + 1))[:, 0]  # (k,)

        def tail_part(i=i, rows=rows):
            lp = layer._tail_log_probs(i, tf.gather(x, rows))  # (k, size_i)
            relative = tf.gather(t, rows) - layer._bounds[i]
            return tf.gather(lp, relative, batch_dims=1)  # (k,)

        part = tf.cond(tf.size(rows) > 0, tail_part, lambda: tf.zeros([0], tf.float32))
        log_probs += tf.scatter_nd(rows[:, None], part, [n])
    return log_probs


def adaptive_predict(layer, inputs, x):
    """`AdaptiveSoftmax`'s most probable class `inputs.shape[:-1]` of rows `x`.

    A row whose best head entry is a shortlist class has it as its argmax (a
    tail class has at most its cluster's probability); only the other rows
    get their tails computed.
    """
    import tensorflow as tf

    best = tf.argmax(layer._head_log_probs(x), axis=-1, output_type=tf.int32)
    rows = tf.where(best >= layer.shortlist_size)[:, 0]
    rest = tf.cond(
        tf.size(rows) > 0,
        lambda: tf.argmax(layer._full_log_prob(tf.gather(x, rows)), axis=-1,
                          output_type=tf.int32),
        lambda: tf.zeros([0], tf.int32),
    )
    best = tf.tensor_scatter_nd_update(best, rows[:, None], rest)
    return tf.reshape(best, tf.shape(inputs)[:-1])
