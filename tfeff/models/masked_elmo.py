"""MaskedElmo: the masked-LM task model of Masked ELMo (backbone + output head + loss),
in `keras.ops` on every Keras backend."""

import keras
from keras import ops

from tfeff import layers as tfeff_layers
from tfeff.backend.checks import check_batch_size
from tfeff.models import distributed
from tfeff.models.distributed import global_mean
from tfeff.models.distributed import layer_losses
from tfeff.config.elmo import output_problem
from tfeff.config.masked_elmo import OUTPUT_LAYERS
from tfeff.models.language_model import check_choice
from tfeff.models.masked_elmo_backbone import MaskedElmoBackbone
from tfeff.models.task import Task

# The batch entries that hold one slice per mask set (axis 1).
SET_KEYS = ("masked_token_ids", "masked_positions", "masked_ids", "masked_weights")


@keras.saving.register_keras_serializable(package="tfeff")
class MaskedElmo(Task):
    """Masked ELMo (Senay & Salin, 2020): `MaskedBiLSTM` over WordPiece embeddings, MLM-trained.

    The task model (keras-hub's split): it adds an output head at the masked
    positions and the loss to a `MaskedElmoBackbone` (width d).

    **Mask accumulation**: the batch's K mask sets (the second axis of
    `masked_token_ids`) run from the same initial LSTM states and the loss is
    the mean of each set's masked-LM loss (on TensorFlow differentiated one
    set at a time, `tf_mask_accumulation`: the memory of one set, not K).
    **Truncated BPTT**: with `tbptt_batch_size` the final LSTM states of the
    first mask set initialize the next batch, except in rows whose `reset`
    is set (a new document).

    At paper size (2 layers, 4096 units, projection 384, 28,745 WordPieces)
    the model has 103,962,441 parameters (paper: ~104M).

    Args:
        backbone: a `MaskedElmoBackbone`.
        output_layer: `"full"` (a softmax tied to the input embedding, plus a
            bias), `"adaptive"` or `"continuous"` (the target's fixed vector).
        output_loss: `"cosine"`, `"l2"` or `"vmf"` (`"continuous"` only).
        embedding_table: `.npy` path or array of the target vectors (`"continuous"`).
        adaptive_cutoffs: cluster boundaries of `"adaptive"` (required there).
        adaptive_div_value: projection divisor of `"adaptive"`.
        adaptive_tail_capacity: `tail_capacity` of `"adaptive"` (as `ElmoLM`'s).
        tbptt_batch_size: rows of the global batch whose states are carried (or None).
        **kwargs: base `Model` arguments.

    Call arguments:
        inputs: `MaskedElmoBackbone`'s inputs and optionally `masked_positions`
            `(batch, p)`; or a training batch (`masked_token_ids` `(batch, K, time)`,
            `masked_positions`, `masked_ids`, `masked_weights` `(batch, K, p)`,
            `padding_mask`, `reset`), whose mask sets it runs (`mask_sets`).
        training: bool.
        initial_state: optional list of `4 * num_layers` LSTM states.

    Returns:
        dict with `sequence_output` `(batch, time, d)`, `states` (the final LSTM
        states) and, with `masked_positions`, `masked_output` `(batch, p, ...)`
        (`output_head.features` there); for a training batch, `masked_output`
        `(batch, K, p, ...)` (K = 1 when not training) and `states`.

    Raises:
        ValueError: `output_layer` is unknown, `embedding_table` is given
            without, or missing with, `"continuous"` (or has not the backbone's
            `vocabulary_size` rows), `tbptt_batch_size` is neither None nor a
            positive integer, or `"adaptive"` has no `adaptive_cutoffs`.
        TypeError: `backbone` is not a `MaskedElmoBackbone`.

    Example:

    >>> backbone = MaskedElmoBackbone(30, num_layers=1, units=8, projection_dim=3,
    ...                               use_cudnn=False)
    >>> model = MaskedElmo(backbone)
    >>> ids = np.array([[2, 7, 8, 3, 0]], "int32")
    >>> out = model({"token_ids": ids, "padding_mask": ids > 0,
    ...              "masked_positions": np.array([[1]], "int32")})
    >>> tuple(out["sequence_output"].shape), tuple(out["masked_output"].shape)
    ((1, 5, 6), (1, 1, 6))
    """

    backbone_class = MaskedElmoBackbone

    def __init__(self, backbone, output_layer="full", output_loss="cosine", embedding_table=None,
                 adaptive_cutoffs=None, adaptive_div_value=4.0, adaptive_tail_capacity=None,
                 tbptt_batch_size=None, **kwargs):
        super().__init__(backbone, **kwargs)
        check_choice("output_layer", output_layer, OUTPUT_LAYERS)
        if (output_layer == "continuous") != (embedding_table is not None):
            raise ValueError("`embedding_table` is needed by, and only by, "
                             f"output_layer='continuous'. Received: output_layer={output_layer!r}")
        if tbptt_batch_size is not None and (
                not isinstance(tbptt_batch_size, int) or tbptt_batch_size <= 0):
            raise ValueError(
                "Received an invalid value for `tbptt_batch_size`, expected a positive "
                f"integer or None. Received: tbptt_batch_size={tbptt_batch_size}")
        problem = output_problem(output_layer, backbone.input_embedding, False, adaptive_cutoffs)
        if problem:
            raise ValueError(problem)
        vocabulary_size = backbone.vocabulary_size
        self.output_layer_type = output_layer
        self.output_loss = output_loss
        self.adaptive_cutoffs = list(adaptive_cutoffs) if adaptive_cutoffs else None
        self.adaptive_div_value = float(adaptive_div_value)
        self.adaptive_tail_capacity = adaptive_tail_capacity
        self.tbptt_batch_size = tbptt_batch_size
        self.target_table = None
        if output_layer == "full":
            self.output_head = tfeff_layers.FullSoftmax(vocabulary_size, name="mlm_softmax")
            self.output_head.tie_to(backbone.token_embedding)
        elif output_layer == "adaptive":
            self.output_head = tfeff_layers.AdaptiveSoftmax(
                vocabulary_size, self.adaptive_cutoffs, div_value=adaptive_div_value,
                tail_capacity=adaptive_tail_capacity, name="mlm_adaptive_softmax")
        else:
            self.target_table = tfeff_layers.FixedEmbedding(embedding_table, name="target_table")
            if self.target_table.vocabulary_size != vocabulary_size:
                raise ValueError(
                    f"`embedding_table` has {self.target_table.vocabulary_size} rows, "
                    f"expected vocabulary_size={vocabulary_size}.")
            self.output_head = tfeff_layers.ContinuousOutput(
                self.target_table.output_dim, loss=output_loss,
                target_embedding=self.target_table, name="mlm_continuous_output")

    @property
    def is_continuous(self):
        return self.output_layer_type == "continuous"

    def build_heads(self):
        backbone = self.backbone
        self.output_head.build((None, backbone.hidden_dim))
        self.carried_states = []
        if self.tbptt_batch_size:
            for i in range(backbone.num_layers):
                for name in ("h_forward", "c_forward", "h_backward", "c_backward"):
                    dim = backbone.projection_dim if name[0] == "h" else backbone.units
                    # One copy, identical on every replica: each replica reads its
                    # rows, and writes the all-gathered states of every replica.
                    self.carried_states.append(self.add_weight(
                        shape=(self.tbptt_batch_size, dim), initializer="zeros",
                        trainable=False, aggregation="only_first_replica",
                        name=f"state_{name}_{i}"))

    def encode(self, token_ids, padding_mask, initial_state=None, training=False):
        """`MaskedElmoBackbone.encode`."""
        return self.backbone.encode(token_ids, padding_mask, initial_state, training)

    def call(self, inputs, training=False, initial_state=None):
        if "masked_token_ids" in inputs:
            return self.mask_sets(inputs, training=training)
        stack, states = self.encode(inputs["token_ids"], inputs["padding_mask"],
                                    initial_state, training)
        top = stack[:, -1]
        out = {"sequence_output": top, "states": states}
        if "masked_positions" in inputs:
            positions = check_batch_size(self, top, inputs["masked_positions"], ("batch", "p"),
                                         "masked_positions", "sequence_output")
            positions = ops.cast(positions, "int32")[..., None]
            hidden = ops.take_along_axis(top, positions, axis=1)  # (batch, p, d)
            out["masked_output"] = self.output_head.features(hidden)
        return out

    def mask_sets(self, batch, training=False):
        """A training batch's outputs: training, every set from the (carried) initial
        states, carrying set 0's final states; else set 0 from zeros, like `test_step`."""
        if not training:
            return self.forward_sets(batch, [0])
        initial = self.initial_states(batch)
        outputs = self.forward_sets(batch, range(batch["masked_token_ids"].shape[1]), initial,
                                    training=True)
        if self.carried_states:
            self.store_states(outputs["states"])
        return outputs

    def forward_sets(self, batch, sets, initial_state=None, training=False):
        """The mask sets `sets` of `batch`, each from `initial_state`: `masked_output`
        `(batch, len(sets), p, ...)` and `states`, the first set's final states."""
        outputs = [self(self.set_inputs(batch, k), training=training, initial_state=initial_state)
                   for k in sets]
        return {"masked_output": ops.stack([o["masked_output"] for o in outputs], axis=1),
                "states": outputs[0]["states"]}

    @staticmethod
    def set_inputs(batch, k):
        """The `call` inputs of mask set k of a training batch."""
        return {"token_ids": batch["masked_token_ids"][:, k],
                "padding_mask": batch["padding_mask"],
                "masked_positions": batch["masked_positions"][:, k]}

    @staticmethod
    def select_sets(batch, sets):
        """`batch` with only the mask sets `sets` (in that order) on the per-set entries."""
        sets = list(sets)
        return {key: (ops.stack([value[:, k] for k in sets], axis=1) if key in SET_KEYS
                      else value)
                for key, value in batch.items()}

    def masked_losses(self, masked_output, masked_ids, masked_weights, training=False):
        """Per-prediction loss `(batch, p)`: `per_position_loss` times `masked_weights`."""
        weights = ops.cast(masked_weights, "float32")
        per_token = self.output_head.per_position_loss(
            masked_output, ops.cast(masked_ids, "int32"), mask=weights > 0, training=training)
        return ops.cast(per_token, "float32") * weights

    def log_prob(self, masked_output):
        """Log-probabilities `(..., vocabulary_size)` (a continuous output raises ValueError)."""
        return self.output_head.log_prob(masked_output)

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        """The model's one loss: the mean over the sets of `y_pred["masked_output"]`
        `(batch, K, p, ...)` of each set's `masked_losses` sum over the global number
        of its predictions (`global_mean`), plus the layer losses."""
        del y, sample_weight
        masked_output = y_pred["masked_output"]
        num_sets = masked_output.shape[1]
        total = 0.0
        for k in range(num_sets):
            weights = x["masked_weights"][:, k]
            losses = self.masked_losses(masked_output[:, k], x["masked_ids"][:, k], weights,
                                        training)
            total += global_mean(ops.sum(losses), ops.sum(ops.cast(weights, "float32")))
        return total / num_sets + layer_losses(self)

    def set_outputs(self, batch, k, initial_state=None, training=False):
        """The model's outputs on mask set k of `batch`, plus its `masked_losses`."""
        outputs = self(self.set_inputs(batch, k), training=training, initial_state=initial_state)
        outputs["masked_losses"] = self.masked_losses(
            outputs["masked_output"], batch["masked_ids"][:, k], batch["masked_weights"][:, k],
            training)
        return outputs

    def set_loss(self, batch, k, initial_state, training):
        """`(loss, outputs)` of mask set k alone (`compute_loss`, `call`)."""
        outputs = self(self.set_inputs(batch, k), training=training, initial_state=initial_state)
        y_pred = {"masked_output": outputs["masked_output"][:, None]}
        loss = self.compute_loss(x=self.select_sets(batch, [k]), y_pred=y_pred,
                                 training=training)
        return loss, outputs

    def initial_states(self, batch):
        """The carried states for this replica's rows, zeroed where `reset` is set."""
        if not self.carried_states:
            return None
        rows = ops.shape(batch["padding_mask"])[0]
        start = distributed.replica_index() * rows
        keep = 1.0 - ops.cast(batch["reset"], "float32")[:, None]
        return [ops.convert_to_tensor(var)[start:start + rows] * ops.cast(keep, var.dtype)
                for var in self.carried_states]

    def store_states(self, states):
        """Writes this step's final states (all replicas' rows) for the next batch."""
        for var, value in zip(self.carried_states, states):
            var.assign(distributed.all_gather(ops.cast(ops.stop_gradient(value), var.dtype)))

    def train_step(self, *args):
        """One update from K mask sets of one batch (mask accumulation), carrying states:
        on TensorFlow set by set (`tf_mask_accumulation`), elsewhere Keras' own step."""
        if keras.backend.backend() != "tensorflow":
            return super().train_step(*args)
        from tfeff.models import tf_mask_accumulation

        (data,) = args
        return tf_mask_accumulation.train_step(self, data)

    def get_config(self):
        config = super().get_config()
        table = self.target_table.get_config()["table"] if self.target_table else None
        config.update({name: getattr(self, name) for name in (
            "output_loss", "adaptive_cutoffs", "adaptive_div_value", "adaptive_tail_capacity",
            "tbptt_batch_size")})
        config.update(output_layer=self.output_layer_type, embedding_table=table)
        return config
