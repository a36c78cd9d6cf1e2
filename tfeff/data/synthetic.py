"""A seeded generator of sentences with real structure, for demos and tests.

The language is made up but not random noise: there is something for a language
model to learn, and a held-out split to measure it on.

* A Zipf-distributed lexicon of invented nouns (animate or inanimate), verbs
  (transitive or not), adjectives, adverbs, names and prepositions, with regular
  morphology (`-s`/`-es`, `-ly`, adjective suffixes), so subword vectors carry
  information; its long tail makes many words rare or held-out only.
* Agreement: determiners with their noun in number, verbs with their subject.
* Selection: each transitive verb takes either animate or inanimate objects.
* Long-range dependencies: object relative clauses put a whole clause between a
  subject and its verb ("the dogs that a farmer feeds run").
"""

import numpy as np

_ONSETS = ("b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z",
           "br", "dr", "gl", "kr", "pl", "st", "tr", "sn", "ch", "sh", "th")
_VOWELS = ("a", "e", "i", "o", "u", "ai", "ou", "ee", "oa")
_CODAS = ("", "", "", "n", "m", "r", "l", "k", "t", "sk", "nd", "ng")
_ADJ_SUFFIXES = ("ful", "ous", "ish", "al", "ic", "y")
_PREPOSITIONS = ("in", "on", "near", "under", "behind", "with", "beside")
_DET_SINGULAR = ("the", "a", "this", "every", "one")
_DET_PLURAL = ("the", "these", "some", "many", "two", "all")
# The largest lexicon: made word by word before the first sentence (seconds at this size).
MAX_LEXICON_SIZE = 1_000_000
_ZIPF_EXPONENT = 1.07
_ZIPF_SHIFT = 2.7
# Random streams: each split's sentences, and each split's paragraph lengths.
_SPLITS = {"train": 1, "heldout": 2}
_PARAGRAPH_STREAM = 3


def _zipf(n):
    weights = 1.0 / (np.arange(n, dtype=np.float64) + _ZIPF_SHIFT) ** _ZIPF_EXPONENT
    return weights / weights.sum()


class _Lexicon:
    def __init__(self, seed, size):
        rng = np.random.default_rng([seed, 0])
        self._seen = set(_PREPOSITIONS + _DET_SINGULAR + _DET_PLURAL + ("that", "and"))
        n_nouns = max(4, int(size * 0.45))
        n_verbs = max(4, int(size * 0.25))
        n_adjectives = max(2, int(size * 0.15))
        n_adverbs = max(2, int(size * 0.05))
        n_names = max(2, size - n_nouns - n_verbs - n_adjectives - n_adverbs)
        self.nouns = [self._stem(rng) for _ in range(n_nouns)]
        self.noun_animate = rng.random(n_nouns) < 0.4
        self.noun_animate[:2] = (True, False)  # both classes always exist
        self.verbs = [self._stem(rng) for _ in range(n_verbs)]
        self.verb_transitive = rng.random(n_verbs) < 0.6
        self.verb_transitive[:2] = (True, False)
        self.verb_object_animate = rng.random(n_verbs) < 0.5
        self.verb_subject_animate = rng.random(n_verbs) < 0.7
        self.adjectives = [self._stem(rng) + _ADJ_SUFFIXES[rng.integers(len(_ADJ_SUFFIXES))]
                           for _ in range(n_adjectives)]
        self.adverbs = [self._stem(rng) + "ly" for _ in range(n_adverbs)]
        self.names = [self._stem(rng).capitalize() for _ in range(n_names)]
        self.nouns_by_animacy = {a: np.flatnonzero(self.noun_animate == a) for a in (True, False)}
        self.noun_p = {k: _zipf(len(v)) for k, v in self.nouns_by_animacy.items()}
        self.verbs_by_kind = {t: np.flatnonzero(self.verb_transitive == t) for t in (True, False)}
        self.verb_p = {k: _zipf(len(v)) for k, v in self.verbs_by_kind.items()}
        self.adjective_p = _zipf(n_adjectives)
        self.adverb_p = _zipf(n_adverbs)
        self.name_p = _zipf(n_names)

    def _stem(self, rng):
        while True:
            syllables = 1 + rng.choice(3, p=(0.3, 0.5, 0.2))
            stem = "".join(_ONSETS[rng.integers(len(_ONSETS))]
                           + _VOWELS[rng.integers(len(_VOWELS))]
                           + _CODAS[rng.integers(len(_CODAS))] for _ in range(syllables))
            if stem not in self._seen and len(stem) > 2:
                self._seen.add(stem)
                return stem

    @staticmethod
    def plural(stem):
        return stem + ("es" if stem.endswith(("s", "sh", "ch", "z")) else "s")

    def third_person(self, stem):
        return self.plural(stem)


