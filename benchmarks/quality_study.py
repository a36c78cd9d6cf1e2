"""Cheap vs expensive at equal wall-clock time: tfeff's quality claims, measured.

Three of tfeff's ideas promise the same quality for less. This study trains
each cheap model and its expensive twin for the **same training time** on the
same corpus, then compares them side by side:

| paper | cheap | expensive twin |
|---|---|---|
| ContinuousOutput (Li et al.) | `elmo_c` (fastText-vector targets) | `elmo_a` (adaptive softmax) |
| ALONE (Takase & Kobayashi) | `elmo_alone` (D_inter 256), `elmo_alone_500`, `elmo_alone_untied` | `elmo_sub` (a table) |
| Masked ELMo (Senay & Salin) | `masked_elmo`, `masked_elmo_k1` (one mask set) | `elmo_sub` (directional, same WordPieces) |

on two corpora: the synthetic language of the demo (its grammar-derived POS,
role and agreement tasks) and real English text (WordNet's glosses and example
sentences, `tools/english_corpus.py`, with its word-order and replaced-word
tasks). For each model and corpus it

1. measures the step time in a short calibration run (cached in
   `calibration.json`) and sets `train.steps = budget / step time`, so that
   every model gets the same training time with its schedule run to the end;
2. pre-trains once per seed, evaluating held-out LM quality at 1/3 and 2/3 of
   the run with the clock stopped, and at the end (the curves of the PNG);
3. exports it and trains linear probes on the frozen features (one probe per
   pre-training seed, so the spread covers both), and fine-tunes the encoder on
   the sentence task (agreement, word order) with the same budget for all
   (`FINE_TUNED` models; the ALONE variants are probed only).

fastText is trained once per corpus (`fasttext.pretrained` for every word
model): the paper takes the vectors as given, so their training is not in
ELMo-C's time. Runs are cached in `--output_dir`'s `quality/` (delete a directory to
redo it).

    python -m benchmarks.quality_study --output_dir runs/bench [--budget 90] [--seeds 0,1]

`make bench` runs the two corpora side by side, each process pinned to one core
(`taskset -c N`, `TF_NUM_INTRAOP_THREADS=1`), then `--table_only` to merge them.

It writes `quality_study.md` (the table), `quality_study.json` and
`quality_study.png` (LM quality against training time).
"""

import json
import os
import sys
import time

from absl import app
from absl import flags
import numpy as np

from benchmarks import feature_study
from benchmarks import harness
from tfeff import evaluation
from tools import english_corpus

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# name: (config, overrides of every corpus)
MODELS = {
    "elmo_c": ("demo_elmo_c", []),
    "elmo_a": ("demo_elmo_a", []),
    "elmo_sub": ("demo_elmo_sub", []),
    "elmo_alone": ("demo_elmo_alone", []),
    # half the table's embedding parameters (2 x 64 x 500 + 564 = 64,564 vs 128,000)
    "elmo_alone_500": ("demo_elmo_alone", ["model.alone.intermediate_dim=500"]),
    # ALONE in, a trainable softmax out: about the table's total parameters
    "elmo_alone_untied": ("demo_elmo_alone", ["model.tie_output=false"]),
    "masked_elmo": ("demo_masked_elmo", []),
    # one mask set per step instead of the paper's 4: 4x the steps in the same time
    "masked_elmo_k1": ("demo_masked_elmo", ["model.mask_accumulation=1"]),
}
# fine-tuned on the sentence task (the others are probed only)
FINE_TUNED = ("elmo_c", "elmo_a", "elmo_sub", "masked_elmo", "masked_elmo_k1")
# (paper, claim, cheap, twin, the LM metric both report)
PAIRS = [
    ("ContinuousOutput (Li et al.)", "ELMo-C learns as well as a softmax ELMo, faster",
     "elmo_c", "elmo_a", "top10"),
    ("ALONE (Takase & Kobayashi)", "embeddings from one vector match a table",
     "elmo_alone", "elmo_sub", "perplexity"),
    ("ALONE (Takase & Kobayashi)", "... with half the table's embedding parameters",
     "elmo_alone_500", "elmo_sub", "perplexity"),
    ("ALONE (Takase & Kobayashi)", "... with an untied output (equal total parameters)",
     "elmo_alone_untied", "elmo_sub", "perplexity"),
    ("Masked ELMo (Senay & Salin)", "a fully bidirectional biLSTM's features beat ELMo's",
     "masked_elmo", "elmo_sub", None),
    ("Masked ELMo (Senay & Salin)", "... with one mask set per step",
     "masked_elmo_k1", "elmo_sub", None),
]
CORPORA = ("synthetic", "english")
CURVE_POINTS = 3   # evaluations at 1/3 and 2/3 of the run, and the final one
CURVE_TARGETS = 4000


