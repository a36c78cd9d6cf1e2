"""The transformer LM family's config (`family: transformer_lm`): keys, defaults, validation.

The checks run `load_config` itself (the family is registered in
`tfeff.config.FAMILIES`): YAML, overrides, nested validation and the file name
in errors.
"""

import dataclasses
import os

import pytest

from tests.conftest import REPO
from tfeff import config as config_lib
from tfeff.config import ConfigError
from tfeff.config import load_config
from tfeff.config.elmo import DataConfig
from tfeff.config.elmo import ElmoModelConfig
from tfeff.config.elmo import EvalConfig
from tfeff.config.elmo import FastTextConfig
from tfeff.config.elmo import TrainConfig
from tfeff.config.transformer_lm import ELMO_MODEL_KEYS
from tfeff.config.transformer_lm import TransformerLMConfig
from tfeff.config.transformer_lm import TransformerLMModelConfig

CONFIG_NAMES = ("demo_transformer_lm", "transformer_lm_gpt")


def config_path(name):
    """A shipped transformer LM config in configs/."""
    return os.path.join(REPO, "configs", f"{name}.yaml")


def test_sections_are_the_elmo_familys_own_dataclasses():
    hints = {f.name: f.type for f in dataclasses.fields(TransformerLMConfig)}
    assert (hints["data"], hints["fasttext"], hints["train"], hints["eval"]) == (
        DataConfig, FastTextConfig, TrainConfig, EvalConfig)
    config = config_lib.config_from_dict({"family": "transformer_lm"})
    assert isinstance(config, TransformerLMConfig)
    assert config.data.synthetic is not None  # the demo corpus, as ELMo's default


def test_elmo_keys_have_elmos_types_defaults_and_order():
    elmo = {f.name: f for f in dataclasses.fields(ElmoModelConfig)}
    ours = {f.name: f for f in dataclasses.fields(TransformerLMModelConfig)}
    for name in ELMO_MODEL_KEYS:
        assert ours[name].type == elmo[name].type, name
        default = (elmo[name].default if elmo[name].default_factory is dataclasses.MISSING
                   else elmo[name].default_factory())
        assert getattr(TransformerLMModelConfig(), name) == default, name
    # Each instance gets its own list and AloneConfig (no shared mutable default).
    a, b = TransformerLMModelConfig(), TransformerLMModelConfig()
    assert a.adaptive_cutoffs is not b.adaptive_cutoffs and a.alone is not b.alone


def test_shipped_configs_load():
    demo = load_config(config_path("demo_transformer_lm"))
    assert (demo.model.output_layer, demo.model.bidirectional, demo.model.num_layers) == (
        "continuous", True, 2)
    assert demo.data.synthetic is not None
    gpt = load_config(config_path("transformer_lm_gpt"))
    m = gpt.model
    # GPT's size (Radford et al. 2018): 12 layers, 768 wide, 12 heads, 3072 feed-forward.
    assert (m.num_layers, m.hidden_dim, m.num_heads, m.intermediate_dim) == (12, 768, 12, 3072)
    assert (m.bidirectional, m.output_layer, m.output_loss, m.input_embedding) == (
        False, "continuous", "cosine", "fixed")
    # An open vocabulary, as ELMo-C's: every word of the corpus is a target.
    elmo_c = load_config(os.path.join(REPO, "configs", "elmo_c.yaml"))
    assert (gpt.data.min_count, gpt.fasttext) == (elmo_c.data.min_count, elmo_c.fasttext)
    assert elmo_c.data.min_count == 1
    # n = 512 (windows of 512 tokens, a learned position each), 32 windows a batch.
    assert (gpt.data.max_sequence_length, gpt.data.batch_size, m.max_sequence_length) == (
        512, 32, 0)
    # Otherwise ELMo-C's corpus and optimizer (configs/elmo_c.yaml), its base batch its
    # own 32 windows (RNMT+'s rate then starts at its peak, 1e-4).
    assert gpt.train == dataclasses.replace(elmo_c.train, base_batch_size=32)
    assert gpt.data.train_files == elmo_c.data.train_files
    # TRANS BASE and TRANS LARGE: Transformer-base and -big bidirectional LMs on ELMo-C's
    # data, vectors and optimizer.
    for name, sizes in (("transformer_lm_base", (6, 512, 8, 2048)),
                        ("transformer_lm_large", (6, 1024, 16, 4096))):
        trans = load_config(config_path(name))
        t = trans.model
        assert (t.num_layers, t.hidden_dim, t.num_heads, t.intermediate_dim) == sizes
        assert t.bidirectional and t.direction_loss == "mean"
        assert (trans.data, trans.fasttext, trans.train) == (
            elmo_c.data, elmo_c.fasttext, elmo_c.train)


