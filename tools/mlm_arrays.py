"""Masked-LM data as NumPy arrays, for training where TensorFlow is not installed.

tfeff's BERT pipeline (`tfeff.data.mlm_dataset`: WordPiece, packing, 80/10/10
masking) runs on TensorFlow and tensorflow-text. This script runs it here and
writes what a JAX or PyTorch machine needs into one `.npz` file:

* `train`: the training windows unmasked, int `(windows, n)`: `[CLS]`, the
  packed WordPiece stream of consecutive lines, `[SEP]`, right-padded with
  `<pad>` (0), in file order (the trainer shuffles and masks them, a new mask
  per step, as BERT does);
* `heldout_*`: the held-out windows masked once by the pipeline itself
  (`token_ids`, `segment_ids`, `padding_mask`, `masked_positions`,
  `masked_ids`, `masked_weights`; seed 0), so every evaluation scores the
  same predictions;
* `vocabulary` (the WordPiece tokens, by id), `vocabulary_size`,
  `max_predictions_per_seq`, `special_ids` (`pad`, `unk`, `cls`, `sep`,
  `mask`) and `source` (the command's inputs).

    python -m tools.english_corpus --output_dir runs/english
    python -m tools.mlm_arrays --train_files runs/english/train.txt \\
        --heldout_files runs/english/heldout.txt --output runs/gpu_data/wordnet_128.npz
    python -m tools.mlm_arrays --synthetic 2000 --sequence_length 32 \\
        --vocabulary_size 500 --output /tmp/synthetic_32.npz

`benchmarks/gpu_suite.py` trains CoRe's two phases from such a file (`--core_data`).
"""

import json
import math
import os
import sys
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from absl import app  # noqa: E402
from absl import flags  # noqa: E402
import numpy as np  # noqa: E402

from tfeff import data as data_lib  # noqa: E402
from tfeff.data import vocabulary as vocabulary_lib  # noqa: E402


def unmask(batch):
    """The token ids of a pipeline batch before masking (the targets put back)."""
    ids = np.array(batch["token_ids"])
    rows, slots = np.nonzero(batch["masked_weights"] > 0)
    ids[rows, batch["masked_positions"][rows, slots]] = batch["masked_ids"][rows, slots]
    return ids


def _batches(files, vocabulary_path, n, p, lower_case, batch_size=1024):
    ds = data_lib.mlm_dataset(files, vocabulary_path, batch_size, n, p, lower_case=lower_case,
                              shuffle_buffer=0, seed=0, repeat=False)
    for batch in ds.as_numpy_iterator():
        yield batch


def build(train_files, heldout_files, output, sequence_length=128, vocabulary_size=8192,
          lower_case=False, max_heldout_windows=None):
    """Writes the arrays file (see the module docstring) atomically; returns its summary."""
    n = sequence_length
    p = math.ceil(0.15 * n)
    directory = os.path.dirname(os.path.abspath(output))
    os.makedirs(directory, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=directory) as scratch:
        vocabulary_path = os.path.join(scratch, "vocabulary.txt")
        vocabulary = data_lib.learn_bert_vocabulary(train_files, vocabulary_size,
                                                    vocabulary_path, lower_case=lower_case)
        train = np.concatenate([unmask(b) for b in _batches(
            train_files, vocabulary_path, n, p, lower_case)])
        heldout = {}
        for b in _batches(heldout_files, vocabulary_path, n, p, lower_case):
            for key, value in b.items():
                heldout.setdefault(key, []).append(value)
        heldout = {k: np.concatenate(v)[:max_heldout_windows] for k, v in heldout.items()}
        dtype = np.uint16 if len(vocabulary) <= 2 ** 16 else np.int32
        arrays = {"train": train.astype(dtype),
                  **{f"heldout_{k}": v for k, v in heldout.items()},
                  "vocabulary": np.array(vocabulary.words),
                  "vocabulary_size": np.int64(len(vocabulary)),
                  "max_predictions_per_seq": np.int64(p),
                  "special_ids": np.array(json.dumps({
                      "pad": vocabulary_lib.PAD_ID, "unk": vocabulary_lib.UNK_ID,
                      "cls": vocabulary_lib.CLS_ID, "sep": vocabulary_lib.SEP_ID,
                      "mask": vocabulary_lib.MASK_ID})),
                  "source": np.array(json.dumps({
                      "train_files": train_files, "heldout_files": heldout_files,
                      "lower_case": lower_case}))}
        partial = os.path.join(scratch, "arrays.npz")
        np.savez_compressed(partial, **arrays)
        os.replace(partial, output)
    tokens = int((train != vocabulary_lib.PAD_ID).sum())
    return {"output": output, "vocabulary_size": len(vocabulary), "train_windows": len(train),
            "train_tokens": tokens, "heldout_windows": len(heldout["token_ids"]),
            "heldout_predictions": int(heldout["masked_weights"].sum())}


def define_flags():
    """The command line's flags, defined when the module runs as the program."""
    flags.DEFINE_list("train_files", None, "Training text, one sentence a line.")
    flags.DEFINE_list("heldout_files", None, "Held-out text.")
    flags.DEFINE_integer("synthetic", None, "Instead of files: tfeff's synthetic language, "
                         "this many training sentences (and a tenth of it held out).")
    flags.DEFINE_string("output", None, "The .npz file to write.", required=True)
    flags.DEFINE_integer("sequence_length", 128, "Tokens per window (at least 8).")
    flags.DEFINE_integer("vocabulary_size", 8192, "WordPiece vocabulary size.")
    flags.DEFINE_bool("lower_case", False, "Lower-case the text first.")
    flags.DEFINE_integer("max_heldout_windows", None, "Keep at most this many held-out windows.")


def main(argv):
    del argv
    args = flags.FLAGS
    if args.synthetic is None and not (args.train_files and args.heldout_files):
        raise app.UsageError("give --train_files and --heldout_files, or --synthetic", 2)
    if args.sequence_length < 8:
        raise app.UsageError(
            f"--sequence_length must be at least 8, not {args.sequence_length}", 2)
    with tempfile.TemporaryDirectory() as corpus_dir:
        train, heldout = args.train_files, args.heldout_files
        if args.synthetic is not None:
            train, heldout = (
                [path] for path in data_lib.write_synthetic_corpus(
                    corpus_dir, args.synthetic, max(args.synthetic // 10, 1)))
        try:
            summary = build(train, heldout, args.output, args.sequence_length,
                            args.vocabulary_size, args.lower_case, args.max_heldout_windows)
        except (data_lib.CorpusError, ValueError) as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    define_flags()
    app.run(main)
