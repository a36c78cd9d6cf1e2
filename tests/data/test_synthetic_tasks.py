"""Labeled tasks derived from the synthetic grammar (feature-based evaluation)."""

import collections
import hashlib

import numpy as np
import pytest

from tfeff.data import synthetic
from tfeff.data import synthetic_corpus, synthetic_tasks


def test_tagging_keeps_the_language_model_corpus_unchanged():
    # Golden digest of the corpus as generated before the sampler learned to tag.
    h = hashlib.sha256()
    for split in ("train", "heldout"):
        for line in synthetic_corpus(500, seed=3, split=split, lexicon_size=400):
            h.update(line.encode() + b"\n")
    assert h.hexdigest() == "d805eef8397cfd940424c59eba6f4f27530e859dd19785bb551dbb9b75cff6ae"


def _conll(path):
    sentences, current = [], []
    for line in open(path, encoding="utf-8"):
        if line.strip():
            current.append(line.rstrip("\n").split("\t"))
        else:
            sentences.append(current)
            current = []
    assert not current  # every sentence is closed by a blank line
    return sentences


@pytest.fixture(scope="module")
def tasks(tmp_path_factory):
    return synthetic_tasks(str(tmp_path_factory.mktemp("tasks")), 400, 100, seed=2,
                           lexicon_size=300)


def test_tags_follow_the_grammar(tasks):
    lexicon = synthetic._Lexicon(2, 300)
    nouns = set(lexicon.nouns) | {lexicon.plural(n) for n in lexicon.nouns}
    verbs = set(lexicon.verbs) | {lexicon.third_person(v) for v in lexicon.verbs}
    sentences = _conll(tasks["tagging"][0])
    assert len(sentences) == 400 and len(_conll(tasks["tagging"][1])) == 100
    roles_of = collections.defaultdict(set)
    for sentence in sentences:
        assert sentence[-1] == [".", "PUNCT", "PUNCT"]
        assert sum(1 for _, _, role in sentence if role == "VERB") == \
            1 + sum(1 for w, _, _ in sentence if w == "and")  # one main verb per clause
        for word, pos, role in sentence:
            assert pos in synthetic.TASK_POS and role in synthetic.TASK_ROLES
            assert (pos == "NOUN") == (word in nouns), word
            if pos == "VERB":
                assert word in verbs
            if pos == "DET":
                assert word in synthetic._DET_SINGULAR + synthetic._DET_PLURAL
            if pos == "PRON":
                assert word == "that" and role == "REL"
            roles_of[word].add(role)
    # Roles need context: many nouns occur both as subjects and as objects.
    both = [w for w in nouns if {"SUBJ", "OBJ"} <= roles_of[w]]
    assert len(both) >= 20, len(both)


def test_agreement_labels_mark_exactly_the_flipped_main_verb(tasks):
    """Regenerate the same sentences: label 0 is the sentence as generated; label 1
    differs in one word, the first main verb, now in the other number."""
    lexicon = synthetic._Lexicon(2, 300)
    sampler = synthetic._Sampler(
        lexicon, np.random.default_rng([2, synthetic._TASK_STREAMS["train"]]))
    rows = [line.rstrip("\n").split("\t") for line in open(tasks["agreement"][0])]
    labels = np.array([int(label) for label, _ in rows])
    assert abs(labels.mean() - 0.5) < 5 * 0.5 / np.sqrt(len(rows))
    for label, sentence in rows:
        sampler.tagged_sentence()  # the tagging sentence drawn in between
        tokens, verbs = sampler.tagged_sentence()
        original = [w for w, _, _ in tokens]
        words = sentence.split(" ")
        diff = [i for i, (a, b) in enumerate(zip(original, words)) if a != b]
        assert len(words) == len(original)
        if label == "0":
            assert diff == []
        else:
            index, verb, plural = verbs[0]
            assert diff == [index]
            assert words[index] == sampler.verb_form(verb, not plural)


def test_bad_sizes_are_refused(tmp_path):
    with pytest.raises(ValueError, match="num_test"):
        synthetic_tasks(str(tmp_path), 10, 0)
