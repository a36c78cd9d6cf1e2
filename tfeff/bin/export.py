"""tfeff-export: write a SavedModel embedder from a model directory (or fastText vectors).

    tfeff-export --model_dir runs/demo --output runs/demo/export [--overwrite]
    tfeff-export --fasttext runs/demo/fasttext.bin --output runs/fasttext_export

Every model family exports (signatures: tfeff.export.embedder); WordPiece embedders need
`import tensorflow_text` before `tf.saved_model.load` (tfeff.export.load_embedder does it).

Exit status: 0 on success, 1 on bad input (one `error: ...` line naming the file or flag),
130 after Ctrl-C (SIGINT) and 143 after SIGTERM, with one `stopped by ...` line: nothing
half-written is left, and an earlier export at `--output` is kept.
"""

from absl import app
from absl import flags

from tfeff.bin import common

_MODEL_DIR = common.DEFINE_path("model_dir", None, "A tfeff-pretrain model directory.")
_FASTTEXT = common.DEFINE_path(
    "fasttext", None, "Instead of --model_dir: export fastText vectors alone (.bin or .vec), "
    "a one-layer context-free embedder.")
_OUTPUT = common.DEFINE_path("output", None, "SavedModel directory to write.", required=True)
_OVERWRITE = flags.DEFINE_bool(
    "overwrite", False, "Replace an earlier export at --output (never a model directory, an "
    "input or other data).")
_MAX_TOKENS = flags.DEFINE_integer(
    "max_tokens", None, "Longest input in model tokens (words, or WordPiece pieces); longer "
    "sentences keep the leading whole words that fit. Default 256; BERT: max_sequence_length-2.")
flags.register_validator(
    "max_tokens", lambda value: value is None or value > 0,
    message="--max_tokens must be a positive integer (leave it out for the default)")
_POOLING = flags.DEFINE_enum(
    "subword_pooling", "first", ["first", "mean", "none"],
    "WordPiece models: a word's vector is its first piece's, the mean of its pieces, or "
    "'none' for one output per piece.")


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
    if (_MODEL_DIR.value is None) == (_FASTTEXT.value is None):
        raise app.UsageError("Pass exactly one of --model_dir and --fasttext.")
    from tfeff.export import export_fasttext, export_model_dir

    def body():
        if _FASTTEXT.value:
            export_fasttext(_FASTTEXT.value, _OUTPUT.value, overwrite=_OVERWRITE.value,
                            max_tokens=_MAX_TOKENS.value)
            print(f"exported {_FASTTEXT.value} to {_OUTPUT.value}")
            return
        step = export_model_dir(_MODEL_DIR.value, _OUTPUT.value, overwrite=_OVERWRITE.value,
                                max_tokens=_MAX_TOKENS.value, subword_pooling=_POOLING.value)
        print(f"exported step {step} to {_OUTPUT.value}")

    common.run_main(body)


def run():
    common.run_app(main, stopped=common.STOPPED + " to export")


if __name__ == "__main__":
    run()
