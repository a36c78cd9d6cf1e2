"""The offline comparison of docs/papers/elmo-c.md: probes on the frozen features of
every demo model.

As in the continuous-output paper (Li et al., 2019, Section 5), representations
are compared by training small task models on frozen features (`tfeff-evaluate`,
`tfeff.evaluation`). This study pre-trains the demo models on one shared
synthetic language (their `configs/demo_*.yaml` with the corpus section of
demo_elmo_c.yaml), exports them and a fastText-only embedder, writes the
grammar-derived tasks (`tfeff.data.synthetic_tasks`) and probes everything
(about 30 minutes on 2 CPU cores; finished pre-training runs in
`--output_dir`'s `features/` are reused).

    python -m benchmarks.feature_study --output_dir runs/bench
    python -m benchmarks.feature_study --models demo_elmo_c,demo_bert --seeds 0

Writes `features.md` and `features.json` to `--output_dir`.
"""

import os
import time

from absl import app
from absl import flags

from benchmarks import harness
from tfeff.evaluation import evaluate
from tfeff.evaluation import table

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

DEMO_MODELS = ("demo_elmo_c", "demo_elmo_a", "demo_elmo_sub", "demo_elmo_alone", "demo_masked_elmo",
               "demo_bert", "demo_bert_core")
DEMO_LANGUAGE = ["data.synthetic.seed=0", "data.synthetic.lexicon_size=3000",
                 "data.synthetic.num_train_sentences=40000",
                 "data.synthetic.num_heldout_sentences=2000"]


# The offline demo comparison ----------------------------------------------------------------

def run_demo(work_dir, models=DEMO_MODELS, num_train=1500, num_test=500, log=print):
    """Pre-trains (or reuses), exports and returns `(embedders, tasks)` for the demo table."""
    from tfeff.config import load_config
    from tfeff.data import synthetic_tasks
    from tfeff.export import export_fasttext, export_model_dir, read_metadata
    from tfeff.training import pretrain

    embedders = {}
    os.makedirs(os.path.join(work_dir, "exports"), exist_ok=True)
    for name in models:
        config = load_config(os.path.join(REPO, "configs", f"{name}.yaml"), DEMO_LANGUAGE)
        model_dir = os.path.join(work_dir, "models", name)
        t0 = time.time()
        pretrain(config, model_dir, verbose=0)
        log(f"pre-trained {name} in {time.time() - t0:.0f}s")
        path = os.path.join(work_dir, "exports", name)
        export_model_dir(model_dir, path, overwrite=True)
        embedders[name.replace("demo_", "")] = path
        if read_metadata(path)["tokenization"] == "wordpiece":  # words of several pieces
            export_model_dir(model_dir, path + "_mean", overwrite=True, subword_pooling="mean")
            embedders[name.replace("demo_", "") + " (mean)"] = path + "_mean"
        if name == "demo_elmo_c":
            ft = os.path.join(work_dir, "exports", "fasttext")
            export_fasttext(os.path.join(model_dir, "fasttext.bin"), ft, overwrite=True)
            embedders = {"fasttext": ft, **embedders}
    paths = synthetic_tasks(os.path.join(work_dir, "tasks"), num_train, num_test, seed=0,
                            lexicon_size=3000)
    tasks = {"POS": ("tagging", *paths["tagging"], 1),
             "role": ("tagging", *paths["tagging"], 2),
             "agreement": ("classification", *paths["agreement"])}
    return embedders, tasks


def define_flags():
    """The command line's flags, defined when the module runs as the program."""
    harness.define_flags()
    flags.DEFINE_list("models", list(DEMO_MODELS), "Demo configs to pre-train and probe.")
    flags.DEFINE_list("sentences", ["1500", "500"], "Task sizes: TRAIN,TEST sentences.")
    flags.DEFINE_list("probe", ["linear"], "linear, bilstm, or both.")
    flags.DEFINE_list("seeds", ["0", "1", "2"], "Seeds of every probe.")
    flags.DEFINE_integer("epochs", 10, "Epochs of every probe.")


def main(argv):
    del argv
    args = flags.FLAGS
    num_train, num_test = (int(n) for n in args.sentences)
    seeds = [int(s) for s in args.seeds]
    work_dir = os.path.join(args.output_dir, "features")  # pre-training runs, reused
    embedders, tasks = run_demo(work_dir, args.models, num_train, num_test)
    rows = evaluate(embedders, tasks, args.probe, seeds, args.epochs)
    text = table(rows, seeds)
    print(text)
    harness.write_results(args.output_dir, "features", text, {
        "models": args.models, "sentences": [num_train, num_test], "probes": args.probe,
        "seeds": seeds, "epochs": args.epochs, "rows": rows})


if __name__ == "__main__":
    define_flags()
    app.run(main)
