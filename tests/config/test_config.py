import dataclasses
import os
import re
import subprocess
import sys

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
    ("model.projection_dim=-1", r"`model.projection_dim` must be non-negative"),
    ("fasttext.dim=-1", r"`fasttext.dim` must be positive"),
    ("model.dropout_rate=1.5", r"`model.dropout_rate` must be in"),
    ("model.units=abc", r"`model.units` must be an integer"),
    ("model.output_loss=mse", r"`model.output_loss` must be one of"),
    ("train.precision=float16", r"`train.precision` must be one of \('float32', "
     r"'mixed_bfloat16', 'mixed_float16'\), got 'float16'"),
    ("train.jit_compile=xla", r"`train.jit_compile` must be true, false or auto, got 'xla'"),
    ("train.jit_compile=1", r"`train.jit_compile` must be true, false or auto, got 1"),
    ("train.decay=rnmt", r"`train.decay: rnmt` needs `train.decay_end_step` > "
     r"decay_start_step, got 0 and 0"),
    ("model.cell_clip=-3", r"`model.cell_clip` must be non-negative"),
    ("train.decay=rnmt", r"needs `train.decay_end_step`"),
    ("model.direction_loss=avg", r"`model.direction_loss` must be one of \('sum', 'mean'\)"),
])
def test_bad_values_name_file_and_key(override, message):
    with pytest.raises(ConfigError, match=message) as info:
        load_config(DEMO, [override])
    assert str(info.value).startswith(f"override `{override}` (applied to {DEMO}): ")


def test_an_error_is_blamed_on_the_override_that_made_it_or_on_the_file(tmp_path):
    with pytest.raises(ConfigError) as info:  # no family has train.momentum
        load_config(DEMO, ["train.steps=7", "train.momentum=0.9"])
    assert str(info.value).startswith(f"override `train.momentum=0.9` (applied to {DEMO}): "
                                      "Unknown config key `train.momentum`")
    with pytest.raises(ConfigError) as info:  # a cross-key rule: the key it names
        load_config(DEMO, ["model.output_layer=adaptive", "model.adaptive_cutoffs=[50, 10]"])
    assert str(info.value).startswith("override `model.adaptive_cutoffs=[50, 10]`")
    broken = tmp_path / "broken.yaml"
    broken.write_text(open(DEMO, encoding="utf-8").read() + "\nextra_section: 1\n")
    with pytest.raises(ConfigError) as info:  # the file is wrong whatever the overrides
        load_config(str(broken), ["train.steps=7"])
    assert str(info.value).startswith(f"{broken}: Unknown config key `extra_section`")
    # An override may mend the file: then nothing is wrong.
    zero = tmp_path / "zero.yaml"
    zero.write_text(open(DEMO, encoding="utf-8").read().replace("steps:", "steps: 0 #", 1))
    with pytest.raises(ConfigError, match=f"^{re.escape(str(zero))}: `train.steps` must be"):
        load_config(str(zero))
    assert load_config(str(zero), ["train.steps=7"]).train.steps == 7


