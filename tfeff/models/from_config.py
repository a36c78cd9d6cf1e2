"""The Keras model of an experiment config (`tfeff.config`), without the training machinery
or TensorFlow: what every family's `build_model` and `benchmarks/gpu.py` call."""

import dataclasses


def alone_kwargs(model_cfg):
    """`AloneEmbedding` arguments of an `input_embedding: alone` model, else None."""
    return model_cfg.alone.layer_kwargs() if model_cfg.input_embedding == "alone" else None


def _same_names(section, names):
    return {name: getattr(section, name) for name in names}


def backbone_alone(model_cfg, tied):
    """The backbone's ALONE arguments, with the lookup: `"table"` under a tied softmax
    (which computes the whole table each step anyway), else `"unique"`."""
    alone = alone_kwargs(model_cfg)
    return None if alone is None else {**alone, "lookup": "table" if tied else "unique"}


def bilstm_model_kwargs(model_cfg):
    """The output arguments of a biLSTM model's `model` section (`ElmoLM`, `MaskedElmo`)."""
    names = ("output_layer", "output_loss", "adaptive_div_value", "adaptive_tail_capacity")
    return dict(_same_names(model_cfg, names), adaptive_cutoffs=model_cfg.adaptive_cutoffs or None)


def _language_model_kwargs(config):
    """The `LanguageModel` (output) arguments of an ELMo or transformer-LM config."""
    m = config.model
    return dict(
        bilstm_model_kwargs(m),
        **_same_names(m, ("vmf_regularization1", "vmf_regularization2", "tie_output",
                          "num_sampled", "direction_loss")),
        seed=config.train.seed)


def _token_layer_kwargs(config, vectors_path):
    m = config.model
    return dict(embedding_table=vectors_path, input_embedding=m.input_embedding,
                token_embedding_dim=m.embedding_dim or None,
                alone=backbone_alone(m, m.tie_output))


def elmo_lm(config, vocabulary_size, vectors_path=None):
    """The `ElmoLM` of an `ElmoConfig` (`vectors_path`: the fixed vectors of word models)."""
    from tfeff.models.elmo_backbone import ElmoBackbone
    from tfeff.models.elmo_lm import ElmoLM

    m = config.model
    backbone = ElmoBackbone(
        vocabulary_size, cell_clip=m.cell_clip or None, proj_clip=m.proj_clip or None,
        projection_dim=m.projection_dim or None, name="elmo_lm_backbone",
        **_same_names(m, ("num_layers", "units", "dropout_rate", "layer_norm")),
        **_token_layer_kwargs(config, vectors_path))
    return ElmoLM(backbone, name="elmo_lm", **_language_model_kwargs(config))


def transformer_lm(config, vocabulary_size, vectors_path=None):
    """The `TransformerLM` of a `TransformerLMConfig` (`vectors_path`: as `elmo_lm`'s)."""
    from tfeff.models.transformer_lm import TransformerLM
    from tfeff.models.transformer_lm_backbone import TransformerLMBackbone

    m = config.model
    backbone = TransformerLMBackbone(
        vocabulary_size,
        max_sequence_length=m.max_sequence_length or config.data.max_sequence_length,
        seed=config.train.seed, name="transformer_lm_backbone",
        **_same_names(m, ("num_layers", "hidden_dim", "num_heads", "intermediate_dim",
                          "dropout_rate", "activation", "layer_norm_epsilon", "bidirectional",
                          "position_embedding", "num_anchors", "anchor_selection")),
        **_token_layer_kwargs(config, vectors_path))
    return TransformerLM(backbone, name="transformer_lm", **_language_model_kwargs(config))


def bert(config, vocabulary_size, relaxed):
    """The `Bert` of a `BertConfig`: relaxed (`model.relaxed`'s anchors and ranks) or not."""
    from tfeff.models.bert import Bert
    from tfeff.models.bert_backbone import BertBackbone

    m = config.model
    backbone = BertBackbone(
        vocabulary_size,
        max_sequence_length=config.data.max_sequence_length,
        relaxed=dataclasses.asdict(m.relaxed) if relaxed else None,
        alone=alone_kwargs(m),
        seed=config.train.seed,
        name="bert_backbone",
        **_same_names(m, ("num_layers", "hidden_dim", "num_heads", "intermediate_dim",
                          "dropout_rate", "activation", "layer_norm_epsilon",
                          "input_embedding", "position_embedding")),
    )
    return Bert(backbone, use_nsp=m.use_nsp, name="bert")


def masked_elmo(config, vocabulary_size, vectors_path=None):
    """The `MaskedElmo` of a `MaskedElmoConfig` (`vectors_path`: continuous targets)."""
    from tfeff.models.masked_elmo import MaskedElmo
    from tfeff.models.masked_elmo_backbone import MaskedElmoBackbone

    m = config.model
    backbone = MaskedElmoBackbone(
        vocabulary_size, use_cudnn=m.use_cudnn, name="masked_elmo_backbone",
        alone=backbone_alone(m, m.output_layer == "full"),
        **_same_names(m, ("num_layers", "units", "projection_dim", "dropout_rate",
                          "input_embedding")))
    return MaskedElmo(
        backbone, embedding_table=vectors_path, name="masked_elmo",
        tbptt_batch_size=config.data.batch_size if m.tbptt else None,
        **bilstm_model_kwargs(m))
