"""Backbone and Task: a task model (heads and loss) that takes a backbone (the encoder).

keras-hub's split: a task (`Bert(BertBackbone(...))`) tracks `task.backbone`, nests
its config, and holds its variables under the backbone's name
(`bert/bert_backbone/token_embedding/embeddings`); older files: `tfeff.models.legacy`.
"""

import keras


class Backbone(keras.Model):
    """Base of the backbones a `Task` takes: `build` needs no input shape and runs
    `build_layers()` (the variables of the layers made in `__init__`) in its name scope."""

    def build(self, input_shape=None):
        self.build_layers()
        self.built = True

    def get_build_config(self):
        # `build()` needs no shape; built by a task it was given none.
        return {"input_shape": None}

    def build_layers(self):
        raise NotImplementedError

    # `tfeff.export.TokenIdsEmbedderModule`'s contract, by default.

    @property
    def embedding_num_layers(self):
        """Layers of `embedding_layers`: the token layer and each of `num_layers`."""
        return self.num_layers + 1

    @property
    def embedding_dim(self):
        """Size of each layer of `embedding_layers`."""
        return self.hidden_dim


class Task(keras.Model):
    """Base of the task models that take a backbone (`Bert`, `ElmoLM`, `TransformerLM`...).

    The subclass names its `backbone_class`, makes its heads in `__init__` and
    builds them in `build_heads()`; the export contract is the backbone's.

    Args:
        backbone: an instance of `backbone_class`.
        **kwargs: base `Model` arguments.
    """

    backbone_class = Backbone
    # The module of `tfeff.export.embedder_module` that exports this task.
    embedder_kind = "token_ids"

    def __init__(self, backbone, **kwargs):
        # Checked first: the encoder's arguments of an older call would otherwise meet
        # Keras' "unrecognized keyword arguments".
        if not isinstance(backbone, self.backbone_class):
            name, backbone_name = type(self).__name__, self.backbone_class.__name__
            raise TypeError(
                f"{name} takes its backbone, a {backbone_name} object, as its first argument "
                f"(e.g. {name}({backbone_name}(...)); the encoder's arguments are the "
                f"backbone's). Received: backbone of type {type(backbone).__name__}")
        super().__init__(**kwargs)
        self.backbone = backbone

    def build(self, input_shape=None):
        if not self.backbone.built:
            self.backbone.build()
        self.build_heads()
        self.built = True

    def get_build_config(self):
        return {"input_shape": None}

    def build_heads(self):
        """Creates the heads' variables (the backbone is built)."""

    def get_config(self):
        config = super().get_config()
        config["backbone"] = keras.saving.serialize_keras_object(self.backbone)
        return config

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        if isinstance(config.get("backbone"), dict):
            # Unbuilt: the task builds it in its own name scope (its variables' paths).
            backbone = {k: v for k, v in config["backbone"].items() if k != "build_config"}
            config["backbone"] = keras.saving.deserialize_keras_object(backbone)
        elif "backbone" not in config:  # a single class's flat config, as saved before
            from tfeff.models import legacy

            config = legacy.nested_config(cls, config)
        return cls(**config)

    # `tfeff.export.TokenIdsEmbedderModule`'s contract: the backbone's.

    @property
    def embedding_tokenization(self):
        return getattr(self.backbone, "embedding_tokenization", "word")

    @property
    def embedding_num_layers(self):
        return self.backbone.embedding_num_layers

    @property
    def embedding_dim(self):
        return self.backbone.embedding_dim

    @property
    def max_embedding_tokens(self):
        return getattr(self.backbone, "max_embedding_tokens", None)

    def embedding_layers(self, token_ids, padding_mask, training=False):
        return self.backbone.embedding_layers(token_ids, padding_mask, training=training)