def corpus_overrides(corpus, english_dir):
    if corpus == "synthetic":
        return list(feature_study.DEMO_LANGUAGE)
    return ["data.synthetic=null",
            f"data.train_files={os.path.join(english_dir, 'train.txt')}",
            f"data.heldout_files={os.path.join(english_dir, 'heldout.txt')}"]


def corpus_tasks(corpus, work_dir, english_dir):
    """`({name: task spec}, sentence_task_name)` in `tfeff.evaluation.evaluate`'s form."""
    if corpus == "synthetic":
        from tfeff.data import synthetic_tasks

        paths = synthetic_tasks(os.path.join(work_dir, "tasks"), 1500, 500, seed=0,
                                lexicon_size=3000)
        return {"POS": ("tagging", *paths["tagging"], 1),
                "role": ("tagging", *paths["tagging"], 2),
                "agreement": ("classification", *paths["agreement"])}, "agreement"
    d = english_dir
    return {"replaced": ("tagging", os.path.join(d, "replaced_train.conll"),
                         os.path.join(d, "replaced_test.conll"), 1),
            "order": ("classification", os.path.join(d, "order_train.tsv"),
                      os.path.join(d, "order_test.tsv"))}, "order"


def clock_callback(on_point=None, every=0):
    """A Keras callback timing training steps (`times`: cumulative seconds after each step).

    Every `every` steps before the last curve point it calls `on_point(model, step,
    seconds)`; that evaluation runs between two steps, so the clock does not count it.
    """
    def on_step(model, step, seconds):
        if on_point and every and step % every == 0 and step < every * CURVE_POINTS:
            on_point(model, step, seconds)

    return harness.training_clock(on_step)


def curve_evaluator(config, model_dir, points):
    """`on_point(model, step, seconds)` appending held-out LM quality to `points`."""
    import copy

    from tfeff.training.families import ELMO

    if config.family != "elmo":
        return None
    config = copy.deepcopy(config)
    config.eval.max_targets = CURVE_TARGETS
    loaded = {}   # the run's data artifacts, read at the first point (they exist by then)

    def on_point(model, step, seconds):
        if not loaded:
            loaded["artifacts"] = ELMO.prepare_data(config, model_dir)
        result = ELMO.evaluate(model, config, loaded["artifacts"])
        points.append({"step": step, "seconds": seconds, "top10": result["top_k"]["10"],
                       "perplexity": result.get("perplexity")})
    return on_point


def run_config(name, corpus, overrides, english_dir, fasttext_bin=None):
    from tfeff.config import load_config

    config_name, extra = MODELS[name]
    config = load_config(os.path.join(REPO, "configs", f"{config_name}.yaml"),
                         corpus_overrides(corpus, english_dir) + extra + overrides)
    if fasttext_bin and config.family == "elmo" and config.data.tokenization == "word":
        config.fasttext.pretrained = fasttext_bin
    return config


def shared_fasttext(corpus, work_dir, english_dir, log):
    """Trains (once) the fastText model every word-level model of `corpus` uses."""
    from tfeff.training import model_directory
    from tfeff.training import prepare_data

    ft_dir = os.path.join(work_dir, corpus, "fasttext")
    path = os.path.join(ft_dir, model_directory.FASTTEXT_FILE)
    if not os.path.exists(path):
        config = run_config("elmo_c", corpus, [], english_dir)
        os.makedirs(ft_dir, exist_ok=True)
        t0 = time.time()
        prepare_data(config, ft_dir)
        log(f"[{corpus}] fastText in {time.time() - t0:.0f}s")
    return path


def share_vocabulary(config, corpus, work_dir, model_dir, after=False):
    """WordPiece ELMos of one corpus share one vocabulary (learned once): their
    perplexities are then over the same tokens. Call before and `after` pretraining."""
    import shutil

    from tfeff.training import model_directory

    if config.family != "elmo" or config.data.tokenization != "wordpiece":
        return
    shared = os.path.join(work_dir, corpus, "wordpiece_vocabulary.txt")
    own = os.path.join(model_dir, model_directory.VOCABULARY_FILE)
    if after and not os.path.exists(shared):
        shutil.copyfile(own, shared)
    elif not after and os.path.exists(shared) and not os.path.exists(own):
        os.makedirs(model_dir, exist_ok=True)
        shutil.copyfile(shared, own)


