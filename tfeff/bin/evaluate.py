r"""tfeff-evaluate: train probes on the frozen features of exported embedders, print a table.

    tfeff-evaluate --embedder elmo=runs/demo/export --embedder ft=runs/ft_export \
        --tagging pos_train.conll,pos_test.conll --tag_column 1 \
        --classification sentiment_train.tsv,sentiment_test.tsv --output runs/features.md
    tfeff-evaluate --embedder elmo=runs/demo/export --tagging ner=train.conll,test.conll \
        --probe linear,bilstm --seeds 0,1 --epochs 5

As in Li et al. (2019), Section 5, a probe (a learned `ScalarMix` over the embedder's
layers, then a linear layer or a small biLSTM: `--probe`) is trained on frozen features,
once per seed. Tagging tasks are CoNLL files (a token a line, the tag in `--tag_column`,
blank lines between sentences, `#` comments), classification tasks TSV files
(`label<TAB>sentence`); both are scored by accuracy and macro-F1. A task is named after its
training file (`pos_train` above) unless written `NAME=TRAIN,TEST`. The Markdown table (mean
± standard deviation over the seeds, in percent, and a `majority class` row) goes to stdout
and `--output`, the progress to stderr. See docs/guides/export.md.

Exit status: 0 on success, 1 on bad input (one `error: ...` line naming the file or flag),
130 after Ctrl-C (SIGINT) and 143 after SIGTERM, with one `stopped by ...` line: no table is
written (nor half-written).
"""

import os
import re

from absl import app
from absl import flags
from absl import logging

from tfeff.bin import common

_EMBEDDER = flags.DEFINE_multi_string(
    "embedder", [], "`NAME=PATH`: a tfeff-export SavedModel, named in the table (repeatable).")
_TAGGING = flags.DEFINE_multi_string(
    "tagging", [], "`[NAME=]TRAIN,TEST`: a tagging task's CoNLL files (repeatable).")
_TAG_COLUMN = flags.DEFINE_integer(
    "tag_column", -1, "Column of the tag in the CoNLL files (0 is the word; negative counts "
    "from the end: -1 is the last).")
_CLASSIFICATION = flags.DEFINE_multi_string(
    "classification", [], "`[NAME=]TRAIN,TEST`: TSV training and test files of a sentence "
    "classification task, one `label<TAB>sentence` a line (repeatable).")
_PROBE = flags.DEFINE_list("probe", ["linear"], "Probes to train: linear, bilstm, or both.")
_SEEDS = flags.DEFINE_list("seeds", ["0", "1", "2"], "Seeds: each probe is trained once per seed.")
_EPOCHS = flags.DEFINE_integer("epochs", 10, "Training epochs of each probe.")
_OUTPUT = common.DEFINE_path("output", None, "Markdown file to write the table to (its "
                             "directory is created).")
_OVERWRITE = flags.DEFINE_bool(
    "overwrite", False, "Replace an earlier table at --output (never a task file, an "
    "embedder or a file inside one, or another file).")

_PROBES = ("linear", "bilstm")
# An optional task name before `=`: a word (a spec whose two files exist is not named).
_TASK_NAME = re.compile(r"^([\w.-]+)=(.*)$")


def _embedders():
    """`{name: path}` of --embedder."""
    embedders = {}
    for spec in _EMBEDDER.value:
        name, sep, path = spec.partition("=")
        if not sep or not name.strip() or not path.strip():
            raise ValueError(f"--embedder wants NAME=PATH, got {spec!r}")
        if name in embedders:
            raise ValueError(f"--embedder: two embedders named {name!r}")
        embedders[name] = path
    return embedders


def _tasks():
    """`{name: spec}` of --tagging and --classification for `tfeff.evaluation.evaluate`."""
    tasks = {}
    for kind, specs in (("tagging", _TAGGING.value), ("classification", _CLASSIFICATION.value)):
        for spec in specs:
            parts, name = spec.split(","), None
            named = _TASK_NAME.match(spec)
            if named and not (len(parts) == 2 and all(map(os.path.isfile, parts))):
                name, parts = named.group(1), named.group(2).split(",")
            if len(parts) != 2 or not all(part.strip() for part in parts):
                raise ValueError(f"--{kind} wants [NAME=]TRAIN,TEST, got {spec!r}")
            for path in parts:
                if not os.path.isfile(path):
                    raise FileNotFoundError(f"--{kind} {spec}: {path} is not a file")
            name = name or os.path.splitext(os.path.basename(parts[0]))[0]
            if name in tasks:
                raise ValueError(f"--{kind} {spec}: a second task named {name!r}; name one "
                                 f"of them: --{kind} NAME=TRAIN,TEST")
            tasks[name] = (kind, *parts) + ((_TAG_COLUMN.value,) if kind == "tagging" else ())
    return tasks


