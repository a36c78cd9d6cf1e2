"""ElmoLM: a bidirectional LSTM language model with a pluggable output layer."""

import numbers

import keras
from keras import ops

from tfeff import layers as tfeff_layers
from tfeff.backend import dynamic_rows
from tfeff.layers.embedding_common import TableEmbedding
from tfeff.backend.checks import check_right_padded
from tfeff.models.distributed import global_mean
from tfeff.models.distributed import layer_losses

OUTPUT_LAYERS = ("continuous", "full", "adaptive", "sampled", "fixed")
INPUT_EMBEDDINGS = ("fixed", "trainable", "alone")
# Output layers that score the fixed table (they need `embedding_table`).
_TABLE_OUTPUTS = ("continuous", "fixed")
# Targets with these ids (padding, unknown word) carry no loss.
FIRST_PREDICTABLE_ID = 2
# How a bidirectional language model's loss combines its directions' mean losses.
DIRECTION_LOSSES = ("sum", "mean")


def combine_directions(losses, how):
    """The model's loss from its directions' losses: their `"sum"` or `"mean"`."""
    total = 0.0
    for loss in losses:
        total += loss
    return total / len(losses) if how == "mean" else total


def direction_pairs(outputs, targets):
    """`(direction, outputs, targets)` aligned per direction.

    Forward position t predicts token t+1 and backward position t predicts
    token t-1, so the outputs and targets are shifted against each other.
    Works on tensors and NumPy arrays; `targets` may be ids or their vectors.
    """
    return (
        ("forward", outputs["forward"][:, :-1], targets[:, 1:]),
        ("backward", outputs["backward"][:, 1:], targets[:, :-1]),
    )