def calibrate(name, corpus, work_dir, english_dir, fasttext_bin, log, steps=45):
    """Median seconds per training step of `name` on `corpus` (cached)."""
    import shutil

    from tfeff.training import pretrain

    cache = os.path.join(work_dir, "calibration.json")
    table = json.load(open(cache)) if os.path.exists(cache) else {}
    key = f"{corpus}/{name}"
    if key not in table:
        config = run_config(name, corpus, [f"train.steps={steps}", "train.checkpoint_every=1000",
                                           "train.validation_steps=0"],
                            english_dir, fasttext_bin)
        model_dir = os.path.join(work_dir, corpus, "calibration", name)
        shutil.rmtree(model_dir, ignore_errors=True)
        clock = clock_callback()
        share_vocabulary(config, corpus, work_dir, model_dir)
        pretrain(config, model_dir, verbose=0, callbacks=[clock])
        share_vocabulary(config, corpus, work_dir, model_dir, after=True)
        step_times = np.diff(clock.times[steps // 3:])   # past tracing and warm-up
        table[key] = float(np.median(step_times))
        log(f"[{corpus}] {name}: {1000 * table[key]:.1f} ms/step")
        _write_json(cache, table)
    return table[key]


def pretrain_run(name, corpus, seed, steps, work_dir, english_dir, fasttext_bin, log):
    """Pre-trains (or reuses) one run; returns its record (eval, curve, time, params)."""
    from tfeff.training import pretrain

    run_dir = os.path.join(work_dir, corpus, f"{name}_seed{seed}")
    record_path = os.path.join(run_dir, "study.json")
    if os.path.exists(record_path):
        return json.load(open(record_path))
    every = max(1, steps // CURVE_POINTS)   # also the checkpoint interval
    config = run_config(name, corpus, [f"train.steps={steps}", f"train.seed={seed}",
                                       f"train.checkpoint_every={every}"],
                        english_dir, fasttext_bin)
    model_dir = os.path.join(run_dir, "model")
    points = []
    clock = clock_callback(curve_evaluator(config, model_dir, points), every)
    t0 = time.time()
    share_vocabulary(config, corpus, work_dir, model_dir)
    results = pretrain(config, model_dir, verbose=0, callbacks=[clock])
    first = clock.times[0] if clock.times else 0.0   # tracing, compiling and warm-up
    ev = results.get("eval", {})
    if config.family == "elmo" and "top_k" in ev:
        points.append({"step": steps, "seconds": clock.elapsed, "top10": ev["top_k"]["10"],
                       "perplexity": ev.get("perplexity")})
    record = {"name": name, "family": config.family, "corpus": corpus, "seed": seed,
              "steps": steps, "train_seconds": clock.elapsed - first, "first_step_seconds": first,
              "wall_seconds": time.time() - t0, "eval": ev, "curve": points,
              "parameters": _parameters(clock.model)}
    from tfeff.export import export_model_dir

    export_model_dir(model_dir, os.path.join(run_dir, "export"), overwrite=True)
    _write_json(record_path, record)
    log(f"[{corpus}] {name} seed {seed}: {steps} steps in {record['train_seconds']:.0f}s "
        f"(+{first:.0f}s first step), "
        + ", ".join(f"{k} {v:.4g}" for k, v in _lm_metrics(record).items()))
    return record


def _parameters(model):
    """Trainable parameters of the trained model and of its input embedding."""
    total = int(sum(np.prod(v.shape) for v in model.trainable_variables))
    embedding = getattr(model.backbone, "token_embedding", None)
    emb = int(sum(np.prod(v.shape) for v in embedding.trainable_variables)) if embedding else 0
    return {"total": total, "embedding": emb}


def _lm_metrics(record):
    """Held-out LM figures of a record; a masked LM's perplexity is not a next-word one."""
    ev, out = record["eval"], {}
    if "top_k" in ev:
        out["top10"] = ev["top_k"]["10"]
        out["unigram_top10"] = ev["unigram_top_k"]["10"]
        out["median_rank"] = ev["median_rank"]
    if ev.get("perplexity") is not None:
        key = "masked_perplexity" if record["family"] == "masked_elmo" else "perplexity"
        out[key] = ev["perplexity"]
    return out


def probe_and_fine_tune(records, corpus, work_dir, english_dir, fine_tune_epochs, log):
    """Adds `probes` (linear, frozen) and `fine_tuned` scores to each record (cached)."""
    tasks, sentence_task = corpus_tasks(corpus, os.path.join(work_dir, corpus), english_dir)
    for record in records:
        run_dir = os.path.join(work_dir, corpus, f"{record['name']}_seed{record['seed']}")
        cache = os.path.join(run_dir, "scores.json")
        if os.path.exists(cache):
            record.update(json.load(open(cache)))
            continue
        rows = evaluation.evaluate({record["name"]: os.path.join(run_dir, "export")},
                                   tasks, ("linear",), (record["seed"],), log=log)
        scores = {"probes": {r["task"]: r["accuracy"][0] for r in rows}}
        if record["name"] not in FINE_TUNED:
            _write_json(cache, scores)
            record.update(scores)
            continue
        train, test = (evaluation.read_tsv(p) for p in tasks[sentence_task][1:3])
        labels = sorted({lb for lb, _ in train})
        index = {lb: i for i, lb in enumerate(labels)}
        t0 = time.time()
        tuned = evaluation.fine_tune(
            os.path.join(run_dir, "model"), [(index[lb], s) for lb, s in train],
            [(index[lb], s) for lb, s in test], len(labels), seed=record["seed"],
            epochs=fine_tune_epochs)
        scores["fine_tuned"] = {sentence_task: tuned["accuracy"]}
        log(f"[{corpus}] {record['name']} seed {record['seed']}: fine-tuned {sentence_task} "
            f"{100 * tuned['accuracy']:.1f} ({time.time() - t0:.0f}s)")
        _write_json(cache, scores)
        record.update(scores)


def _write_json(path, value):
    from tfeff.data.files import write_text_atomic

    write_text_atomic(path, json.dumps(value, indent=2) + "\n")


def stored_records(work_dir, models, seeds):
    """Every finished record of `models` and `seeds` in `work_dir`, scores included."""
    records = []
    for corpus in CORPORA:
        for name in models:
            for seed in seeds:
                run_dir = os.path.join(work_dir, corpus, f"{name}_seed{seed}")
                if not os.path.exists(os.path.join(run_dir, "study.json")):
                    continue
                record = json.load(open(os.path.join(run_dir, "study.json")))
                if os.path.exists(os.path.join(run_dir, "scores.json")):
                    record.update(json.load(open(os.path.join(run_dir, "scores.json"))))
                records.append(record)
    return records


def _ms(values, scale=1.0, digits=1):
    v = scale * np.asarray([x for x in values if x is not None], np.float64)
    if not len(v):
        return ""
    if len(v) == 1:
        return f"{v[0]:.{digits}f}"
    return f"{v.mean():.{digits}f} ± {v.std(ddof=1):.{digits}f}"


def table(records, budget, seeds):
    """Markdown: per corpus, one row per model."""
    lines = []
    for corpus in CORPORA:
        rows = [r for r in records if r["corpus"] == corpus]
        if not rows:
            continue
        names = list(dict.fromkeys(r["name"] for r in rows))
        tasks = list(dict.fromkeys(t for r in rows for t in r.get("probes", {})))
        tuned = list(dict.fromkeys(t for r in rows for t in r.get("fine_tuned", {})))
        lines += [f"**{corpus}** (training budget {budget:.0f} s per model, pre-training "
                  f"seeds {list(seeds)}; mean ± sd over seeds)", ""]
        header = (["model", "steps", "train s", "params (embedding)", "top-10 (unigram)",
                   "median rank", "perplexity", "masked ppl"]
                  + [f"{t} probe" for t in tasks] + [f"{t} fine-tuned" for t in tuned])
        lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        for name in names:
            rs = [r for r in rows if r["name"] == name]
            m = [_lm_metrics(r) for r in rs]
            p = rs[0]["parameters"]
            cells = [name, _ms([r["steps"] for r in rs], digits=0),
                     _ms([r["train_seconds"] for r in rs], digits=0),
                     f"{p['total']:,} ({p['embedding']:,})",
                     (f"{_ms([x.get('top10') for x in m], 100)} "
                      f"({_ms([x.get('unigram_top10') for x in m], 100)})"
                      if "top10" in m[0] else ""),
                     _ms([x.get("median_rank") for x in m], digits=0),
                     _ms([x.get("perplexity") for x in m]),
                     _ms([x.get("masked_perplexity") for x in m])]
            cells += [_ms([r.get("probes", {}).get(t) for r in rs], 100) for t in tasks]
            cells += [_ms([r.get("fine_tuned", {}).get(t) for r in rs], 100) for t in tuned]
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)


def plot(records, path):
    plt = harness.pyplot()
    if plt is None:
        return
    corpora = [c for c in CORPORA if any(r["corpus"] == c and r["curve"] for r in records)]
    pairs = list(dict.fromkeys((p[2], p[3], p[4]) for p in PAIRS if p[4]))
    if not corpora:
        return
    fig, axes = plt.subplots(len(corpora), len(pairs), figsize=(3.6 * len(pairs),
                                                                3.2 * len(corpora)),
                             squeeze=False)
    panels = [(ax, (c, *pair)) for row, c in zip(axes, corpora) for ax, pair in zip(row, pairs)]
    for ax, (corpus, cheap, twin, metric) in panels:
        for name, color in ((cheap, "tab:blue"), (twin, "tab:orange")):
            for i, r in enumerate(x for x in records if x["corpus"] == corpus and x["name"] == name):
                pts = [q for q in r["curve"] if q.get(metric) is not None]
                ax.plot([q["seconds"] for q in pts], [q[metric] for q in pts], "o-",
                        color=color, alpha=0.8, label=name if i == 0 else None)
        ax.set_title(f"{corpus}: {cheap} vs {twin}", fontsize=9)
        ax.set_xlabel("training seconds")
        ax.set_ylabel("held-out " + ("top-10" if metric == "top10" else "perplexity"))
        if metric == "perplexity":
            ax.set_yscale("log")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def define_flags():
    """The command line's flags, defined when the module runs as the program."""
    harness.define_flags()
    flags.DEFINE_string("english_dir", "", "Corpus of `python -m tools.english_corpus` "
                        "(default: built in --output_dir).")
    flags.DEFINE_list("corpora", list(CORPORA), "Corpora to train on.")
    flags.DEFINE_list("models", list(MODELS), "Models to train.")
    flags.DEFINE_float("budget", 90.0, "Training seconds of every model (steps from "
                       "calibration).")
    flags.DEFINE_list("seeds", ["0", "1"], "Seeds of every model.")
    flags.DEFINE_integer("fine_tune_epochs", 2, "Epochs of the fine-tuning task.")
    flags.DEFINE_bool("table_only", False, "Only write the table and the PNG of the "
                      "finished runs.")


def main(argv):
    del argv
    args = flags.FLAGS
    corpora, models = args.corpora, args.models
    for c in corpora:
        if c not in CORPORA:
            raise app.UsageError(
                f"--corpora: unknown corpus {c!r}; expected some of {CORPORA}", 2)
    for m in models:
        if m not in MODELS:
            raise app.UsageError(f"--models: unknown model {m!r}; expected some of "
                                 f"{list(MODELS)}", 2)
    work_dir = os.path.join(args.output_dir, "quality")  # the runs, reused
    seeds = [int(s) for s in args.seeds]
    english_dir = args.english_dir or os.path.join(work_dir, "english_text")
    os.makedirs(work_dir, exist_ok=True)

    def log(message):
        print(message, flush=True)

    if args.table_only:
        corpora = []
    if "english" in corpora and not os.path.exists(os.path.join(english_dir, "order_test.tsv")):
        try:
            log(english_corpus.write_corpus(english_dir))
        except english_corpus.CorpusError as e:
            print(f"error: {e}", file=sys.stderr)
            return 1
    for corpus in corpora:
        fasttext_bin = shared_fasttext(corpus, work_dir, english_dir, log)
        corpus_records = []
        for name in models:
            step_time = calibrate(name, corpus, work_dir, english_dir, fasttext_bin, log)
            steps = max(CURVE_POINTS, int(round(args.budget / step_time)))
            for seed in seeds:
                corpus_records.append(pretrain_run(name, corpus, seed, steps, work_dir,
                                                   english_dir, fasttext_bin, log))
        probe_and_fine_tune(corpus_records, corpus, work_dir, english_dir,
                            args.fine_tune_epochs, log)
    # The table holds every finished run of these models and seeds (an earlier
    # invocation's other corpus included).
    records = stored_records(work_dir, models, seeds)
    text = table(records, args.budget, seeds)
    print(text)
    harness.write_results(args.output_dir, "quality_study", text, records)
    plot(records, os.path.join(args.output_dir, "quality_study.png"))
    return 0


if __name__ == "__main__":
    define_flags()
    app.run(main)
