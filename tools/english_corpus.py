"""Real English text for the studies: WordNet's glosses and example sentences.

Nothing can be downloaded at run time, but Debian's `wordnet-base` package
(`apt-get install wordnet-base`) holds about 117,000 synsets, each with a
definition and often quoted example sentences written by lexicographers:

    00045646 04 n 02 rally 1 ... | the feat of mustering strength for a renewed
    effort; "he singled to start a rally in the 9th inning"; ...

This script turns the `data.{noun,verb,adj,adv}` files into a
one-sentence-per-line corpus: every `;`-separated part of a gloss is a line
(definitions are noun or verb phrases, examples are full sentences), split
into words and punctuation, lower-cased by default. A synset's lines all go to
the same side of the train/held-out split (chosen from a hash of the synset's
offset and part of speech), so no example is seen in training through its
sibling definition. The text is never committed; run this where you need it:

    python -m tools.english_corpus --output_dir runs/english
    tfeff-pretrain --config configs/demo_elmo_c.yaml --model_dir runs/en_elmo_c \
        --override data.synthetic=null \
        --override data.train_files=runs/english/train.txt \
        --override data.heldout_files=runs/english/heldout.txt

It also writes two labeled tasks made from held-out text, in the formats of
`benchmarks/feature_study.py` (they need context: a word's form does not give
the answer away):

* `order_{train,test}.tsv`: sentence classification; in half the sentences two
  adjacent words were swapped (`1`) and the model must tell them from the
  originals (`0`), a word-order acceptability judgement like CoLA's.
* `replaced_{train,test}.conll`: token tagging; in every sentence one word was
  replaced with a random word of the same frequency band (`R`), the others are
  original (`O`), as in ELECTRA's replaced-token detection.
"""

import collections
import os
import random
import re
import sys
import zlib

from absl import app
from absl import flags

from tfeff.data import files

WORDNET_DIR = "/usr/share/wordnet"
PARTS = ("noun", "verb", "adj", "adv")
# Abbreviations ("U.S."), words (with inner apostrophes, hyphens and dots, as in "don't",
# "well-known", "3.5"), or any other single non-space character (punctuation).
TOKEN = re.compile(r"(?:[^\W\d_]\.){2,}|[^\W_](?:[\w'’.-]*[^\W_])?|\S", re.UNICODE)


class CorpusError(ValueError):
    """A missing or unreadable WordNet file (the message says which and what to do)."""


def tokenize(text, lower=True):
    """Words and punctuation of `text` as a list (a sentence's final dot is a token)."""
    return TOKEN.findall(text.lower() if lower else text)


def gloss_parts(path):
    """Yields `(synset_key, text)` for every `;`-separated part of every gloss in `path`."""
    if not os.path.exists(path):
        raise CorpusError(f"{path} not found: install WordNet with `apt-get install wordnet-base` "
                          "or pass --wordnet_dir")
    with open(path, encoding="utf-8", errors="strict") as f:
        for number, line in enumerate(f, start=1):
            if line.startswith("  "):        # the license header
                continue
            head, sep, gloss = line.partition(" | ")
            if not sep:
                raise CorpusError(f"{path}:{number}: no ' | ' before the gloss: {line[:80]!r}")
            fields = head.split()
            key = f"{fields[2]}{fields[0]}"   # part-of-speech letter + byte offset
            for part in gloss.split(";"):
                part = part.strip().strip('"').strip()
                if part:
                    yield key, part


def heldout_side(key, fraction):
    return zlib.crc32(key.encode()) % 10_000 < fraction * 10_000


def build(wordnet_dir, heldout_fraction=0.02, min_tokens=3, lower=True):
    """`(train_lines, heldout_lines)`: tokenized sentences joined by spaces.

    A blank line follows each synset's lines: a synset is a paragraph (a
    document for Masked ELMo and BERT; the line-based ELMos skip blank lines).
    """
    train, heldout = [], []
    for part in PARTS:
        last_key = None
        for key, text in gloss_parts(os.path.join(wordnet_dir, f"data.{part}")):
            tokens = tokenize(text, lower)
            if len(tokens) < min_tokens:
                continue
            side = heldout if heldout_side(key, heldout_fraction) else train
            if key != last_key and side and side[-1]:
                side.append("")
            side.append(" ".join(tokens))
            last_key = key
    for side in (train, heldout):
        if side and side[-1]:
            side.append("")
    return train, heldout


def _swap_adjacent(tokens, rng):
    """Swaps two adjacent, different words; None when the sentence has no such pair."""
    pairs = [i for i in range(len(tokens) - 1) if tokens[i] != tokens[i + 1]]
    if not pairs:
        return None
    i = rng.choice(pairs)
    out = list(tokens)
    out[i], out[i + 1] = out[i + 1], out[i]
    return out


