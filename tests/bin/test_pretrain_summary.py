"""The summary `tfeff-pretrain` prints for each family's `eval` results
(`Family.summary_lines`, the family's `eval_summary` after the step)."""

from tfeff.training.families import BERT
from tfeff.training.families import ELMO
from tfeff.training.families import FAMILIES
from tfeff.training.families import MASKED_ELMO

TOP_K = {"top_k": {"1": 0.3, "10": 0.47}, "unigram_top_k": {"1": 0.046, "10": 0.418}}


def test_continuous_elmo_reports_top_k_and_median_rank():
    ev = {**TOP_K, "targets": 20000, "median_rank": 26.0, "output_layer": "continuous",
          "tokenization": "word"}
    assert ELMO.summary_lines({"step": 1500, "eval": ev}) == [
        "finished at step 1500",
        "held-out top-1 accuracy: 0.3000 (unigram baseline 0.0460)",
        "held-out top-10 accuracy: 0.4700 (unigram baseline 0.4180)",
        "held-out median rank 26 (20000 targets)",
    ]


def test_softmax_elmo_reports_perplexity_without_a_masked_lm_loss():
    # The shape of eval.json that made every softmax ELMo run exit 1 (KeyError 'mlm_loss').
    for tokenization, unit in (("word", "words"), ("wordpiece", "WordPiece tokens")):
        ev = {**TOP_K, "targets": 400, "median_rank": 12.5, "perplexity": 81.234,
              "output_layer": "adaptive", "tokenization": tokenization}
        assert ELMO.summary_lines({"step": 4, "eval": ev})[-1] == (
            f"held-out perplexity 81.23 ({unit}; 400 targets, median rank 12.5)")


def test_masked_lm_families_and_the_core_switch():
    bert = {"masked_tokens": 64, "mlm_loss": 5.1234, "perplexity": 167.9, "accuracy": 0.0625}
    lines = BERT.summary_lines({"step": 4, "eval": bert,
                                "switch": {"switch_step": 2, "reason": "coarse_steps reached"}})
    assert lines == ["finished at step 4",
                     "held-out masked-LM loss 5.1234, perplexity 167.90, accuracy 0.0625 "
                     "(64 masked tokens)",
                     "CoRe switch at step 2 (coarse_steps reached)"]
    bert["unigram_perplexity"] = 338.04
    assert BERT.summary_lines({"step": 4, "eval": bert})[1] == (
        "held-out masked-LM loss 5.1234, perplexity 167.90 (unigram 338.04), accuracy 0.0625 "
        "(64 masked tokens)")
    continuous = {"masked_tokens": 10, "mlm_loss": 0.5}  # Masked ELMo, continuous output
    assert MASKED_ELMO.summary_lines({"step": 4, "eval": continuous})[-1] == (
        "held-out masked-LM loss 0.5000 (10 masked tokens)")


def test_a_run_without_held_out_data_prints_only_its_step():
    for family in FAMILIES.values():
        assert family.summary_lines({"step": 7}) == ["finished at step 7"]
        assert family.summary_lines({"step": 7, "eval": {}}) == ["finished at step 7"]
