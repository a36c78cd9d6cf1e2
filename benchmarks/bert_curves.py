"""Held-out masked-LM perplexity curves of BERT recipe variants, side by side on one corpus.

Each variant is a set of config overrides on --config (default the demo
BERT). All variants train on the same corpus and vocabulary (prepared once in
--output_dir's `bert_curves/`), with the same batches, and are evaluated every --every steps on
the same held-out masked tokens, next to the unigram perplexity of those
targets. Training time excludes the evaluations.

    # the recipe table of docs/papers/core.md: learned vs rotary positions at the demo size
    python -m benchmarks.bert_curves --output_dir runs/bench \\
        --variant learned:model.position_embedding=learned \\
        --variant rotary:model.position_embedding=rotary

Writes `bert_curves.md`, `bert_curves.json` and `bert_curves.png` (with
matplotlib) to --output_dir.
"""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import platform  # noqa: E402

from absl import app  # noqa: E402
from absl import flags  # noqa: E402
import keras  # noqa: E402

from benchmarks import harness  # noqa: E402
from tfeff import data as data_lib  # noqa: E402
from tfeff.config import load_config  # noqa: E402
from tfeff.training.families.bert import BERT  # noqa: E402
from tfeff.training.families.bert import bert_dataset  # noqa: E402
from tfeff.training.families.bert import evaluate_bert  # noqa: E402
from tfeff.training.families.bert import unigram_log_probs  # noqa: E402
from tfeff.training.optimizers import make_optimizer  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FLAGS = flags.FLAGS


def define_flags():
    """The command line's flags, defined when the module runs as the program."""
    harness.define_flags()
    flags.DEFINE_string("config", os.path.join(REPO, "configs", "demo_bert.yaml"), "Base config.")
    flags.DEFINE_multi_string(
        "variant", ["learned:model.position_embedding=learned",
                    "rotary:model.position_embedding=rotary"],
        "NAME:key=value[,key=value...] (overrides on --config).")
    flags.DEFINE_multi_string("override", [], "key=value for every variant "
                              "(e.g. train.steps=3000).")
    flags.DEFINE_integer("every", 200, "Evaluate every this many steps.")


def parse_variant(text):
    name, _, overrides = text.partition(":")
    if not name or not overrides:
        raise app.UsageError(f"--variant {text!r}: expected NAME:key=value[,key=value...]")
    return name, overrides.split(",")


def train_variant(name, config, files, vocabulary_path, unigram):
    train_files, heldout_files = files
    vocabulary_size = len(data_lib.Vocabulary.load(vocabulary_path))
    keras.utils.set_random_seed(config.train.seed)
    model = BERT.build_model(config, vocabulary_size)
    model.build()
    model.compile(optimizer=make_optimizer(config.train, config.data.batch_size),
                  jit_compile=False)
    dataset = bert_dataset(config, train_files, vocabulary_path, True, seed=config.train.seed)

    def evaluate(m):
        return evaluate_bert(m, config, heldout_files, vocabulary_path, unigram=unigram)

    points = []

    def on_step(model, step, seconds):  # held-out perplexity every FLAGS.every steps
        if step % FLAGS.every == 0 or step == config.train.steps:
            ev = evaluate(model)
            points.append({"step": step, "seconds": seconds, **ev})
            print(f"{name}: step {step}, {seconds:.0f} s, held-out perplexity "
                  f"{ev['perplexity']:.1f}", flush=True)

    model.fit(dataset, steps_per_epoch=config.train.steps, epochs=1, verbose=0,
              callbacks=[harness.training_clock(on_step)])
    return points


def main(argv):
    del argv
    variants = [parse_variant(v) for v in FLAGS.variant]
    base = load_config(FLAGS.config, FLAGS.override)
    work_dir = os.path.join(FLAGS.output_dir, "bert_curves")  # corpus and vocabulary, reused
    os.makedirs(work_dir, exist_ok=True)
    artifacts = BERT.prepare_data(base, work_dir)
    train_files, heldout_files, vocabulary_path = (
        artifacts.train_files, artifacts.heldout_files, artifacts.vocabulary_path)
    unigram = unigram_log_probs(base, train_files, vocabulary_path)
    results = {}
    for name, overrides in variants:
        config = load_config(FLAGS.config, FLAGS.override + overrides)
        results[name] = {"overrides": overrides, "points": train_variant(
            name, config, (train_files, heldout_files), vocabulary_path, unigram)}
    unigram_ppl = next(iter(results.values()))["points"][-1]["unigram_perplexity"]
    steps = [p["step"] for p in next(iter(results.values()))["points"]]
    machine = f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs"
    lines = [f"Held-out masked-LM perplexity by step ({os.path.relpath(FLAGS.config, REPO)}"
             f"{' with ' + ', '.join(FLAGS.override) if FLAGS.override else ''}; unigram "
             f"perplexity {unigram_ppl:.1f}; {machine}; one seed)", "",
             "| variant | " + " | ".join(str(s) for s in steps) + " | train seconds |",
             "|---" * (len(steps) + 2) + "|"]
    for name, r in results.items():
        lines.append(f"| {name} | " + " | ".join(f"{p['perplexity']:.1f}" for p in r["points"])
                     + f" | {r['points'][-1]['seconds']:.0f} |")
    text = "\n".join(lines) + "\n"
    print(text)
    harness.write_results(FLAGS.output_dir, "bert_curves", text, results)
    plt = harness.pyplot()
    if plt is None:
        return
    fig, ax = plt.subplots(figsize=(6, 4))
    for name, r in results.items():
        ax.plot([p["step"] for p in r["points"]], [p["perplexity"] for p in r["points"]],
                marker="o", markersize=3, label=name)
    ax.axhline(unigram_ppl, color="gray", linestyle=":", label="unigram")
    ax.axhline(0.25 * unigram_ppl, color="gray", linewidth=0.8, label="0.25 x unigram")
    ax.set_yscale("log")
    ax.set_xlabel("step")
    ax.set_ylabel("held-out masked-LM perplexity")
    ax.legend()
    fig.tight_layout()
    fig.savefig(os.path.join(FLAGS.output_dir, "bert_curves.png"), dpi=120)


if __name__ == "__main__":
    define_flags()
    app.run(main)