def order_task(sentences, rng):
    """`[(label, tokens)]`: half with two adjacent words swapped (label 1)."""
    rows = []
    for tokens in sentences:
        if rng.random() < 0.5:
            swapped = _swap_adjacent(tokens, rng)
            if swapped is not None:
                rows.append(("1", swapped))
                continue
        rows.append(("0", tokens))
    return rows


def replaced_task(sentences, counts, rng):
    """`[(tokens, tags)]`: one word per sentence replaced by a word of similar frequency.

    Only alphabetic words are replaced and used as replacements (a replaced
    punctuation mark would give itself away).
    """
    ranked = [w for w, _ in counts.most_common() if w.isalpha()]
    rank = {w: i for i, w in enumerate(ranked)}
    rows = []
    for tokens in sentences:
        words = [j for j, t in enumerate(tokens) if t.isalpha()]
        if not words:
            continue
        i = rng.choice(words)
        r = rank.get(tokens[i], len(ranked) - 1)
        band = ranked[max(0, r - 50): r + 51]        # 100 neighbours in frequency
        choices = [w for w in band if w != tokens[i]]
        out = list(tokens)
        out[i] = rng.choice(choices)
        tags = ["O"] * len(tokens)
        tags[i] = "R"
        rows.append((out, tags))
    return rows


def _write_atomic(path, lines):
    files.write_text_atomic(path, "".join(line + "\n" for line in lines))


def write_tasks(output_dir, heldout, train, num_train=1500, num_test=500, seed=0, max_len=30):
    """Writes the order and replaced tasks from held-out sentences of 5 to `max_len` tokens."""
    rng = random.Random(seed)
    counts = collections.Counter(w for line in train for w in line.split())
    pool = [line.split() for line in heldout if 5 <= len(line.split()) <= max_len]  # no blanks
    rng.shuffle(pool)
    if len(pool) < 2 * (num_train + num_test):
        raise CorpusError(f"only {len(pool)} held-out sentences of 5 to {max_len} tokens; the "
                          f"tasks need {2 * (num_train + num_test)} (raise --heldout_fraction)")
    order_pool, replaced_pool = pool[: num_train + num_test], pool[num_train + num_test:]
    order = order_task(order_pool, rng)
    _write_atomic(os.path.join(output_dir, "order_train.tsv"),
                  [f"{label}\t{' '.join(t)}" for label, t in order[:num_train]])
    _write_atomic(os.path.join(output_dir, "order_test.tsv"),
                  [f"{label}\t{' '.join(t)}" for label, t in order[num_train:]])
    replaced = replaced_task(replaced_pool[: num_train + num_test], counts, rng)
    for name, rows in (("train", replaced[:num_train]), ("test", replaced[num_train:])):
        lines = []
        for tokens, tags in rows:
            lines.extend(f"{t} {g}" for t, g in zip(tokens, tags))
            lines.append("")
        _write_atomic(os.path.join(output_dir, f"replaced_{name}.conll"), lines)


def write_corpus(output_dir, wordnet_dir=WORDNET_DIR, heldout_fraction=0.05, min_tokens=3,
                 lower=True, seed=0):
    """Writes `train.txt`, `heldout.txt` and the tasks to `output_dir`; returns a summary
    line. Raises CorpusError (naming the file) for a missing or unreadable WordNet."""
    if not 0 < heldout_fraction < 1:
        raise CorpusError(f"--heldout_fraction must be in (0, 1), got {heldout_fraction}")
    train, heldout = build(wordnet_dir, heldout_fraction, min_tokens, lower=lower)
    _write_atomic(os.path.join(output_dir, "train.txt"), train)
    _write_atomic(os.path.join(output_dir, "heldout.txt"), heldout)
    write_tasks(output_dir, heldout, train, seed=seed)
    words = sum(len(line.split()) for line in train)
    vocab = len({w for line in train for w in line.split()})
    train, heldout = [x for x in train if x], [x for x in heldout if x]
    return (f"{output_dir}: {len(train)} training lines ({words} tokens, {vocab} types), "
            f"{len(heldout)} held-out lines, tasks order_*.tsv and replaced_*.conll")


def define_flags():
    """The command line's flags, defined when the module runs as the program."""
    flags.DEFINE_string("wordnet_dir", WORDNET_DIR, "WordNet's dict folder (wordnet-base).")
    flags.DEFINE_string("output_dir", None, "Where the corpus and tasks go.", required=True)
    flags.DEFINE_float("heldout_fraction", 0.05, "Share of synsets held out, in (0, 1).")
    flags.DEFINE_integer("min_tokens", 3, "Shorter lines are dropped.")
    flags.DEFINE_bool("keep_case", False, "Do not lower-case.")
    flags.DEFINE_integer("seed", 0, "Seed of the tasks.")


def main(argv):
    del argv
    args = flags.FLAGS
    try:
        print(write_corpus(args.output_dir, args.wordnet_dir, args.heldout_fraction,
                           args.min_tokens, lower=not args.keep_case, seed=args.seed))
    except CorpusError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    define_flags()
    app.run(main)
