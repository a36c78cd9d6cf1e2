"""Feature-based evaluation: probes trained on frozen embedder outputs.

As in the continuous-output paper (Li et al., 2019, Section 5), representations
are compared by training small task models on frozen features. A probe is a
learned `ScalarMix` over the embedder's layers followed by a linear layer or a
small biLSTM, for

* token tagging from CoNLL-format files (one token per line, the tag in
  `--tag_column`, blank lines between sentences; `#` lines are comments):
  token accuracy and macro-F1 over tags;
* sentence classification from TSV files (`label<TAB>sentence`): accuracy and
  macro-F1 over labels.

Features are computed once per embedder and task (`embed_tokens` for tagging,
so output token i is input token i; `embed` for sentences), then each probe is
trained with several seeds; the table reports mean ± standard deviation.

    python -m benchmarks.feature_study --embedder elmo=runs/demo/export \
        --tagging train.conll,test.conll --tag_column 1 \
        --classification train.tsv,test.tsv --results runs/bench/features.md

The readers, features, probes, fine-tuning and table are `tfeff.evaluation`'s;
this script is their command line.

`--demo` runs the whole offline comparison of docs/papers/elmo-c.md: it pre-trains the
demo models on one shared synthetic language (their `configs/demo_*.yaml`
with the corpus section of demo_elmo_c.yaml), exports them and a
fastText-only embedder, writes the grammar-derived tasks
(`tfeff.data.synthetic_tasks`) and probes everything (about 30 minutes on 2
CPU cores; finished pre-training runs are reused).
"""

import argparse
import os
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

from tfeff.evaluation import FormatError  # noqa: E402
from tfeff.evaluation import evaluate  # noqa: E402
from tfeff.evaluation import table  # noqa: E402

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


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--embedder", action="append", default=[], metavar="NAME=PATH",
                        help="an exported embedder (repeat for several)")
    parser.add_argument("--tagging", action="append", default=[], metavar="TRAIN,TEST",
                        help="CoNLL train and test files (repeatable)")
    parser.add_argument("--tag_column", type=int, default=-1,
                        help="column of the tag (0 is the word; default: the last)")
    parser.add_argument("--classification", action="append", default=[], metavar="TRAIN,TEST",
                        help="TSV train and test files, label<TAB>sentence (repeatable)")
    parser.add_argument("--probe", default="linear", help="linear, bilstm, or both: linear,bilstm")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--results", help="write the markdown table here")
    parser.add_argument("--demo", action="store_true",
                        help="pre-train the demo models and evaluate them on synthetic tasks")
    parser.add_argument("--work_dir", default="runs/features", help="--demo's directory")
    parser.add_argument("--demo_models", default=",".join(DEMO_MODELS))
    parser.add_argument("--demo_sentences", default="1500,500",
                        help="--demo's task sizes: TRAIN,TEST sentences")
    args = parser.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    probes = args.probe.split(",")
    try:
        if args.demo:
            num_train, num_test = (int(n) for n in args.demo_sentences.split(","))
            embedders, tasks = run_demo(args.work_dir, args.demo_models.split(","), num_train,
                                        num_test)
        else:
            embedders, tasks = {}, {}
            for spec in args.embedder:
                name, sep, path = spec.partition("=")
                if not sep:
                    raise FormatError(f"--embedder wants NAME=PATH, got {spec!r}")
                embedders[name] = path
            for kind, specs in (("tagging", args.tagging), ("classification", args.classification)):
                for spec in specs:
                    parts = spec.split(",")
                    if len(parts) != 2:
                        raise FormatError(f"--{kind} wants TRAIN,TEST, got {spec!r}")
                    name = os.path.splitext(os.path.basename(parts[0]))[0]
                    tasks[name] = (kind, *parts) + ((args.tag_column,) if kind == "tagging" else ())
            if not embedders or not tasks:
                parser.error("give at least one --embedder and one task, or --demo")
        rows = evaluate(embedders, tasks, probes, seeds, args.epochs)
    except (FormatError, FileNotFoundError, FileExistsError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(1)
    text = table(rows, seeds)
    print(text)
    if args.results:
        os.makedirs(os.path.dirname(os.path.abspath(args.results)), exist_ok=True)
        with open(args.results, "w", encoding="utf-8") as f:
            f.write(text)


if __name__ == "__main__":
    main()
