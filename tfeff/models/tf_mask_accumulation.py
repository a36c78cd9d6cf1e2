"""TensorFlow's mask-accumulation step: K mask sets' gradients, one set at a time.

`MaskedElmo`'s loss is the mean over a batch's K mask sets of each set's
masked-LM loss (`MaskedElmo.compute_loss`), and Keras' own step
differentiates it with every set's activations alive at once. On TensorFlow
`train_step` here takes the same gradient set by set (one set's activations
at a time: the memory of one set, not K), adds the sets' gradients keeping
sparse ones sparse (`tf.IndexedSlices`: embedding rows) and applies their
mean in one update. Each set's loss is `compute_loss` on that set alone, so
there is one loss; `tests/models/test_masked_elmo.py` checks that the
update, the reported loss and the carried states equal Keras' step.
"""

import keras
import tensorflow as tf

from tfeff.models import distributed


def train_step(model, data):
    """One update of `model` (a `MaskedElmo`) from the mask sets of one batch."""
    # `fit` passes a dict, `train_on_batch` `(x,)`.
    batch, _, _ = keras.utils.unpack_x_y_sample_weight(data)
    num_sets = batch["masked_token_ids"].shape[1]
    initial = model.initial_states(batch)
    variables = model.trainable_variables
    total = None
    mean_loss = 0.0
    next_states = None
    for k in range(num_sets):
        with tf.GradientTape() as tape:
            outputs = model.forward_sets(batch, [k], initial, training=True)
            loss = model.compute_loss(x=model.select_sets(batch, [k]), y_pred=outputs,
                                      training=True)
            scaled = model.optimizer.scale_loss(loss)
        grads = tape.gradient(scaled, variables)
        total = grads if total is None else [add_gradients(a, b) for a, b in zip(total, grads)]
        mean_loss += loss / num_sets
        if k == 0:
            next_states = outputs["states"]
    grads = [scale_gradient(g, 1.0 / num_sets) for g in total]
    model.optimizer.apply_gradients(zip(grads, variables))
    if model.carried_states:
        model.store_states(next_states)
    model._loss_tracker.update_state(distributed.unscale_loss(mean_loss),
                                     sample_weight=tf.shape(batch["padding_mask"])[0])
    return model.get_metrics_result()


def add_gradients(a, b):
    """Sum of two gradients; sparse ones (`tf.IndexedSlices`, embedding rows) stay sparse."""
    if a is None or b is None:
        return a if b is None else b
    if isinstance(a, tf.IndexedSlices) and isinstance(b, tf.IndexedSlices):
        return tf.IndexedSlices(tf.concat([a.values, b.values], 0),
                                tf.concat([a.indices, b.indices], 0), a.dense_shape)
    return tf.convert_to_tensor(a) + tf.convert_to_tensor(b)


def scale_gradient(g, factor):
    """`g * factor`, sparse or dense (None stays None)."""
    if g is None:
        return None
    if isinstance(g, tf.IndexedSlices):
        return tf.IndexedSlices(g.values * tf.cast(factor, g.values.dtype), g.indices,
                                g.dense_shape)
    return g * tf.cast(factor, g.dtype)
