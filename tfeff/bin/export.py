"""tfeff-export: write a SavedModel embedder from a model directory.

    tfeff-export --model_dir runs/demo --output runs/demo/export [--overwrite]
"""

from absl import app
from absl import flags
from absl import logging

from tfeff.bin import common

_MODEL_DIR = flags.DEFINE_string("model_dir", None, "A tfeff-pretrain model directory.", required=True)
_OUTPUT = flags.DEFINE_string("output", None, "SavedModel directory to write.", required=True)
_OVERWRITE = flags.DEFINE_bool("overwrite", False, "Replace an existing export.")
_MAX_TOKENS = flags.DEFINE_integer("max_tokens", 256, "Longest sentence (words); longer ones are truncated.")


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
    from tfeff.export import export_model_dir

    def body():
        step = export_model_dir(
            _MODEL_DIR.value, _OUTPUT.value, overwrite=_OVERWRITE.value,
            max_tokens=_MAX_TOKENS.value,
        )
        logging.info("Exported step %d to %s", step, _OUTPUT.value)
        print(f"exported step {step} to {_OUTPUT.value}")

    common.run_main(body)


def run():
    app.run(main)


if __name__ == "__main__":
    run()
