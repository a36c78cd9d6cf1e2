"""tools/english_corpus.py (WordNet glosses -> corpus and tasks) and benchmarks/quality_study.py's
table."""

from importlib import import_module
import pytest


# Three synsets in WordNet's data-file format (invented glosses; the header line of the
# real files starts with two spaces).
DATA_NOUN = """  1 This software and database is being provided to you, the LICENSEE
00001740 03 n 01 entity 0 003 ~ 00001930 n 0000 | that which is perceived; "the entity was seen."
00002137 03 n 02 abstraction 0 abstract_entity 0 010 @ 00001740 n 0000 | a general concept; "he doesn't like U.S. abstractions"; "it's well-known"
00002452 03 n 01 thing 0 001 @ 00002137 n 0000 | a separate entity
"""


@pytest.fixture(scope="module")
def corpus_tool():
    return import_module("tools.english_corpus")


def test_tokenize_golden(corpus_tool):
    assert corpus_tool.tokenize('He doesn\'t like U.S. "abstractions", ok.') == \
        ["he", "doesn't", "like", "u.s.", '"', "abstractions", '"', ",", "ok", "."]
    assert corpus_tool.tokenize("A well-known 9th inning.", lower=False) == \
        ["A", "well-known", "9th", "inning", "."]


def test_gloss_parts_split_definitions_and_examples(corpus_tool, tmp_path):
    (tmp_path / "data.noun").write_text(DATA_NOUN, encoding="utf-8")
    parts = list(corpus_tool.gloss_parts(str(tmp_path / "data.noun")))
    assert parts == [
        ("n00001740", "that which is perceived"), ("n00001740", "the entity was seen."),
        ("n00002137", "a general concept"), ("n00002137", "he doesn't like U.S. abstractions"),
        ("n00002137", "it's well-known"), ("n00002452", "a separate entity")]


def test_a_synset_stays_on_one_side_of_the_split(corpus_tool, tmp_path):
    for part in corpus_tool.PARTS:
        (tmp_path / f"data.{part}").write_text(DATA_NOUN if part == "noun" else "",
                                               encoding="utf-8")
    # The crc32 of the keys modulo 10,000 are 4598, 1182 and 716: at 0.3 the first
    # synset is trained on, the others held out.
    train, heldout = corpus_tool.build(str(tmp_path), heldout_fraction=0.3, min_tokens=2)
    side = {key: corpus_tool.heldout_side(key, 0.3) for key in ("n00001740", "n00002137",
                                                                "n00002452")}
    assert side == {"n00001740": False, "n00002137": True, "n00002452": True}
    expected_heldout = [line for key, line in [
        ("n00001740", "that which is perceived"), ("n00001740", "the entity was seen ."),
        ("n00002137", "a general concept"), ("n00002137", "he doesn't like u.s. abstractions"),
        ("n00002137", "it's well-known"), ("n00002452", "a separate entity")] if side[key]]
    # a blank line after each synset (a paragraph)
    assert [x for x in heldout if x] == expected_heldout
    assert len([x for x in train if x]) + len(expected_heldout) == 6
    lines = train + heldout
    assert lines.count("") == 3 and lines[-1] == "" and train[-1] == ""


def test_bad_files_are_named(corpus_tool, tmp_path):
    with pytest.raises(corpus_tool.CorpusError, match="apt-get install wordnet-base"):
        list(corpus_tool.gloss_parts(str(tmp_path / "data.noun")))
    (tmp_path / "data.noun").write_text("00001740 03 n 01 entity 0 000 no gloss\n")
    with pytest.raises(corpus_tool.CorpusError, match=r"data.noun:1: no ' \| '"):
        list(corpus_tool.gloss_parts(str(tmp_path / "data.noun")))


def test_order_task_swaps_exactly_two_adjacent_words(corpus_tool):
    import random

    sentences = [f"w{i} x{i} y{i} z{i} the end".split() for i in range(400)]
    rows = corpus_tool.order_task(sentences, random.Random(0))
    assert 150 < sum(label == "1" for label, _ in rows) < 250
    for (label, tokens), original in zip(rows, sentences):
        diff = [i for i, (a, b) in enumerate(zip(tokens, original)) if a != b]
        if label == "0":
            assert tokens == original
        else:
            assert len(diff) == 2 and diff[1] == diff[0] + 1
            assert tokens[diff[0]] == original[diff[1]] and tokens[diff[1]] == original[diff[0]]


def test_replaced_task_replaces_one_word_by_a_word_of_similar_frequency(corpus_tool):
    import collections
    import random

    counts = collections.Counter({f"w{i}": 1000 - i for i in range(1000)})
    counts[","] = 5000
    sentences = [["w10", ",", f"w{500 + i}", "w20", "."] for i in range(300)]
    rows = corpus_tool.replaced_task(sentences, counts, random.Random(0))
    ranked = [w for w, _ in counts.most_common() if w.isalpha()]
    for (tokens, tags), original in zip(rows, sentences):
        assert tags.count("R") == 1
        i = tags.index("R")
        assert tokens[i] != original[i] and tokens[i].isalpha() and original[i].isalpha()
        assert abs(ranked.index(tokens[i]) - ranked.index(original[i])) <= 50
        assert [t for j, t in enumerate(tokens) if j != i] == \
            [t for j, t in enumerate(original) if j != i]


def test_quality_study_table_reports_mean_and_sd_over_seeds(tmp_path):
    study = import_module("benchmarks.quality_study")

    def record(name, family, seed, steps, seconds, ev, probes, tuned=None):
        r = {"name": name, "family": family, "corpus": "synthetic", "seed": seed,
             "steps": steps, "train_seconds": seconds, "eval": ev, "curve": [],
             "parameters": {"total": 1000, "embedding": 100}, "probes": probes}
        if tuned:
            r["fine_tuned"] = tuned
        return r

    lm = lambda top10, ppl: {"top_k": {"10": top10}, "unigram_top_k": {"10": 0.3},  # noqa: E731
                             "median_rank": 5.0, "perplexity": ppl}
    records = [
        record("elmo_sub", "elmo", 0, 900, 90.0, lm(0.5, 20.0), {"role": 0.90}, {"agr": 0.8}),
        record("elmo_sub", "elmo", 1, 900, 92.0, lm(0.7, 30.0), {"role": 0.94}, {"agr": 0.9}),
        # a masked LM's perplexity goes to its own column
        record("masked_elmo", "masked_elmo", 0, 200, 91.0, {"perplexity": 40.0},
               {"role": 0.80}),
    ]
    text = study.table(records, 90, [0, 1])
    cells = [[c.strip() for c in line.strip().strip("|").split("|")]
             for line in text.splitlines() if line.startswith("| ")]
    rows = {row[0]: dict(zip(cells[0], row)) for row in cells[1:]}
    assert list(rows) == ["elmo_sub", "masked_elmo"]
    sub = rows["elmo_sub"]
    assert sub["steps"] == "900 ± 0" and sub["train s"] == "91 ± 1"
    # mean ± sample sd: (0.5, 0.7) -> 60.0 ± 14.1; (20, 30) -> 25.0 ± 7.1
    assert sub["top-10 (unigram)"] == "60.0 ± 14.1 (30.0 ± 0.0)"
    assert sub["perplexity"] == "25.0 ± 7.1"
    assert sub["role probe"] == "92.0 ± 2.8"
    assert sub["agr fine-tuned"] == "85.0 ± 7.1"
    masked = rows["masked_elmo"]
    assert masked["perplexity"] == "" and masked["masked ppl"] == "40.0"
    assert masked["role probe"] == "80.0" and masked["agr fine-tuned"] == ""
