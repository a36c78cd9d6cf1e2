"""CoRe's claim measured: standard vs two-phase BERT pretraining, held-out MLM loss vs wall time.

Two `tfeff-pretrain` runs one after the other on this machine, on the same
synthetic corpus, with the same sizes, optimizer, schedule and step budget
(the study size below, derived from configs/demo_bert_core.yaml):

    standard    a standard BERT for --steps steps
    two-phase   CoRe: the relaxed BERT until its loss plateaus (at most
                --coarse_steps), converted in-process, then the standard BERT
                to --steps

Every `--every` steps both runs write a checkpoint (all are kept); its wall
time is its file's modification time, counted from the start of training
(data preparation excluded, the conversion and the second graph trace
included). Afterwards each checkpoint is evaluated on the same held-out
batches: the coarse phase's checkpoints as the model they convert to
(`exact_attention=True`, what the conversion checks equal to float32 rounding).

Output in --output_dir: `core_study.md` (the table), `core_study.json`
(every point) and `core_study.png` (both curves against wall time, like the
paper's Figure 3). The table has the wall time at which each run first
reaches the standard run's final held-out loss (linear between
checkpoints) and their ratio (the paper: about 0.75), the final losses, and
where the time goes: median seconds per step of each phase, the switch's
cost, and the FLOPs per step of both models.

    python -m benchmarks.core_study --output_dir runs/bench           # make bench, ~30 min
    python -m benchmarks.core_study --output_dir runs/bench --reuse   # re-evaluate finished runs
"""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import glob  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import shutil  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

from absl import app  # noqa: E402
from absl import flags  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from benchmarks import harness  # noqa: E402
from benchmarks.core_training import first_reach  # noqa: E402
from benchmarks.core_training import plot  # noqa: E402
from tfeff.training import checkpoints  # noqa: E402
from tfeff.training import model_directory  # noqa: E402
from tfeff.training.families.bert import BERT  # noqa: E402
from tfeff.training.families.bert import COARSE_DIR  # noqa: E402
from tfeff.training.families.bert import SWITCH_FILE  # noqa: E402
from tfeff.training.families.bert import evaluate_bert  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BASE_CONFIG = os.path.join(REPO, "configs", "demo_bert_core.yaml")
FLAGS = flags.FLAGS


def define_flags():
    """The command line's flags, defined when the module runs as the program."""
    harness.define_flags()
    flags.DEFINE_integer("hidden_dim", 256, "d.")
    flags.DEFINE_integer("num_heads", 4, "h.")
    flags.DEFINE_integer("intermediate_dim", 1024, "d_f.")
    flags.DEFINE_integer("num_layers", 2, "Transformer layers.")
    flags.DEFINE_integer("sequence_length", 256, "n.")
    flags.DEFINE_integer("batch_size", 16, "Sequences per batch.")
    flags.DEFINE_integer("num_anchors", 16, "m of the relaxed attention.")
    flags.DEFINE_integer("ffn_rank", 32, "d_r of the relaxed feed-forward network.")
    flags.DEFINE_integer("train_sentences", 300000, "Synthetic training sentences.")
    flags.DEFINE_integer("steps", 2400, "Step budget of both runs.")
    flags.DEFINE_integer("coarse_steps", 1200, "Most steps of the relaxed phase.")
    flags.DEFINE_integer("every", 200, "Checkpoint (and curve point) interval in steps.")
    flags.DEFINE_integer("eval_batches", 60, "Held-out batches per evaluation.")
    flags.DEFINE_bool("reuse", False, "Reuse finished runs in --output_dir (only re-evaluate).")
    flags.DEFINE_string("name", "two_phase",
                        "Name of the two-phase run (its directory; outputs core_study_NAME.* "
                        "unless the default): compare relaxed variants against one standard "
                        "run with --reuse.")


