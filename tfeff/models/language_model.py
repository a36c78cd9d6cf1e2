"""What `ElmoLM` and `TransformerLM` share, whatever their encoder: the token layer
(`LanguageModelBackbone`), and the output head, target alignment and loss
(`LanguageModel`)."""

import numbers

import keras
from keras import ops

from tfeff import layers as tfeff_layers
from tfeff.backend import dynamic_rows
from tfeff.config.elmo import INPUT_EMBEDDINGS
from tfeff.config.elmo import OUTPUT_LAYERS
from tfeff.config.elmo import DIRECTION_LOSSES
from tfeff.config.elmo import output_problem
from tfeff.layers.embedding_common import TableEmbedding
from tfeff.models.distributed import global_mean
from tfeff.models.distributed import layer_losses
from tfeff.models.task import Backbone
from tfeff.models.task import Task

# Targets with these ids (padding, unknown word) carry no loss.
FIRST_PREDICTABLE_ID = 2
DIRECTIONS = ("forward", "backward")


def combine_directions(losses, how):
    """The model's loss from its directions' losses: their `"sum"` or `"mean"`."""
    total = sum(losses, 0.0)
    return total / len(losses) if how == "mean" else total


def direction_pairs(outputs, targets):
    """`(direction, outputs, targets)` of each direction `outputs` holds, aligned (forward
    t predicts token t+1, backward t token t-1); `targets` may be ids or vectors."""
    pairs = []
    if "forward" in outputs:
        pairs.append(("forward", outputs["forward"][:, :-1], targets[:, 1:]))
    if "backward" in outputs:
        pairs.append(("backward", outputs["backward"][:, 1:], targets[:, :-1]))
    return tuple(pairs)


def prediction_pairs(outputs, ids):
    """`(direction, outputs, target_ids, valid)` of each direction (`direction_pairs`):
    `valid` where the target is predictable (not padding, not `<unk>`) and predicted
    from a token (in a padded row the backward output after `</s>` is padding)."""
    pairs = []
    for (direction, features, targets), (_, source, _) in zip(
            direction_pairs(outputs, ids), direction_pairs(dict.fromkeys(outputs, ids), ids)):
        valid = (targets >= FIRST_PREDICTABLE_ID) & (source > 0)
        pairs.append((direction, features, targets, valid))
    return tuple(pairs)


def check_positive_int(name, value, types=numbers.Integral):
    """Raises ValueError unless `value` is a positive integer of `types` (not a bool)."""
    if not isinstance(value, types) or isinstance(value, bool) or value <= 0:
        raise ValueError(f"Received an invalid value for `{name}`, expected a positive integer. "
                         f"Received: {name}={value!r}")


def check_vocabulary_size_type(model, vocabulary_size):
    """Raises TypeError unless `vocabulary_size` is None or an integer (not fixed vectors)."""
    if vocabulary_size is not None and not isinstance(vocabulary_size, numbers.Integral):
        raise TypeError(
            f"{type(model).__name__}'s first argument is `vocabulary_size` (as for "
            "MaskedElmo and Bert); pass fixed vectors as `embedding_table=`. Received: "
            f"vocabulary_size of type {type(vocabulary_size).__name__}")


def check_choice(name, value, choices):
    """Raises ValueError unless `value` is one of `choices`."""
    if value not in choices:
        raise ValueError(f"Received an invalid value for `{name}`, expected one of {choices}. "
                         f"Received: {name}={value!r}")


