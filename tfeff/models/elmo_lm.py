"""ElmoLM: a bidirectional LSTM language model with a pluggable output layer."""

import warnings

import keras

from tfeff.backend.checks import check_token_ids
from tfeff.models.elmo_backbone import ElmoBackbone
from tfeff.models.language_model import LanguageModel

# The backbone's layers the task tracks under its own names (`BackboneTask`).
_BACKBONE_LAYERS = ("token_projection",
                    ("forward_lstms", "forward_norms", "backward_lstms", "backward_norms"),
                    "dropout")


@keras.saving.register_keras_serializable(package="tfeff")
class ElmoLM(LanguageModel):
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

    The task model, as keras-hub splits them: an `ElmoBackbone` (`backbone`:
    the token layer and the LSTM stacks, whose representation stack
    `[concat(x, x), concat(f_1, b_1), ..., concat(f_L, b_L)]` is what
    features are extracted from), the output layer and the loss.

    The constructor reads as `MaskedElmo`'s and `Bert`'s: the vocabulary size
    first, the fixed vectors as the keyword `embedding_table`.

    Args:
        vocabulary_size: number of ids (row 0 is padding); may be left out
            when `embedding_table` is given (it is then the table's rows, and
            must equal them when both are given).
        num_layers: LSTM layers per direction.
        units: LSTM cell size.
        projection_dim: LSTM projection (and token-projection) size; None:
            LSTMs without a projection (the width is `units`).
        dropout_rate: dropout after each LSTM layer, in [0, 1).
        output_layer: one of `OUTPUT_LAYERS`.
        output_loss: `"cosine"`, `"l2"` or `"vmf"` (`"continuous"` only).
        embedding_table: path of the `.npy` vocabulary vectors, or an array
            `(vocabulary_size, dim)`; row 0 is padding. Required by
            the fixed input embedding and the `"continuous"` / `"fixed"` outputs.
        vmf_regularization1: lambda_1 of the `"vmf"` loss, >= 0 (penalty on the
            norm of the prediction).
        vmf_regularization2: lambda_2 of the `"vmf"` loss, in (0, 1] (scale of
            the dot product).
        input_embedding: `"fixed"` (the table), `"trainable"` or `"alone"`.
        token_embedding_dim: size of a trainable or ALONE input embedding
            (default: the table's dimension, else `projection_dim`). The old
            name `embedding_dim` is still read, with a `DeprecationWarning`.
        tie_output: use the trainable (or ALONE) input embedding as the
            `"full"` softmax's output matrix (a projection to
            `token_embedding_dim` is added when it differs from
            `projection_dim`).
        adaptive_cutoffs: cluster boundaries of `"adaptive"`.
        adaptive_div_value: projection divisor of `"adaptive"`.
        adaptive_tail_capacity: `tail_capacity` of `"adaptive"` (the share of
            rows a tail computes on JAX and under `torch.compile`; None: all).
        num_sampled: negatives per step of `"sampled"` and `"fixed"`.
        seed: sampler seed.
        alone: dict of `AloneEmbedding` arguments (all but
            `vocabulary_size`, `output_dim`, `mask_zero` and `lookup`) for
            `input_embedding="alone"`; `base_dim` defaults to `token_embedding_dim`.
        cell_clip: None or the bound of each LSTM's cell state
            (`ProjectedLSTM`; ELMo: 3).
        proj_clip: None or the bound of each LSTM's projected state (ELMo: 3).
        direction_loss: `"sum"` or `"mean"` of the two directions' losses.
        layer_norm: whether each LSTM layer's output is layer-normalized (Li et
            al.'s encoder; ELMo's has none).
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
        ValueError: `output_layer` is unknown, `embedding_table` is missing
            for a `"continuous"` or `"fixed"` output, `tie_output` is set
            without a trainable or ALONE input and a `"full"` output, or
            `"adaptive"` has no `adaptive_cutoffs`. The backbone checks the
            rest (see `ElmoBackbone`). A `vocabulary_size` that is no integer
            (fixed vectors passed first) raises `TypeError`.

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

    # The export module of `tfeff.export.embedder_module`: the fixed input embeds
    # strings through fastText, and a continuous output adds its predictions.
    embedder_kind = "elmo"

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
        token_embedding_dim=None,
        tie_output=False,
        adaptive_cutoffs=None,
        adaptive_div_value=4.0,
        adaptive_tail_capacity=None,
        num_sampled=8192,
        seed=None,
        alone=None,
        cell_clip=None,
        proj_clip=None,
        direction_loss="sum",
        layer_norm=True,
        **kwargs,
    ):
        if "embedding_dim" in kwargs:  # its earlier name, still in saved configs
            warnings.warn("ElmoLM's `embedding_dim` is now `token_embedding_dim` (its "
                          "`embedding_dim` is the exported width, as for the other models).",
                          DeprecationWarning, stacklevel=2)
            old = kwargs.pop("embedding_dim")
            if token_embedding_dim is not None and old is not None and old != token_embedding_dim:
                raise ValueError(
                    "`embedding_dim` is the earlier name of `token_embedding_dim`; received "
                    f"both, and they differ: {old} and {token_embedding_dim}")
            token_embedding_dim = token_embedding_dim or old
        super().__init__(
            vocabulary_size, output_layer=output_layer, output_loss=output_loss,
            vmf_regularization1=vmf_regularization1, vmf_regularization2=vmf_regularization2,
            input_embedding=input_embedding, embedding_table=embedding_table,
            tie_output=tie_output, adaptive_cutoffs=adaptive_cutoffs,
            adaptive_div_value=adaptive_div_value,
            adaptive_tail_capacity=adaptive_tail_capacity, num_sampled=num_sampled, seed=seed,
            direction_loss=direction_loss, **kwargs)
        backbone = ElmoBackbone(
            vocabulary_size, num_layers=num_layers, units=units, projection_dim=projection_dim,
            dropout_rate=dropout_rate, embedding_table=embedding_table,
            input_embedding=input_embedding, token_embedding_dim=token_embedding_dim,
            alone=self.backbone_alone(alone, input_embedding), cell_clip=cell_clip,
            proj_clip=proj_clip, layer_norm=layer_norm, dtype=self.dtype_policy,
            name=f"{self.name}_backbone")
        for name in ("num_layers", "units", "projection_dim", "width", "dropout_rate",
                     "layer_norm"):
            setattr(self, name, getattr(backbone, name))
        self.attach_backbone(backbone, _BACKBONE_LAYERS, self.width)

    def build(self, input_shape=None):
        self.build_backbone()
        self.build_output_head(self.width)
        self.built = True

    def encode(self, vectors, mask, training=False):
        """The backbone's `encode`: `(stack, forward_top, backward_top)` of token vectors."""
        return self._backbone.encode(vectors, mask, training=training)

    def call(self, inputs, training=False):
        ids = check_token_ids(self, inputs, "inputs")
        mask = ids > 0
        vectors = self.token_embedding(ids, training=training)  # (batch, time, emb)
        _, forward, backward = self._backbone.encode(vectors, mask, training=training)
        return {"forward": self.head_inputs(forward), "backward": self.head_inputs(backward)}
