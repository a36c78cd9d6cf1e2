"""The summary `tfeff-pretrain` prints for each family's `eval` results
(`Family.summary_lines`, the family's `eval_summary` after the step)."""

import os
import re

from tests.conftest import REPO
from tfeff.training.families import BERT
from tfeff.training.families import ELMO
from tfeff.training.families import FAMILIES
from tfeff.training.families import MASKED_ELMO
from tfeff.training.families.base import CONTINUOUS_HELP as CONTINUOUS_HELP_LINK
from tfeff.training.families.base import SUMMARY_HELP

TOP_K = {"top_k": {"1": 0.3, "10": 0.47}, "unigram_top_k": {"1": 0.046, "10": 0.418}}


HELP = "see docs/guides/pretraining.md#reading-the-summary"
CONTINUOUS_HELP = "see docs/papers/elmo-c.md#real-text"


def test_continuous_elmo_reports_what_it_counted_and_every_baseline():
    ev = {**TOP_K, "targets": 20000, "heldout_targets": 52311, "vocabulary_size": 48000,
          "median_rank": 26.0, "unigram_median_rank": 97.0, "output_layer": "continuous",
          "tokenization": "word"}
    assert ELMO.summary_lines({"step": 1500, "eval": ev}) == [
        "finished at step 1500",
        "held-out: the first 20,000 of the 52,311 held-out targets (eval.max_targets), both "
        "directions, <unk> left out; vocabulary 48,000 words",
        "held-out top-1 accuracy: 0.3000 (unigram baseline 0.0460)",
        "held-out top-10 accuracy: 0.4700 (unigram baseline 0.4180)",
        "held-out median rank 26 (0 = first; unigram baseline 97)",
    ]


def test_a_result_below_its_baseline_is_flagged_with_the_page_that_explains():
    ev = {"top_k": {"1": 0.082, "10": 0.116}, "unigram_top_k": {"1": 0.0, "10": 0.394},
          "targets": 500, "heldout_targets": 500, "vocabulary_size": 3475,
          "median_rank": 982.0, "unigram_median_rank": 30.0, "output_layer": "continuous",
          "tokenization": "word"}
    lines = ELMO.summary_lines({"step": 60, "eval": ev})
    assert lines[1] == ("held-out: all 500 held-out targets, both directions, <unk> left out; "
                        "vocabulary 3,475 words")
    # The median rank trails its baseline too, shown but not flagged (see the guide).
    # A continuous output's known cause, with the section on it (not the general checklist).
    assert lines[-2:] == [
        "held-out results below the unigram baseline (top-10 accuracy): the cosine loss "
        "predicts the mean direction of the likely next words' fastText vectors, which on "
        "real text points at frequent words unless the vectors separate the others well "
        "(Li et al.'s came from Common Crawl, not from the model's corpus)",
        "held-out ranking of next words: use published fastText vectors as fasttext.pretrained "
        f"(fasttext.dim set to theirs); {CONTINUOUS_HELP}"]
    assert lines[-3] == "held-out median rank 982 (0 = first; unigram baseline 30)"
    # A softmax output below its baseline: the general checklist.
    softmax = {**ev, "output_layer": "adaptive", "perplexity": 500.0,
               "unigram_perplexity": 400.0}
    assert ELMO.summary_lines({"step": 60, "eval": softmax})[-1] == (
        "held-out results below the unigram baseline (top-10 accuracy, perplexity): the model "
        f"predicts worse than word frequencies alone; {HELP}")


def test_summary_links_name_sections_the_docs_have():
    """The pages and `{#anchor}`s the summary lines point to exist."""
    for link in (SUMMARY_HELP, CONTINUOUS_HELP_LINK):
        page, anchor = link.split("#")
        with open(os.path.join(REPO, page), encoding="utf-8") as f:
            text = f.read()
        assert re.search(r"^#+ .*\{#" + re.escape(anchor) + r"\}\s*$", text, re.M), link


def test_softmax_elmo_reports_perplexity_beside_the_unigram_models():
    # The shape of eval.json that made every softmax ELMo run exit 1 (KeyError 'mlm_loss').
    for tokenization, unit in (("word", "words"), ("wordpiece", "WordPiece tokens")):
        ev = {**TOP_K, "targets": 400, "heldout_targets": 400, "vocabulary_size": 900,
              "median_rank": 12.5, "unigram_median_rank": 40.0, "perplexity": 81.234,
              "unigram_perplexity": 402.5, "output_layer": "adaptive",
              "tokenization": tokenization}
        lines = ELMO.summary_lines({"step": 4, "eval": ev})
        assert lines[1].endswith(f"vocabulary 900 {unit}")
        assert lines[-1] == f"held-out perplexity 81.23 ({unit}; unigram baseline 402.50)"


def test_masked_lm_families_and_the_core_switch():
    bert = {"masked_tokens": 6400, "mlm_loss": 5.1234, "perplexity": 167.9, "accuracy": 0.0625,
            "unigram_perplexity": 338.04, "unigram_accuracy": 0.031, "batches": 50,
            "complete": False, "vocabulary_size": 8000, "softmax": True}
    lines = BERT.summary_lines({"step": 4, "eval": bert,
                                "switch": {"switch_step": 2, "reason": "coarse_steps reached"}})
    assert lines == ["finished at step 4",
                     "held-out: 6,400 masked tokens of the first 50 held-out batches "
                     "(eval.max_batches; there are more), <unk> never masked; vocabulary "
                     "8,000 WordPieces",
                     "held-out masked-LM loss 5.1234 (nats), perplexity 167.90 (unigram "
                     "baseline 338.04), accuracy 0.0625 (unigram baseline 0.0310)",
                     "CoRe switch at step 2 (coarse_steps reached)"]
    worse = {**bert, "perplexity": 400.0, "complete": True, "batches": 7}
    lines = MASKED_ELMO.summary_lines({"step": 4, "eval": worse})
    assert lines[1].startswith("held-out: 6,400 masked tokens of all 7 held-out batches,")
    assert lines[-1] == ("held-out results below the unigram baseline (perplexity): the model "
                         f"predicts worse than word frequencies alone; {HELP}")
    continuous = {"masked_tokens": 10, "mlm_loss": 0.5, "batches": 2, "complete": True,
                  "vocabulary_size": 300, "softmax": False}  # Masked ELMo, continuous output
    assert MASKED_ELMO.summary_lines({"step": 4, "eval": continuous})[-1] == (
        "held-out masked loss 0.5000 (cosine distance to the target's fastText vector; no "
        "baseline)")


def test_a_run_without_held_out_data_prints_only_its_step():
    for family in FAMILIES.values():
        assert family.summary_lines({"step": 7}) == ["finished at step 7"]
        assert family.summary_lines({"step": 7, "eval": {}}) == ["finished at step 7"]
