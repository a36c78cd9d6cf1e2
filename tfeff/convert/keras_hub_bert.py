"""Interop with keras-hub's `BertBackbone` (optional: `pip install -e '.[hub]'`).

keras-hub's `BertBackbone` runs its feed-forward networks with the tanh
approximation of GELU and layer norms with epsilon 1e-12, both fixed. A tfeff
`Bert` with `activation="gelu_approximate"` (and the default
`layer_norm_epsilon=1e-12`) therefore converts exactly; one with BERT's erf
GELU (`"gelu"`, the default) converts with a warning, its sequence output
differing slightly (docs/guides/interop.md gives the measured relative
errors); a ReLU one does not convert.
keras-hub's backbone has no masked-LM head: `from_keras_hub` initializes
tfeff's; `write_keras_hub_preset` (`tfeff.convert.keras_hub_preset`) carries
it into a `BertMaskedLM`.

keras-hub's encoder exposes no accessors for its sublayers, whose weights the
conversion copies: `_layer_pairs` reads its private attributes
(`_self_attention_layer`, ...).
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
    """Whether keras-hub's `BertBackbone` computes exactly `bert`'s sequence output:
    `bert` uses keras-hub's activation and layer-norm epsilon."""
    return (bert.backbone.activation == KERAS_HUB_ACTIVATION
            and bert.backbone.layer_norm_epsilon == KERAS_HUB_LAYER_NORM_EPSILON)


def _layer_pairs(bert, backbone):
    """`(tfeff layer, keras-hub layer)` pairs whose weights correspond one to one."""
    pairs = [
        (bert.backbone.segment_embedding, backbone.segment_embedding),
        (bert.backbone.embeddings_norm, backbone.embeddings_layer_norm),
    ]
    for ours, theirs in zip(bert.backbone.transformer_layers, backbone.transformer_layers):
        pairs += [
            (ours.self_attention, theirs._self_attention_layer),
            (ours.attention_norm, theirs._self_attention_layer_norm),
            (ours.intermediate_dense, theirs._feedforward_intermediate_dense),
            (ours.output_dense, theirs._feedforward_output_dense),
            (ours.output_norm, theirs._feedforward_layer_norm),
        ]
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

    The backbone's `sequence_output` equals `bert`'s at real tokens: exactly
    when `bert` uses `activation="gelu_approximate"` and
    `layer_norm_epsilon=1e-12` (keras-hub's fixed choices), only approximately
    (relative error of the order of 1e-4) with BERT's erf `"gelu"`, which is
    logged as a warning. Its `pooled_output` equals `bert`'s only with
    `use_nsp`; without it the backbone's pooler is freshly initialized. An
    ALONE input embedding (`input_embedding="alone"`) is written as its
    computed table, as `write_hf_bert` does. The masked-LM and next-sentence
    heads have no place in the backbone (`write_keras_hub_preset` carries the
    masked-LM head).

    Args:
        bert: a built standard (not relaxed) tfeff `Bert` with learned
            position embeddings.

    Returns:
        The `keras_hub.models.BertBackbone`.

    Without keras-hub installed, an ImportError says how to install it.

    Raises:
        ValueError: `bert` is relaxed (merge it with `merge_relaxed_bert`
            first), has rotary positions (`model.position_embedding`) or uses
            ReLU (`model.activation`); also when a weight's shape does not match.
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

    The model uses keras-hub's activation (`gelu_approximate`) and has a
    pooler (`use_nsp=True`, from the backbone's `pooled_dense`), so its
    `sequence_output` and `pooled_output` equal the backbone's. The masked-LM
    and next-sentence heads are freshly initialized: a backbone has neither.

    Args:
        backbone: a `keras_hub.models.BertBackbone`.
        name: the name of the returned model.

    Returns:
        The built tfeff `Bert`.

    A weight whose shape does not match raises a ValueError naming it; without
    keras-hub installed, an ImportError says how to install it.
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