def study_overrides():
    """The overrides of the study size on configs/demo_bert_core.yaml (both runs)."""
    n = FLAGS.sequence_length
    return [
        f"data.synthetic.num_train_sentences={FLAGS.train_sentences}",
        f"data.max_sequence_length={n}", f"data.batch_size={FLAGS.batch_size}",
        f"data.max_predictions_per_seq={int(np.ceil(0.15 * n))}",
        f"model.hidden_dim={FLAGS.hidden_dim}", f"model.num_heads={FLAGS.num_heads}",
        f"model.intermediate_dim={FLAGS.intermediate_dim}",
        f"model.num_layers={FLAGS.num_layers}",
        f"model.relaxed.num_anchors={FLAGS.num_anchors}",
        f"model.relaxed.ffn_rank={FLAGS.ffn_rank}",
        f"train.steps={FLAGS.steps}", f"train.checkpoint_every={FLAGS.every}",
        f"train.keep_checkpoints={FLAGS.steps // FLAGS.every + 2}",
        f"eval.max_batches={FLAGS.eval_batches}",
    ]


def run(label, model_dir, overrides):
    """`tfeff-pretrain` in a subprocess (unless --reuse finds it finished); its eval.json."""
    eval_path = os.path.join(model_dir, model_directory.EVAL_FILE)
    if FLAGS.reuse and os.path.exists(eval_path):
        print(f"{label}: reusing {model_dir}", flush=True)
    else:
        shutil.rmtree(model_dir, ignore_errors=True)
        cmd = [sys.executable, "-m", "tfeff.bin.pretrain", "--config", BASE_CONFIG,
               "--model_dir", model_dir] + [a for o in overrides for a in ("--override", o)]
        print(f"{label}: running tfeff-pretrain ({len(overrides)} overrides)", flush=True)
        t = time.time()
        with open(os.path.join(os.path.dirname(model_dir), f"{label}.log"), "w") as log:
            subprocess.run(cmd, check=True, stdout=log, stderr=subprocess.STDOUT)
        print(f"{label}: done in {time.time() - t:.0f} s", flush=True)
    with open(eval_path) as f:
        return json.load(f)


def checkpoint_times(directory):
    """`{step: mtime}` of the checkpoints in `directory`."""
    out = {}
    for index in glob.glob(os.path.join(directory, "ckpt-*.index")):
        step = int(os.path.basename(index)[len("ckpt-"):-len(".index")])
        out[step] = os.path.getmtime(index)
    return out


def events(log_dir, tag="train/loss"):
    """`[(step, wall_time)]` of the training loss scalars, sorted."""
    points = []
    for path in glob.glob(os.path.join(log_dir, "events.*")):
        for event in tf.compat.v1.train.summary_iterator(path):
            if any(v.tag == tag for v in event.summary.value):
                points.append((event.step, event.wall_time))
    return sorted(points)


def evaluate_checkpoints(model_dir, exact_attention=None):
    """`{step: held-out MLM loss}` for every checkpoint of the model directory."""
    config = model_directory.load_model_dir_config(model_dir)
    vocabulary = os.path.join(model_dir, model_directory.VOCABULARY_FILE)
    heldout = model_directory.corpus_files(config.data, model_dir)[1]
    model = BERT.build_model(config, *BERT.model_inputs(config, model_dir))
    model.build()
    checkpoint = checkpoints.make_checkpoint(model)
    losses = {}
    for step in sorted(checkpoint_times(os.path.join(model_dir, model_directory.CHECKPOINT_DIR))):
        path = os.path.join(model_dir, model_directory.CHECKPOINT_DIR, f"ckpt-{step}")
        checkpoints.restore(checkpoint, path)
        ev = evaluate_bert(model, config, heldout, vocabulary, exact_attention=exact_attention)
        losses[step] = ev["mlm_loss"]
        print(f"  {model_dir} step {step}: held-out MLM loss {ev['mlm_loss']:.4f}", flush=True)
    return losses


def curve(model_dir, train_seconds, exact_attention=None):
    """Points `{step, seconds, loss}` of a directory, seconds from the start of training."""
    times = checkpoint_times(os.path.join(model_dir, model_directory.CHECKPOINT_DIR))
    losses = evaluate_checkpoints(model_dir, exact_attention)
    return [{"step": s, "wall": times[s], "loss": losses[s]} for s in sorted(times)]


def step_seconds(log_dir, lo, hi):
    """Median seconds per step between consecutive logged steps within [lo, hi]."""
    points = [p for p in events(log_dir) if lo <= p[0] <= hi]
    per_step = [(b[1] - a[1]) / (b[0] - a[0]) for a, b in zip(points, points[1:])]
    return statistics.median(per_step) if per_step else None


