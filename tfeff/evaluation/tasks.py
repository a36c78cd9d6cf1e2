"""Task files of the feature evaluations: token tagging (CoNLL) and sentence
classification (TSV). Bad lines are a `FormatError` naming the file and line."""

from tfeff.data import words


class FormatError(ValueError):
    """A task file line that cannot be read (the message names file and line)."""


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
