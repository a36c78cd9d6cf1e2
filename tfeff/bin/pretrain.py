"""tfeff-pretrain: prepare data, pretrain, evaluate. Resumes from `--model_dir`.

    tfeff-pretrain --config configs/demo_elmo_c.yaml --model_dir runs/demo \
        [--override train.steps=2000 ...] [--strategy default|mirrored|multi_worker] \
        [--on_nan stop|skip] [--restore_fallback] [--deterministic]

Exit status: 0 when training finished, 1 on bad input or a training fault
(the message says what happened and the directory stays resumable), 42
(`PREEMPTED_EXIT_CODE`) after SIGTERM: a checkpoint was saved and rerunning
the same command resumes.
"""

import sys


from absl import app
from absl import flags

from tfeff.bin import common

FLAGS = flags.DEFINE_string("config", None, "YAML config file.", required=True)
_MODEL_DIR = flags.DEFINE_string("model_dir", None, "Output/resume directory.", required=True)
_OVERRIDE = flags.DEFINE_multi_string("override", [], "key.sub=value (repeatable).")
_STRATEGY = flags.DEFINE_enum(
    "strategy", "default", ["default", "mirrored", "multi_worker"], "tf.distribute strategy."
)
_ON_NAN = flags.DEFINE_enum(
    "on_nan", None, ["stop", "skip"],
    "A step with NaN/Inf loss or gradients: stop (naming the step) or skip its update "
    "(sets train.on_nan).")
_RESTORE_FALLBACK = flags.DEFINE_bool(
    "restore_fallback", False,
    "If the latest checkpoint is corrupted or truncated, restore the newest readable one.")
_DETERMINISTIC = flags.DEFINE_bool(
    "deterministic", None,
    "Enable TensorFlow op determinism (sets train.deterministic): bit-identical resumes on CPU.")


def summary_lines(results):
    """The lines printed after a finished run, whatever the family reported.

    ELMo reports top-k accuracy against the unigram baseline (and, with a
    softmax output, perplexity and the median rank); BERT and Masked ELMo the
    held-out masked-LM loss (and, with a softmax output, perplexity and
    accuracy); a CoRe run its switch step.
    """
    lines = [f"finished at step {results['step']}"]
    ev = results.get("eval") or {}
    for k, acc in ev.get("top_k", {}).items():
        lines.append(f"held-out top-{k} accuracy: {acc:.4f} "
                     f"(unigram baseline {ev['unigram_top_k'][k]:.4f})")
    if "mlm_loss" in ev:
        line = f"held-out masked-LM loss {ev['mlm_loss']:.4f}"
        if ev.get("perplexity") is not None:
            line += f", perplexity {ev['perplexity']:.2f}"
            if ev.get("unigram_perplexity") is not None:
                line += f" (unigram {ev['unigram_perplexity']:.2f})"
        if "accuracy" in ev:
            line += f", accuracy {ev['accuracy']:.4f}"
        lines.append(f"{line} ({ev['masked_tokens']} masked tokens)")
    elif ev.get("perplexity") is not None:
        unit = "WordPiece tokens" if ev.get("tokenization") == "wordpiece" else "words"
        lines.append(f"held-out perplexity {ev['perplexity']:.2f} ({unit}; "
                     f"{ev['targets']} targets, median rank {ev['median_rank']:g})")
    elif "median_rank" in ev and ev["median_rank"] is not None:
        lines.append(f"held-out median rank {ev['median_rank']:g} ({ev['targets']} targets)")
    if results.get("switch"):
        lines.append(f"CoRe switch at step {results['switch']['switch_step']} "
                     f"({results['switch']['reason']})")
    return lines


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
    from tfeff.config import load_config
    from tfeff.training import pretrain
    from tfeff.training.fault_tolerance import PREEMPTED_EXIT_CODE

    def body():
        overrides = list(_OVERRIDE.value)
        if _ON_NAN.value is not None:
            overrides.append(f"train.on_nan={_ON_NAN.value}")
        if _DETERMINISTIC.value is not None:
            overrides.append(f"train.deterministic={str(_DETERMINISTIC.value).lower()}")
        config = load_config(FLAGS.value, overrides)
        results = pretrain(config, _MODEL_DIR.value, strategy=_STRATEGY.value,
                           restore_fallback=_RESTORE_FALLBACK.value)
        if results.get("preempted"):
            print(f"preempted: saved the checkpoint of step {results['step']}; rerun the same "
                  "command to resume", file=sys.stderr)
            sys.exit(PREEMPTED_EXIT_CODE)
        for line in summary_lines(results):
            print(line)

    common.run_main(body)


def run():
    app.run(main)


if __name__ == "__main__":
    run()
