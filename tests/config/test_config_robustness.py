"""Config values a user did not mean: refused by key in one bounded line, before any work.

Structures where a key takes one value (a YAML alias bomb), huge values, settings that
would have no effect, seeds out of range; and `--override` values read as their key's
type (a path is a path) and merged into a section.
"""

import os
import re
import subprocess
import sys
import tracemalloc

import pytest

from tests.conftest import REPO
from tfeff.config import ConfigError
from tfeff.config import TrainConfig
from tfeff.config import load_config
from tfeff.config.train import ONLY_WITH

DEMO = os.path.join(REPO, "configs", "demo_elmo_c.yaml")
DEMO_TEXT = open(DEMO, encoding="utf-8").read()


def _bomb(levels):
    """A YAML alias bomb of 9 ** levels leaves in a few hundred bytes: one flow sequence
    that defines each anchor where it is first used."""
    value = "&a0 [" + ", ".join(["x"] * 9) + "]"
    for i in range(1, levels + 1):
        value = f"&a{i} [{value}, " + ", ".join([f"*a{i - 1}"] * 8) + "]"
    return value


def _config(tmp_path, text, name="c.yaml"):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


def _demo_with(section, line):
    """The demo config's text with `line` added at the top of `section`."""
    assert f"\n{section}:\n" in DEMO_TEXT
    return DEMO_TEXT.replace(f"\n{section}:\n", f"\n{section}:\n  {line}\n", 1)


