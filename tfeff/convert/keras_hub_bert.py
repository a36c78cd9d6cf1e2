"""Interop with keras-hub's `BertBackbone` (optional: `pip install -e '.[hub]'`).

keras-hub's `BertBackbone` fixes tanh-approximated GELU and layer-norm epsilon 1e-12: a
tfeff `Bert` with those converts exactly, one with erf GELU approximately (with a warning),
a ReLU one not at all (docs/guides/interop.md#what-converts-exactly-or-not). keras-hub's
encoder has no accessors for its sublayers: `_layer_pairs` reads its private attributes.
"""

import logging

import keras

from tfeff.models import Bert
from tfeff.models import BertBackbone

# What keras-hub's BertBackbone fixes: its feed-forward activation and layer-norm epsilon.
KERAS_HUB_ACTIVATION = "gelu_approximate"
KERAS_HUB_LAYER_NORM_EPSILON = 1e-12


def import_keras_hub():
    """The `keras_hub` module; ImportError saying how to install it."""
    try:
        import keras_hub
    except ImportError as e:
        raise ImportError(
            "tfeff.convert's keras-hub interop needs keras-hub: pip install -e '.[hub]'") from e
    return keras_hub


def exact_in_keras_hub(bert):
    """Whether `bert` uses keras-hub's activation and layer-norm epsilon."""
    return (bert.backbone.activation == KERAS_HUB_ACTIVATION
            and bert.backbone.layer_norm_epsilon == KERAS_HUB_LAYER_NORM_EPSILON)


def _layer_pairs(bert, backbone):
    """`(tfeff layer, keras-hub layer)` pairs whose weights correspond one to one."""
    pairs = [(bert.backbone.segment_embedding, backbone.segment_embedding),
             (bert.backbone.embeddings_norm, backbone.embeddings_layer_norm)]
    for ours, theirs in zip(bert.backbone.transformer_layers, backbone.transformer_layers):
        pairs += [(ours.self_attention, theirs._self_attention_layer),
                  (ours.attention_norm, theirs._self_attention_layer_norm),
                  (ours.intermediate_dense, theirs._feedforward_intermediate_dense),
                  (ours.output_dense, theirs._feedforward_output_dense),
                  (ours.output_norm, theirs._feedforward_layer_norm)]
    if bert.use_nsp:
        pairs.append((bert.pooler, backbone.pooled_dense))
    return pairs


def copy_weights(source_weights, target_weights, what):
    """Assigns each source weight to the target at the same index (ValueError naming
    `what` when the lists differ in length or two paired weights in shape)."""
    if len(source_weights) != len(target_weights):
        raise ValueError(f"{what}: {len(source_weights)} vs {len(target_weights)} weights")
    for s, t in zip(source_weights, target_weights):
        if tuple(s.shape) != tuple(t.shape):
            raise ValueError(f"{what}: {s.path} {tuple(s.shape)} vs {t.path} {tuple(t.shape)}")
        t.assign(s)


def to_keras_hub(bert):
    """A `keras_hub.models.BertBackbone` with the weights of a standard `Bert`.

    Its `sequence_output` equals `bert`'s at real tokens (exactly or approximately: see
    docs/guides/interop.md#what-converts-exactly-or-not); its `pooled_output` only with
    `use_nsp`, else the pooler is fresh. An ALONE input embedding is written as its computed
    table; the heads are left out. Without keras-hub, an ImportError says how to install it.

    Args:
        bert: a built standard (not relaxed) tfeff `Bert` with learned positions.

    Returns:
        The `keras_hub.models.BertBackbone`.

    Raises:
        ValueError: `bert` is relaxed, has rotary positions or uses ReLU (naming the config
            key), or a weight's shape does not match.
    """
    keras_hub = import_keras_hub()
    encoder = bert.backbone
    if encoder.is_relaxed:
        raise ValueError("to_keras_hub needs a standard Bert: merge_relaxed_bert first.")
    if encoder.position_embedding_type != "learned":
        raise ValueError(
            f"to_keras_hub needs learned position embeddings: keras-hub's BertBackbone has an "
            f"absolute position table and this model uses {encoder.position_embedding_type!r} "
            f"positions (model.position_embedding).")
    if encoder.activation == "relu":
        raise ValueError(
            "to_keras_hub needs a GELU model: keras-hub's BertBackbone always uses the tanh "
            "approximation of GELU and this model uses 'relu' (model.activation).")
    if encoder.activation != KERAS_HUB_ACTIVATION:
        logging.warning("keras-hub's BERT uses tanh-approximated GELU; this model uses %r "
                        "(model.activation), so outputs will differ slightly.",
                        encoder.activation)
    if encoder.layer_norm_epsilon != KERAS_HUB_LAYER_NORM_EPSILON:
        logging.warning("keras-hub's BERT uses layer-norm epsilon %g; this model uses %g "
                        "(model.layer_norm_epsilon), so outputs will differ slightly.",
                        KERAS_HUB_LAYER_NORM_EPSILON, encoder.layer_norm_epsilon)
    backbone = keras_hub.models.BertBackbone(
        vocabulary_size=encoder.vocabulary_size, num_layers=encoder.num_layers,
        num_heads=encoder.num_heads, hidden_dim=encoder.hidden_dim,
        intermediate_dim=encoder.intermediate_dim, dropout=encoder.dropout_rate,
        max_sequence_length=encoder.max_sequence_length, num_segments=encoder.num_segments,
    )
    if encoder.input_embedding == "alone":
        logging.info("Writing the ALONE embedding as its computed table")
        table = encoder.token_embedding.embedding_table(training=False)
    else:
        table = encoder.token_embedding.embeddings
    backbone.token_embedding.embeddings.assign(keras.ops.convert_to_numpy(table))
    backbone.position_embedding.position_embeddings.assign(encoder.position_embedding.embeddings)
    for ours, theirs in _layer_pairs(bert, backbone):
        copy_weights(ours.weights, theirs.weights, ours.path)
    return backbone


def from_keras_hub(backbone, name="bert"):
    """A tfeff `Bert` with the weights of a keras-hub `BertBackbone`.

    With keras-hub's activation and `use_nsp=True` (the pooler), its `sequence_output` and
    `pooled_output` equal the backbone's; the heads are freshly initialized. A misshapen
    weight raises a ValueError naming it; without keras-hub, an ImportError.

    Args:
        backbone: a `keras_hub.models.BertBackbone`.
        name: the name of the returned model.

    Returns:
        The built tfeff `Bert`.
    """
    import_keras_hub()
    bert = Bert(BertBackbone(
        backbone.vocabulary_size, num_layers=backbone.num_layers,
        hidden_dim=backbone.hidden_dim, num_heads=backbone.num_heads,
        intermediate_dim=backbone.intermediate_dim,
        max_sequence_length=backbone.max_sequence_length,
        num_segments=backbone.num_segments, dropout_rate=backbone.dropout,
        activation=KERAS_HUB_ACTIVATION, name=f"{name}_backbone",
    ), use_nsp=True, name=name)
    bert.build()
    bert.backbone.token_embedding.embeddings.assign(backbone.token_embedding.embeddings)
    bert.backbone.position_embedding.embeddings.assign(
        keras.ops.convert_to_numpy(backbone.position_embedding.position_embeddings))
    for ours, theirs in _layer_pairs(bert, backbone):
        copy_weights(theirs.weights, ours.weights, theirs.path)
    return bert
