"""ElmoLM: a bidirectional LSTM language model with a pluggable output layer."""

import keras
import tensorflow as tf

from tfeff import layers as tfeff_layers

OUTPUT_LAYERS = ("continuous",)
# Targets with these ids (padding, unknown word) carry no loss.
_FIRST_PREDICTABLE_ID = 2


@keras.saving.register_keras_serializable(package="tfeff")
class ElmoLM(keras.Model):
    """ELMo-style biLM: ELMo-C of Li et al. (TACL 2019), Table 1.

    * Fixed input: each token's pre-trained (fastText) vector, gathered in
      host memory (`FixedEmbedding`), linearly projected to `projection_dim`.
    * Forward and backward stacks of `num_layers` LSTMs with a recurrent
      projection (`ProjectedLSTM`: `units` cells, `projection_dim` outputs),
      each followed by layer normalization and dropout; from the second layer
      on, a residual connection adds the layer's input.
    * Output: a `ContinuousOutput` shared by both directions predicts the
      fixed vector of the next (forward) and previous (backward) token.
      The loss is the mean over predictable targets of each direction,
      summed over the two directions.

    The representation stack used for feature extraction is
    `[concat(x, x), concat(f_1, b_1), ..., concat(f_L, b_L)]`, each of size
    `2 * projection_dim` (ELMo's layer 0 duplicates the token layer).

    Args:
        embedding_table: path of the `.npy` vocabulary vectors, or an array
            `(vocabulary_size, embedding_dim)`; row 0 is padding.
        num_layers: LSTM layers per direction.
        units: LSTM cell size.
        projection_dim: LSTM projection (and token-projection) size.
        dropout_rate: dropout after each LSTM layer, in [0, 1).
        output_layer: `"continuous"` (the other output layers come with the
            output-layer zoo).
        output_loss: `"cosine"`, `"l2"` or `"vmf"` (see `ContinuousOutput`).
        vmf_regularization1, vmf_regularization2: vMF loss regularizers.
        **kwargs: base `Model` arguments.

    Call arguments:
        inputs: int ids `(batch, time)`, right-padded with 0.
        training: bool.

    Returns:
        dict with `"forward"` and `"backward"` predictions
        `(batch, time, embedding_dim)`: at position t, the forward prediction
        is for token t+1 and the backward prediction for token t-1.
    """

    def __init__(
        self,
        embedding_table,
        num_layers=2,
        units=4096,
        projection_dim=512,
        dropout_rate=0.1,
        output_layer="continuous",
        output_loss="cosine",
        vmf_regularization1=0.0,
        vmf_regularization2=1.0,
        **kwargs,
    ):
        super().__init__(**kwargs)
        for arg, value in (
            ("num_layers", num_layers),
            ("units", units),
            ("projection_dim", projection_dim),
        ):
            if not isinstance(value, int) or value <= 0:
                raise ValueError(
                    f"Received an invalid value for `{arg}`, expected a positive "
                    f"integer. Received: {arg}={value}"
                )
        if not 0 <= dropout_rate < 1:
            raise ValueError(
                "Received an invalid value for `dropout_rate`, expected a value in "
                f"[0, 1). Received: dropout_rate={dropout_rate}"
            )
        if output_layer not in OUTPUT_LAYERS:
            raise ValueError(
                f"Received an invalid value for `output_layer`, expected one of "
                f"{OUTPUT_LAYERS}. Received: output_layer={output_layer!r}"
            )
        self.num_layers = num_layers
        self.units = units
        self.projection_dim = projection_dim
        self.dropout_rate = float(dropout_rate)
        self.output_layer_type = output_layer
        self.output_loss = output_loss
        self.vmf_regularization1 = float(vmf_regularization1)
        self.vmf_regularization2 = float(vmf_regularization2)

        self.token_embedding = tfeff_layers.FixedEmbedding(
            embedding_table, mask_zero=True, name="token_embedding"
        )
        self.embedding_dim = self.token_embedding.output_dim
        self.vocabulary_size = self.token_embedding.vocabulary_size
        self.token_projection = keras.layers.Dense(
            projection_dim, name="token_projection"
        )
        self.forward_lstms, self.backward_lstms = [], []
        self.forward_norms, self.backward_norms = [], []
        for i in range(num_layers):
            for direction, lstms, norms in (
                ("forward", self.forward_lstms, self.forward_norms),
                ("backward", self.backward_lstms, self.backward_norms),
            ):
                lstms.append(
                    tfeff_layers.ProjectedLSTM(
                        units,
                        projection_dim,
                        go_backwards=direction == "backward",
                        name=f"{direction}_lstm_{i}",
                    )
                )
                norms.append(
                    keras.layers.LayerNormalization(
                        epsilon=1e-6, name=f"{direction}_norm_{i}"
                    )
                )
        self.dropout = keras.layers.Dropout(self.dropout_rate, name="dropout")
        self.output_projection = tfeff_layers.ContinuousOutput(
            self.embedding_dim,
            loss=output_loss,
            vmf_regularization1=vmf_regularization1,
            vmf_regularization2=vmf_regularization2,
            name="continuous_output",
        )

    def build(self, input_shape=None):
        shape = (None, None)
        emb_shape = shape + (self.embedding_dim,)
        hidden_shape = shape + (self.projection_dim,)
        self.token_projection.build(emb_shape)
        for i in range(self.num_layers):
            for lstm, norm in (
                (self.forward_lstms[i], self.forward_norms[i]),
                (self.backward_lstms[i], self.backward_norms[i]),
            ):
                lstm.build(hidden_shape)
                norm.build(hidden_shape)
        self.output_projection.build(hidden_shape)
        self.built = True

    def encode(self, vectors, mask, training=False):
        """Runs the biLSTM stacks on token vectors.

        Args:
            vectors: float `(batch, time, embedding_dim)` token vectors.
            mask: bool `(batch, time)`, right-padded.
            training: bool.

        Returns:
            `(stack, forward_top, backward_top)`: the representation stack
            `(batch, num_layers + 1, time, 2 * projection_dim)` and the top
            layer of each direction `(batch, time, projection_dim)`.
        """
        mask = tf.cast(mask, tf.bool)
        token = self.token_projection(vectors)  # (batch, time, proj)
        token = token * tf.cast(mask, token.dtype)[:, :, None]
        forward, backward = token, token
        stack = [tf.concat([token, token], axis=-1)]
        for i in range(self.num_layers):
            f = self.forward_lstms[i](forward, mask=mask)  # (batch, time, proj)
            b = self.backward_lstms[i](backward, mask=mask)
            f = self.dropout(self.forward_norms[i](f), training=training)
            b = self.dropout(self.backward_norms[i](b), training=training)
            if i > 0:
                f, b = f + forward, b + backward
            keep = tf.cast(mask, f.dtype)[:, :, None]
            forward, backward = f * keep, b * keep
            stack.append(tf.concat([forward, backward], axis=-1))
        return tf.stack(stack, axis=1), forward, backward

    def call(self, inputs, training=False):
        ids = tf.cast(inputs, tf.int32)
        mask = ids > 0
        vectors = self.token_embedding(ids)  # host gather: (batch, time, emb)
        _, forward, backward = self.encode(vectors, mask, training=training)
        return {
            "forward": self.output_projection(forward),
            "backward": self.output_projection(backward),
        }

    def direction_losses(self, ids, predictions):
        """Per-direction (sum of losses, number of targets) over this batch.

        Forward position t predicts token t+1, backward position t predicts
        token t-1. Targets that are padding or `<unk>` are skipped.
        """
        ids = tf.cast(ids, tf.int32)
        targets = self.token_embedding(ids)  # host gather of the same rows
        out = {}
        for name, pred, tgt_ids, tgt in (
            ("forward", predictions["forward"][:, :-1], ids[:, 1:], targets[:, 1:]),
            ("backward", predictions["backward"][:, 1:], ids[:, :-1], targets[:, :-1]),
        ):
            valid = tf.cast(tgt_ids >= _FIRST_PREDICTABLE_ID, tf.float32)
            per_token = self.output_projection.distance(pred, tgt)  # (batch, time-1)
            out[name] = (tf.reduce_sum(per_token * valid), tf.reduce_sum(valid))
        return out

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        """Sum over directions of the mean loss per predictable target.

        Under `tf.distribute`, each replica divides its loss sum by the
        *global* number of targets (all-reduced), so the replicas' losses add
        up to the loss of the global batch and the summed gradients equal the
        single-device gradients exactly, whatever the padding per replica.
        That is also the form Keras expects from `compute_loss` (a replica's
        share of the global loss), so its `loss` metric reports the global mean.
        """
        del y, sample_weight
        losses = self.direction_losses(x, y_pred)
        total = 0.0
        for loss_sum, count in losses.values():
            global_count = _all_reduce_sum(count)
            total += loss_sum / tf.maximum(global_count, 1.0)
        for loss in self.losses:
            total += tf.cast(tf.reduce_sum(loss), total.dtype)
        return total

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "embedding_table": self.token_embedding.get_config()["table"],
                "num_layers": self.num_layers,
                "units": self.units,
                "projection_dim": self.projection_dim,
                "dropout_rate": self.dropout_rate,
                "output_layer": self.output_layer_type,
                "output_loss": self.output_loss,
                "vmf_regularization1": self.vmf_regularization1,
                "vmf_regularization2": self.vmf_regularization2,
            }
        )
        return config


def _all_reduce_sum(value):
    ctx = tf.distribute.get_replica_context()
    if ctx is None or ctx.num_replicas_in_sync == 1:
        return value
    return ctx.all_reduce(tf.distribute.ReduceOp.SUM, value)

