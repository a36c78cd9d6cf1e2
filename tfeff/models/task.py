"""Backbone and BackboneTask: a task model (heads and loss) around a backbone (the encoder).

keras-hub's split: a backbone knows no head and no loss; a task adds them.
tfeff's task models were single classes before they were split, and Keras
writes a saved model's weights by the attributes it walks, in order, and
keys checkpoints by variable paths. A `BackboneTask` keeps both as they were,
so files written before the split load:

* `adopt_backbone` tracks the backbone's layers on the task under their own
  names and in the order the single class made them (its `weights` keep their
  order, and with them an optimizer's saved slots), before the task makes its
  heads; `track_backbone` keeps the backbone itself in the private,
  untracked `_backbone` (Keras' saving visits private attributes last; the
  task's `layers` and `summary` do not list it beside its own layers), and
  `__dir__` hides the `backbone` property from that walk;
* `build_backbone` builds the backbone's layers in the task's name scope, so
  their variables keep their paths (`bert/token_embedding/embeddings`).
"""

import keras


class Backbone(keras.Model):
    """Base of the backbones a `BackboneTask` wraps: `build` is `build_layers`.

    A subclass implements `build_layers()`, which creates its layers' variables
    in the caller's name scope: its own when it is built alone, the task's when
    the task builds it (`BackboneTask.build_backbone`).
    """

    def build(self, input_shape=None):
        self.build_layers()
        self.built = True

    def get_build_config(self):
        # `build()` needs no shape; built inside a task it was given none.
        return {"input_shape": None}

    def build_layers(self):
        raise NotImplementedError


class BackboneTask(keras.Model):
    """Base of the task models around a backbone (`Bert`, `ElmoLM`, `TransformerLM`).

    The backbone implements `build_layers()` (its `build` without a name scope
    of its own) and the embeddable-model contract; the task answers that
    contract through it.
    """

    def adopt_backbone(self, backbone, layer_names):
        """Tracks the backbone's layers `layer_names` (those it has) on this task, in order.

        A tuple of names stands for lists that the single class filled together: they
        are adopted item by item, interleaved (`forward_lstms[0]`, `forward_norms[0]`,
        `backward_lstms[0]`, ..., then `[1]`), which is the order of its `weights`. An
        empty list (an ELMo without layer norms) drops out of the interleaving.
        """
        for name in layer_names:
            if isinstance(name, tuple):
                for list_name in name:
                    setattr(self, list_name, [])
                filled = tuple(n for n in name if getattr(backbone, n))
                for items in zip(*(getattr(backbone, n) for n in filled)):
                    for list_name, item in zip(filled, items):
                        getattr(self, list_name).append(item)
            elif hasattr(backbone, name):
                setattr(self, name, getattr(backbone, name))

    def track_backbone(self, backbone):
        """Keeps `backbone`, untracked: its layers are the task's already."""
        object.__setattr__(self, "_backbone", backbone)

    @property
    def backbone(self):
        """The backbone: the encoder this task trains, with no head and no loss."""
        return self._backbone

    def __dir__(self):
        # Keras' saving walks the names `dir` lists: without `backbone`, it reaches the
        # backbone's layers by their adopted names first, and the backbone last.
        return [name for name in super().__dir__() if name != "backbone"]

    def get_config(self):
        """The base `Model` keys and the backbone's arguments: one flat config, as the
        single class had (the task's constructor takes the backbone's arguments)."""
        config = super().get_config()
        backbone = self._backbone.get_config()
        for key in ("name", "trainable", "dtype"):
            del backbone[key]
        return {**config, **backbone}

    def build_backbone(self):
        """Builds the backbone's layers in this task's name scope (see the module),
        unless the backbone was built (and its variables named) by a call of its own."""
        if not self._backbone.built:
            self._backbone.build_layers()
            self._backbone.built = True

    # The embeddable-model contract of `tfeff.export.TokenIdsEmbedderModule`: the backbone's.

    @property
    def embedding_tokenization(self):
        return getattr(self._backbone, "embedding_tokenization", "word")

    @property
    def embedding_num_layers(self):
        return self._backbone.embedding_num_layers

    @property
    def embedding_dim(self):
        return self._backbone.embedding_dim

    @property
    def max_embedding_tokens(self):
        return getattr(self._backbone, "max_embedding_tokens", None)

    def embedding_layers(self, token_ids, padding_mask, training=False):
        return self._backbone.embedding_layers(token_ids, padding_mask, training=training)
