"""Bert: BERT's pretraining task (masked LM, next sentence) on a `BertBackbone`."""

import keras
from keras import ops

from tfeff.backend.checks import check_batch_size
from tfeff.models.bert_backbone import BertBackbone
from tfeff.models.bert_layer import get_activation
from tfeff.models.distributed import global_mean
from tfeff.models.distributed import layer_losses
from tfeff.models.task import Task


@keras.saving.register_keras_serializable(package="tfeff")
class Bert(Task):
    """BERT (Devlin et al. 2019) for masked-LM pretraining; CoRe's relaxed BERT by config.

    The task model (keras-hub's split) on a `BertBackbone`, whose sizes,
    activation and initializer its heads take. The masked-LM head transforms the
    masked positions' hidden states (dense, activation, layer norm) and scores
    them against the token embedding (tied; with ALONE, its computed table)
    plus a bias; with `use_nsp`, a tanh pooler on `[CLS]` feeds a two-way
    next-sentence classifier.

    Args:
        backbone: a `BertBackbone`.
        use_nsp: add the pooler and next-sentence head.
        **kwargs: base `Model` arguments.

    Call arguments:
        inputs: `BertBackbone`'s inputs (right-padded), plus optional
            `masked_positions` `(batch, p)`.
        training: bool.
        exact_attention: run anchor attention exactly (the converter's check).

    Returns:
        dict with `sequence_output` `(batch, n, hidden_dim)`, `mlm_logits` `(batch, p,
        vocabulary_size)` (given `masked_positions`), and with `use_nsp`
        `pooled_output` and `nsp_logits` `(batch, 2)`.

    Raises:
        TypeError: `backbone` is not a `BertBackbone`.

    Example:

    >>> backbone = BertBackbone(30, num_layers=1, hidden_dim=8, num_heads=2,
    ...                         intermediate_dim=16, max_sequence_length=8)
    >>> bert = Bert(backbone)
    >>> ids = np.array([[2, 7, 8, 3, 0, 0]], "int32")  # CLS, two words, SEP, padding
    >>> out = bert({"token_ids": ids, "masked_positions": np.array([[1]], "int32")})
    >>> tuple(out["sequence_output"].shape), tuple(out["mlm_logits"].shape)
    ((1, 6, 8), (1, 1, 30))
    """

    backbone_class = BertBackbone

    def __init__(self, backbone, use_nsp=False, **kwargs):
        super().__init__(backbone, **kwargs)
        self.use_nsp = bool(use_nsp)
        init = backbone.initializer
        common = {"dtype": self.dtype_policy}
        self.mlm_dense = keras.layers.Dense(
            backbone.hidden_dim, activation=get_activation(backbone.activation),
            kernel_initializer=init(), name="mlm_dense", **common)
        self.mlm_norm = keras.layers.LayerNormalization(
            epsilon=backbone.layer_norm_epsilon, name="mlm_norm", **common)
        self.pooler = self.nsp_dense = None
        if self.use_nsp:
            self.pooler = keras.layers.Dense(
                backbone.hidden_dim, activation="tanh", kernel_initializer=init(),
                name="pooler", **common)
            self.nsp_dense = keras.layers.Dense(
                2, kernel_initializer=init(), name="nsp_dense", **common)

    def build_heads(self):
        hidden_dim = self.backbone.hidden_dim
        shape = (None, None, hidden_dim)
        self.mlm_dense.build(shape)
        self.mlm_norm.build(shape)
        self.mlm_bias = self.add_weight(
            name="mlm_bias", shape=(self.backbone.vocabulary_size,), initializer="zeros")
        if self.use_nsp:
            self.pooler.build((None, hidden_dim))
            self.nsp_dense.build((None, hidden_dim))

    def mlm_logits(self, sequence_output, masked_positions, training=False):
        """Logits `(batch, p, vocabulary_size)` at `masked_positions` `(batch, p)` only."""
        positions = ops.cast(check_batch_size(self, sequence_output, masked_positions,
                                              ("batch", "p"), "masked_positions",
                                              "sequence_output"), "int32")
        h = ops.take_along_axis(sequence_output, positions[..., None], axis=1)  # (batch, p, d)
        h = self.mlm_norm(self.mlm_dense(h))
        token_embedding = self.backbone.token_embedding
        if self.backbone.input_embedding == "alone":
            logits = token_embedding.attend(h, training=training)
        else:
            table = ops.cast(token_embedding.embeddings, h.dtype)
            logits = ops.einsum("bpd,vd->bpv", h, table)
        return ops.cast(logits, "float32") + ops.cast(self.mlm_bias, "float32")

    def call(self, inputs, training=False, exact_attention=None):
        if not isinstance(inputs, dict):
            inputs = {"token_ids": inputs}
        sequence = self.backbone.encode(
            inputs["token_ids"], inputs.get("segment_ids"), inputs.get("padding_mask"),
            training=training, exact_attention=exact_attention,
        )
        outputs = {"sequence_output": sequence}
        if inputs.get("masked_positions") is not None:
            outputs["mlm_logits"] = self.mlm_logits(
                sequence, inputs["masked_positions"], training=training)
        if self.use_nsp:
            pooled = self.pooler(sequence[:, 0])
            outputs["pooled_output"] = pooled
            outputs["nsp_logits"] = ops.cast(self.nsp_dense(pooled), "float32")
        return outputs

    def losses_and_counts(self, x, y_pred):
        """`{"mlm": (sum, count), "nsp": (sum, count)}` of cross-entropies over this batch."""
        weights = ops.cast(x["masked_weights"], "float32")
        ce = keras.losses.sparse_categorical_crossentropy(
            ops.cast(x["masked_ids"], "int32"), y_pred["mlm_logits"], from_logits=True)
        out = {"mlm": (ops.sum(ce * weights), ops.sum(weights))}
        if self.use_nsp and "nsp_labels" in x:
            nsp = keras.losses.sparse_categorical_crossentropy(
                ops.cast(x["nsp_labels"], "int32"), y_pred["nsp_logits"], from_logits=True)
            out["nsp"] = (ops.sum(nsp), ops.cast(ops.shape(nsp)[0], "float32"))
        return out

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        """Mean masked-LM (plus NSP) cross-entropy, globally normalized (`global_mean`)."""
        del y, sample_weight
        losses = self.losses_and_counts(x, y_pred).values()
        return sum(global_mean(total, count) for total, count in losses) + layer_losses(self)

    def get_config(self):
        return {**super().get_config(), "use_nsp": self.use_nsp}
