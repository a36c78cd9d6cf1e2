"""Vocabulary: frequency-sorted words with reserved ids, built by streaming count."""

import collections
import logging
import unicodedata

import tensorflow as tf

from tfeff.data import files
from tfeff.data import words as words_lib

PAD, UNK, BOS, EOS = "<pad>", "<unk>", "<s>", "</s>"
SPECIALS = (PAD, UNK, BOS, EOS)
PAD_ID, UNK_ID, BOS_ID, EOS_ID = range(4)
# Masked-LM vocabularies reserve one more id; the boundaries are BERT's [CLS] and [SEP].
MASK = "[MASK]"
MASK_ID = len(SPECIALS)
CLS_ID = BOS_ID
SEP_ID = EOS_ID
# BERT's names of the reserved tokens (Hugging Face vocab.txt, keras-hub).
BERT_RESERVED_NAMES = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", MASK)


def _warn_about_unicode_forms(counter):
    """Warns when words of `counter` differ only in Unicode normalization (NFC)."""
    forms = collections.defaultdict(list)
    for word in counter:
        if not word.isascii():
            forms[unicodedata.normalize("NFC", word)].append(word)
    spelled = [words for words in forms.values() if len(words) > 1]
    if not spelled:
        return
    shown = " and ".join(f"{w!r} ({' '.join(f'U+{ord(c):04X}' for c in w if not c.isascii())})"
                         for w in sorted(spelled[0]))
    logging.warning(
        "The text spells %d word(s) in more than one Unicode normalization form, e.g. %s: "
        "words are taken byte for byte, so these count as different words, with vectors "
        "of their own. If they are one word, normalize the text (to NFC) before training, "
        "and the text you embed later the same way.", len(spelled), shown)


class Vocabulary:
    """Words in id order with their corpus counts; its file holds `word<TAB>count` lines.

    Ids 0-3 are reserved (`SPECIALS`: padding, unknown words, sentence boundaries);
    corpus words follow by decreasing count, ties broken alphabetically.

    Args:
        words: the words in id order, starting with `SPECIALS`.
        counts: their corpus counts, one per word.

    Raises:
        ValueError: the lengths differ, `SPECIALS` do not come first, or a word repeats.
    """

    def __init__(self, words, counts):
        words, counts = list(words), [int(c) for c in counts]
        if len(words) != len(counts):
            raise ValueError("`words` and `counts` must have the same length.")
        if tuple(words[: len(SPECIALS)]) != SPECIALS:
            raise ValueError(f"A vocabulary must start with the reserved words {SPECIALS}.")
        if len(set(words)) != len(words):
            dup = next(w for w, c in collections.Counter(words).items() if c > 1)
            raise ValueError(f"Duplicate word in vocabulary: {dup!r}")
        self.words, self.counts = words, counts
        self._index = {w: i for i, w in enumerate(words)}

    @classmethod
    def build(cls, lines, min_count=1, max_words_in_memory=10_000_000):
        """Counts the words (`tfeff.data.words.split`) of `lines` in one streaming pass.

        Words are taken byte for byte; a warning shows a word spelled in two Unicode
        normalization forms. Beyond `max_words_in_memory` distinct words the rarest
        are pruned with a rising threshold (as fastText does), so counts of very rare
        words in huge corpora are lower bounds.

        Args:
            lines: iterable of str sentences (see `tfeff.data.text_lines`).
            min_count: words seen fewer times are left out (they map to `<unk>`).
            max_words_in_memory: bound on distinct words held while counting.
        """
        if min_count < 1:
            raise ValueError(f"`min_count` must be >= 1. Received: min_count={min_count}")
        if max_words_in_memory < 1:
            raise ValueError("`max_words_in_memory` must be positive. "
                             f"Received: max_words_in_memory={max_words_in_memory}")
        counter = collections.Counter()
        sentences, threshold = 0, 1
        for line in lines:
            counter.update(words_lib.split(line))
            sentences += 1
            if len(counter) > max_words_in_memory:
                while len(counter) > 0.75 * max_words_in_memory:
                    threshold += 1
                    counter = collections.Counter(
                        {w: c for w, c in counter.items() if c >= threshold})
                logging.warning("Vocabulary count pruned words seen fewer than %d times to "
                                "stay within max_words_in_memory=%d.", threshold,
                                max_words_in_memory)
        for special in SPECIALS:
            counter.pop(special, None)
        _warn_about_unicode_forms(counter)
        kept = sorted(((w, c) for w, c in counter.items() if c >= min_count),
                      key=lambda wc: (-wc[1], wc[0]))
        return cls(list(SPECIALS) + [w for w, _ in kept],
                   [0, 0, sentences, sentences] + [c for _, c in kept])

    def with_extra_words(self, lines):
        """A copy with the unseen words of `lines` appended with count 0 (held-out words:
        with continuous outputs every word has a subword vector, so it can be a target)."""
        extra = sorted({w for line in lines for w in words_lib.split(line)} - set(self.words))
        return Vocabulary(self.words + extra, self.counts + [0] * len(extra))

    @classmethod
    def load(cls, path):
        """Reads a vocabulary file; errors name the file and line."""
        words, counts = [], []
        with tf.io.gfile.GFile(path, "rb") as f:
            for number, raw in enumerate(f, start=1):
                try:
                    word, count = raw.decode("utf-8").rstrip("\n").split("\t")
                    counts.append(int(count))
                except (UnicodeDecodeError, ValueError) as e:
                    raise ValueError(f"{path}:{number}: expected `word<TAB>count`, got "
                                     f"{raw[:80]!r}") from e
                words.append(word)
        try:
            return cls(words, counts)
        except ValueError as e:
            raise ValueError(f"{path}: {e}") from e

    def save(self, path):
        """Writes the vocabulary atomically."""
        for word in self.words:
            if "\t" in word or "\n" in word:
                raise ValueError(f"Word {word!r} contains a tab or newline.")
        files.write_text_atomic(
            path, "".join(f"{w}\t{c}\n" for w, c in zip(self.words, self.counts)))

    def __len__(self):
        return len(self.words)

    def __contains__(self, word):
        return word in self._index

    def id(self, word):
        """Id of `word`, or `UNK_ID`."""
        return self._index.get(word, UNK_ID)

    def most_frequent_ids(self, k):
        """Ids of the `k` most frequent corpus words (specials excluded)."""
        return list(range(len(SPECIALS), min(len(self), len(SPECIALS) + k)))
