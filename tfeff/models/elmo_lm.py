"""ElmoLM: a bidirectional LSTM language model with a pluggable output layer."""

import warnings

import keras
from keras import ops

from tfeff import layers as tfeff_layers
from tfeff.backend.checks import check_right_padded
from tfeff.models.language_model import LanguageModel
from tfeff.models.language_model import check_positive_int


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
        token_embedding_dim: size of a trainable or ALONE input embedding
            (default: the table's dimension, else `projection_dim`). The old
            name `embedding_dim` is still read, with a `DeprecationWarning`.
        tie_output: use the trainable (or ALONE) input embedding as the
            `"full"` softmax's output matrix (a projection to
            `token_embedding_dim` is added when it differs from
            `projection_dim`).
        adaptive_cutoffs: cluster boundaries of `"adaptive"`.
        adaptive_div_value: projection divisor of `"adaptive"`.
        num_sampled: negatives per step of `"sampled"` and `"fixed"`.
        seed: sampler seed.
        alone: dict of `AloneEmbedding` arguments (all but
            `vocabulary_size`, `output_dim`, `mask_zero` and `lookup`) for
            `input_embedding="alone"`; `base_dim` defaults to `token_embedding_dim`.
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

    # The export module of `tfeff.export.embedder_module`: the fixed input embeds
    # strings through fastText, and a continuous output adds its predictions.
    embedder = "elmo"

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
        num_sampled=8192,
        seed=None,
        alone=None,
        cell_clip=None,
        proj_clip=None,
        direction_loss="sum",
        **kwargs,
    ):
        if "embedding_dim" in kwargs:  # its earlier name, still in saved configs
            warnings.warn("ElmoLM's `embedding_dim` is now `token_embedding_dim` (its "
                          "`embedding_dim` is the exported width, as for the other models).",
                          DeprecationWarning, stacklevel=2)
            token_embedding_dim = token_embedding_dim or kwargs.pop("embedding_dim")
        for arg, value in (
            ("num_layers", num_layers),
            ("units", units),
            ("projection_dim", projection_dim),
        ):
            check_positive_int(arg, value)
        if not 0 <= dropout_rate < 1:
            raise ValueError(
                "Received an invalid value for `dropout_rate`, expected a value in "
                f"[0, 1). Received: dropout_rate={dropout_rate}"
            )
        super().__init__(
            vocabulary_size, hidden_dim=projection_dim, output_layer=output_layer,
            output_loss=output_loss, embedding_table=embedding_table,
            vmf_regularization1=vmf_regularization1, vmf_regularization2=vmf_regularization2,
            input_embedding=input_embedding, token_embedding_dim=token_embedding_dim,
            tie_output=tie_output, adaptive_cutoffs=adaptive_cutoffs,
            adaptive_div_value=adaptive_div_value, num_sampled=num_sampled, seed=seed,
            alone=alone, direction_loss=direction_loss, **kwargs)
        self.num_layers = num_layers
        self.units = units
        self.projection_dim = projection_dim
        self.dropout_rate = float(dropout_rate)
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
        self.make_output_head(projection_dim)

    def build(self, input_shape=None):
        hidden_shape = (None, None, self.projection_dim)
        self.build_token_embedding()
        self.token_projection.build((None, None, self.token_embedding_dim))
        for i in range(self.num_layers):
            for lstm, norm in (
                (self.forward_lstms[i], self.forward_norms[i]),
                (self.backward_lstms[i], self.backward_norms[i]),
            ):
                lstm.build(hidden_shape)
                norm.build(hidden_shape)
        self.build_output_head(self.projection_dim)
        self.built = True

    def encode(self, vectors, mask, training=False):
        """Runs the biLSTM stacks on token vectors.

        Args:
            vectors: float `(batch, time, token_embedding_dim)` token vectors.
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

    # The embeddable-model contract (`tfeff.export.TokenIdsEmbedderModule`).

    @property
    def embedding_num_layers(self):
        """Layers of `embedding_layers`: the token layer and each LSTM layer."""
        return self.num_layers + 1

    @property
    def embedding_dim(self):
        """Size of each layer of `embedding_layers` (both directions concatenated)."""
        return 2 * self.projection_dim

    def embedding_layers(self, token_ids, padding_mask, training=False):
        """The representation stack of `encode` for `token_ids` (with `<s>` and `</s>`):
        `(batch, num_layers + 1, time, embedding_dim)`."""
        vectors = self.token_embedding(ops.cast(token_ids, "int32"), training=training)
        stack, _, _ = self.encode(vectors, padding_mask, training=training)
        return stack

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "num_layers": self.num_layers,
                "units": self.units,
                "projection_dim": self.projection_dim,
                "dropout_rate": self.dropout_rate,
                "cell_clip": self.forward_lstms[0].cell_clip,
                "proj_clip": self.forward_lstms[0].proj_clip,
            }
        )
        return config
