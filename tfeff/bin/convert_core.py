"""tfeff-convert-core: merge a relaxed (CoRe) BERT model directory into a standard one.

    tfeff-convert-core --model_dir runs/relaxed --output_dir runs/standard

The standard model is checked against the relaxed one run with exact
attention before anything is written; on any mismatch the command exits
non-zero and `--output_dir` is not created. `tfeff-pretrain --model_dir
runs/standard --config runs/standard/config.yaml` continues training it.
"""

from absl import app
from absl import flags

from tfeff.bin import common

_MODEL_DIR = flags.DEFINE_string("model_dir", None, "Relaxed BERT model directory.",
                                 required=True)
_OUTPUT_DIR = flags.DEFINE_string("output_dir", None, "Standard model directory to write.",
                                  required=True)
_RTOL = flags.DEFINE_float("rtol", 1e-5, "Largest accepted relative error of the check.")


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
    from tfeff.convert import convert_model_dir

    def body():
        step, errors = convert_model_dir(_MODEL_DIR.value, _OUTPUT_DIR.value, rtol=_RTOL.value)
        print(f"converted {_MODEL_DIR.value} (step {step}) -> {_OUTPUT_DIR.value}; relative "
              "errors vs exact attention: "
              + ", ".join(f"{k} {v:.2g}" for k, v in errors.items()))

    common.run_main(body)


def run():
    app.run(main)


if __name__ == "__main__":
    run()
