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
    # Rebuilt by the task, the backbone's variables keep the task's paths (checkpoints
    # key them by path).
    assert [w.path for w in reloaded.weights] == [w.path for w in task.weights]
    rebuilt = type(task).from_config(task.get_config())
    rebuilt.build()
    assert [w.path for w in rebuilt.weights] == [w.path for w in task.weights]
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


def test_an_old_flat_bert_config_with_alone_embeddings_loads():
    """A single-class `Bert` config (flat) with ALONE embeddings becomes a task on a
    backbone with the same ALONE settings (BertBackbone chooses its own lookup)."""
    from tfeff.models import Bert

    flat = {"vocabulary_size": 30, "num_layers": 1, "hidden_dim": 8, "num_heads": 2,
            "intermediate_dim": 16, "max_sequence_length": 8, "input_embedding": "alone",
            "alone": {"intermediate_dim": 8, "seed": 3}, "use_nsp": False, "name": "bert"}
    bert = Bert.from_config(flat)
    bert.build()
    assert bert.backbone.name == "bert_backbone" and bert.backbone.alone["seed"] == 3
    assert bert.backbone.token_embedding.lookup == "table"
    assert bert.backbone.get_config()["alone"] == bert.backbone.alone


def test_a_relaxed_bert_on_a_backbone_built_first_merges():
    """A backbone called before its task has no task name in its variables' paths; the
    relaxed-to-standard merge pairs the variables by their paths below the model."""
    from tfeff.models import Bert
    from tfeff.models import BertBackbone
    from tfeff.models.relaxed_merge import merge_relaxed_bert

    backbone = BertBackbone(30, num_layers=1, hidden_dim=8, num_heads=2, intermediate_dim=16,
                            max_sequence_length=8, relaxed={"num_anchors": 2, "ffn_rank": 2},
                            dropout_rate=0.0, name="bert_backbone")
    backbone({"token_ids": IDS})
    relaxed = Bert(backbone, name="bert")
    standard = merge_relaxed_bert(relaxed)
    assert not standard.backbone.is_relaxed
    assert standard.weights[0].path.startswith("bert/")
