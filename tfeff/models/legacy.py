"""Files written before tasks took a backbone: the one place that knows their layout.

Before (tfeff 0.1.0 and the development versions after it), a task model was one
class (`Bert(vocabulary_size, num_layers=...)`) with a flat config and its encoder's
layers as its own attributes, so

* a `.keras` file holds a flat config, and its weights under the paths Keras'
  saving walk gave those attributes (`token_embedding/vars/0`, `layers/bert_layer/...`);
* a model directory's checkpoints key the variables without the backbone's name
  (`bert/token_embedding/embeddings`, `adamw/bert_token_embedding_embeddings_momentum`).

`load_model` reads either kind of `.keras` file; `Task.from_config` turns a flat
config nested (`nested_config`); `checkpoint_key` maps a variable's key to the
old one (`tfeff.training.checkpoints.restore` falls back to it).
"""

import inspect
import json
import zipfile

import keras

# Per task class, the attributes its single class made, in the order it made them
# (which is the order Keras' saving walk found them in): the backbone's, then the
# heads'. A tuple stands for lists filled together, item by item.
_OLD_LAYOUTS = {
    "Bert": (("token_embedding", "position_embedding", "segment_embedding",
              "embeddings_norm", "embeddings_dropout", "transformer_layers"),
             ("mlm_dense", "mlm_norm", "pooler", "nsp_dense")),
    "ElmoLM": (("fixed_table", "token_embedding", "token_projection",
                ("forward_lstms", "forward_norms", "backward_lstms", "backward_norms"),
                "dropout"),
               ("pre_output", "output_head")),
    "TransformerLM": (("fixed_table", "token_embedding", "token_projection", "embeddings_norm",
                       "embeddings_dropout", "forward_position_embedding", "forward_layers",
                       "backward_position_embedding", "backward_layers"),
                      ("pre_output", "output_head")),
}
# The keys of old configs under their names of today.
_RENAMED_KEYS = {"embedding_dim": "token_embedding_dim"}


def nested_config(task_class, config):
    """A flat (single-class) config of `task_class` as today's: the backbone's keys
    become a backbone object, named `<task name>_backbone`."""
    config = {_RENAMED_KEYS.get(k, k): v for k, v in config.items()}
    if task_class.__name__ == "MaskedElmo" and config.get("output_layer") == "softmax":
        config["output_layer"] = "full"  # its name before the other models' "full"
    backbone_class = task_class.backbone_class
    backbone_keys = set(inspect.signature(backbone_class.__init__).parameters) - {"self"}
    task_keys = set(inspect.signature(task_class.__init__).parameters) - {"self", "backbone"}
    base_keys = {"name", "trainable", "dtype"}
    unknown = sorted(set(config) - backbone_keys - task_keys - base_keys)
    if unknown:
        raise ValueError(f"A saved {task_class.__name__} config has keys no version of it "
                         f"took: {unknown}")
    backbone_config = {k: v for k, v in config.items() if k in backbone_keys}
    if backbone_config.get("alone") is not None and task_class.__name__ != "Bert":
        # The single class chose the lookup: from the table when the softmax is tied to it
        # (BertBackbone always gathers from its table).
        tied = config.get("tie_output") or (task_class.__name__ == "MaskedElmo" and
                                            config.get("output_layer", "full") == "full")
        backbone_config["alone"] = {**backbone_config["alone"],
                                    "lookup": "table" if tied else "unique"}
    name = config.get("name", task_class.__name__.lower())
    backbone = backbone_class(**backbone_config, name=f"{name}_backbone",
                              dtype=config.get("dtype"))
    task_config = {k: v for k, v in config.items()
                   if k in task_keys - {"kwargs"} or k in base_keys}
    return {**task_config, "backbone": backbone}


def _saved_config(path):
    with zipfile.ZipFile(path) as archive:
        return json.loads(archive.read("config.json"))


def _is_old(config):
    return ((config.get("class_name") in _OLD_LAYOUTS or config.get("class_name") == "MaskedElmo")
            and "backbone" not in config.get("config", {}))


def is_old_file(path):
    """Whether the `.keras` file `path` holds a single-class task (a flat config)."""
    return _is_old(_saved_config(path))


def load_model(path, **kwargs):
    """`keras.saving.load_model(path, **kwargs)`, for today's `.keras` files and those
    written before tasks took a backbone (their weights read under their old paths).

    Args:
        path: a `.keras` file.
        **kwargs: `keras.saving.load_model`'s other arguments (`custom_objects`,
            `safe_mode`, `compile`: an old file's model is not compiled).

    Returns:
        The model (built, with the file's weights; an old file's optimizer state is not
        read). `tfeff.models.legacy.upgrade(path, output)` writes it as today's file.
    """
    config = _saved_config(path)
    if not _is_old(config):
        return keras.saving.load_model(path, **kwargs)
    model = keras.saving.deserialize_keras_object(
        config, custom_objects=kwargs.get("custom_objects"),
        safe_mode=kwargs.get("safe_mode", True))
    if not model.built:
        model.build()
    _OldLayout(model).load_weights(path)
    return model


def upgrade(path, output):
    """Writes the `.keras` file `path` (of any tfeff version) as today's, to `output`."""
    load_model(path).save(output)


class _OldLayout(keras.Model):
    """A view of a built task with its single class's attributes, to read old weights
    into (not a model to call: its layers are the task's)."""

    def __init__(self, task):
        super().__init__(name=task.name)
        backbone_names, head_names = _OLD_LAYOUTS.get(type(task).__name__, ((), ()))
        for name in backbone_names:
            if isinstance(name, tuple):
                filled = tuple(n for n in name if getattr(task.backbone, n))
                for list_name in name:
                    setattr(self, list_name, [])
                for items in zip(*(getattr(task.backbone, n) for n in filled)):
                    for list_name, item in zip(filled, items):
                        getattr(self, list_name).append(item)
            elif hasattr(task.backbone, name):
                setattr(self, name, getattr(task.backbone, name))
        if not backbone_names:  # MaskedElmo nested its backbone already
            self.backbone = task.backbone
        for name in head_names or ("target_table", "output_head"):
            if hasattr(task, name):
                setattr(self, name, getattr(task, name))
        self._task_variables = task._trainable_variables + task._non_trainable_variables
        self.built = True

    def load_own_variables(self, store):
        for i, variable in enumerate(self._task_variables):
            variable.assign(store[str(i)])


def checkpoint_key(task, key):
    """The key an old checkpoint gave the variable keyed `key` today (the backbone's name
    left out of its path), or `key` itself."""
    task_name, backbone_name = task.name, task.backbone.name
    return (key.replace(f"{task_name}.{backbone_name}.", f"{task_name}.", 1)
            .replace(f".{task_name}_{backbone_name}_", f".{task_name}_", 1))