class LanguageModelBackbone(Backbone):
    """Base of the next-word models' backbones: the token layer (a subclass's
    `build_layers` starts with `build_token_embedding`).

    Args:
        vocabulary_size: number of ids (row 0 is padding); with a table, its row count.
        hidden_dim: the encoder's width (a trainable or ALONE input's default size).
        embedding_table: as `ElmoBackbone`'s (kept as `fixed_table` for the output).
        input_embedding: one of `INPUT_EMBEDDINGS`.
        token_embedding_dim: as `ElmoBackbone`'s.
        alone: `AloneEmbedding` arguments (not `vocabulary_size`, `output_dim`, `mask_zero`;
            `lookup` defaults to `"unique"`, `base_dim` to `token_embedding_dim`).
        **kwargs: base `Model` arguments.
    """

    def __init__(self, vocabulary_size=None, *, hidden_dim, embedding_table=None,
                 input_embedding="fixed", token_embedding_dim=None, alone=None, **kwargs):
        super().__init__(**kwargs)
        check_vocabulary_size_type(self, vocabulary_size)
        check_choice("input_embedding", input_embedding, INPUT_EMBEDDINGS)
        if embedding_table is None and input_embedding == "fixed":
            raise ValueError("`embedding_table` is required by input_embedding='fixed'.")
        if alone is not None and input_embedding != "alone":
            raise ValueError("`alone` is only used with input_embedding='alone'.")
        self.input_embedding = input_embedding
        self.width = hidden_dim
        self.alone = dict(alone or {}) if input_embedding == "alone" else None
        self.fixed_table = None
        if embedding_table is not None:
            self.fixed_table = tfeff_layers.FixedEmbedding(
                embedding_table, mask_zero=True, name="token_embedding")
            table_size = self.fixed_table.vocabulary_size
            if vocabulary_size is not None and int(vocabulary_size) != table_size:
                raise ValueError(f"`vocabulary_size`={vocabulary_size} differs from the table's "
                                 f"{table_size} rows.")
            vocabulary_size = table_size
        if vocabulary_size is None or int(vocabulary_size) < 2:
            raise ValueError(
                "Received an invalid value for `vocabulary_size`, expected an integer >= 2 (or "
                f"an `embedding_table`). Received: vocabulary_size={vocabulary_size}")
        self.vocabulary_size = int(vocabulary_size)
        if input_embedding == "fixed":
            self.token_embedding = self.fixed_table
            self.token_embedding_dim = self.fixed_table.output_dim
            return
        self.token_embedding_dim = int(token_embedding_dim or (
            self.fixed_table.output_dim if self.fixed_table else hidden_dim))
        if input_embedding == "alone":
            options = {"base_dim": self.token_embedding_dim, "lookup": "unique", **self.alone}
            self.token_embedding = tfeff_layers.AloneEmbedding(
                self.vocabulary_size, self.token_embedding_dim, mask_zero=True,
                name="alone_token_embedding", **options)
            # A drawn seed is part of the model: keep it for get_config.
            self.alone["seed"] = self.token_embedding.seed
        else:
            self.token_embedding = TableEmbedding(
                self.vocabulary_size, self.token_embedding_dim, mask_zero=True,
                embeddings_initializer=keras.initializers.RandomNormal(stddev=0.05),
                name="trainable_token_embedding")

    def build_token_embedding(self):
        """Creates the token embedding's variables (the fixed table has none to train)."""
        if self.input_embedding != "fixed":
            self.token_embedding.build((None, None))

    def get_config(self):
        config = super().get_config()
        config.update({name: getattr(self, name) for name in (
            "vocabulary_size", "input_embedding", "token_embedding_dim", "alone")})
        config["embedding_table"] = (self.fixed_table.get_config()["table"] if self.fixed_table
                                     else None)
        return config