def _arguments():
    """`(embedders, tasks, probes, seeds)` from the flags; ValueError naming a bad one."""
    embedders, tasks = _embedders(), _tasks()
    if not embedders or not tasks:
        raise ValueError("give at least one --embedder and one --tagging or --classification")
    if _TAGGING.value and _TAG_COLUMN.value == 0:
        raise ValueError("--tag_column 0 is the word column; give the tag's column")
    probes = _PROBE.value
    if not probes or not set(probes) <= set(_PROBES) or len(set(probes)) != len(probes):
        raise ValueError(f"--probe wants linear, bilstm or both (linear,bilstm), got "
                         f"{','.join(probes)!r}")
    try:
        seeds = [int(s) for s in _SEEDS.value]
    except ValueError as e:
        raise ValueError(f"--seeds must be integers, got {','.join(_SEEDS.value)!r}") from e
    if not seeds or len(set(seeds)) != len(seeds):
        raise ValueError(f"--seeds wants one or more different integers, got "
                         f"{','.join(_SEEDS.value)!r}")
    if _EPOCHS.value < 1:
        raise ValueError(f"--epochs must be a positive integer, got {_EPOCHS.value}")
    return embedders, tasks, probes, seeds


_TABLE_HEADER = "| features | probe |"  # the first line of every table it writes


def _not_a_table(path):
    """None when `path` is a table tfeff-evaluate wrote (its header line), else what it is."""
    try:
        with open(path, encoding="utf-8") as f:
            first = f.readline(len(_TABLE_HEADER))
    except (OSError, UnicodeDecodeError):
        return "it is not a text file"
    return None if first == _TABLE_HEADER else "its first line is not a table's header"


def _check_output(path, embedders, tasks):
    """Refuses an --output that is a task file, a directory, a file inside an embedder, or
    an existing file (with --overwrite, other than a table tfeff-evaluate wrote)."""
    from tfeff.data import files

    inputs = {os.path.realpath(p) for spec in tasks.values() for p in spec[1:3]}
    if os.path.realpath(path) in inputs:
        raise ValueError(f"--output {path} is one of the task files")
    if os.path.isdir(path):
        raise ValueError(f"--output {path} is a directory; give a file name")
    files.check_not_an_input(
        path, {f"embedder {name} (--embedder)": p for name, p in embedders.items()})
    files.check_replaceable(path)  # a named pipe or the like: FileExistsError naming it
    if os.path.lexists(path) and not _OVERWRITE.value:
        raise FileExistsError(f"--output {path} exists; pass --overwrite to replace it")
    reason = _not_a_table(path) if os.path.isfile(path) else None
    if reason is not None:
        raise FileExistsError(
            f"--output {path} exists and is not a table tfeff-evaluate wrote ({reason}); "
            "--overwrite replaces only such a table, so nothing was written. Choose another "
            "output path.")


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"Unexpected arguments: {argv[1:]}")

    def body():
        embedders, tasks, probes, seeds = _arguments()
        if _OUTPUT.value is not None:
            _check_output(_OUTPUT.value, embedders, tasks)
        from tfeff.data.files import write_text_atomic
        from tfeff.evaluation import evaluate
        from tfeff.evaluation import table

        rows = evaluate(embedders, tasks, probes, seeds, _EPOCHS.value, log=logging.info)
        text = table(rows, seeds)
        print(text, end="")
        if _OUTPUT.value is not None:
            _check_output(_OUTPUT.value, embedders, tasks)  # anything new there meanwhile
            write_text_atomic(_OUTPUT.value, text)
            logging.info("wrote the table to %s", _OUTPUT.value)

    common.run_main(body)


def run():
    common.run_app(main)


if __name__ == "__main__":
    run()
