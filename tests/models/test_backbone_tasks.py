"""ElmoLM and TransformerLM take their backbones (`tfeff.models.task.Task`).

The backbone is the task's encoder, its variables the task's under the backbone's name;
alone it computes what the task scores, saves and reloads; the task's config nests the
backbone's (tests/compat loads the files written before tasks took a backbone).
"""
import keras
import numpy as np
import pytest

from tfeff.models import ElmoBackbone
from tfeff.models import ElmoLM
from tfeff.models import TransformerLM
from tfeff.models import TransformerLMBackbone

IDS = np.array([[2, 5, 7, 9, 3, 0], [2, 11, 4, 3, 0, 0]], "int32")
TASKS = {
    "elmo": lambda: ElmoLM(
        ElmoBackbone(20, num_layers=2, units=8, projection_dim=4, dropout_rate=0.0,
                     input_embedding="alone", token_embedding_dim=6,
                     alone={"intermediate_dim": 8, "lookup": "table"}, name="elmo_lm_backbone"),
        tie_output=True, output_layer="full", name="elmo_lm"),
    "transformer_lm": lambda: TransformerLM(
        TransformerLMBackbone(20, num_layers=1, hidden_dim=8, num_heads=2, intermediate_dim=16,
                              max_sequence_length=8, dropout_rate=0.0,
                              input_embedding="trainable", name="transformer_lm_backbone"),
        output_layer="adaptive", adaptive_cutoffs=[8, 14], adaptive_div_value=2.0,
        name="transformer_lm"),
}
BACKBONES = {"elmo": ElmoBackbone, "transformer_lm": TransformerLMBackbone}


@pytest.mark.parametrize("kind", sorted(TASKS))
def test_the_backbone_is_the_encoder_of_the_task_and_stands_alone(kind, tmp_path):
    keras.utils.set_random_seed(0)
    task = TASKS[kind]()
    task.build()
    backbone = task.backbone
    assert type(backbone) is BACKBONES[kind] and backbone.built
    # One set of variables, the backbone's under its name in the task's paths; the heads'
    # are the task's alone.
    assert {id(w) for w in backbone.weights} < {id(w) for w in task.weights}
    heads = {id(w) for w in task.output_head.weights}
    if task.pre_output is not None:
        heads |= {id(w) for w in task.pre_output.weights}
    own = {id(w) for w in task.weights} - {id(w) for w in backbone.weights}
    assert own == heads - {id(w) for w in backbone.weights}
    assert all(w.path.startswith(f"{task.name}/{backbone.name}/") for w in backbone.weights)
    assert all(w.path.startswith(f"{task.name}/") and "backbone" not in w.path
               for w in task.weights if id(w) in own)
    # The config nests the backbone's; the task's own keys are the output's.
    config = task.get_config()
    assert config["backbone"] == keras.saving.serialize_keras_object(backbone)
    assert "num_layers" not in config and "output_layer" in config
    # The task scores the backbone's top layers; the export contract is the backbone's.
    tops = backbone(IDS)
    outputs = task(IDS)
    assert sorted(tops) == sorted(outputs) == ["backward", "forward"]
    for direction in tops:
        np.testing.assert_array_equal(np.asarray(task.head_inputs(tops[direction])),
                                      np.asarray(outputs[direction]))
    np.testing.assert_array_equal(np.asarray(task.embedding_layers(IDS, IDS > 0)),
                                  np.asarray(backbone.embedding_layers(IDS, IDS > 0)))
    assert (task.embedding_num_layers, task.embedding_dim) == (
        backbone.embedding_num_layers, backbone.embedding_dim)
    # Saved alone, the backbone reloads as itself with the same outputs; the task too.
    backbone.save(tmp_path / "backbone.keras")
    loaded = keras.saving.load_model(tmp_path / "backbone.keras")
    assert type(loaded) is BACKBONES[kind]
    for direction, top in loaded(IDS).items():
        np.testing.assert_array_equal(np.asarray(top), np.asarray(tops[direction]))
    task.save(tmp_path / "task.keras")
    reloaded = keras.saving.load_model(tmp_path / "task.keras")
    assert reloaded.get_config() == task.get_config()
    for direction, out in reloaded(IDS).items():
        np.testing.assert_array_equal(np.asarray(out), np.asarray(outputs[direction]))


@pytest.mark.parametrize("kind", sorted(TASKS))
def test_a_backbone_built_by_its_own_call_keeps_its_variables(kind):
    """Calling the backbone first builds it under its own name; the task then builds its
    heads only, and scores the backbone's outputs with the one set of variables."""
    keras.utils.set_random_seed(0)
    task = TASKS[kind]()
    tops = task.backbone(IDS)
    variables = [id(w) for w in task.backbone.weights]
    outputs = task(IDS)
    assert [id(w) for w in task.backbone.weights] == variables
    assert len({id(w) for w in task.weights}) == len(task.weights)
    for direction in tops:
        np.testing.assert_array_equal(np.asarray(task.head_inputs(tops[direction])),
                                      np.asarray(outputs[direction]))
