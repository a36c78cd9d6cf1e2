"""The Keras model of an experiment config (`tfeff.config`), without the training machinery.

What every family's `build_model` (`tfeff.training.families`) calls, and what
code that must not import TensorFlow uses (a JAX or PyTorch machine:
`benchmarks/gpu.py`). Each function maps the config's `model` section
(and the few `data`/`train` values a model needs) to the model's arguments.
"""

import dataclasses


def alone_kwargs(model_cfg):
    """`AloneEmbedding` arguments of an `input_embedding: alone` model, else None."""
    return model_cfg.alone.layer_kwargs() if model_cfg.input_embedding == "alone" else None


def _same_names(section, names):
    """`{name: section.name}`: the keys a constructor takes under the config's names."""
    return {name: getattr(section, name) for name in names}


def bilstm_model_kwargs(model_cfg):
    """The `model` section's arguments that `ElmoLM` and `MaskedElmo` share."""
    m = model_cfg
    return dict(
        _same_names(m, ("num_layers", "units", "projection_dim", "dropout_rate", "output_layer",
                        "output_loss", "adaptive_div_value", "adaptive_tail_capacity",
                        "input_embedding")),
        adaptive_cutoffs=m.adaptive_cutoffs or None, alone=alone_kwargs(m))


def _language_model_kwargs(config, vectors_path):
    """The `LanguageModel` arguments of an ELMo or transformer-LM config (their ends)."""
    m = config.model
    return dict(
        _same_names(m, ("output_layer", "output_loss", "vmf_regularization1",
                        "vmf_regularization2", "input_embedding", "tie_output",
                        "adaptive_div_value", "adaptive_tail_capacity", "num_sampled",
                        "direction_loss")),
        embedding_table=vectors_path, token_embedding_dim=m.embedding_dim or None,
        adaptive_cutoffs=m.adaptive_cutoffs or None, seed=config.train.seed,
        alone=alone_kwargs(m))


def elmo_lm(config, vocabulary_size, vectors_path=None):
    """The `ElmoLM` of an `ElmoConfig` (`vectors_path`: the fixed vectors of word models)."""
    from tfeff.models.elmo_lm import ElmoLM

    m = config.model
    return ElmoLM(
        vocabulary_size, cell_clip=m.cell_clip or None, proj_clip=m.proj_clip or None,
        projection_dim=m.projection_dim or None, name="elmo_lm",
        **_same_names(m, ("num_layers", "units", "dropout_rate", "layer_norm")),
        **_language_model_kwargs(config, vectors_path))


def transformer_lm(config, vocabulary_size, vectors_path=None):
    """The `TransformerLM` of a `TransformerLMConfig` (`vectors_path`: the fixed vectors of
    word models)."""
    from tfeff.models.transformer_lm import TransformerLM

    m = config.model
    return TransformerLM(
        vocabulary_size,
        max_sequence_length=m.max_sequence_length or config.data.max_sequence_length,
        name="transformer_lm",
        **_same_names(m, ("num_layers", "hidden_dim", "num_heads", "intermediate_dim",
                          "dropout_rate", "activation", "layer_norm_epsilon", "bidirectional",
                          "position_embedding", "num_anchors", "anchor_selection")),
        **_language_model_kwargs(config, vectors_path))


def bert(config, vocabulary_size, relaxed):
    """The `Bert` of a `BertConfig`: relaxed (`model.relaxed`'s anchors and ranks) or not."""
    from tfeff.models.bert import Bert

    m = config.model
    return Bert(
        vocabulary_size,
        max_sequence_length=config.data.max_sequence_length,
        relaxed=dataclasses.asdict(m.relaxed) if relaxed else None,
        alone=alone_kwargs(m),
        seed=config.train.seed,
        name="bert",
        **_same_names(m, ("num_layers", "hidden_dim", "num_heads", "intermediate_dim",
                          "dropout_rate", "activation", "layer_norm_epsilon", "use_nsp",
                          "input_embedding", "position_embedding")),
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