class _Sampler:
    """Draws sentences as tagged tokens `(word, pos, role)`; a `None` role inside a noun
    phrase is the phrase's, filled in by the caller. Tagging draws no random numbers,
    so the sentences are the same whether or not the tags are kept."""

    def __init__(self, lexicon, rng):
        self.lex = lexicon
        self.rng = rng

    def _pick(self, items, p):
        return items[self.rng.choice(len(items), p=p)]

    def noun_phrase(self, plural, animate, allow_relative=True, allow_name=True):
        """The tokens of an NP; relative clauses create long-range agreement."""
        lex, rng = self.lex, self.rng
        if allow_name and animate and not plural and rng.random() < 0.15:
            tokens = [[self._pick(lex.names, lex.name_p), "PROPN", None]]
        else:
            tokens = [[str(rng.choice(_DET_PLURAL if plural else _DET_SINGULAR)), "DET", None]]
            while rng.random() < 0.3 and len(tokens) < 3:
                tokens.append([self._pick(lex.adjectives, lex.adjective_p), "ADJ", None])
            noun = lex.nouns[self._pick(lex.nouns_by_animacy[animate], lex.noun_p[animate])]
            tokens.append([lex.plural(noun) if plural else noun, "NOUN", None])
        if allow_relative and rng.random() < 0.2:
            tokens += self.relative_clause(object_animate=animate)
        if rng.random() < 0.1:
            pp = [[str(rng.choice(_PREPOSITIONS)), "ADP", None]] + self.noun_phrase(
                rng.random() < 0.4, rng.random() < 0.3, allow_relative=False)
            tokens += _with_role(pp, "PREP")
        return tokens

    def relative_clause(self, object_animate):
        """`that` + subject + transitive verb whose (gapped) object is the head noun."""
        lex, rng = self.lex, self.rng
        candidates = [
            v for v in lex.verbs_by_kind[True] if lex.verb_object_animate[v] == object_animate
        ] or list(lex.verbs_by_kind[True])
        verb = candidates[rng.integers(len(candidates))]
        subj_plural = rng.random() < 0.4
        subject = self.noun_phrase(
            subj_plural, bool(lex.verb_subject_animate[verb]), allow_relative=False)
        return _with_role([["that", "PRON", None]] + subject
                          + [[self.verb_form(verb, subj_plural), "VERB", None]], "REL")

    def verb_form(self, verb, plural):
        stem = self.lex.verbs[verb]
        return stem if plural else self.lex.third_person(stem)

    def clause(self):
        """`(tokens, (index of the main verb, verb id, subject is plural))`."""
        lex, rng = self.lex, self.rng
        transitive = rng.random() < 0.6
        verb = self._pick(lex.verbs_by_kind[transitive], lex.verb_p[transitive])
        plural = rng.random() < 0.4
        tokens = _with_role(self.noun_phrase(plural, bool(lex.verb_subject_animate[verb])), "SUBJ")
        main_verb = (len(tokens), verb, plural)
        tokens.append([self.verb_form(verb, plural), "VERB", "VERB"])
        if transitive:
            tokens += _with_role(
                self.noun_phrase(rng.random() < 0.4, bool(lex.verb_object_animate[verb])), "OBJ")
        elif rng.random() < 0.4:
            tokens.append([self._pick(lex.adverbs, lex.adverb_p), "ADV", "ADV"])
        return tokens, main_verb

    def tagged_sentence(self):
        """`(tokens, main verbs)`: `[word, pos, role]` lists and one entry per clause."""
        tokens, main = self.clause()
        verbs = [main]
        if self.rng.random() < 0.15:
            second, (index, verb, plural) = self.clause()
            verbs.append((len(tokens) + 2 + index, verb, plural))
            tokens += [[",", "PUNCT", "CONJ"], ["and", "CCONJ", "CONJ"]] + second
        return tokens + [[".", "PUNCT", "PUNCT"]], verbs

    def sentence(self):
        return [word for word, _, _ in self.tagged_sentence()[0]]


def _with_role(tokens, role):
    for token in tokens:
        if token[2] is None:
            token[2] = role
    return tokens


def synthetic_corpus(num_sentences, seed=0, split="train", lexicon_size=3000):
    """Yields `num_sentences` sentences (space-separated words) of the demo language.

    Args:
        num_sentences: non-negative int.
        seed: the language and its sentences are a function of this seed.
        split: `"train"` or `"heldout"`: the same language, independent sentences.
        lexicon_size: number of content words (nouns, verbs, adjectives, adverbs, names).

    Yields:
        str sentences.

    Raises:
        ValueError: `num_sentences` is not a non-negative integer, `lexicon_size` is
            not an integer in [20, 1,000,000], or `split` is unknown (when iteration starts).
    """
    if not isinstance(num_sentences, int) or num_sentences < 0:
        raise ValueError(
            "Received an invalid value for `num_sentences`, expected a non-negative "
            f"integer. Received: num_sentences={num_sentences}")
    if not isinstance(lexicon_size, int) or not 20 <= lexicon_size <= MAX_LEXICON_SIZE:
        raise ValueError(
            "Received an invalid value for `lexicon_size`, expected an integer in "
            f"[20, {MAX_LEXICON_SIZE:,}] (the lexicon is made before the first sentence). "
            f"Received: lexicon_size={lexicon_size}")
    if split not in _SPLITS:
        raise ValueError(f"Received an invalid value for `split`, expected one of "
                         f"{tuple(_SPLITS)}. Received: split={split!r}")
    lexicon = _Lexicon(seed, lexicon_size)
    sampler = _Sampler(lexicon, np.random.default_rng([seed, _SPLITS[split]]))
    for _ in range(num_sentences):
        yield " ".join(sampler.sentence())


