"""MaskedElmo: a fully bidirectional biLSTM trained as a masked LM.

`keras.ops` code: it runs and trains on every Keras backend. On TensorFlow its
own `train_step` takes the mask sets' gradients one set at a time (and keeps
sparse embedding gradients sparse); elsewhere Keras' step differentiates
`compute_loss`, which gives the same update.
"""

import keras
from keras import ops

from tfeff import layers as tfeff_layers
from tfeff.layers.input_checks import check_right_padded
from tfeff.models.distributed import global_mean
from tfeff.models.distributed import layer_losses

OUTPUT_LAYERS = ("softmax", "adaptive", "continuous")
INPUT_EMBEDDINGS = ("trainable", "alone")


@keras.saving.register_keras_serializable(package="tfeff")
class MaskedElmo(keras.Model):
    """Masked ELMo (Senay & Salin, 2020): `MaskedBiLSTM` over WordPiece embeddings, MLM-trained.

    * Input: WordPiece ids embedded to d = `2 * projection_dim` (a trainable
      `Embedding`, or with `input_embedding="alone"` an `AloneEmbedding`),
      then dropout.
    * Encoder: `MaskedBiLSTM(units, projection_dim, num_layers)`: each layer
      after the first sees both directions of the layer below.
    * Output at the masked positions only: `"softmax"`, a full softmax tied to
      the input embedding (plus a bias); `"adaptive"`, an `AdaptiveSoftmax`;
      `"continuous"`, a `ContinuousOutput` predicting the target's fixed
      vector (`embedding_table`).
    * Training (`train_step`): **mask accumulation**, K = the second axis of
      the batch's `masked_token_ids`: the K mask sets run one after another
      from the same initial LSTM states, each set's gradient is taken
      separately and their mean is applied in one update. **Truncated BPTT**:
      with `tbptt_batch_size` (the global batch size) the final LSTM states of
      the first mask set are kept in non-trainable variables and initialize
      the next batch, except in rows whose `reset` is set (a new document).

    At paper size (2 layers, 4096 units, projection 384, 28,745 WordPieces)
    the model has 103,962,441 parameters (paper: ~104M).

    Args:
        vocabulary_size: int >= 2 (WordPiece ids, `[MASK]` included).
        num_layers, units, projection_dim: the `MaskedBiLSTM`.
        dropout_rate: dropout on the embeddings and each LSTM output.
        output_layer: one of `OUTPUT_LAYERS`.
        output_loss: `"cosine"`, `"l2"` or `"vmf"` (`"continuous"` only).
        embedding_table: `.npy` path or array `(vocabulary_size, dim)` of fixed
            target vectors (`"continuous"` only).
        adaptive_cutoffs, adaptive_div_value: `"adaptive"` only.
        input_embedding: `"trainable"` or `"alone"`.
        alone: dict of `AloneEmbedding` arguments for `input_embedding="alone"`.
        use_cudnn: the `MaskedBiLSTM` switch (`"auto"`, True, False).
        tbptt_batch_size: rows of the global batch (streams) whose states are
            carried between batches; None starts every batch from zeros.
        **kwargs: base `Model` arguments.

    Call arguments:
        inputs: dict with int `token_ids` `(batch, time)` (right-padded),
            `padding_mask` `(batch, time)` (right-padded: a True after a
            False raises, as in `MaskedBiLSTM`) and optionally `masked_positions`
            `(batch, p)`; or a training batch (`masked_token_ids`
            `(batch, K, time)`, `masked_positions`, `masked_ids`,
            `masked_weights` `(batch, K, p)`, `padding_mask`, `reset`), whose
            mask sets it runs (`mask_sets`).
        training: bool.
        initial_state: optional list of `4 * num_layers` LSTM states.

    Returns:
        dict with `sequence_output` `(batch, time, d)`, `states` (the final
        LSTM states) and, with `masked_positions`, `masked_output`: what the
        output layer consumes at those positions (hidden states `(batch, p, d)`,
        or the predicted vectors of `"continuous"`). For a training batch,
        `masked_output` `(batch, K, p, ...)` (K = 1 when not training) and
        `states`.
    """

    def __init__(
        self,
        vocabulary_size,
        num_layers=2,
        units=4096,
        projection_dim=384,
        dropout_rate=0.1,
        output_layer="softmax",
        output_loss="cosine",
        embedding_table=None,
        adaptive_cutoffs=None,
        adaptive_div_value=4.0,
        input_embedding="trainable",
        alone=None,
        use_cudnn="auto",
        tbptt_batch_size=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        if not isinstance(vocabulary_size, int) or vocabulary_size < 2:
            raise ValueError(
                "Received an invalid value for `vocabulary_size`, expected an integer "
                f">= 2. Received: vocabulary_size={vocabulary_size}")
        if output_layer not in OUTPUT_LAYERS:
            raise ValueError(
                f"Received an invalid value for `output_layer`, expected one of "
                f"{OUTPUT_LAYERS}. Received: output_layer={output_layer!r}")
        if input_embedding not in INPUT_EMBEDDINGS:
            raise ValueError(
                f"Received an invalid value for `input_embedding`, expected one of "
                f"{INPUT_EMBEDDINGS}. Received: input_embedding={input_embedding!r}")
        if (output_layer == "continuous") != (embedding_table is not None):
            raise ValueError("`embedding_table` is needed by, and only by, "
                             f"output_layer='continuous'. Received: output_layer={output_layer!r}")
        if alone is not None and input_embedding != "alone":
            raise ValueError("`alone` is only used with input_embedding='alone'.")
        if tbptt_batch_size is not None and (
                not isinstance(tbptt_batch_size, int) or tbptt_batch_size <= 0):
            raise ValueError(
                "Received an invalid value for `tbptt_batch_size`, expected a positive "
                f"integer or None. Received: tbptt_batch_size={tbptt_batch_size}")
        self.vocabulary_size = vocabulary_size
        self.num_layers = num_layers
        self.units = units
        self.projection_dim = projection_dim
        self.hidden_dim = 2 * projection_dim
        self.dropout_rate = float(dropout_rate)
        self.output_layer_type = output_layer
        self.output_loss = output_loss
        self.adaptive_cutoffs = list(adaptive_cutoffs) if adaptive_cutoffs else None
        self.adaptive_div_value = float(adaptive_div_value)
        self.input_embedding = input_embedding
        self.use_cudnn = use_cudnn
        self.tbptt_batch_size = tbptt_batch_size
        self.alone = dict(alone or {}) if input_embedding == "alone" else None
        tied = output_layer == "softmax"
        if input_embedding == "alone":
            options = {"base_dim": self.hidden_dim, **self.alone}
            self.token_embedding = tfeff_layers.AloneEmbedding(
                vocabulary_size, self.hidden_dim, lookup="table" if tied else "unique",
                name="alone_token_embedding", **options)
            self.alone["seed"] = self.token_embedding.seed
        else:
            self.token_embedding = keras.layers.Embedding(
                vocabulary_size, self.hidden_dim,
                embeddings_initializer=keras.initializers.RandomNormal(stddev=0.02),
                name="token_embedding")
        self.embedding_dropout = keras.layers.Dropout(self.dropout_rate,
                                                      name="embedding_dropout")
        self.encoder = tfeff_layers.MaskedBiLSTM(
            units, projection_dim, num_layers=num_layers, dropout_rate=dropout_rate,
            use_cudnn=use_cudnn, return_state=True, return_all_layers=True, name="encoder")
        self.target_table = None
        if output_layer == "softmax":
            self.output_head = tfeff_layers.FullSoftmax(vocabulary_size, name="mlm_softmax")
            self.output_head.tie_to(self.token_embedding)
        elif output_layer == "adaptive":
            if not self.adaptive_cutoffs:
                raise ValueError("output_layer='adaptive' needs `adaptive_cutoffs`.")
            self.output_head = tfeff_layers.AdaptiveSoftmax(
                vocabulary_size, self.adaptive_cutoffs, div_value=adaptive_div_value,
                name="mlm_adaptive_softmax")
        else:
            self.target_table = tfeff_layers.FixedEmbedding(embedding_table, name="target_table")
            if self.target_table.vocabulary_size != vocabulary_size:
                raise ValueError(
                    f"`embedding_table` has {self.target_table.vocabulary_size} rows, "
                    f"expected vocabulary_size={vocabulary_size}.")
            self.output_head = tfeff_layers.ContinuousOutput(
                self.target_table.output_dim, loss=output_loss, name="mlm_continuous_output")

    @property
    def is_continuous(self):
        return self.output_layer_type == "continuous"

    def build(self, input_shape=None):
        seq = (None, None)
        self.token_embedding.build(seq)
        self.encoder.build(seq + (self.hidden_dim,))
        if self.is_continuous:
            self.output_head.build((None, self.hidden_dim))
        else:
            self.output_head.build((None, self.hidden_dim), (None,))
        self.carried_states = []
        if self.tbptt_batch_size:
            for i in range(self.num_layers):
                for name, dim in (("h_forward", self.projection_dim), ("c_forward", self.units),
                                  ("h_backward", self.projection_dim),
                                  ("c_backward", self.units)):
                    # One copy, identical on every replica: each replica reads its
                    # rows, and writes the all-gathered states of every replica.
                    self.carried_states.append(self.add_weight(
                        shape=(self.tbptt_batch_size, dim), initializer="zeros",
                        trainable=False, aggregation="only_first_replica",
                        name=f"state_{name}_{i}"))
        self.built = True

    # ------------------------------------------------------------------ forward

    def encode(self, token_ids, padding_mask, initial_state=None, training=False):
        """`(stack, states)`: all layers `(batch, num_layers + 1, time, d)` and final states."""
        mask = check_right_padded(self, padding_mask, "padding_mask")
        x = self.token_embedding(ops.cast(token_ids, "int32"))
        x = self.embedding_dropout(x, training=training)
        stack, *states = self.encoder(x, mask=mask, initial_state=initial_state,
                                      training=training)
        return stack, states

    # The embeddable-model contract of `tfeff.export.TokenIdsEmbedderModule`.
    embedding_tokenization = "bert"

    @property
    def embedding_num_layers(self):
        """Layers of `embedding_layers`: the token embedding and each biLSTM layer."""
        return self.num_layers + 1

    @property
    def embedding_dim(self):
        return 2 * (self.projection_dim or self.units)

    def embedding_layers(self, token_ids, padding_mask, training=False):
        """Every layer for `token_ids` from zero states: `(batch, num_layers + 1, n,
        embedding_dim)`, the token-embedding layer first."""
        return self.encode(token_ids, padding_mask, training=training)[0]

    def call(self, inputs, training=False, initial_state=None):
        if "masked_token_ids" in inputs:
            return self.mask_sets(inputs, training=training)
        stack, states = self.encode(inputs["token_ids"], inputs["padding_mask"],
                                    initial_state, training)
        top = stack[:, -1]
        out = {"sequence_output": top, "states": states}
        if "masked_positions" in inputs:
            positions = ops.cast(inputs["masked_positions"], "int32")[..., None]
            hidden = ops.take_along_axis(top, positions, axis=1)  # (batch, p, d)
            out["masked_output"] = self.output_head(hidden) if self.is_continuous else hidden
        return out

    def mask_sets(self, batch, training=False):
        """The outputs of a training batch's mask sets (what `fit` calls off TensorFlow).

        Training: every set from the same initial states (the carried ones with
        TBPTT, which then take set 0's final states); `masked_output` stacks the
        sets `(batch, K, p, ...)`. Not training: set 0 from zero states, like
        `test_step`.
        """
        sets = range(batch["masked_token_ids"].shape[1]) if training else range(1)
        initial = self.initial_states(batch) if training else None
        outputs = [self(self.set_inputs(batch, k), training=training, initial_state=initial)
                   for k in sets]
        if training and self.carried_states:
            self.store_states(outputs[0]["states"])
        return {"masked_output": ops.stack([o["masked_output"] for o in outputs], axis=1),
                "states": outputs[0]["states"]}

    @staticmethod
    def set_inputs(batch, k):
        """The `call` inputs of mask set k of a training batch."""
        return {"token_ids": batch["masked_token_ids"][:, k],
                "padding_mask": batch["padding_mask"],
                "masked_positions": batch["masked_positions"][:, k]}

    def masked_losses(self, masked_output, masked_ids, masked_weights, training=False):
        """Per-prediction loss `(batch, p)` (0 where `masked_weights` is 0).

        Negative log-likelihood for the softmax outputs, the distance to the
        target's fixed vector for `"continuous"`.
        """
        ids = ops.cast(masked_ids, "int32")
        weights = ops.cast(masked_weights, "float32")
        if self.is_continuous:
            per_token = self.output_head.position_loss(self.target_table(ids), masked_output)
        else:
            log_probs, _ = self.output_head(masked_output, ids, mask=weights > 0,
                                            training=training, return_loss=True)
            per_token = -log_probs
        return ops.cast(per_token, "float32") * weights

    def log_prob(self, masked_output):
        """Log-distribution over the vocabulary `(..., vocabulary_size)` (softmax outputs)."""
        if self.is_continuous:
            raise ValueError("A continuous output has no distribution over the vocabulary.")
        return self.output_head.log_prob(masked_output)

    @staticmethod
    def _set_mean(masked_losses, masked_weights):
        """A mask set's loss sum over the global number of its predictions."""
        return global_mean(ops.sum(masked_losses), ops.sum(ops.cast(masked_weights, "float32")))

    def set_loss(self, batch, k, initial_state, training):
        """Mask set k's loss: its loss sum over the global number of its predictions.

        Returns `(loss, outputs)` (`set_outputs`); under `tf.distribute` each replica returns its
        share of the global mean (so replica gradients add up exactly).
        """
        outputs = self.set_outputs(batch, k, initial_state, training)
        loss = self._set_mean(outputs["masked_losses"], batch["masked_weights"][:, k])
        return loss + layer_losses(self), outputs

    def set_outputs(self, batch, k, initial_state=None, training=False):
        """The model's outputs on mask set k of `batch`, plus its per-prediction
        `masked_losses` `(batch, p)` (see `masked_losses`)."""
        outputs = self(self.set_inputs(batch, k), training=training, initial_state=initial_state)
        outputs["masked_losses"] = self.masked_losses(
            outputs["masked_output"], batch["masked_ids"][:, k], batch["masked_weights"][:, k],
            training)
        return outputs

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        """The mean over `mask_sets`' sets of each set's masked-LM loss (+ layer losses).

        Its gradient is the mean of the sets' gradients: the update of the
        TensorFlow `train_step`, which takes them one set at a time to hold one
        set's activations instead of K.
        """
        del y, sample_weight
        masked_output = y_pred["masked_output"]
        num_sets = masked_output.shape[1]
        total = 0.0
        for k in range(num_sets):
            losses = self.masked_losses(masked_output[:, k], x["masked_ids"][:, k],
                                        x["masked_weights"][:, k], training)
            total += self._set_mean(losses, x["masked_weights"][:, k])
        return total / num_sets + layer_losses(self)

    # ------------------------------------------------------------------ TBPTT states

    def _replica_rows(self, batch_rows):
        if keras.backend.backend() != "tensorflow":
            return 0
        import tensorflow as tf

        ctx = tf.distribute.get_replica_context()
        replica = 0 if ctx is None else ctx.replica_id_in_sync_group
        if not isinstance(replica, int):
            replica = ops.cast(replica, "int32")
        return replica * batch_rows

    def initial_states(self, batch):
        """The carried states for this replica's rows, zeroed where `reset` is set."""
        if not self.carried_states:
            return None
        rows = ops.shape(batch["padding_mask"])[0]
        start = self._replica_rows(rows)
        keep = 1.0 - ops.cast(batch["reset"], "float32")[:, None]
        states = []
        for var in self.carried_states:
            value = ops.convert_to_tensor(var)[start:start + rows]
            states.append(value * ops.cast(keep, value.dtype))
        return states

    def store_states(self, states):
        """Writes this step's final states (all replicas' rows) for the next batch."""
        ctx = None
        if keras.backend.backend() == "tensorflow":
            import tensorflow as tf

            ctx = tf.distribute.get_replica_context()
        for var, value in zip(self.carried_states, states):
            value = ops.cast(ops.stop_gradient(value), var.dtype)
            if ctx is not None and ctx.num_replicas_in_sync > 1:
                value = ctx.all_gather(value, axis=0)
            var.assign(value)

    # ------------------------------------------------------------------ training

    def train_step(self, *args):
        """One update from K mask sets of one batch (mask accumulation), carrying states.

        On TensorFlow the sets' gradients are taken one set after another (one
        set's activations alive at a time) and their mean applied; on other
        backends Keras' own step differentiates `compute_loss`, the same mean.
        """
        if keras.backend.backend() != "tensorflow":
            return super().train_step(*args)
        import tensorflow as tf

        (data,) = args
        batch, _, _ = keras.utils.unpack_x_y_sample_weight(data)  # fit: a dict; train_on_batch: (x,)
        num_sets = batch["masked_token_ids"].shape[1]
        initial = self.initial_states(batch)
        variables = self.trainable_variables
        total = None
        mean_loss = 0.0
        next_states = None
        for k in range(num_sets):
            with tf.GradientTape() as tape:
                loss, outputs = self.set_loss(batch, k, initial, training=True)
                scaled = self.optimizer.scale_loss(loss)
            grads = tape.gradient(scaled, variables)
            total = grads if total is None else [_add(a, b) for a, b in zip(total, grads)]
            mean_loss += loss / num_sets
            if k == 0:
                next_states = outputs["states"]
        grads = [_scale(g, 1.0 / num_sets) for g in total]
        self.optimizer.apply_gradients(zip(grads, variables))
        if self.carried_states:
            self.store_states(next_states)
        self._loss_tracker.update_state(
            _unscale(mean_loss),
            sample_weight=tf.shape(batch["padding_mask"])[0])
        return self.get_metrics_result()

    def get_config(self):
        config = super().get_config()
        table = self.target_table.get_config()["table"] if self.target_table else None
        config.update({
            "vocabulary_size": self.vocabulary_size,
            "num_layers": self.num_layers,
            "units": self.units,
            "projection_dim": self.projection_dim,
            "dropout_rate": self.dropout_rate,
            "output_layer": self.output_layer_type,
            "output_loss": self.output_loss,
            "embedding_table": table,
            "adaptive_cutoffs": self.adaptive_cutoffs,
            "adaptive_div_value": self.adaptive_div_value,
            "input_embedding": self.input_embedding,
            "alone": self.alone,
            "use_cudnn": self.use_cudnn,
            "tbptt_batch_size": self.tbptt_batch_size,
        })
        return config


def _unscale(loss):
    """A replica's loss share, as the global loss (Keras' loss tracker averages replicas)."""
    import tensorflow as tf

    ctx = tf.distribute.get_replica_context()
    if ctx is None or ctx.num_replicas_in_sync == 1:
        return loss
    return loss * ctx.num_replicas_in_sync


def _add(a, b):
    """Sum of two gradients; sparse ones (embedding rows) stay sparse (TensorFlow)."""
    import tensorflow as tf

    if a is None or b is None:
        return a if b is None else b
    if isinstance(a, tf.IndexedSlices) and isinstance(b, tf.IndexedSlices):
        return tf.IndexedSlices(tf.concat([a.values, b.values], 0),
                                tf.concat([a.indices, b.indices], 0), a.dense_shape)
    return tf.convert_to_tensor(a) + tf.convert_to_tensor(b)


def _scale(g, factor):
    import tensorflow as tf

    if g is None:
        return None
    if isinstance(g, tf.IndexedSlices):
        return tf.IndexedSlices(g.values * tf.cast(factor, g.values.dtype), g.indices,
                                g.dense_shape)
    return g * tf.cast(factor, g.dtype)
