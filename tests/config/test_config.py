import os

import pytest

from tests.conftest import REPO
from tfeff.config import ConfigError, load_config, to_dict, write_yaml

DEMO = os.path.join(REPO, "configs", "demo_elmo_c.yaml")


def test_yaml_round_trip_and_overrides(tmp_path):
    c = load_config(DEMO, ["train.steps=7", "model.output_loss=vmf"])
    assert c.train.steps == 7 and c.model.output_loss == "vmf"
    write_yaml(c, str(tmp_path / "c.yaml"))
    assert to_dict(load_config(str(tmp_path / "c.yaml"))) == to_dict(c)
    assert load_config(os.path.join(REPO, "configs", "elmo_c.yaml")).model.units == 4096


@pytest.mark.parametrize("override, message", [
    ("model.unitz=3", r"Unknown config key `model.unitz`. Did you mean `model.units`"),
    ("trian.steps=3", r"Unknown config key `trian`"),
    ("train.steps=0", r"`train.steps` must be positive"),
    ("data.batch_size=-4", r"`data.batch_size` must be positive"),
    ("model.projection_dim=0", r"`model.projection_dim` must be positive"),
    ("fasttext.dim=-1", r"`fasttext.dim` must be positive"),
    ("model.dropout_rate=1.5", r"`model.dropout_rate` must be in"),
    ("model.units=abc", r"`model.units` must be an integer"),
    ("model.output_loss=mse", r"`model.output_loss` must be one of"),
])
def test_bad_values_name_file_and_key(override, message):
    with pytest.raises(ConfigError, match=message) as info:
        load_config(DEMO, [override])
    assert "demo_elmo_c.yaml" in str(info.value)


def test_missing_file_and_bad_yaml(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        load_config(str(tmp_path / "nope.yaml"))
    (tmp_path / "bad.yaml").write_text("family: elmo\nmodel: [unclosed\n")
    with pytest.raises(ConfigError, match="bad.yaml"):
        load_config(str(tmp_path / "bad.yaml"))
