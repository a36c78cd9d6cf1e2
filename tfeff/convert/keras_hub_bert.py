"""Interop with keras-hub's `BertBackbone` (optional: `pip install tfeff[hub]`).

keras-hub's BERT uses the tanh approximation of GELU: a tfeff `Bert` with
`activation="gelu_approximate"` converts exactly; one with BERT's erf GELU
(the default) converts with a warning, its outputs differing by about 1e-3.
keras-hub's backbone has no masked-LM head: `from_keras_hub` initializes it.
"""

import logging

import keras

from tfeff.models import Bert


def _import_keras_hub():
    try:
        import keras_hub
    except ImportError as e:
        raise ImportError(
            "tfeff.convert's keras-hub interop needs keras-hub: pip install 'tfeff[hub]'") from e
    return keras_hub


def _layer_pairs(bert, backbone):
    """`(tfeff layer, keras-hub layer)` pairs whose weights correspond one to one."""
    pairs = [
        (bert.segment_embedding, backbone.segment_embedding),
        (bert.embeddings_norm, backbone.embeddings_layer_norm),
    ]
    for ours, theirs in zip(bert.transformer_layers, backbone.transformer_layers):
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


def _copy(source_weights, target_weights, what):
    if len(source_weights) != len(target_weights):
        raise ValueError(f"{what}: {len(source_weights)} vs {len(target_weights)} weights")
    for s, t in zip(source_weights, target_weights):
        if tuple(s.shape) != tuple(t.shape):
            raise ValueError(f"{what}: {s.path} {tuple(s.shape)} vs {t.path} {tuple(t.shape)}")
        t.assign(s)


def to_keras_hub(bert):
    """A `keras_hub.models.BertBackbone` with the weights of a standard `Bert`.

    The backbone's `sequence_output` equals `bert`'s at real tokens (exactly
    with `activation="gelu_approximate"`); its `pooled_output` equals
    `bert`'s only with `use_nsp` (else its pooler is freshly initialized).
    """
    keras_hub = _import_keras_hub()
    if bert.is_relaxed:
        raise ValueError("to_keras_hub needs a standard Bert: merge_relaxed_bert first.")
    if bert.position_embedding_type != "learned":
        raise ValueError(
            f"to_keras_hub needs learned position embeddings: keras-hub's BertBackbone has an "
            f"absolute position table and this model uses {bert.position_embedding_type!r} "
            f"positions (model.position_embedding).")
    if bert.input_embedding != "trainable":
        raise ValueError("to_keras_hub needs a trainable token embedding (write_hf_bert "
                         "materializes an ALONE one).")
    if bert.activation != "gelu_approximate":
        logging.warning("keras-hub's BERT uses tanh-approximated GELU; this model uses %r, so "
                        "outputs will differ slightly.", bert.activation)
    backbone = keras_hub.models.BertBackbone(
        vocabulary_size=bert.vocabulary_size, num_layers=bert.num_layers,
        num_heads=bert.num_heads, hidden_dim=bert.hidden_dim,
        intermediate_dim=bert.intermediate_dim, dropout=bert.dropout_rate,
        max_sequence_length=bert.max_sequence_length, num_segments=bert.num_segments,
    )
    backbone.token_embedding.embeddings.assign(bert.token_embedding.embeddings)
    backbone.position_embedding.position_embeddings.assign(bert.position_embedding.embeddings)
    for ours, theirs in _layer_pairs(bert, backbone):
        _copy(ours.weights, theirs.weights, ours.path)
    return backbone


def from_keras_hub(backbone, name="bert"):
    """A tfeff `Bert` (`gelu_approximate`, with pooler) from a keras-hub `BertBackbone`."""
    _import_keras_hub()
    bert = Bert(
        backbone.vocabulary_size, num_layers=backbone.num_layers,
        hidden_dim=backbone.hidden_dim, num_heads=backbone.num_heads,
        intermediate_dim=backbone.intermediate_dim,
        max_sequence_length=backbone.max_sequence_length,
        num_segments=backbone.num_segments, dropout_rate=backbone.dropout,
        activation="gelu_approximate", use_nsp=True, name=name,
    )
    bert.build()
    bert.token_embedding.embeddings.assign(backbone.token_embedding.embeddings)
    bert.position_embedding.embeddings.assign(
        keras.ops.convert_to_numpy(backbone.position_embedding.position_embeddings))
    for ours, theirs in _layer_pairs(bert, backbone):
        _copy(theirs.weights, ours.weights, theirs.path)
    return bert