def test_round_trip_through_yaml(tmp_path):
    config = load_config(config_path("demo_transformer_lm"),
                         ["model.num_anchors=4", "model.anchor_selection=strided"])
    config_lib.write_yaml(config, str(tmp_path / "c.yaml"))
    again = load_config(str(tmp_path / "c.yaml"))
    assert config_lib.to_dict(again) == config_lib.to_dict(config)
    assert (again.model.num_anchors, again.model.anchor_selection) == (4, "strided")


@pytest.mark.parametrize("overrides,message", [
    (["model.units=4096"], "Unknown config key `model.units`"),
    (["model.hidden_dim=66"], "`model.hidden_dim` must be a multiple of num_heads"),
    (["model.num_heads=0"], "`model.num_heads` must be positive"),
    (["model.dropout_rate=1.0"], r"`model.dropout_rate` must be in \[0, 1\)"),
    (["model.activation=tanh"], "`model.activation` must be one of"),
    (["model.layer_norm_epsilon=0"], "`model.layer_norm_epsilon` must be positive"),
    (["model.position_embedding=absolute"], "`model.position_embedding` must be one of"),
    (["model.hidden_dim=12", "model.num_heads=4"],
     "`model.position_embedding: rotary` needs an even head size"),
    (["model.num_anchors=-1"], "`model.num_anchors` must be non-negative"),
    (["model.anchor_selection=first"], "`model.anchor_selection` must be one of"),
    (["model.max_sequence_length=10"], "`model.max_sequence_length` \\(10\\) must be 0"),
    (["model.bidirectional=2"], "`model.bidirectional` must be true or false"),
    # ELMo's keys, validated by ElmoModelConfig's rules under the same names.
    (["model.output_layer=softmax"], "`model.output_layer` must be one of"),
    (["model.output_layer=adaptive"], "`model.adaptive_cutoffs` must list"),
    (["model.tie_output=true"], "`model.tie_output` needs input_embedding"),
    (["model.output_loss=dot"], "`model.output_loss` must be one of"),
    (["model.embedding_dim=-1"], "`model.embedding_dim` must be non-negative"),
    (["model.alone.filter_type=ternary"], "`model.alone.filter_type` must be one of"),
    (["data.tokenization=wordpiece"],
     "`data.tokenization: wordpiece` needs `model.input_embedding: trainable`"),
    (["data.tokenization=wordpiece", "model.input_embedding=trainable"],
     "`data.tokenization: wordpiece` needs `model.output_layer` full"),
    (["train.precision=float16"], "`train.precision` must be one of"),
    (["eval.top_k=[]"], "`eval.top_k` must list at least one k"),
])
def test_invalid_values_are_refused_naming_the_key(overrides, message):
    path = config_path("demo_transformer_lm")
    with pytest.raises(ConfigError, match=message) as info:
        load_config(path, overrides)
    assert "demo_transformer_lm.yaml" in str(info.value)


def test_valid_variants_load():
    path = config_path("demo_transformer_lm")
    for overrides in (
            ["model.bidirectional=false", "model.position_embedding=learned"],
            ["model.num_anchors=8", "model.anchor_selection=strided"],
            ["model.max_sequence_length=64"],
            ["model.output_layer=full", "model.input_embedding=trainable",
             "model.tie_output=true", "model.embedding_dim=32"],
            ["model.output_layer=adaptive", "model.adaptive_cutoffs=[100, 1000]"],
            ["model.output_layer=sampled", "model.num_sampled=64",
             "model.input_embedding=alone"],
            ["data.tokenization=wordpiece", "model.input_embedding=trainable",
             "model.output_layer=full"]):
        load_config(path, overrides)