def flops_per_step(config, relaxed):
    """FLOPs of one training step (forward + backward = 3 forward) of the encoder and MLM head.

    Matrix products only, 2 FLOPs per multiply-add; the relaxed attention as
    in benchmarks/core.py (anchor scores, S2 V, U = S2 V W_O, S1 U).
    """
    m, d = config.model, config.model.hidden_dim
    n, b = config.data.max_sequence_length, config.data.batch_size
    h, f, dk = m.num_heads, m.intermediate_dim, d // m.num_heads
    a, r = (m.relaxed.num_anchors, m.relaxed.ffn_rank) if relaxed else (0, 0)
    if a:  # 0: that part stays standard
        attention = 3 * n * d * d + h * (3 * n * a * dk + a * dk * d + n * a * d)
    else:
        attention = 4 * n * d * d + 2 * n * n * d
    ffn = 2 * n * r * (d + f) if r else 2 * n * d * f
    p = config.data.max_predictions_per_seq
    head = p * (d * d + d * config.data.wordpiece_vocabulary_size)
    return 2 * 3 * b * (m.num_layers * (attention + ffn) + head)


def main(argv):
    del argv
    out_dir = os.path.abspath(FLAGS.output_dir)
    runs_dir = os.path.join(out_dir, "core_study")
    os.makedirs(runs_dir, exist_ok=True)
    machine = f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, " + (
        "GPU" if tf.config.list_physical_devices("GPU") else "no GPU")
    common = study_overrides()
    standard_dir = os.path.join(runs_dir, "standard")
    two_phase_dir = os.path.join(runs_dir, FLAGS.name)
    stem = "core_study" if FLAGS.name == "two_phase" else f"core_study_{FLAGS.name}"
    standard_eval = run("standard", standard_dir,
                        common + ["core.coarse_steps=0", "core.plateau_patience=0",
                                  "model.relaxed=null"])
    corpus = os.path.join(standard_dir, "corpus")
    two_phase_eval = run(FLAGS.name, two_phase_dir, common + [
        f"core.coarse_steps={FLAGS.coarse_steps}", f"core.plateau_window={FLAGS.every // 2}",
        "data.synthetic=null",
        f"data.train_files={corpus}/train.txt", f"data.heldout_files={corpus}/heldout.txt"])

    # Wall time from the start of training: the final checkpoint is written at its end.
    curves, starts = {}, {}
    standard = curve(standard_dir, standard_eval["train_seconds"])
    starts["standard"] = standard[-1]["wall"] - standard_eval["train_seconds"]
    coarse = curve(os.path.join(two_phase_dir, COARSE_DIR), None,
                   exact_attention=True)
    refined = curve(two_phase_dir, two_phase_eval["train_seconds"])
    starts["two_phase"] = refined[-1]["wall"] - two_phase_eval["train_seconds"]
    with open(os.path.join(two_phase_dir, COARSE_DIR,
                           SWITCH_FILE)) as f:
        switch = json.load(f)
    # The converted checkpoint at the switch step is written after the conversion:
    # the same loss as the coarse one, later.
    converted = [p for p in refined if p["step"] == switch["switch_step"]]
    two_phase = coarse + refined
    for label, points in (("standard", standard), ("two_phase", two_phase)):
        for p in points:
            p["seconds"] = p["wall"] - starts[label]
        curves[label] = points
    target = standard[-1]["loss"]
    reach = {label: first_reach(points, target) for label, points in curves.items()}
    ratio = (reach["two_phase"] / reach["standard"]
             if reach["two_phase"] is not None and reach["standard"] else None)
    # The other way round: when the standard run reached the two-phase run's final loss.
    reverse_target = two_phase[-1]["loss"]
    reverse = {label: first_reach(points, reverse_target) for label, points in curves.items()}
    reverse_ratio = (reverse["two_phase"] / reverse["standard"]
                     if reverse["two_phase"] is not None and reverse["standard"] else None)

    config = model_directory.load_model_dir_config(two_phase_dir)
    steps, s = FLAGS.steps, switch["switch_step"]
    std_step = step_seconds(os.path.join(standard_dir, "logs"), 0, steps)
    coarse_step = step_seconds(os.path.join(two_phase_dir, "logs"), 0, s)
    # From the second refined log on: the first interval holds the switch.
    refined_step = step_seconds(os.path.join(two_phase_dir, "logs"), s + 1, steps)
    coarse_end = [p for p in coarse if p["step"] == s][0]["seconds"]
    switch_cost = converted[0]["seconds"] - coarse_end if converted else None
    first_refined = [p for p in events(os.path.join(two_phase_dir, "logs")) if p[0] > s][0]
    refined_start = (first_refined[1] - starts["two_phase"]
                     - (first_refined[0] - s) * (refined_step or std_step))
    flops = {k: flops_per_step(config, k == "relaxed") for k in ("standard", "relaxed")}

    summary = {
        "machine": machine, "size": common, "switch": switch,
        "standard_final_loss": target, "two_phase_final_loss": two_phase[-1]["loss"],
        "standard_train_seconds": standard_eval["train_seconds"],
        "two_phase_train_seconds": two_phase_eval["train_seconds"],
        "seconds_to_standard_final_loss": reach, "ratio": ratio,
        "seconds_to_two_phase_final_loss": reverse, "reverse_ratio": reverse_ratio,
        "seconds_per_step": {"standard": std_step, "relaxed": coarse_step,
                             "refined": refined_step},
        "switch_seconds": {"conversion_and_save": switch_cost,
                           "until_refined_training": refined_start - coarse_end},
        "flops_per_step": flops,
        "unigram_perplexity": standard_eval.get("unigram_perplexity"),
        "standard_perplexity": standard_eval["perplexity"],
        "two_phase_perplexity": two_phase_eval["perplexity"],
    }
    plot(os.path.join(out_dir, f"{stem}.png"), curves, coarse_end, target,
         "CoRe two-phase vs standard BERT pretraining")
    def fmt(value, spec="{:.0f}", missing="n/a"):
        return missing if value is None else spec.format(value)

    lines = [
        f"CoRe study: standard vs two-phase BERT, {FLAGS.num_layers} layers, d={FLAGS.hidden_dim}, "
        f"h={FLAGS.num_heads}, d_f={FLAGS.intermediate_dim}, n={FLAGS.sequence_length}, "
        f"batch {FLAGS.batch_size}, relaxed m={FLAGS.num_anchors} d_r={FLAGS.ffn_rank}, "
        f"{steps} steps, one seed ({machine})", "",
        "| run | train seconds | final held-out MLM loss (perplexity) | seconds to the standard "
        "run's final loss | seconds to the two-phase run's final loss |", "|---|---|---|---|---|",
        f"| standard | {standard_eval['train_seconds']:.0f} | {target:.3f} "
        f"({standard_eval['perplexity']:.1f}) | {fmt(reach['standard'], missing='never')} | "
        f"{fmt(reverse['standard'], missing='never')} |",
        f"| two-phase (switch at step {s}, {switch['reason']}) | "
        f"{two_phase_eval['train_seconds']:.0f} | {two_phase[-1]['loss']:.3f} "
        f"({two_phase_eval['perplexity']:.1f}) | {fmt(reach['two_phase'], missing='never')} | "
        f"{fmt(reverse['two_phase'], missing='never')} |",
        "",
        f"Time ratio two-phase / standard to the standard run's final loss: "
        f"{fmt(ratio, '{:.2f}', 'none (two-phase never reaches it)')} (paper: about 0.75); "
        f"to the two-phase run's final loss: {fmt(reverse_ratio, '{:.2f}')}. "
        f"Unigram perplexity {fmt(summary['unigram_perplexity'], '{:.1f}')}.", "",
        "| where the time goes | standard | two-phase |", "|---|---|---|",
        f"| seconds per step, relaxed phase | | {fmt(coarse_step, '{:.3f}')} |",
        f"| seconds per step, standard model | {fmt(std_step, '{:.3f}')} | "
        f"{fmt(refined_step, '{:.3f}')} |",
        f"| conversion and save at the switch (s) | | {fmt(switch_cost, '{:.1f}')} |",
        f"| switch until refined training runs (s; + retrace, input skip) | | "
        f"{fmt(refined_start - coarse_end, '{:.1f}')} |",
        f"| forward+backward GFLOPs per step (matrix products) | {flops['standard'] / 1e9:.1f} | "
        f"{flops['relaxed'] / 1e9:.1f} (relaxed phase) |",
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    harness.write_results(out_dir, stem, text, {"summary": summary, "curves": curves})


if __name__ == "__main__":
    define_flags()
    app.run(main)