def test_missing_file_and_bad_yaml(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        load_config(str(tmp_path / "nope.yaml"))
    (tmp_path / "bad.yaml").write_text("family: elmo\nmodel: [unclosed\n")
    with pytest.raises(ConfigError, match="bad.yaml"):
        load_config(str(tmp_path / "bad.yaml"))


@pytest.mark.parametrize("overrides, message", [
    (["model.output_layer=adaptive"], r"`model.adaptive_cutoffs` must list"),
    (["model.output_layer=adaptive", "model.adaptive_cutoffs=[50, 10]"], r"must be increasing"),
    (["model.output_layer=softmax"], r"`model.output_layer` must be one of"),
    (["model.tie_output=true"], r"`model.tie_output` needs input_embedding: trainable"),
    (["data.tokenization=wordpiece"], r"needs `model.input_embedding: trainable`"),
    (["data.tokenization=wordpiece", "model.input_embedding=trainable"],
     r"needs `model.output_layer` full, adaptive or sampled, got 'continuous'"),
    (["data.tokenization=bpe"], r"`data.tokenization` must be one of"),
    (["model.num_sampled=0"], r"`model.num_sampled` must be positive"),
    (["model.input_embedding=alone", "model.alone.zero_probability=1.0"],
     r"`model.alone.zero_probability` must be in \(0, 1\)"),
    (["model.alone.filter_type=ternary"], r"`model.alone.filter_type` must be one of"),
    (["model.alone.num_codebooks=0"], r"`model.alone.num_codebooks` must be positive"),
    (["model.alone.codebook_size=-1"], r"`model.alone.codebook_size` must be positive"),
    (["model.alone.intermediate_dim=0"], r"`model.alone.intermediate_dim` must be positive"),
    (["model.alone.base_dim=-8"], r"`model.alone.base_dim` must be non-negative"),
    (["model.alone.dropout_rate=1"], r"`model.alone.dropout_rate` must be in \[0, 1\)"),
    (["model.alone.seeds=1"], r"Unknown config key `model.alone.seeds`. Did you mean `model.alone.seed`"),
    (["model.input_embedding=alone", "model.tie_output=true", "model.output_layer=adaptive",
      "model.adaptive_cutoffs=[100]"], r"`model.tie_output` needs input_embedding"),
])
def test_output_layer_settings_are_validated(overrides, message):
    with pytest.raises(ConfigError, match=message):
        load_config(DEMO, overrides)


def test_every_bundled_config_loads():
    names = sorted(os.listdir(os.path.join(REPO, "configs")))
    for variant in ("elmo_c", "elmo_a", "elmo_sub", "elmo_sampled", "elmo_fixed", "elmo_alone"):
        assert f"{variant}.yaml" in names and f"demo_{variant}.yaml" in names
    configs = {n: load_config(os.path.join(REPO, "configs", n)) for n in names}
    layers = {c.model.output_layer for c in configs.values() if c.family == "elmo"}
    assert layers == {"continuous", "adaptive", "full", "sampled", "fixed"}
    bert = {n: c for n, c in configs.items() if c.family == "bert"}
    # Each CoRe config and its standard baseline: the paper's recipe (n = 512), the
    # cheaper n = 128 variant, the demo. A pair differs only in the CoRe settings.
    pairs = [("bert_base_n512.yaml", "bert_base_core.yaml"),
             ("bert_base.yaml", "bert_base_core_n128.yaml"),
             ("demo_bert.yaml", "demo_bert_core.yaml")]
    assert sorted(bert) == sorted(n for pair in pairs for n in pair)
    for base_name, core_name in pairs:
        base, core = bert[base_name], bert[core_name]
        assert core.two_phase and not base.two_phase
        assert (base.data, base.train) == (core.data, core.train), core_name
        assert dataclasses.replace(core.model, relaxed=None) == base.model, core_name
    for name in ("bert_base_n512.yaml", "bert_base.yaml"):
        m = bert[name].model
        assert (m.hidden_dim, m.num_layers, m.num_heads, m.intermediate_dim) == (
            768, 12, 12, 3072)
    for name in ("bert_base_core.yaml", "bert_base_core_n128.yaml"):
        relaxed = bert[name].model.relaxed
        assert (relaxed.num_anchors, relaxed.ffn_rank) == (32, 64)
    paper = bert["bert_base_core.yaml"]
    assert (paper.data.max_sequence_length, paper.data.batch_size, paper.model.use_nsp,
            paper.core.coarse_steps, paper.train.steps) == (512, 1024, True, 100_000, 400_000)


@pytest.mark.parametrize("override,message", [
    ("core.coarse_steps=10", "`core.coarse_steps` > 0 needs `model.relaxed`"),
    ("model.relaxed.anchors=3", "Unknown config key `model.relaxed.anchors`"),
    ("model.num_heads=5", "`model.hidden_dim` must be a multiple of num_heads"),
    ("data.max_predictions_per_seq=0", "`data.max_predictions_per_seq` must be in"),
    ("core.plateau_patience=2", "`core.plateau_patience` needs `core.coarse_steps`"),
    ("train.epochs=2", "`train.epochs` is counted by the elmo, transformer_lm and masked_elmo "
                      "families"),
])
def test_bert_config_errors_name_the_key(override, message):
    path = os.path.join(REPO, "configs", "demo_bert.yaml")
    overrides = [override]
    if override.startswith("model.relaxed."):
        overrides = ["model.relaxed={num_anchors: 2}", override]
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_config(path, overrides)


def test_coarse_phase_must_leave_refined_steps():
    path = os.path.join(REPO, "configs", "demo_bert_core.yaml")
    with pytest.raises(ConfigError, match=r"`core.coarse_steps` \(1200\) must be smaller"):
        load_config(path, ["core.coarse_steps=1200"])


def test_output_layer_is_checked_against_the_vocabulary():
    from tfeff.data import Vocabulary
    from tfeff.training.families.language_model import check_output_layer

    vocab = Vocabulary(["<pad>", "<unk>", "<s>", "</s>", "a", "b", "c"], [0, 0, 5, 5, 9, 4, 1])
    check_output_layer(load_config(DEMO, ["model.output_layer=adaptive",
                                          "model.adaptive_cutoffs=[5]"]).model, vocab)
    with pytest.raises(ConfigError, match=r"adaptive_cutoffs` \[7\] must lie inside \(0, 7\)"):
        check_output_layer(load_config(DEMO, ["model.output_layer=adaptive",
                                              "model.adaptive_cutoffs=[7]"]).model, vocab)
    with pytest.raises(ConfigError, match="num_sampled`=7 must be smaller"):
        check_output_layer(load_config(DEMO, ["model.output_layer=sampled",
                                              "model.num_sampled=7"]).model, vocab)
    unsorted = Vocabulary(vocab.words, [0, 0, 5, 5, 1, 4, 9])
    with pytest.raises(ValueError, match="not sorted by decreasing frequency"):
        check_output_layer(load_config(DEMO, ["model.output_layer=sampled",
                                              "model.num_sampled=3"]).model, unsorted)


def _float_keys(cls, prefix=""):
    """The dotted names of every float field of a config dataclass tree."""
    import dataclasses
    import typing

    from tfeff.config.base import _is_dataclass_type, _unwrap_optional

    hints = typing.get_type_hints(cls)
    for field in dataclasses.fields(cls):
        tp, _ = _unwrap_optional(hints[field.name])
        name = f"{prefix}{field.name}"
        if tp is float:
            yield name
        elif _is_dataclass_type(tp):
            yield from _float_keys(tp, name + ".")


@pytest.mark.parametrize("family_config", ["demo_elmo_c.yaml", "demo_bert_core.yaml",
                                           "demo_masked_elmo.yaml"])
def test_every_float_key_refuses_nan_and_inf_by_name(family_config):
    from tfeff.config import FAMILIES

    path = os.path.join(REPO, "configs", family_config)
    family = load_config(path).family
    keys = list(_float_keys(FAMILIES[family]))
    assert "train.learning_rate" in keys and len(keys) > 8
    for key in keys:
        for value in (".nan", ".inf", "-.inf", "nan"):
            with pytest.raises(ConfigError, match=rf"`{re.escape(key)}` must be a "
                               r"(finite )?number, got"):
                load_config(path, [f"{key}={value}"])


def test_numbers_are_what_a_user_means(tmp_path):
    c = load_config(DEMO, ["train.learning_rate=1e-3", "train.steps=1e3",
                           "train.clipnorm=5E-1"])
    assert (c.train.learning_rate, c.train.steps, c.train.clipnorm) == (0.001, 1000, 0.5)
    assert isinstance(c.train.steps, int)
    text = open(DEMO, encoding="utf-8").read()
    path = tmp_path / "c.yaml"
    path.write_text(text.replace("train:\n", "train:\n  weight_decay: 1e-2\n", 1))
    assert load_config(str(path)).train.weight_decay == 0.01
    path.write_text(text.replace("train:\n", "train:\n  weight_decay: '2e-2'\n", 1))
    assert load_config(str(path)).train.weight_decay == 0.02
    with pytest.raises(ConfigError, match=r"`train.steps` must be an integer, got 2.5"):
        load_config(DEMO, ["train.steps=2.5"])
    with pytest.raises(ConfigError, match=r"`train.learning_rate` must be a number, got '1e'"):
        load_config(DEMO, ["train.learning_rate=1e"])


def test_duplicate_keys_are_refused_with_both_lines(tmp_path):
    text = open(DEMO, encoding="utf-8").read()
    lines = text.splitlines()
    first = lines.index("train:") + 1
    path = tmp_path / "twice.yaml"
    path.write_text(text + "train:\n  steps: 3\n")
    with pytest.raises(ConfigError) as info:
        load_config(str(path))
    second = len(lines) + 1
    assert str(info.value) == (
        f"{path}:{second}: not valid YAML: the key `train` is given twice (lines {first} and "
        f"{second}); a second one would silently replace the first")
    path.write_text(text.replace("train:\n", "train:\n  steps: 3\n  steps: 4\n", 1))
    with pytest.raises(ConfigError, match=rf"the key `steps` is given twice \(lines "
                                          rf"{first + 1} and {first + 2}\)"):
        load_config(str(path))
    with pytest.raises(ConfigError, match="the key `a` is given twice"):
        load_config(DEMO, ["model.alone={a: 1, a: 2}"])


def test_a_config_that_is_a_directory_or_not_utf8_is_named(tmp_path):
    with pytest.raises(ConfigError, match=rf"^{re.escape(str(tmp_path))} is a directory, not a "
                                          "YAML config file$"):
        load_config(str(tmp_path))
    path = tmp_path / "latin1.yaml"
    path.write_bytes(b"family: elmo\n# caf\xe9\n")
    with pytest.raises(ConfigError, match=rf"^{re.escape(str(path))}:2: the config file is not "
                                          r"UTF-8 text \(byte 0xe9 at offset 18\)$"):
        load_config(str(path))


def test_anchors_merge_keys_and_number_like_strings_round_trip(tmp_path):
    text = open(DEMO, encoding="utf-8").read()
    sizes = "model:\n  num_layers: 2\n  units: 256\n  projection_dim: 64\n"
    assert sizes in text
    path = tmp_path / "merged.yaml"
    path.write_text("sizes: &sizes {num_layers: 2, units: 24, projection_dim: 12}\n" +
                    text.replace(sizes, "model:\n  <<: *sizes\n  units: 20\n", 1))
    with pytest.raises(ConfigError, match="Unknown config key `sizes`"):
        load_config(str(path))  # the anchor parses; a top-level key tfeff lacks is refused
    path.write_text(text.replace(sizes, "model:\n  <<: {num_layers: 2, units: 24, "
                                        "projection_dim: 12}\n  units: 20\n", 1))
    merged = load_config(str(path))
    assert (merged.model.num_layers, merged.model.units, merged.model.projection_dim) == \
        (2, 20, 12)
    c = load_config(DEMO, ["data.synthetic=null", "data.train_files='1e5'"])
    write_yaml(c, str(tmp_path / "c.yaml"))
    assert load_config(str(tmp_path / "c.yaml")).data.train_files == "1e5"


def test_jit_compile_true_is_refused_with_op_determinism_and_values_round_trip(tmp_path):
    with pytest.raises(ConfigError, match=r"`train.jit_compile: true` cannot be honoured with "
                       r"`train.deterministic: true`"):
        load_config(DEMO, ["train.jit_compile=true", "train.deterministic=true"])
    c = load_config(DEMO, ["train.jit_compile=auto", "train.deterministic=true",
                           "train.precision=mixed_bfloat16"])
    assert (c.train.jit_compile, c.train.precision) == ("auto", "mixed_bfloat16")
    assert load_config(DEMO).train.jit_compile is False
    write_yaml(c, str(tmp_path / "c.yaml"))
    assert to_dict(load_config(str(tmp_path / "c.yaml"))) == to_dict(c)
    assert load_config(DEMO, ["train.jit_compile=true"]).train.jit_compile is True


def test_a_local_config_is_read_without_tensorflow_a_remote_one_needs_it(monkeypatch):
    # Reading a local file imports no TensorFlow (the JAX and PyTorch machines of the
    # GPU benchmarks have none; where it is installed, it is not loaded for this).
    code = ("import sys; from tfeff.config import load_config; "
            f"load_config({os.path.join(REPO, 'configs', 'demo_bert.yaml')!r}); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'tensorflow'))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=REPO, env={**os.environ, "KERAS_BACKEND": "jax"})
    assert done.returncode == 0 and done.stdout.strip() == "[]", done.stdout + done.stderr
    from tfeff.config import base

    monkeypatch.setattr(base, "_gfile", lambda: None)  # as where TensorFlow is missing
    with pytest.raises(ConfigError, match=r"^gs://bucket/c\.yaml: a remote path needs "
                                          r"TensorFlow's file systems"):
        load_config("gs://bucket/c.yaml")


def test_lstms_without_a_projection_refuse_a_projection_clip():
    """`model.projection_dim: 0` is a plain LSTM (Li et al.'s Table 5 rows): there is no
    projected state for `proj_clip` to bound."""
    config = load_config(DEMO, ["model.projection_dim=0"])
    assert config.model.projection_dim == 0
    with pytest.raises(ConfigError, match=r"`model.proj_clip` bounds the LSTMs' projected "
                                          r"state: it needs `model.projection_dim` > 0"):
        load_config(DEMO, ["model.projection_dim=0", "model.proj_clip=3"])
