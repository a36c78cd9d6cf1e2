"""`adaptive_tail_capacity`: the config key reaches each language model's
`AdaptiveSoftmax`, survives the model's config, and is checked."""

import os

import pytest

from tests.conftest import REPO
from tfeff.config import ConfigError
from tfeff.config import load_config
from tfeff.models import from_config

ADAPTIVE = ["model.output_layer=adaptive", "model.adaptive_cutoffs=[10]",
            "model.input_embedding=trainable"]
CASES = {"demo_elmo_c.yaml": from_config.elmo_lm,
         "demo_transformer_lm.yaml": from_config.transformer_lm,
         "demo_masked_elmo.yaml": from_config.masked_elmo}


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_key_reaches_the_adaptive_softmax_and_the_model_config(name):
    build, path = CASES[name], os.path.join(REPO, "configs", name)
    config = load_config(path, ADAPTIVE + ["model.adaptive_tail_capacity=0.25"])
    model = build(config, 30)
    assert model.output_head.tail_capacity == 0.25
    clone = type(model).from_config(model.get_config())
    assert clone.output_head.tail_capacity == 0.25
    assert build(load_config(path, ADAPTIVE), 30).output_head.tail_capacity is None


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("value", ["0", "1.5", "-0.1"])
def test_a_capacity_outside_the_unit_interval_is_refused(name, value):
    with pytest.raises(ConfigError, match=r"`model.adaptive_tail_capacity` must be null or "
                                          rf"in \(0, 1\], got {value}"):
        load_config(os.path.join(REPO, "configs", name),
                    ADAPTIVE + [f"model.adaptive_tail_capacity={value}"])
