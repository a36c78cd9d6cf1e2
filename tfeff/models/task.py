"""BackboneTask: a task model (heads and loss) around a backbone (the encoder).

keras-hub's split: a backbone knows no head and no loss; a task adds them.
tfeff's task models were single classes before they were split, and Keras
writes a saved model's weights by the attributes it walks, in order, and
keys checkpoints by variable paths. A `BackboneTask` keeps both as they were,
so files written before the split load:

* `adopt_backbone` tracks the backbone's layers on the task under their own
  names, before the task makes its heads; `track_backbone` keeps the backbone
  itself last, in the private `_backbone` (Keras' saving visits private
  attributes last), and `__dir__` hides the `backbone` property from that walk;
* `build_backbone` builds the backbone's layers in the task's name scope, so
  their variables keep their paths (`bert/token_embedding/embeddings`).
"""

import keras


class BackboneTask(keras.Model):
    """Base of the task models around a backbone (`Bert`, `ElmoLM`, `TransformerLM`).

    The backbone implements `build_layers()` (its `build` without a name scope
    of its own) and the embeddable-model contract; the task answers that
    contract through it.
    """

    def adopt_backbone(self, backbone, layer_names):
        """Tracks the backbone's layers `layer_names` (those it has) on this task."""
        for name in layer_names:
            if hasattr(backbone, name):
                setattr(self, name, getattr(backbone, name))

    def track_backbone(self, backbone):
        """Keeps `backbone`; called after the heads are made."""
        self._backbone = backbone

    @property
    def backbone(self):
        """The backbone: the encoder this task trains, with no head and no loss."""
        return self._backbone

    def __dir__(self):
        # Keras' saving walks the names `dir` lists: without `backbone`, it reaches the
        # backbone's layers by their adopted names first, and the backbone last.
        return [name for name in super().__dir__() if name != "backbone"]

    def build_backbone(self):
        """Builds the backbone's layers in this task's name scope (see the module)."""
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