def write_synthetic_corpus(directory, num_train, num_heldout, seed=0, lexicon_size=3000,
                           paragraph_sentences=0):
    """Writes `train.txt` and `heldout.txt` under `directory` (atomically), with
    `paragraph_sentences` > 0 in paragraphs of 1 to `2 * paragraph_sentences - 1`
    sentences (uniform, seeded) separated by blank lines.

    Args:
        directory: where the two files are written.
        num_train: sentences of `train.txt` (the `"train"` split of `synthetic_corpus`).
        num_heldout: sentences of `heldout.txt` (the `"heldout"` split).
        seed: the language and its sentences are a function of this seed.
        lexicon_size: number of content words, as for `synthetic_corpus`.
        paragraph_sentences: mean sentences per paragraph; 0 writes no breaks.

    Returns:
        `(train_path, heldout_path)`.
    """
    from tfeff.data import files  # Local import keeps this module free of I/O helpers.

    tf_paths = []
    for split, count in (("train", num_train), ("heldout", num_heldout)):
        lines = list(synthetic_corpus(count, seed, split, lexicon_size))
        text = [line + "\n" for line in lines]
        if paragraph_sentences > 0:
            rng = np.random.default_rng([seed, _PARAGRAPH_STREAM, _SPLITS[split]])
            end = int(rng.integers(1, 2 * paragraph_sentences))
            while end < len(lines):
                text[end - 1] += "\n"
                end += int(rng.integers(1, 2 * paragraph_sentences))
        tf_paths.append(f"{directory}/{split}.txt")
        files.write_text_atomic(tf_paths[-1], "".join(text))
    return tuple(tf_paths)


# Labeled tasks derived from the grammar (feature-based evaluation).
TASK_POS = ("DET", "ADJ", "NOUN", "PROPN", "VERB", "ADV", "ADP", "PRON", "CCONJ", "PUNCT")
TASK_ROLES = ("SUBJ", "VERB", "OBJ", "ADV", "REL", "PREP", "CONJ", "PUNCT")
_TASK_STREAMS = {"train": 10, "test": 11}
_CORRUPTION_STREAM = 20


def synthetic_tasks(directory, num_train, num_test, seed=0, lexicon_size=3000):
    """Writes labeled tasks in the language of `synthetic_corpus(..., seed, lexicon_size)`,
    from sentences of their own random streams.

    * `tagging_{train,test}.conll`: `word<TAB>pos<TAB>role` lines, a blank line after
      each sentence; `role` (`TASK_ROLES`), unlike `pos` (`TASK_POS`), needs context.
    * `agreement_{train,test}.tsv`: `label<TAB>sentence`; label 1 (half the sentences):
      the first main verb no longer agrees with its subject ("the dogs that a farmer
      feeds runs").

    Args:
        directory: where the four files are written.
        num_train: sentences of each task's training file, a positive int.
        num_test: sentences of each task's test file, a positive int.
        seed: the seed of the language (as for `synthetic_corpus`) and of the sentences.
        lexicon_size: number of content words, as for `synthetic_corpus`.

    Returns:
        `{"tagging": (train, test), "agreement": (train, test)}` paths.

    Raises:
        ValueError: `num_train` or `num_test` is not a positive integer.
    """
    from tfeff.data import files

    for name, value in (("num_train", num_train), ("num_test", num_test)):
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"`{name}` must be a positive integer. Received: {name}={value!r}")
    lexicon = _Lexicon(seed, lexicon_size)
    out = {"tagging": [], "agreement": []}
    for split, count in (("train", num_train), ("test", num_test)):
        sampler = _Sampler(lexicon, np.random.default_rng([seed, _TASK_STREAMS[split]]))
        flips = np.random.default_rng([seed, _CORRUPTION_STREAM, _TASK_STREAMS[split]])
        conll, tsv = [], []
        for _ in range(count):
            tokens, _ = sampler.tagged_sentence()
            conll.append("".join(f"{w}\t{p}\t{r}\n" for w, p, r in tokens) + "\n")
            tokens, verbs = sampler.tagged_sentence()
            words = [w for w, _, _ in tokens]
            label = int(flips.random() < 0.5)
            if label:
                index, verb, plural = verbs[0]
                words[index] = sampler.verb_form(verb, not plural)
            tsv.append(f"{label}\t{' '.join(words)}\n")
        for task, ext, lines in (("tagging", "conll", conll), ("agreement", "tsv", tsv)):
            out[task].append(f"{directory}/{task}_{split}.{ext}")
            files.write_text_atomic(out[task][-1], "".join(lines))
    return {k: tuple(v) for k, v in out.items()}
