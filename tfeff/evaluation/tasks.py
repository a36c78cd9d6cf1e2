"""Task files of the feature evaluations: token tagging (CoNLL) and sentence
classification (TSV), read and checked (`read_task`); errors are `FormatError`s.
"""

import dataclasses
import os

from tfeff.data import words


class FormatError(ValueError):
    """A task file that cannot be used (the message names the file, and any line)."""


def read_conll(path, tag_column=-1):
    """`[(tokens, tags)]` of a CoNLL-style file; `tag_column` counts from 0 (the word)."""
    sentences, tokens, tags = [], [], []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, start=1):
            line = line.strip()
            if line.startswith("#"):
                continue
            if not line:
                if tokens:
                    sentences.append((tokens, tags))
                tokens, tags = [], []
                continue
            fields = words.split(line)
            try:
                tag = fields[tag_column]
            except IndexError:
                raise FormatError(
                    f"{path}:{number}: expected a tag in column {tag_column}, the line has "
                    f"{len(fields)} column(s): {line!r}") from None
            if tag_column == 0 or (tag_column < 0 and len(fields) + tag_column == 0):
                raise FormatError(f"{path}:{number}: the tag column cannot be the word column")
            tokens.append(fields[0])
            tags.append(tag)
    if tokens:
        sentences.append((tokens, tags))
    if not sentences:
        raise FormatError(f"{path}: no sentences")
    return sentences


def read_tsv(path):
    """`[(label, sentence)]` of a `label<TAB>sentence` file."""
    rows = []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, start=1):
            line = line.rstrip("\n")
            if not line.strip():
                continue
            label, sep, sentence = line.partition("\t")
            if not sep or not label:
                raise FormatError(f"{path}:{number}: expected 'label<TAB>sentence', got {line!r}")
            rows.append((label, sentence))
    if not rows:
        raise FormatError(f"{path}: no examples")
    return rows


KINDS = ("tagging", "classification")


@dataclasses.dataclass(frozen=True)
class Task:
    """A task's two files, read and checked against each other (`read_task`).

    `train`, `test`: what `read_conll` or `read_tsv` return; `classes`: the training tags
    or labels, sorted; `overlap`: the test sentences that are also training sentences.
    """

    name: str
    kind: str
    train_path: str
    test_path: str
    train: list
    test: list
    classes: list
    tag_column: int | None = None
    overlap: int = 0

    @property
    def index(self):
        return {c: i for i, c in enumerate(self.classes)}

    def labels(self, part):
        """The gold classes of `part` (`self.train` or `self.test`), one per token or sentence."""
        if self.kind == "tagging":
            return [t for _, tags in part for t in tags]
        return [label for label, _ in part]

    def texts(self, part):
        """The sentences of `part` as word tuples."""
        if self.kind == "tagging":
            return [tuple(tokens) for tokens, _ in part]
        return [tuple(words.split(sentence)) for _, sentence in part]

    @property
    def unit(self):
        """What one gold class belongs to: `"tokens"` or `"sentences"`."""
        return "tokens" if self.kind == "tagging" else "sentences"


def check_split(name, train_path, test_path, train, test, train_labels, test_labels,
                train_texts=None, test_texts=None, what="label"):
    """Refuses a training and test set that cannot give a meaningful score.

    Args:
        name: the task's name (for messages).
        train_path: where the training set comes from (for messages).
        test_path: where the test set comes from (for messages).
        train: the training examples, in any form that compares equal when equal.
        test: the test examples, in the same form.
        train_labels: the training set's gold classes, flat.
        test_labels: the test set's gold classes, flat.
        train_texts: the training sentences as word tuples (for emptiness, overlap), or None.
        test_texts: the test sentences as word tuples, or None.
        what: what a class is called (`"label"`, `"tag"`).

    Returns:
        The number of test sentences that are also training sentences.

    Raises:
        FormatError: naming the file: the test set is the training set, has an unknown
            class, or the training set one class; every sentence of a set is empty.
    """
    where = f"task {name!r}"
    same = test_path == train_path or (os.path.exists(train_path) and os.path.exists(test_path)
                                       and os.path.samefile(train_path, test_path))
    if same:
        raise FormatError(f"{test_path}: the test data of {where} is its training data "
                          f"({train_path}); give held-out test data")
    if train == test:
        raise FormatError(f"{test_path}: the test data of {where} holds the same examples as "
                          f"its training data ({train_path}); give held-out test data")
    classes = set(train_labels)
    if len(classes) < 2:
        only = f" is {next(iter(classes))!r}" if classes else "s are missing"
        raise FormatError(f"{train_path}: every training {what} of {where}{only}; a task "
                          f"needs at least two different {what}s to score")
    unknown = sorted(set(test_labels) - classes)
    if unknown:
        raise FormatError(f"{test_path}: {what}s not in the training data of {where}: "
                          f"{unknown}")
    for path, texts in ((train_path, train_texts), (test_path, test_texts)):
        if texts is not None and not any(texts):
            raise FormatError(f"{path}: every sentence of {where} is empty; there is nothing "
                              "to classify")
    if train_texts is None or test_texts is None:
        return 0
    seen = set(train_texts)
    return sum(1 for text in test_texts if text in seen)


def read_task(name, spec):
    """Reads a task's files and checks them against each other.

    Args:
        name: the task's name.
        spec: `("tagging", train, test, tag_column)` or `("classification", train, test)`.

    Returns:
        A `Task`.

    Raises:
        FormatError: naming the file and what is wrong with it (see `check_split`).
        ValueError: `spec` is not one of the two forms.
    """
    if not isinstance(spec, (tuple, list)) or not spec or spec[0] not in KINDS or \
            len(spec) != (4 if spec[0] == "tagging" else 3):
        raise ValueError(f"task {name!r}: expected ('tagging', TRAIN, TEST, TAG_COLUMN) or "
                         f"('classification', TRAIN, TEST), got {spec!r}")
    kind, train_path, test_path = spec[:3]
    tag_column = spec[3] if kind == "tagging" else None
    read = (lambda path: read_conll(path, tag_column)) if kind == "tagging" else read_tsv
    train, test = read(train_path), read(test_path)
    task = Task(name, kind, train_path, test_path, train, test, [], tag_column)
    train_labels = task.labels(train)
    overlap = check_split(name, train_path, test_path, train, test, train_labels,
                          task.labels(test), task.texts(train), task.texts(test),
                          what="tag" if kind == "tagging" else "label")
    return dataclasses.replace(task, classes=sorted(set(train_labels)), overlap=overlap)


def read_tasks(tasks):
    """`{name: Task}` of `{name: spec}` (`read_task`); `Task` values pass as they are."""
    return {name: spec if isinstance(spec, Task) else read_task(name, spec)
            for name, spec in tasks.items()}