class LanguageModel(Task):
    """Base of the next-word language models (arguments and errors: see `ElmoLM`)."""

    backbone_class = LanguageModelBackbone
    # Gather the predictable rows before the output head on TensorFlow (`direction_losses`).
    compact_targets = True

    def __init__(self, backbone, *, output_layer="continuous", output_loss="cosine",
                 vmf_regularization1=0.0, vmf_regularization2=1.0, tie_output=False,
                 adaptive_cutoffs=None, adaptive_div_value=4.0, adaptive_tail_capacity=None,
                 num_sampled=8192, seed=None, direction_loss="sum", **kwargs):
        super().__init__(backbone, **kwargs)
        check_choice("output_layer", output_layer, OUTPUT_LAYERS)
        check_choice("direction_loss", direction_loss, DIRECTION_LOSSES)
        problem = output_problem(output_layer, backbone.input_embedding, tie_output,
                                 adaptive_cutoffs, backbone.fixed_table is not None)
        if problem:
            raise ValueError(problem)
        self.output_layer_type = output_layer
        self.output_loss = output_loss
        self.vmf_regularization1 = float(vmf_regularization1)
        self.vmf_regularization2 = float(vmf_regularization2)
        self.tie_output = bool(tie_output)
        self.adaptive_cutoffs = list(adaptive_cutoffs) if adaptive_cutoffs else None
        self.adaptive_div_value = float(adaptive_div_value)
        self.adaptive_tail_capacity = adaptive_tail_capacity
        self.num_sampled = int(num_sampled)
        self.seed = seed
        self.direction_loss = direction_loss
        self.make_output_head(backbone.width)

    def make_output_head(self, hidden_dim):
        """Makes `output_head` (and `pre_output` where needed) for width `hidden_dim`."""
        self.pre_output = None
        output_layer = self.output_layer_type
        fixed_table = self.backbone.fixed_table
        vocabulary_size = self.backbone.vocabulary_size
        token_embedding_dim = self.backbone.token_embedding_dim
        if output_layer == "continuous":
            self.output_head = tfeff_layers.ContinuousOutput(
                fixed_table.output_dim, loss=self.output_loss,
                vmf_regularization1=self.vmf_regularization1,
                vmf_regularization2=self.vmf_regularization2,
                target_embedding=fixed_table, name="continuous_output")
        elif output_layer == "full":
            if self.tie_output and token_embedding_dim != hidden_dim:
                self.pre_output = keras.layers.Dense(token_embedding_dim, name="pre_output")
            self.output_head = tfeff_layers.FullSoftmax(vocabulary_size, name="full_softmax")
            if self.tie_output:
                self.output_head.tie_to(self.backbone.token_embedding)
        elif output_layer == "adaptive":
            self.output_head = tfeff_layers.AdaptiveSoftmax(
                vocabulary_size, self.adaptive_cutoffs, div_value=self.adaptive_div_value,
                tail_capacity=self.adaptive_tail_capacity, name="adaptive_softmax")
        elif output_layer == "sampled":
            self.output_head = tfeff_layers.SampledSoftmax(
                vocabulary_size, self.num_sampled, seed=self.seed, name="sampled_softmax")
        else:  # "fixed"
            self.pre_output = keras.layers.Dense(fixed_table.output_dim, name="pre_output")
            self.output_head = tfeff_layers.SampledSoftmax(
                vocabulary_size, self.num_sampled, use_bias=False, seed=self.seed,
                output_embedding=fixed_table, name="fixed_sampled_softmax")

    @property
    def is_continuous(self):
        return self.output_layer_type == "continuous"

    def build_heads(self):
        """Creates the variables of `pre_output` and the output head."""
        hidden_shape = (None, None, self.backbone.width)
        if self.pre_output is not None:
            self.pre_output.build(hidden_shape)
            hidden_shape = (None, None, self.pre_output.units)
        self.output_head.build(hidden_shape)

    def head_inputs(self, hidden):
        """What the output head scores (`output_head.features`), after any `pre_output`."""
        if self.pre_output is not None:
            hidden = self.pre_output(hidden)
        return self.output_head.features(hidden)

    def log_prob(self, head_inputs):
        """Log-probabilities `(..., vocabulary_size)` (a continuous output raises ValueError)."""
        return self.output_head.log_prob(head_inputs)

    def prediction_pairs(self, outputs, ids):
        """`prediction_pairs` of this model's outputs (what its loss and evaluation score)."""
        return prediction_pairs(outputs, ids)

    def direction_losses(self, ids, outputs, training=False):
        """Per direction, (sum of `per_position_loss`, number of targets) over the
        valid targets of `prediction_pairs`. With `compact_targets` they are gathered
        first on TensorFlow (`dynamic_rows.compact_rows`), else masked."""
        ids = ops.cast(ids, "int32")
        out = {}
        for direction, features, targets, valid in self.prediction_pairs(outputs, ids):
            kept, kept_ids, mask = (dynamic_rows.compact_rows(valid, features, targets)
                                    if self.compact_targets else (features, targets, valid))
            losses = self.output_head.per_position_loss(kept, kept_ids, mask=mask,
                                                        training=training)
            out[direction] = (ops.sum(ops.cast(losses, "float32")),
                              ops.sum(ops.cast(valid, "float32")))
        return out

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        """Sum (or mean, `direction_loss`) over directions of the mean loss per target.

        Each replica divides its loss sum by the *global* number of targets, so the
        replicas' losses and gradients add up to the single-device ones exactly."""
        del y, sample_weight
        losses = self.direction_losses(x, y_pred, training=training).values()
        return combine_directions(
            [global_mean(loss_sum, count) for loss_sum, count in losses],
            self.direction_loss) + layer_losses(self)

    def get_config(self):
        config = super().get_config()
        config.update({name: getattr(self, name) for name in (
            "output_loss", "vmf_regularization1", "vmf_regularization2", "tie_output",
            "adaptive_cutoffs", "adaptive_div_value", "adaptive_tail_capacity", "num_sampled",
            "seed", "direction_loss")})
        config["output_layer"] = self.output_layer_type
        return config
