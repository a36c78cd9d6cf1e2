"""ElmoLM: a bidirectional LSTM language model with a pluggable output layer."""

import keras

from tfeff.backend.checks import check_token_ids
from tfeff.models.elmo_backbone import ElmoBackbone
from tfeff.models.language_model import LanguageModel


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

    The task model, as keras-hub splits them: it takes an `ElmoBackbone`
    (`backbone`: the token layer and the LSTM stacks, whose representation
    stack `[concat(x, x), concat(f_1, b_1), ..., concat(f_L, b_L)]` is what
    features are extracted from) and adds the output layer and the loss
    (the output arguments: `LanguageModel`).

    Args:
        backbone: an `ElmoBackbone`.
        output_layer: one of `OUTPUT_LAYERS` (see above).
        output_loss: `"cosine"`, `"l2"` or `"vmf"` (`"continuous"` only).
        vmf_regularization1: lambda_1 of the `"vmf"` loss, >= 0.
        vmf_regularization2: lambda_2 of the `"vmf"` loss, in (0, 1].
        tie_output: use the backbone's trainable or ALONE input embedding as
            the `"full"` softmax's output matrix (an ALONE backbone then best
            gathers from its table, `alone={"lookup": "table", ...}`: the
            softmax computes the whole table each step anyway).
        adaptive_cutoffs: cluster boundaries of `"adaptive"`.
        adaptive_div_value: projection divisor of `"adaptive"`.
        adaptive_tail_capacity: `tail_capacity` of `"adaptive"` (None: all rows).
        num_sampled: negatives per step of `"sampled"` and `"fixed"`.
        seed: sampler seed.
        direction_loss: `"sum"` or `"mean"` of the directions' losses.
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
        ValueError: the output's settings do not go together (see
            `LanguageModel`).
        TypeError: `backbone` is not an `ElmoBackbone`.

    Example:

    >>> backbone = ElmoBackbone(20, num_layers=1, units=8, projection_dim=4,
    ...                         input_embedding="trainable")
    >>> lm = ElmoLM(backbone, output_layer="full")
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

    backbone_class = ElmoBackbone

    def call(self, inputs, training=False):
        ids = check_token_ids(self, inputs, "inputs")
        vectors = self.backbone.token_embedding(ids, training=training)  # (batch, time, emb)
        _, forward, backward = self.backbone.encode(vectors, ids > 0, training=training)
        return {"forward": self.head_inputs(forward), "backward": self.head_inputs(backward)}