@pytest.mark.parametrize("text, message", [
    (_demo_with("data", f"heldout_files: {_bomb(6)}"),
     "`data.heldout_files` must be a string, got a list of 9 items"),
    (f"family: elmo\ndata: {_bomb(6)}\n",
     "`data` must be a mapping (a section), got a list of 9 items"),
    (_demo_with("eval", f"chunk_size: {_bomb(6)}"),
     "`eval.chunk_size` must be an integer, got a list of 9 items"),
    (_demo_with("train", f"jit_compile: {_bomb(6)}"),
     "`train.jit_compile` must be a single value, got a list of 9 items"),
    (f"family: {_bomb(6)}\n", "`family` must be one of ('bert', 'elmo', 'masked_elmo', "
                                "'transformer_lm'), got [[[...], [...], "),
])
def test_an_alias_bomb_is_refused_without_being_expanded(tmp_path, text, message):
    """531,441 leaves behind one key: the message says what the value is without
    writing it out (its repr took gigabytes)."""
    path = _config(tmp_path, text)
    tracemalloc.start()
    try:
        with pytest.raises(ConfigError) as info:
            load_config(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert str(info.value).startswith(f"{path}: {message}")
    # Bounded whatever the value (the file's path, which the test does not choose, aside).
    assert len(str(info.value)) - len(str(path)) < 300 and "\n" not in str(info.value)
    assert peak < 4 * 2**20, f"{peak / 2**20:.1f} MiB"  # its repr: 48 MiB


# A subprocess run: under `slow` for the default suite's time budget (the mechanism is
# also checked in process there).
@pytest.mark.slow
def test_the_binary_refuses_an_alias_bomb_in_one_line_and_writes_nothing(tmp_path):
    """Through tfeff-pretrain: exit status 1, one `error:` line, no traceback, no model
    directory (the bomb cost 2.5 GB of memory in 18 s before the message was built)."""
    path = _config(tmp_path, _demo_with("data", f"heldout_files: {_bomb(8)}"))
    model_dir = tmp_path / "run"
    done = subprocess.run([sys.executable, "-m", "tfeff.bin.pretrain", "--config", path,
                           "--model_dir", str(model_dir)], cwd=REPO, capture_output=True,
                          text=True, timeout=300,
                          env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    assert done.returncode == 1, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert errors == [f"error: {path}: `data.heldout_files` must be a string, got a list of "
                      "9 items"], done.stderr[-2000:]
    assert not model_dir.exists()


BIG = 200_000


@pytest.mark.parametrize("text, key", [
    (_demo_with("data", f"tokenization: {'w' * BIG}"), "`data.tokenization` must be one of"),
    (_demo_with("model", f"embedding_dim: {'u' * BIG}"),
     "`model.embedding_dim` must be an integer"),
    (_demo_with("train", f"jit_compile: {'j' * BIG}"),
     "`train.jit_compile` must be true, false or auto"),
    (_demo_with("model", f"? {'k' * BIG}\n  : 1"), "Unknown config key `model.kkkk"),
    (DEMO_TEXT.replace("family: elmo", f"family: {'f' * BIG}"), "`family` must be one of"),
])
def test_a_long_value_is_shortened_in_the_message(tmp_path, text, key):
    """A value (or key) of 200,000 characters is named by its start, not printed whole."""
    with pytest.raises(ConfigError, match=re.escape(key)) as info:
        load_config(_config(tmp_path, text))
    assert len(str(info.value)) < 600, len(str(info.value))


def test_a_long_override_is_shortened_in_the_message():
    value = "x" * 100_000  # what a command line takes in one argument
    with pytest.raises(ConfigError) as info:
        load_config(DEMO, [f"data.train_files={value}"])  # with data.synthetic: both set
    message = str(info.value)
    assert message.startswith("override `data.train_files=xxx") and "100,017 characters" in \
        message and len(message) < 600
    assert message.endswith("Set only one of `data.train_files` and `data.synthetic`.")


def test_a_config_file_of_megabytes_is_refused_before_it_is_parsed(tmp_path):
    """PyYAML takes seconds and gigabytes over megabytes: a config is kilobytes."""
    path = _config(tmp_path, DEMO_TEXT.replace("data:\n", "data:\n  train_files: " + "y" *
                                               (1 << 20) + "\n", 1))
    with pytest.raises(ConfigError, match=rf"^{re.escape(path)}: the config file is over 1 MiB"):
        load_config(path)


@pytest.mark.parametrize("family, shown", [("[elmo]", "['elmo']"), ("{elmo: 1}", "{'elmo': 1}"),
                                           ("7", "7")])
def test_a_family_that_is_not_a_name_is_refused_by_key(tmp_path, family, shown):
    """`family: [elmo]` was a TypeError traceback (a list is no dict key)."""
    path = _config(tmp_path, DEMO_TEXT.replace("family: elmo", f"family: {family}", 1))
    with pytest.raises(ConfigError, match=re.escape(
            f"{path}: `family` must be one of ('bert', 'elmo', 'masked_elmo', "
            f"'transformer_lm'), got {shown}")):
        load_config(path)


@pytest.mark.parametrize("override", ["train.seed=-1", f"train.seed={2 ** 32}",
                                      "data.synthetic.seed=-1"])
def test_a_seed_out_of_range_is_refused_at_load(override):
    """`train.seed=-1` failed after the data was prepared, naming no key (NumPy's seeds
    are 32-bit)."""
    key = override.split("=")[0]
    with pytest.raises(ConfigError, match=rf"^override `{re.escape(override)}` .*"
                                          rf"`{re.escape(key)}` must be"):
        load_config(DEMO, [override])
    assert load_config(DEMO, [f"train.seed={2 ** 32 - 1}"]).train.seed == 2 ** 32 - 1


# A value other than the default for each key that applies to one choice only.
_SET = {"decay_rate": 0.5, "decay_steps": 10, "decay_start_step": 5, "decay_end_step": 50,
        "final_learning_rate_fraction": 0.5, "adagrad_initial_accumulator": 1.0,
        "weight_decay": 0.01, "adam_epsilon": 1e-6}
_CHOICES = {"decay": ("cosine", "linear", "exponential", "constant", "rnmt"),
            "optimizer": ("adam", "adagrad")}


@pytest.mark.parametrize("key", sorted(ONLY_WITH))
def test_a_setting_without_effect_under_the_choice_made_is_refused(key):
    """Each key that applies to one choice only (`ONLY_WITH`) is refused, naming it and
    the choice, when set under another (rnmt's keys under cosine were silently ignored);
    under its own choice it is taken."""
    assert set(_SET) == set(ONLY_WITH)
    choice_key, allowed, owner = ONLY_WITH[key]
    for choice in _CHOICES[choice_key]:
        overrides = [f"train.{choice_key}={choice}", f"train.{key}={_SET[key]}"]
        if choice == "rnmt" and key != "decay_end_step":  # rnmt needs an end past its start
            overrides.append("train.decay_end_step=100")
        if choice in allowed:
            assert getattr(load_config(DEMO, overrides).train, key) == _SET[key]
            continue
        default = getattr(TrainConfig(), key)
        with pytest.raises(ConfigError, match=re.escape(
                f"`train.{key}` is {owner}: it has no effect with `train.{choice_key}: "
                f"{choice}`, got {_SET[key]!r} (leave it out, or at its default {default!r})")):
            load_config(DEMO, overrides)


def test_an_rnmt_decay_that_would_start_after_the_run_is_refused():
    rnmt = ["train.decay=rnmt", "train.decay_end_step=3000"]
    with pytest.raises(ConfigError, match=re.escape(
            "`train.decay_start_step` (1,500) is not before `train.steps` (1,500): the rnmt "
            "decay would never start")):
        load_config(DEMO, rnmt + ["train.decay_start_step=1500"])
    # With `train.epochs` the steps are known when the run has counted its corpus.
    config = load_config(DEMO, rnmt + ["train.decay_start_step=1500", "train.epochs=1"])
    config.train.steps = 900
    with pytest.raises(ConfigError, match=re.escape(
            "`train.decay_start_step` (1,500) is not before the 900 steps that "
            "`train.epochs: 1` comes to")):
        config.train.validate_steps("train")


def test_a_mapping_override_is_merged_into_its_section():
    """`model={units: 48}` replaced the section: the file's other model keys fell back
    to their defaults (a projection of 512 instead of the file's 64)."""
    config = load_config(DEMO, ["model={units: 48, dropout_rate: 0.0}",
                                "data={synthetic: {seed: 3}}"])
    assert (config.model.units, config.model.dropout_rate) == (48, 0.0)
    assert (config.model.projection_dim, config.model.output_layer) == (64, "continuous")
    assert (config.data.synthetic.seed, config.data.synthetic.num_train_sentences,
            config.data.batch_size) == (3, 40000, 64)
    # A null still removes a section that may be empty (then a list of files is needed).
    assert load_config(DEMO, ["data.synthetic=null", "data.train_files=a.txt"]
                       ).data.synthetic is None


@pytest.mark.parametrize("raw, value", [
    ("*.txt", "*.txt"), ("[x].txt", "[x].txt"), ("{a,b}.txt", "{a,b}.txt"),
    ("corpus/*.txt, more/[0-9].txt", "corpus/*.txt, more/[0-9].txt"),
    ("1e5", "1e5"), ("true", "true"), (" spaced.txt ", "spaced.txt"),
    ("'1e5'", "1e5"), ("''", ""), ("", ""), ("'  padded.txt'", "  padded.txt"),
])
def test_a_string_key_takes_its_override_as_written(raw, value):
    """A path given to --override was parsed as YAML: `*.txt` an alias error, `[x].txt` a
    syntax error. A string key's value is taken as written; in quotes, YAML's string."""
    config = load_config(DEMO, ["data.synthetic=null", f"data.heldout_files={raw}",
                                "data.train_files=train.txt"])
    assert config.data.heldout_files == value


def test_other_keys_parse_their_override_as_yaml():
    config = load_config(DEMO, ["model.units=48", "train.learning_rate=1e-3",
                                "train.jit_compile=auto", "train.deterministic=true",
                                "eval.top_k=[1, 5]", "model.output_layer=adaptive",
                                "model.adaptive_cutoffs=[50, 100]"])
    assert (config.model.units, config.train.learning_rate, config.train.jit_compile,
            config.train.deterministic, config.eval.top_k, config.model.adaptive_cutoffs) == \
        (48, 1e-3, "auto", True, [1, 5], [50, 100])
    with pytest.raises(ConfigError, match=r"^override `model.units=\*x` \(applied to .*\): "
                                          r"Override `model.units=\*x`: the value is not valid "
                                          r"YAML \(found undefined alias 'x'"):
        load_config(DEMO, ["model.units=*x"])


def test_a_model_directorys_own_config_keeps_loading(tmp_path):
    """A config.yaml that tfeff wrote before the no-effect checks existed (a decay key
    under another decay, an rnmt decay past its steps) still loads with `saved=True`,
    as resume and export read it; a config a user gives is refused."""
    path = _config(tmp_path, DEMO_TEXT)
    text = open(path, encoding="utf-8").read()
    old = tmp_path / "config.yaml"
    old.write_text(text.replace("train:\n", "train:\n  decay_rate: 0.5\n", 1),
                   encoding="utf-8")
    assert load_config(str(old), saved=True).train.decay_rate == 0.5
    with pytest.raises(ConfigError, match=r"`train.decay_rate` is the exponential decay's"):
        load_config(str(old))
