"""tfeff-convert-core: merge a relaxed (CoRe) BERT model directory into a standard one,
or write a standard BERT model directory as a keras-hub preset.

    tfeff-convert-core --model_dir runs/relaxed --output_dir runs/standard
    tfeff-convert-core --model_dir runs/standard --keras_hub_preset runs/standard-keras-hub

With `--output_dir`, the standard model is checked against the relaxed one
run with exact attention before anything is written; on any mismatch the
command exits non-zero and `--output_dir` is not created. `tfeff-pretrain
--model_dir runs/standard --config runs/standard/config.yaml` continues
training it.

With `--keras_hub_preset`, `--model_dir` holds a standard BERT with learned
positions (a two-phase CoRe run after its switch, the output of
`--output_dir`, or a standard run), and the preset gets a keras-hub
`BertMaskedLM` with its preprocessor and tokenizer
(`tfeff.convert.write_keras_hub_preset`):
`keras_hub.models.BertMaskedLM.from_preset(DIR)` loads it. `--overwrite`
replaces an earlier preset. It needs keras-hub (`pip install -e '.[hub]'`).
"""

import importlib

from absl import app
from absl import flags

from tfeff.bin import common

_MODEL_DIR = common.DEFINE_path(
    "model_dir", None, "Relaxed BERT model directory (--output_dir), or standard BERT model "
    "directory (--keras_hub_preset).", required=True)
_OUTPUT_DIR = common.DEFINE_path("output_dir", None, "Standard model directory to write.")
_KERAS_HUB_PRESET = common.DEFINE_path(
    "keras_hub_preset", None, "keras-hub preset directory to write from the standard BERT "
    "of --model_dir (instead of --output_dir).")
_OVERWRITE = flags.DEFINE_bool(
    "overwrite", False, "Replace an existing --keras_hub_preset that holds a keras-hub preset.")
_RTOL = common.DEFINE_positive_float("rtol", None, "Largest accepted relative error of the merge's "
                           "check (--output_dir); default: derived from the model's size "
                           "(float32 rounding along its longest path).")


def _merge(model_dir, output_dir, rtol):
    from tfeff.convert import convert_model_dir

    step, errors = convert_model_dir(model_dir, output_dir, rtol=rtol)
    print(f"converted {model_dir} (step {step}) -> {output_dir}; relative errors vs exact "
          "attention: " + ", ".join(f"{k} {v:.2g}" for k, v in errors.items()))


def _write_preset(model_dir, preset_dir, overwrite):
    from tfeff.convert import write_keras_hub_preset

    step, errors = write_keras_hub_preset(model_dir, preset_dir, overwrite=overwrite)
    print(f"wrote {model_dir} (step {step}) as the keras-hub preset {preset_dir}; relative "
          "errors vs tfeff: " + ", ".join(f"{k} {v:.2g}" for k, v in errors.items()))


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
    if (_OUTPUT_DIR.value is None) == (_KERAS_HUB_PRESET.value is None):
        raise app.UsageError("Pass exactly one of --output_dir and --keras_hub_preset.")
    if _OVERWRITE.value and _KERAS_HUB_PRESET.value is None:
        raise app.UsageError("--overwrite applies to --keras_hub_preset only.")
    if _KERAS_HUB_PRESET.value is not None:
        if flags.FLAGS["rtol"].present:
            raise app.UsageError("--rtol applies to --output_dir only (the preset's check "
                                 "has its own tolerances).")
        try:
            importlib.import_module("keras_hub")
        except ImportError as e:
            raise app.UsageError(f"--keras_hub_preset needs keras-hub, which cannot be imported "
                                 f"({e}): pip install -e '.[hub]' from a checkout of tfeff.")
    if _OUTPUT_DIR.value is not None:
        common.run_main(lambda: _merge(_MODEL_DIR.value, _OUTPUT_DIR.value, _RTOL.value))
    else:
        common.run_main(lambda: _write_preset(_MODEL_DIR.value, _KERAS_HUB_PRESET.value,
                                              _OVERWRITE.value))


def run():
    common.run_app(main)


if __name__ == "__main__":
    run()
