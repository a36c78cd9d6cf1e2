r"""tfeff-embed: embed a text file (one sentence per line) with an exported embedder.

    tfeff-embed --embedder runs/demo/export --input sentences.txt --output runs/embeddings \
        [--format npy|hdf5] [--layers 0,2] [--on_invalid_utf8 error|skip|replace]

Streams the file in chunks sorted by length, writes one array per layer plus offsets and
tokens (see tfeff.export.embed_file), shows a progress bar, and resumes an interrupted run
from `<output>.partial` (--noresume starts over).

Exit status: 0 on success, 1 on bad input (one `error: ...` line naming the file or flag),
130 after Ctrl-C (SIGINT) and 143 after SIGTERM, with one `stopped by ...` line: the lines
embedded so far stay in `<output>.partial`, and rerunning the same command resumes.
"""

from absl import app
from absl import flags

from tfeff.bin import common

_EMBEDDER = common.DEFINE_path("embedder", None, "A tfeff-export SavedModel.", required=True)
_INPUT = common.DEFINE_path("input", None, "UTF-8 text, one sentence per line.", required=True)
_OUTPUT = common.DEFINE_path("output", None, "Output directory.", required=True)
_FORMAT = flags.DEFINE_enum("format", "npy", ["npy", "hdf5"], "Array format.")
_LAYERS = flags.DEFINE_list("layers", None, "Layer indices to write (default: all).")
_BATCH = flags.DEFINE_integer("batch_size", 32, "Sentences per batch.")
_CHUNK = flags.DEFINE_integer("chunk_lines", 4096, "Lines committed at a time (resume unit).")
_UTF8 = flags.DEFINE_enum(
    "on_invalid_utf8", "error", ["error", "skip", "replace"],
    "A line that is not valid UTF-8: stop with its line number, embed it as empty (its line "
    "number is logged and listed in embeddings.json), or replace the bad bytes.")
_DTYPE = flags.DEFINE_enum("dtype", "float32", ["float32", "float16"], "Stored vector type.")
_RESUME = flags.DEFINE_bool("resume", True, "Continue an interrupted run of the same job.")
_OVERWRITE = flags.DEFINE_bool(
    "overwrite", False, "Replace an earlier tfeff-embed output at --output (never the "
    "embedder, the input or other data).")
_PROGRESS = flags.DEFINE_bool(
    "progress", None, "Show a progress bar on stderr (default: when it is a terminal).")


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
    from tfeff.export.embed_file import embed_file

    def body():
        try:
            layers = None if _LAYERS.value is None else [int(k) for k in _LAYERS.value]
        except ValueError as e:
            raise ValueError(f"--layers must be integers, got {_LAYERS.value}") from e
        result = embed_file(
            _EMBEDDER.value, _INPUT.value, _OUTPUT.value, output_format=_FORMAT.value,
            layers=layers, batch_size=_BATCH.value, chunk_lines=_CHUNK.value,
            on_invalid_utf8=_UTF8.value, dtype=_DTYPE.value, resume=_RESUME.value,
            overwrite=_OVERWRITE.value, progress=_PROGRESS.value)
        print(f"embedded {result['lines']} lines ({result['tokens']} tokens) to {_OUTPUT.value}"
              + (f"; skipped {len(result['skipped_lines'])} invalid line(s)"
                 if result["skipped_lines"] else ""))

    common.run_main(body)


def run():
    common.run_app(main, stopped=common.STOPPED + " to resume")


if __name__ == "__main__":
    run()
