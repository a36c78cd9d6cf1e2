"""The GPU suite's report: `results.md` (the tables) and `results.json` from the parts'
files in a results folder, and the CoRe training curves' PNG where matplotlib is."""

import datetime
import json
import os

from benchmarks import gpu_parts
from benchmarks import harness
from benchmarks import paper_speed


ELMO_C_TARGET_WORDS_PER_S = 200_000


LABELS = {
    "tfeff_jax": "tfeff `Bert`, JAX, XLA",
    "keras_hub_jax": "keras-hub `BertMaskedLM`, JAX, XLA",
    "hf_torch": "Hugging Face `BertForMaskedLM`, PyTorch eager, SDPA",
    "hf_torch_compile": "Hugging Face `BertForMaskedLM`, `torch.compile`, SDPA",
    "tfeff_torch": "tfeff `Bert`, PyTorch eager",
    "keras_hub_torch": "keras-hub `BertMaskedLM`, PyTorch eager",
    "tfeff_relaxed_jax": "tfeff `Bert`, CoRe relaxed, JAX, XLA",
}


def _fmt_memory(row):
    b = row.get("peak_memory_bytes")
    return f"{b / 2**30:.1f} GiB" if b else "n/a"


def tables(preset, sizes, parts, rows):
    """The Markdown tables of the parts done so far."""
    by_part = {r["part"]: r for r in rows}
    lines = []
    if any(r["section"] == "peers" for r in rows):
        lines += [f"### BERT MLM training step (bf16; {sizes['layers']} layers, width "
                  f"{sizes['hidden']}, {sizes['heads']} heads, FFN {sizes['intermediate']}, "
                  f"vocabulary {sizes['vocabulary']:,}; median of {sizes['steps']} steps "
                  f"after {sizes['warmup']})", ""]
    for n in sizes["lengths"]:
        if not any(f"bert_{i}_{n}" in by_part for i in ("tfeff_jax", "keras_hub_jax", "hf_torch",
                                                         "hf_torch_compile", "tfeff_torch",
                                                         "keras_hub_torch")):
            continue
        masked = gpu_parts.masked_per_sequence(n)
        lines += [f"n = {n}, batch {sizes['lengths'][n]}, {masked} masked "
                  "per sequence:", "",
                  "| implementation | parameters | step ms | tokens/s | vs Hugging Face "
                  "eager | peak memory | MFU |", "|---|---|---|---|---|---|---|"]
        reference = by_part.get(f"bert_hf_torch_{n}", {}).get("step_s")
        for part, _, section, implementation, length in parts:
            if section != "peers" or length != n or part not in by_part:
                continue
            r = by_part[part]
            if "step_s" not in r:
                lines.append(f"| {LABELS[implementation]} | {r['error']} | | | | | |")
                continue
            peak = r.get("peak_flops")
            mfu = (f"{100 * r['model_tflops'] * 1e12 / peak:.1f}%" if peak else "n/a")
            ratio = f"{reference / r['step_s']:.2f}x" if reference else "n/a"
            lines.append(f"| {LABELS[implementation]} | {r['params'] / 1e6:.1f}M | "
                         f"{1000 * r['step_s']:.1f} | {r['tokens_per_s']:,.0f} | {ratio} | "
                         f"{_fmt_memory(r)} | {mfu} |")
        lines.append("")
    core = []
    for n in sizes["lengths"]:
        standard = by_part.get(f"bert_tfeff_jax_{n}", {})
        relaxed = by_part.get(f"core_relaxed_jax_{n}", {})
        if "step_s" in standard and "step_s" in relaxed:
            core.append(f"| {n} | {1000 * standard['step_s']:.1f} | "
                        f"{1000 * relaxed['step_s']:.1f} | "
                        f"{standard['step_s'] / relaxed['step_s']:.2f}x | "
                        f"{_fmt_memory(standard)} | {_fmt_memory(relaxed)} |")
    if core:
        lines += ["### CoRe: relaxed vs standard BERT training step (tfeff, JAX, bf16)", "",
                  "| n | standard ms | relaxed ms | standard / relaxed | standard memory | "
                  "relaxed memory |", "|---|---|---|---|---|---|", *core, ""]
    profiled = [(part, implementation, length) for part, _, section, implementation, length
                in parts if section in ("peers", "core")
                and ("profile" in by_part.get(part, {})
                     or "profile_error" in by_part.get(part, {}))]
    if profiled:
        from benchmarks import xla_profile

        lines += ["### Where the JAX steps' time goes (`benchmarks/xla_profile.py`)", ""]
        for part, implementation, length in profiled:
            r = by_part[part]
            lines += [f"{LABELS[implementation]}, n={length}:", ""]
            lines += ([f"No profile: {r['profile_error']}"] if "profile_error" in r else
                      [xla_profile.table(r["profile"], r["step_s"])])
            lines.append("")
    output = {name: by_part[f"output_{name}_jax"] for name in gpu_parts.OUTPUT_MODELS
              if f"output_{name}_jax" in by_part}
    if output:
        lines += [f"### Output layers at a {sizes['word_vocabulary']:,}-word vocabulary "
                  "(ELMo encoder, JAX, bf16)", "",
                  "| model | parameters | step ms | words/s | / ELMo-C step | paper | "
                  "peak memory | MFU |", "|---|---|---|---|---|---|---|---|"]
        base = output.get("elmo_c", {}).get("step_s")
        for name, r in output.items():
            label, paper = gpu_parts.OUTPUT_MODELS[name]
            ratio = f"{r['step_s'] / base:.2f}x" if base else "n/a"
            mfu = f"{100 * r['mfu']:.1f}%" if r.get("mfu") else "n/a"
            lines.append(f"| {label} | {r['params'] / 1e6:.1f}M | {1000 * r['step_s']:.1f} | "
                         f"{r['tokens_per_s']:,.0f} | {ratio} | "
                         f"{f'{paper:.2f}x' if paper else '1'} | {_fmt_memory(r)} | {mfu} |")
        if "elmo_c" in output:
            words = output["elmo_c"]["tokens_per_s"]
            lines += ["", f"ELMo-C: {words:,.0f} words/s against the target of "
                      f"{ELMO_C_TARGET_WORDS_PER_S:,} on one H100 "
                      f"({words / ELMO_C_TARGET_WORDS_PER_S:.2f} of it)."]
            if output["elmo_c"].get("profile_error"):
                lines += ["", f"No profile of ELMo-C's step: {output['elmo_c']['profile_error']}"]
            elif output["elmo_c"].get("profile"):
                from benchmarks import xla_profile

                lines += ["", f"What limits ELMo-C's step (a trace of "
                          f"{output['elmo_c']['profile']['steps']} steps, "
                          "`benchmarks/xla_profile.py`):", "",
                          xla_profile.table(output["elmo_c"]["profile"],
                                            output["elmo_c"]["step_s"])]
        lines.append("")
    peer = by_part.get("output_adaptive_torch")
    if peer:
        lines += ["### ELMo-A's adaptive softmax against PyTorch's `AdaptiveLogSoftmaxWithLoss` "
                  f"({peer['word_vocabulary']:,} words, cutoffs {peer['cutoffs']}; same "
                  "encoder under bf16 autocast, torch backend; output layers in float32)",
                  "",
                  "| output layer | parameters | step ms | words/s | / PyTorch's |",
                  "|---|---|---|---|---|"]
        for name, label in (("tfeff", "tfeff `AdaptiveSoftmax`"),
                            ("torch", "`torch.nn.AdaptiveLogSoftmaxWithLoss`")):
            step = peer[f"{name}_step_s"]
            ratio = f"{peer['tfeff_over_torch']:.2f}x" if name == "tfeff" else "1"
            lines.append(f"| {label} | {peer[f'{name}_params'] / 1e6:.1f}M | "
                         f"{1000 * step:.1f} | {peer['tokens_per_step'] / step:,.0f} | "
                         f"{ratio} |")
        lines.append("")
    speed, parity = by_part.get("lstm_speed_torch"), by_part.get("lstm_parity_torch")
    if speed or parity:
        lines += ["### Masked ELMo's encoder (`MaskedBiLSTM`, torch backend)", ""]
        if speed:
            lines += [speed.get("table") or f"`benchmarks/lstm.py` exited "
                      f"{speed['returncode']}:\n\n```text\n{speed['output']}\n```", ""]
        if parity:
            verdict = ("equal to the portable path (outputs, states, gradients)"
                       if parity["returncode"] == 0 else
                       f"FAILED (exit {parity['returncode']}):\n\n```text\n"
                       f"{parity['output']}\n```")
            lines += [f"Parity of the torch LSTM path on {sizes['device']}: {verdict}", ""]
    lines += core_training_table(by_part)
    lines += paper_speed.tables(by_part)
    return "\n".join(lines)


