"""tfeff-convert-core: merge a relaxed (CoRe) BERT model directory into a standard one,
or write a standard BERT model directory as a keras-hub preset or a Hugging Face directory.

    tfeff-convert-core --model_dir runs/relaxed --output_dir runs/standard
    tfeff-convert-core --model_dir runs/standard --keras_hub_preset runs/standard-keras-hub
    tfeff-convert-core --model_dir runs/standard --hf_dir runs/standard-hf

With `--output_dir`, the standard model is checked against the relaxed one run with exact
attention before anything is written (a mismatch exits non-zero, writing nothing);
`tfeff-pretrain --model_dir runs/standard --config runs/standard/config.yaml` continues
training it. `--keras_hub_preset` (for `keras_hub.models.BertMaskedLM.from_preset(DIR)`;
needs `pip install -e '.[hub]'`) and `--hf_dir` (for `transformers.BertForPreTraining`, or
`RoFormerForMaskedLM` for rotary positions; needs `pip install -e '.[hf]'`) take a standard
BERT. Each output is written to `<output>.tmp-XXXXXXXX`, renamed into place when complete,
while `<output>.lock` keeps a second command off it. See docs/guides/interop.md.

Exit status: 0 on success, 1 on bad input (one `error: ...` line naming the file or flag),
130 after Ctrl-C (SIGINT) and 143 after SIGTERM, with one `stopped by ...` line: nothing
half-written is left, and an earlier output is kept.
"""

import importlib

from absl import app
from absl import flags

from tfeff.bin import common

_MODEL_DIR = common.DEFINE_path(
    "model_dir", None, "Relaxed BERT model directory (--output_dir), or standard BERT model "
    "directory (--keras_hub_preset, --hf_dir).", required=True)
_OUTPUT_DIR = common.DEFINE_path("output_dir", None, "Standard model directory to write.")
_KERAS_HUB_PRESET = common.DEFINE_path(
    "keras_hub_preset", None, "keras-hub preset directory to write from the standard BERT "
    "of --model_dir (instead of --output_dir).")
_HF_DIR = common.DEFINE_path(
    "hf_dir", None, "Hugging Face directory to write from the standard BERT of --model_dir "
    "(weights, config and tokenizer files; RoFormer for rotary positions).")
_OVERWRITE = flags.DEFINE_bool(
    "overwrite", False, "Replace an existing --keras_hub_preset or --hf_dir it wrote.")
_RTOL = common.DEFINE_positive_float(
    "rtol", None, "Largest accepted relative error of the merge's check (--output_dir); "
    "default: derived from the model's size (float32 rounding along its longest path).")


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


def _write_hf(model_dir, hf_dir, overwrite):
    from tfeff.convert import write_hf_model_dir

    step = write_hf_model_dir(model_dir, hf_dir, overwrite=overwrite)
    print(f"wrote {model_dir} (step {step}) as the Hugging Face directory {hf_dir}")


# What each output needs that tfeff does not: (module, extra).
_NEEDS = {"keras_hub_preset": ("keras_hub", "hub"), "hf_dir": ("safetensors", "hf")}


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
    outputs = {holder.name: holder.value for holder in (_OUTPUT_DIR, _KERAS_HUB_PRESET, _HF_DIR)
               if holder.value is not None}
    if len(outputs) != 1:
        raise app.UsageError("Pass exactly one of --output_dir, --keras_hub_preset and "
                             "--hf_dir.")
    (output, path), = outputs.items()
    if output == "output_dir":
        if _OVERWRITE.value:
            raise app.UsageError("--overwrite applies to --keras_hub_preset and --hf_dir only.")
        common.run_main(lambda: _merge(_MODEL_DIR.value, path, _RTOL.value))
        return
    if flags.FLAGS["rtol"].present:
        raise app.UsageError(f"--rtol applies to --output_dir only (--{output} has no merge to "
                             "check).")
    module, extra = _NEEDS[output]
    try:
        importlib.import_module(module)
    except ImportError as e:
        raise app.UsageError(f"--{output} needs {module}, which cannot be imported ({e}): "
                             f"pip install -e '.[{extra}]' from a checkout of tfeff.")
    write = _write_preset if output == "keras_hub_preset" else _write_hf
    common.run_main(lambda: write(_MODEL_DIR.value, path, _OVERWRITE.value))


def run():
    common.run_app(main)


if __name__ == "__main__":
    run()