@keras.saving.register_keras_serializable(package="tfeff")
class ElmoLM(keras.Model):
    """ELMo-style biLM with a pluggable input embedding and output layer.

    With the defaults it is ELMo-C of Li et al. (TACL 2019), Table 1:

    * Input: each token's pre-trained (fastText) vector, gathered in host
      memory (`FixedEmbedding`), linearly projected to `projection_dim`; or,
      with `input_embedding="trainable"`, a trainable `Embedding` (the
      subword LM, ELMo-Sub); or, with `input_embedding="alone"`, an
      `AloneEmbedding` whose parameters do not grow with the vocabulary.
    * Forward and backward stacks of `num_layers` LSTMs with a recurrent
      projection (`ProjectedLSTM`: `units` cells, `projection_dim` outputs),
      each followed by layer normalization and dropout; from the second layer
      on, a residual connection adds the layer's input.
    * Output, shared by both directions, predicting the next (forward) and
      previous (backward) token:
      - `"continuous"`: `ContinuousOutput` predicts the target's fixed vector.
      - `"full"`: `FullSoftmax` over the vocabulary (optionally tied to a
        trainable or ALONE input embedding, `tie_output`; a tied ALONE
        embedding computes its table once per step for both ends).
      - `"adaptive"`: `AdaptiveSoftmax` with `adaptive_cutoffs`.
      - `"sampled"`: `SampledSoftmax` with `num_sampled` log-uniform negatives.
      - `"fixed"`: a projection to the fixed table's dimension and a sampled
        softmax whose output matrix is that frozen table (FIXED in the paper).
      The loss is the mean over predictable targets of each direction,
      summed over the two directions (`direction_loss="sum"`) or averaged
      (`"mean"`, as ELMo's bilm-tf: with Adam the two differ by the
      gradient-clipping bound they meet).

    The representation stack used for feature extraction is
    `[concat(x, x), concat(f_1, b_1), ..., concat(f_L, b_L)]`, each of size
    `2 * projection_dim` (ELMo's layer 0 duplicates the token layer).

    The constructor reads as `MaskedElmo`'s and `Bert`'s: the vocabulary size
    first, the fixed vectors as the keyword `embedding_table`.

    Args:
        vocabulary_size: number of ids (row 0 is padding); may be left out
            when `embedding_table` is given (it is then the table's rows, and
            must equal them when both are given).
        num_layers: LSTM layers per direction.
        units: LSTM cell size.
        projection_dim: LSTM projection (and token-projection) size.
        dropout_rate: dropout after each LSTM layer, in [0, 1).
        output_layer: one of `OUTPUT_LAYERS`.
        output_loss: `"cosine"`, `"l2"` or `"vmf"` (`"continuous"` only).
        embedding_table: path of the `.npy` vocabulary vectors, or an array
            `(vocabulary_size, embedding_dim)`; row 0 is padding. Required by
            the fixed input embedding and the `"continuous"` / `"fixed"` outputs.
        vmf_regularization1: lambda_1 of the `"vmf"` loss, >= 0 (penalty on the
            norm of the prediction).
        vmf_regularization2: lambda_2 of the `"vmf"` loss, in (0, 1] (scale of
            the dot product).
        input_embedding: `"fixed"` (the table), `"trainable"` or `"alone"`.
        embedding_dim: size of a trainable input embedding (default: the
            table's dimension, else `projection_dim`).
        tie_output: use the trainable (or ALONE) input embedding as the
            `"full"` softmax's output matrix (a projection to `embedding_dim`
            is added when it differs from `projection_dim`).
        adaptive_cutoffs: cluster boundaries of `"adaptive"`.
        adaptive_div_value: projection divisor of `"adaptive"`.
        num_sampled: negatives per step of `"sampled"` and `"fixed"`.
        seed: sampler seed.
        alone: dict of `AloneEmbedding` arguments (all but
            `vocabulary_size`, `output_dim`, `mask_zero` and `lookup`) for
            `input_embedding="alone"`; `base_dim` defaults to `embedding_dim`.
        cell_clip: None or the bound of each LSTM's cell state
            (`ProjectedLSTM`; ELMo: 3).
        proj_clip: None or the bound of each LSTM's projected state (ELMo: 3).
        direction_loss: `"sum"` or `"mean"` of the two directions' losses.
        **kwargs: base `Model` arguments.

    Call arguments:
        inputs: int ids `(batch, time)`, right-padded with 0 (a row with a
            real id after a 0 raises, see `encode`).
        training: bool.

    Returns:
        dict with `"forward"` and `"backward"` tensors `(batch, time, dim)`:
        for `"continuous"` the predicted vectors, for the softmax outputs the
        hidden states that the output layer scores (`output_head.log_prob`).
        At position t, the forward output is for token t+1 and the backward
        output for token t-1.

    Raises:
        TypeError: `vocabulary_size` is not an integer (fixed vectors passed
            first instead of as `embedding_table=`).
        ValueError: `num_layers`, `units` or `projection_dim` is not a
            positive integer, `dropout_rate` is not in [0, 1), `output_layer`
            or `input_embedding` is unknown, `embedding_table` is missing where
            required, `tie_output` is set without a trainable or ALONE input
            and a `"full"` output, `alone` is given without
            `input_embedding="alone"`, `vocabulary_size` is not an integer >= 2
            or differs from the table's rows, or `"adaptive"` has no
            `adaptive_cutoffs`.

    Example:

    >>> lm = ElmoLM(20, num_layers=1, units=8, projection_dim=4,
    ...             input_embedding="trainable", output_layer="full")
    >>> ids = np.array([[2, 5, 6, 3, 0]], "int32")  # <s> w w </s> <pad>
    >>> out = lm(ids)
    >>> sorted(out), tuple(out["forward"].shape)
    (['backward', 'forward'], (1, 5, 4))
    >>> float(lm.compute_loss(x=ids, y_pred=out)) > 0
    True
    """

    def __init__(
        self,
        vocabulary_size=None,
        num_layers=2,
        units=4096,
        projection_dim=512,
        dropout_rate=0.1,
        output_layer="continuous",
        output_loss="cosine",
        embedding_table=None,
        vmf_regularization1=0.0,
        vmf_regularization2=1.0,
        input_embedding="fixed",
        embedding_dim=None,
        tie_output=False,
        adaptive_cutoffs=None,
        adaptive_div_value=4.0,
        num_sampled=8192,
        seed=None,
        alone=None,
        cell_clip=None,
        proj_clip=None,
        direction_loss="sum",
        **kwargs,
    ):
        super().__init__(**kwargs)
        if vocabulary_size is not None and not isinstance(vocabulary_size, numbers.Integral):
            raise TypeError(
                "ElmoLM's first argument is `vocabulary_size` (as for MaskedElmo and Bert); "
                "pass fixed vectors as `embedding_table=`. Received: "
                f"vocabulary_size of type {type(vocabulary_size).__name__}"
            )
        if vocabulary_size is not None:
            vocabulary_size = int(vocabulary_size)
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
        if direction_loss not in DIRECTION_LOSSES:
            raise ValueError(
                f"Received an invalid value for `direction_loss`, expected one of "
                f"{DIRECTION_LOSSES}. Received: direction_loss={direction_loss!r}"
            )
        if input_embedding not in INPUT_EMBEDDINGS:
            raise ValueError(
                f"Received an invalid value for `input_embedding`, expected one of "
                f"{INPUT_EMBEDDINGS}. Received: input_embedding={input_embedding!r}"
            )
        needs_table = input_embedding == "fixed" or output_layer in _TABLE_OUTPUTS
        if needs_table and embedding_table is None:
            raise ValueError(
                f"`embedding_table` is required by input_embedding={input_embedding!r} "
                f"/ output_layer={output_layer!r}."
            )
        if tie_output and (input_embedding not in ("trainable", "alone")
                           or output_layer != "full"):
            raise ValueError(
                "`tie_output=True` needs input_embedding='trainable' or 'alone', and "
                f"output_layer='full'. Received: input_embedding={input_embedding!r}, "
                f"output_layer={output_layer!r}"
            )
        self.num_layers = num_layers
        self.units = units
        self.projection_dim = projection_dim
        self.dropout_rate = float(dropout_rate)
        self.output_layer_type = output_layer
        self.output_loss = output_loss
        self.vmf_regularization1 = float(vmf_regularization1)
        self.vmf_regularization2 = float(vmf_regularization2)
        self.input_embedding = input_embedding
        self.tie_output = bool(tie_output)
        self.adaptive_cutoffs = list(adaptive_cutoffs) if adaptive_cutoffs else None
        self.adaptive_div_value = float(adaptive_div_value)
        self.num_sampled = int(num_sampled)
        self.seed = seed
        self.direction_loss = direction_loss
        if alone is not None and input_embedding != "alone":
            raise ValueError("`alone` is only used with input_embedding='alone'.")
        self.alone = dict(alone or {}) if input_embedding == "alone" else None

        self.fixed_table = None
        if embedding_table is not None:
            self.fixed_table = tfeff_layers.FixedEmbedding(
                embedding_table, mask_zero=True, name="token_embedding"
            )
            table_size = self.fixed_table.vocabulary_size
            if vocabulary_size is not None and vocabulary_size != table_size:
                raise ValueError(
                    f"`vocabulary_size`={vocabulary_size} differs from the table's "
                    f"{table_size} rows."
                )
            vocabulary_size = table_size
        if not isinstance(vocabulary_size, int) or vocabulary_size < 2:
            raise ValueError(
                "Received an invalid value for `vocabulary_size`, expected an integer "
                f">= 2 (or an `embedding_table`). Received: vocabulary_size={vocabulary_size}"
            )
        self.vocabulary_size = vocabulary_size
        if input_embedding == "fixed":
            self.token_embedding = self.fixed_table
            self.embedding_dim = self.fixed_table.output_dim
        else:
            self.embedding_dim = int(embedding_dim or (
                self.fixed_table.output_dim if self.fixed_table else projection_dim))
        if input_embedding == "alone":
            options = {"base_dim": self.embedding_dim, **self.alone}
            self.token_embedding = tfeff_layers.AloneEmbedding(
                vocabulary_size, self.embedding_dim, mask_zero=True,
                # Tied: the softmax computes the whole table each step; gather from it.
                lookup="table" if tie_output else "unique",
                name="alone_token_embedding", **options,
            )
            # A drawn seed is part of the model: keep it for get_config.
            self.alone["seed"] = self.token_embedding.seed
        elif input_embedding == "trainable":
            self.token_embedding = TableEmbedding(
                vocabulary_size, self.embedding_dim, mask_zero=True,
                embeddings_initializer=keras.initializers.RandomNormal(stddev=0.05),
                name="trainable_token_embedding",
            )
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
                        cell_clip=cell_clip,
                        proj_clip=proj_clip,
                        name=f"{direction}_lstm_{i}",
                    )
                )
                norms.append(
                    keras.layers.LayerNormalization(
                        epsilon=1e-6, name=f"{direction}_norm_{i}"
                    )
                )
        self.dropout = keras.layers.Dropout(self.dropout_rate, name="dropout")
        self.pre_output = None  # a projection in front of a softmax, when needed
        if output_layer == "continuous":
            self.output_head = tfeff_layers.ContinuousOutput(
                self.fixed_table.output_dim,
                loss=output_loss,
                vmf_regularization1=vmf_regularization1,
                vmf_regularization2=vmf_regularization2,
                target_embedding=self.fixed_table,
                name="continuous_output",
            )
        elif output_layer == "full":
            if tie_output and self.embedding_dim != projection_dim:
                self.pre_output = keras.layers.Dense(self.embedding_dim, name="pre_output")
            self.output_head = tfeff_layers.FullSoftmax(vocabulary_size, name="full_softmax")
            if tie_output:
                self.output_head.tie_to(self.token_embedding)
        elif output_layer == "adaptive":
            if not self.adaptive_cutoffs:
                raise ValueError("output_layer='adaptive' needs `adaptive_cutoffs`.")
            self.output_head = tfeff_layers.AdaptiveSoftmax(
                vocabulary_size, self.adaptive_cutoffs, div_value=adaptive_div_value,
                name="adaptive_softmax",
            )
        elif output_layer == "sampled":
            self.output_head = tfeff_layers.SampledSoftmax(
                vocabulary_size, self.num_sampled, seed=seed, name="sampled_softmax"
            )
        else:  # "fixed"
            self.pre_output = keras.layers.Dense(
                self.fixed_table.output_dim, name="pre_output"
            )
            self.output_head = tfeff_layers.SampledSoftmax(
                vocabulary_size, self.num_sampled, use_bias=False, seed=seed,
                output_embedding=self.fixed_table, name="fixed_sampled_softmax",
            )

    @property
    def is_continuous(self):
        return self.output_layer_type == "continuous"

    def build(self, input_shape=None):
        shape = (None, None)
        emb_shape = shape + (self.embedding_dim,)
        hidden_shape = shape + (self.projection_dim,)
        if self.input_embedding != "fixed":
            self.token_embedding.build(shape)
        self.token_projection.build(emb_shape)
        for i in range(self.num_layers):
            for lstm, norm in (
                (self.forward_lstms[i], self.forward_norms[i]),
                (self.backward_lstms[i], self.backward_norms[i]),
            ):
                lstm.build(hidden_shape)
                norm.build(hidden_shape)
        if self.pre_output is not None:
            self.pre_output.build(hidden_shape)
            hidden_shape = shape + (self.pre_output.units,)
        self.output_head.build(hidden_shape)
        self.built = True

    def encode(self, vectors, mask, training=False):
        """Runs the biLSTM stacks on token vectors.

        Args:
            vectors: float `(batch, time, embedding_dim)` token vectors.
            mask: bool `(batch, time)`, right-padded: a True after a False
                raises (`tfeff.backend.checks.check_right_padded`:
                `ValueError` eagerly, `InvalidArgumentError` in a
                `tf.function`; not checked under XLA or `jax.jit`).
            training: bool.

        Returns:
            `(stack, forward_top, backward_top)`: the representation stack
            `(batch, num_layers + 1, time, 2 * projection_dim)` and the top
            layer of each direction `(batch, time, projection_dim)`.
        """
        mask = check_right_padded(self, mask)
        token = self.token_projection(vectors)  # (batch, time, proj)
        token = token * ops.cast(mask, token.dtype)[:, :, None]
        forward, backward = token, token
        stack = [ops.concatenate([token, token], axis=-1)]
        for i in range(self.num_layers):
            f = self.forward_lstms[i](forward, mask=mask)  # (batch, time, proj)
            b = self.backward_lstms[i](backward, mask=mask)
            f = self.dropout(self.forward_norms[i](f), training=training)
            b = self.dropout(self.backward_norms[i](b), training=training)
            if i > 0:
                f, b = f + forward, b + backward
            keep = ops.cast(mask, f.dtype)[:, :, None]
            forward, backward = f * keep, b * keep
            stack.append(ops.concatenate([forward, backward], axis=-1))
        return ops.stack(stack, axis=1), forward, backward

    def call(self, inputs, training=False):
        ids = ops.cast(inputs, "int32")
        mask = ids > 0
        vectors = self.token_embedding(ids, training=training)  # (batch, time, emb)
        _, forward, backward = self.encode(vectors, mask, training=training)
        return {"forward": self.head_inputs(forward), "backward": self.head_inputs(backward)}

    def head_inputs(self, hidden):
        """What the output layer scores (`output_head.features`): predictions (continuous)
        or hidden states (after `pre_output`, when there is one)."""
        if self.pre_output is not None:
            hidden = self.pre_output(hidden)
        return self.output_head.features(hidden)

    def log_prob(self, head_inputs):
        """Log-distribution over the vocabulary `(..., vocabulary_size)` (softmax outputs;
        a continuous output raises ValueError)."""
        return self.output_head.log_prob(head_inputs)

    def prediction_pairs(self, outputs, ids):
        """`(direction, outputs, target_ids, valid)` of each direction (`direction_pairs`),
        `valid` True where the target counts (not padding, not `<unk>`): what the loss
        and the held-out evaluation score (the language-model contract
        `tfeff.training.evaluation.collect_predictions` reads). Tensors or arrays."""
        return tuple((name, features, targets, targets >= FIRST_PREDICTABLE_ID)
                     for name, features, targets in direction_pairs(outputs, ids))

    def direction_losses(self, ids, predictions, training=False):
        """Per-direction (sum of losses, number of targets) over this batch.

        Forward position t predicts token t+1, backward position t predicts
        token t-1. Targets that are padding or `<unk>` are skipped: on
        TensorFlow the output layer only ever sees the predictable positions
        (gathered first, `dynamic_rows.compact_rows`); other backends need
        static shapes and mask them. Either way the sum is the output head's
        `per_position_loss` over the predictable targets.
        """
        ids = ops.cast(ids, "int32")
        out = {}
        for name, features, tgt_ids, valid in self.prediction_pairs(predictions, ids):
            kept, kept_ids, mask = dynamic_rows.compact_rows(valid, features, tgt_ids)
            losses = self.output_head.per_position_loss(kept, kept_ids, mask=mask,
                                                        training=training)
            out[name] = (ops.sum(losses), ops.sum(ops.cast(valid, "float32")))
        return out

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        """Sum (or mean, `direction_loss`) over directions of the mean loss per
        predictable target.

        Under `tf.distribute`, each replica divides its loss sum by the
        *global* number of targets (all-reduced), so the replicas' losses add
        up to the loss of the global batch and the summed gradients equal the
        single-device gradients exactly, whatever the padding per replica.
        That is also the form Keras expects from `compute_loss` (a replica's
        share of the global loss), so its `loss` metric reports the global mean.
        """
        del y, sample_weight
        losses = self.direction_losses(x, y_pred, training=training)
        return combine_directions(
            [global_mean(loss_sum, count) for loss_sum, count in losses.values()],
            self.direction_loss) + layer_losses(self)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "embedding_table": (
                    self.fixed_table.get_config()["table"] if self.fixed_table else None
                ),
                "num_layers": self.num_layers,
                "units": self.units,
                "projection_dim": self.projection_dim,
                "dropout_rate": self.dropout_rate,
                "output_layer": self.output_layer_type,
                "output_loss": self.output_loss,
                "vmf_regularization1": self.vmf_regularization1,
                "vmf_regularization2": self.vmf_regularization2,
                "input_embedding": self.input_embedding,
                "vocabulary_size": self.vocabulary_size,
                "embedding_dim": self.embedding_dim,
                "tie_output": self.tie_output,
                "adaptive_cutoffs": self.adaptive_cutoffs,
                "adaptive_div_value": self.adaptive_div_value,
                "num_sampled": self.num_sampled,
                "seed": self.seed,
                "alone": self.alone,
                "cell_clip": self.forward_lstms[0].cell_clip,
                "proj_clip": self.forward_lstms[0].proj_clip,
                "direction_loss": self.direction_loss,
            }
        )
        return config