def core_training_summary(by_part):
    """The comparison of section 3 once both runs are in, else None: the target (the
    standard run's final held-out loss), the time each run first reaches it (and the
    standard's best loss), and their ratios."""
    from benchmarks import core_training

    standard = by_part.get("core_train_standard_jax")
    two = by_part.get("core_train_two_phase_jax")
    if not standard or not two:
        return None
    final = standard["points"][-1]["loss"]
    best = min(p["loss"] for p in standard["points"])
    out = {"target": final, "best": best}
    for name, row in (("standard", standard), ("two_phase", two)):
        out[name] = {"to_final_s": core_training.first_reach(row["points"], final),
                     "to_best_s": core_training.first_reach(row["points"], best)}
    for key in ("to_final_s", "to_best_s"):
        a, b = out["two_phase"][key], out["standard"][key]
        out[f"ratio_{key}"] = a / b if a is not None and b else None
    return out


def core_training_table(by_part):
    """Section 3's Markdown lines (one table per finished run, the comparison once both are
    in)."""
    runs = [(label, by_part[part]) for label, part in (
        ("standard", "core_train_standard_jax"), ("two-phase", "core_train_two_phase_jax"))
        if part in by_part]
    if not runs:
        return []
    sizes = runs[0][1]["sizes"]
    lines = [f"### CoRe: two-phase vs standard training ({sizes['layers']} layers, width "
             f"{sizes['hidden']}, FFN {sizes['intermediate']}, {sizes['position_embedding']} "
             f"positions; relaxed: {sizes['relaxed']['num_anchors']} anchors, FFN rank "
             f"{sizes['relaxed']['ffn_rank']}; n = {runs[0][1]['sequence_length']}, batch "
             f"{sizes['batch']}, AdamW {sizes['learning_rate']:g}; "
             f"{runs[0][1]['train_windows']:,} training windows of "
             f"`{os.path.basename(runs[0][1]['core_data'])}`; JAX, bf16)", "",
             "| run | steps | switch at step | training s | ms/step relaxed | "
             "ms/step standard | final held-out loss | best |", "|---|---|---|---|---|---|---|---|"]
    for label, r in runs:
        switch = r["switch"]
        ms = {k: f"{1000 * v:.1f}" if v else "" for k, v in r["median_step_s"].items()}
        steps = (f"{r['steps']:,}" if r["steps"] == r["planned_steps"] else
                 f"{r['steps']:,} of {r['planned_steps']:,} (time budget)")
        lines.append(f"| {label} | {steps} | "
                     f"{switch['step'] if switch else ''} | {r['train_seconds']:.0f} | "
                     f"{ms['relaxed']} | {ms['standard']} | {r['points'][-1]['loss']:.3f} | "
                     f"{min(p['loss'] for p in r['points']):.3f} |")
    lines.append("")
    summary = core_training_summary(by_part)
    two = by_part.get("core_train_two_phase_jax")
    if two:
        switch = two["switch"]
        errors = ", ".join(f"{k} {v:.1e}" for k, v in switch["relative_errors"].items())
        lines += [f"The switch at step {switch['step']} ({switch['seconds']:.0f} s): "
                  f"`merge_relaxed_bert` took {switch['merge_s']:.1f} s, its float32 check "
                  f"passed (relative errors {errors}; it refuses above the float32 rounding "
                  f"bound of the model's longest path).", ""]
    if summary:
        def seconds(value):
            return f"{value:.0f} s" if value is not None else "not reached"

        def ratio(value):
            return f"{value:.2f}" if value is not None else "n/a"

        lines += [
            f"Time to the standard run's final held-out loss ({summary['target']:.3f}): "
            f"standard {seconds(summary['standard']['to_final_s'])}, two-phase "
            f"{seconds(summary['two_phase']['to_final_s'])}, ratio "
            f"{ratio(summary['ratio_to_final_s'])} (the paper: about 0.75). To the standard "
            f"run's best ({summary['best']:.3f}): standard "
            f"{seconds(summary['standard']['to_best_s'])}, two-phase "
            f"{seconds(summary['two_phase']['to_best_s'])}, ratio "
            f"{ratio(summary['ratio_to_best_s'])}.", ""]
    return lines


