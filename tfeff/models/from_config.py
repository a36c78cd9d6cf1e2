"""The Keras model of an experiment config (`tfeff.config`), without the training machinery.

What every family's `build_model` (`tfeff.training.families`) calls, and what
code that must not import TensorFlow uses (a JAX or PyTorch machine:
`tools/benchmark_gpu.py`). Each function maps the config's `model` section
(and the few `data`/`train` values a model needs) to the model's arguments.
"""

import dataclasses


def alone_kwargs(model_cfg):
    """`AloneEmbedding` arguments of an `input_embedding: alone` model, else None."""
    return model_cfg.alone.layer_kwargs() if model_cfg.input_embedding == "alone" else None


def bilstm_model_kwargs(model_cfg):
    """The `model` section's arguments that `ElmoLM` and `MaskedElmo` share."""
    m = model_cfg
    return dict(
        num_layers=m.num_layers,
        units=m.units,
        projection_dim=m.projection_dim,
        dropout_rate=m.dropout_rate,
        output_layer=m.output_layer,
        output_loss=m.output_loss,
        adaptive_cutoffs=m.adaptive_cutoffs or None,
        adaptive_div_value=m.adaptive_div_value,
        input_embedding=m.input_embedding,
        alone=alone_kwargs(m),
    )


def elmo_lm(config, vocabulary_size, vectors_path=None):
    """The `ElmoLM` of an `ElmoConfig` (`vectors_path`: the fixed vectors of word models)."""
    from tfeff.models.elmo_lm import ElmoLM

    m = config.model
    return ElmoLM(
        vocabulary_size,
        embedding_table=vectors_path,
        vmf_regularization1=m.vmf_regularization1,
        vmf_regularization2=m.vmf_regularization2,
        token_embedding_dim=m.embedding_dim or None,
        tie_output=m.tie_output,
        num_sampled=m.num_sampled,
        seed=config.train.seed,
        cell_clip=m.cell_clip or None,
        proj_clip=m.proj_clip or None,
        direction_loss=m.direction_loss,
        name="elmo_lm",
        **bilstm_model_kwargs(m),
    )


def transformer_lm(config, vocabulary_size, vectors_path=None):
    """The `TransformerLM` of a `TransformerLMConfig` (`vectors_path`: the fixed vectors of
    word models)."""
    from tfeff.models.transformer_lm import TransformerLM

    m = config.model
    return TransformerLM(
        vocabulary_size,
        num_layers=m.num_layers,
        hidden_dim=m.hidden_dim,
        num_heads=m.num_heads,
        intermediate_dim=m.intermediate_dim,
        max_sequence_length=m.max_sequence_length or config.data.max_sequence_length,
        dropout_rate=m.dropout_rate,
        activation=m.activation,
        layer_norm_epsilon=m.layer_norm_epsilon,
        bidirectional=m.bidirectional,
        position_embedding=m.position_embedding,
        num_anchors=m.num_anchors,
        anchor_selection=m.anchor_selection,
        output_layer=m.output_layer,
        output_loss=m.output_loss,
        embedding_table=vectors_path,
        vmf_regularization1=m.vmf_regularization1,
        vmf_regularization2=m.vmf_regularization2,
        input_embedding=m.input_embedding,
        token_embedding_dim=m.embedding_dim or None,
        tie_output=m.tie_output,
        adaptive_cutoffs=m.adaptive_cutoffs or None,
        adaptive_div_value=m.adaptive_div_value,
        num_sampled=m.num_sampled,
        seed=config.train.seed,
        alone=alone_kwargs(m),
        direction_loss=m.direction_loss,
        name="transformer_lm",
    )


def bert(config, vocabulary_size, relaxed):
    """The `Bert` of a `BertConfig`: relaxed (`model.relaxed`'s anchors and ranks) or not."""
    from tfeff.models.bert import Bert

    m = config.model
    return Bert(
        vocabulary_size,
        num_layers=m.num_layers,
        hidden_dim=m.hidden_dim,
        num_heads=m.num_heads,
        intermediate_dim=m.intermediate_dim,
        max_sequence_length=config.data.max_sequence_length,
        dropout_rate=m.dropout_rate,
        activation=m.activation,
        layer_norm_epsilon=m.layer_norm_epsilon,
        relaxed=dataclasses.asdict(m.relaxed) if relaxed else None,
        use_nsp=m.use_nsp,
        input_embedding=m.input_embedding,
        position_embedding=m.position_embedding,
        alone=alone_kwargs(m),
        seed=config.train.seed,
        name="bert",
    )


def masked_elmo(config, vocabulary_size, vectors_path=None):
    """The `MaskedElmo` of a `MaskedElmoConfig` (`vectors_path`: a continuous output's
    targets)."""
    from tfeff.models.masked_elmo import MaskedElmo

    m = config.model
    return MaskedElmo(
        vocabulary_size,
        embedding_table=vectors_path,
        use_cudnn=m.use_cudnn,
        tbptt_batch_size=config.data.batch_size if m.tbptt else None,
        name="masked_elmo",
        **bilstm_model_kwargs(m),
    )
