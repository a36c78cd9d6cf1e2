"""TensorFlow's mask-accumulation step: K mask sets' gradients, one set at a time.

Keras' own step differentiates `MaskedElmo.compute_loss` with every set's activations
alive at once; `train_step` takes the same gradient set by set (the memory of one set),
keeping sparse gradients sparse: the same update, loss and carried states.
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
    total, mean_loss, next_states = None, 0.0, None
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
