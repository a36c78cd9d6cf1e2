"""Language-model tasks from one set of arguments, for the tests that vary an LM's input
and output together (`ElmoLM`, `TransformerLM`).

A task takes its backbone (`ElmoLM(ElmoBackbone(...), output_layer=...)`); the tests'
variant tables list the input's and the output's arguments side by side, and
`language_model` sends each to its class. Imported by the backend subprocess scripts
too: no TensorFlow here.
"""

import inspect


def _arguments(cls):
    return set(inspect.signature(cls.__init__).parameters) - {"self", "backbone", "kwargs"}


def language_model(task_class, vocabulary_size=None, *, name=None, dtype=None, **kwargs):
    """`task_class(<its backbone class>(vocabulary_size, ...), ...)` of `kwargs`.

    The output's arguments (`LanguageModel`'s) go to the task, the others to the
    backbone; `seed` to both where both take one (the backbone's dropout and positions,
    the output's sampling); an ALONE input tied to the softmax gathers from the table
    the softmax computes (`lookup="table"`, as `tfeff.models.from_config` builds it).
    `name` names the task, and its backbone `<name>_backbone`; `dtype` is both's.
    """
    backbone_class = task_class.backbone_class
    output_keys = _arguments(task_class)
    task_kwargs = {k: v for k, v in kwargs.items() if k in output_keys}
    backbone_kwargs = {k: v for k, v in kwargs.items()
                       if k not in output_keys or (k == "seed" and
                                                   "seed" in _arguments(backbone_class))}
    if backbone_kwargs.get("alone") is not None and task_kwargs.get("tie_output"):
        backbone_kwargs["alone"] = {**backbone_kwargs["alone"], "lookup": "table"}
    if name is not None:
        backbone_kwargs["name"], task_kwargs["name"] = f"{name}_backbone", name
    backbone = backbone_class(vocabulary_size, dtype=dtype, **backbone_kwargs)
    return task_class(backbone, dtype=dtype, **task_kwargs)