def write_results(out, preset, sizes, parts, command, environment):
    """`OUT/results.json` and `OUT/results.md` from every part's file so far."""
    rows = []
    for part, *_ in parts:
        path = os.path.join(out, "parts", f"{part}.json")
        if os.path.exists(path):
            with open(path, encoding="utf-8") as f:
                rows.append(json.load(f))
    date = utc_now()
    data = {"date": date, "command": command, "preset": preset, "environment": environment,
            "rows": rows}
    summary = core_training_summary({r["part"]: r for r in rows})
    if summary:
        from benchmarks import core_training

        data["core_training"] = summary
        by_part = {r["part"]: r for r in rows}
        two = by_part["core_train_two_phase_jax"]
        data["core_training"]["png"] = core_training.plot(
            os.path.join(out, "core_training.png"),
            {"standard": by_part["core_train_standard_jax"]["points"],
             "two-phase (relaxed, then merged)": two["points"]},
            two["switch"]["seconds"], summary["target"],
            "CoRe two-phase vs standard BERT training")
    gpus = ", ".join(environment["gpus"]) or "no NVIDIA GPU (nvidia-smi)"
    versions = ", ".join(f"{k} {v}" for k, v in environment["packages"].items() if v)
    text_png = ""
    if summary:
        text_png = ("\nBoth curves: `core_training.png`.\n" if data["core_training"]["png"]
                    else "\nNo PNG (matplotlib is not installed here): rerun the same command "
                    "on this folder where it is, to draw it.\n")
    finished = sorted(r["finished"] for r in rows if "finished" in r)
    when = (f"parts measured {finished[0]} to {finished[-1]}" if finished else "no part yet")
    text = (f"# tfeff GPU measurements ({preset} preset)\n\n"
            f"Written {date} ({when}); `{command}`\n\nDevice: {gpus}; Python "
            f"{environment['python']}, {environment['cpu_count']} CPU cores; {versions}.\n\n" + tables(preset, sizes, parts, rows)
            + text_png)
    harness.write_text_atomic(os.path.join(out, "results.json"), json.dumps(data, indent=1))
    harness.write_text_atomic(os.path.join(out, "results.md"), text)
    return rows


def utc_now():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
