"""ElmoLM: a bidirectional LSTM language model with a pluggable output layer."""

import keras

from tfeff.backend.checks import check_token_ids
from tfeff.models.elmo_backbone import ElmoBackbone
from tfeff.models.language_model import LanguageModel


@keras.saving.register_keras_serializable(package="tfeff")
class ElmoLM(LanguageModel):
    """ELMo-style biLM with a pluggable input embedding and output layer.

    The task model (keras-hub's split) on an `ElmoBackbone`; with a fixed input
    and a continuous output, ELMo-C of Li et al. (TACL 2019), Table 1. The
    output, shared by both directions, is `"continuous"` (`ContinuousOutput`:
    the target's fixed vector), `"full"` (`FullSoftmax`), `"adaptive"`
    (`AdaptiveSoftmax`), `"sampled"` (`SampledSoftmax`, log-uniform negatives)
    or `"fixed"` (a sampled softmax over the frozen fixed table: FIXED in the paper).

    The loss is the mean over predictable targets of each direction, summed
    over the directions or averaged (`"mean"`, as ELMo's bilm-tf: with Adam
    the two differ by the gradient-clipping bound they meet).

    Args:
        backbone: an `ElmoBackbone`; the `"continuous"` and `"fixed"` outputs
            score its fixed vectors (`embedding_table`), whatever its input.
        output_layer: one of `OUTPUT_LAYERS` (see above).
        output_loss: `"cosine"`, `"l2"` or `"vmf"` (`"continuous"` only).
        vmf_regularization1: lambda_1 of the `"vmf"` loss, >= 0.
        vmf_regularization2: lambda_2 of the `"vmf"` loss, in (0, 1].
        tie_output: use the backbone's trainable or ALONE input embedding as
            the `"full"` softmax's output matrix (projected to its size when it
            differs from the width; ALONE then best uses `lookup="table"`).
        adaptive_cutoffs: cluster boundaries of `"adaptive"`.
        adaptive_div_value: projection divisor of `"adaptive"`.
        adaptive_tail_capacity: `tail_capacity` of `"adaptive"` (the share of
            rows a tail computes on JAX and under `torch.compile`; None: all).
        num_sampled: negatives per step of `"sampled"` and `"fixed"`.
        seed: sampler seed.
        direction_loss: `"sum"` or `"mean"` of the directions' losses.
        **kwargs: base `Model` arguments.

    Call arguments:
        inputs: int ids `(batch, time)`, right-padded with 0.
        training: bool.

    Returns:
        dict of `"forward"` and `"backward"` `(batch, time, dim)`: predicted vectors
        (`"continuous"`) or the hidden states the softmax scores (`log_prob`), at
        position t for token t+1 (forward) or t-1 (backward).

    Raises:
        ValueError: `output_layer` or `direction_loss` is unknown, or the output's
            settings do not go together (`tfeff.config.elmo.output_problem`: no fixed
            vectors, a `tie_output` without its input or output, no cutoffs).
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

    # `tfeff.export.embedder_module`'s module: the fixed input embeds strings through
    # fastText, and a continuous output adds its predictions.
    embedder_kind = "elmo"
    backbone_class = ElmoBackbone

    def call(self, inputs, training=False):
        ids = check_token_ids(self, inputs, "inputs")
        vectors = self.backbone.token_embedding(ids, training=training)  # (batch, time, emb)
        _, forward, backward = self.backbone.encode(vectors, ids > 0, training=training)
        return {"forward": self.head_inputs(forward), "backward": self.head_inputs(backward)}
