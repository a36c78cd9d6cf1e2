"""The papers' speed tables as GPU-suite parts, built from the configs.

`benchmarks/gpu_suite.py` runs each of `PARTS` in a process of its own
(`gpu_parts.run_part` calls `run` here); `gpu_report` prints `tables`. What
the parts time, every row at the shapes its label names:

* **Li et al. (TACL 2019), Table 4** (§5.2.1): the five output layers CONT
  (`configs/elmo_c.yaml`), FIXED (`elmo_fixed.yaml`), SUBWORD (`elmo_sub.yaml`),
  ADAPTIVE (`elmo_a.yaml`) and SAMPLED (`elmo_sampled.yaml` with
  `model.layer_norm=true`: Table 4's SAMPLED has CONT's input and encoder, where
  the config is ELMo's baseline without layer norm) at 800K words, and CONT,
  ADAPTIVE and SAMPLED at 2,000K. S1: batch 1, the loss read back after every
  step, the time of one batch. S2: the paper's maximal batch per card, the time
  to train one million words = the steps that take (words / (batch x
  length), rounded up) x the median step. S3 needs four cards: not run.
* **Li et al., Table 2**: ELMo-C, ELMo-A, ELMo-Sub and ELMo (`elmo_sampled.yaml`)
  at the configs' own settings (clipping, averaged directions, ELMo-A's
  divisor, ELMo without layer norm and with Adagrad) and per-card batches
  (the config's global batch over the cards its comment names: 768, 256, 320,
  128), and all four at 128 windows. `benchmarks/gpu.py`'s paper preset keeps
  the published rows at 128 windows without the configs' settings.
* **Li et al., Table 5, GPT** (§5.2.2): `configs/transformer_lm_gpt.yaml`
  (n = 512) with CONT, FIXED, SUBWORD, ADAPTIVE and SAMPLED at 800K words, the
  other outputs' settings read from their ELMo configs; time per million words
  at the config's batch of 32 windows (the paper's per-card batches are not
  given; its figures are on four cards).
* **Masked ELMo** (Senay & Salin, §2.2, §3.1): `configs/masked_elmo.yaml` on the
  torch backend with 4 mask sets and with 1 (`model.mask_accumulation`, the
  paper's "+6%"), on the cuDNN path (`use_cudnn: auto`) and on the portable
  path (`use_cudnn: false`, the per-step loop an in-cell clip would need; tfeff's
  `MaskedBiLSTM` has no clipping, so no clipped cell is timed).

Variants compared are timed in interleaved rounds in one process
(`harness.interleaved_times`): medians of the rounds, and ratios as the median
over rounds of the per-round ratio. Every model of a part runs one precision
(`mixed_bfloat16` on JAX; float32 without TF32 for Masked ELMo on torch) and
one optimizer per table (Table 4 and 5: the CONT config's Adam and clipping
for every row; Table 2 and Masked ELMo: each config's own), built from the
config with a constant rate (tfeff's trainer, which skips non-finite updates,
needs TensorFlow). A model that runs out of device memory is a row saying so,
as Table 5's "OOM". Keras, JAX and PyTorch are imported in `run` only: the
suite's own process imports none of them.
"""

import math
import os

import numpy as np

from benchmarks import harness

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MILLION = 1_000_000

# Li et al., Table 4's output layers: name -> (paper-size config, demo config).
OUTPUTS = {
    "CONT": ("elmo_c", "demo_elmo_c"),
    "FIXED": ("elmo_fixed", "demo_elmo_fixed"),
    "SUBWORD": ("elmo_sub", "demo_elmo_sub"),
    "ADAPTIVE": ("elmo_a", "demo_elmo_a"),
    "SAMPLED": ("elmo_sampled", "demo_elmo_sampled"),
}
# Table 4 (§5.2.1), by (output, vocabulary; None for the paper's "∞"): the maximal batch
# per card, the parameters in millions, and S1, S2, S3 (CONT in seconds, the others
# relative to CONT). The 40K rows are not timed here.
TABLE4 = {
    ("CONT", None): dict(batch=640, params=76, S1=0.47, S2=115.28, S3=34.58),
    ("FIXED", None): dict(batch=512, params=76, S1=1.17, S2=1.24, S3=1.24),
    ("SUBWORD", None): dict(batch=320, params=92, S1=1.09, S2=1.53, S3=1.55),
    ("ADAPTIVE", 40_000): dict(batch=384, params=97, S1=1.08, S2=1.30, S3=1.34),
    ("ADAPTIVE", 800_000): dict(batch=256, params=196, S1=1.16, S2=1.47, S3=1.89),
    ("ADAPTIVE", 2_000_000): dict(batch=192, params=213, S1=1.25, S2=1.82, S3=2.49),
    ("SAMPLED", 40_000): dict(batch=512, params=96, S1=1.07, S2=1.18, S3=1.30),
    ("SAMPLED", 800_000): dict(batch=256, params=483, S1=1.15, S2=1.35, S3=1.91),
    ("SAMPLED", 2_000_000): dict(batch=64, params=1102, S1=1.16, S2=2.35, S3=16.09),
}
# Table 5's GPT column (§5.2.2): seconds per million words on four cards (CONT), the
# others relative to CONT; ADAPTIVE and SAMPLED at 800K words.
TABLE5_GPT = {"CONT": 43.53, "FIXED": 1.14, "SUBWORD": 1.44, "ADAPTIVE": 2.33, "SAMPLED": 8.31}
# Table 2: model -> (config, demo config, training days, cards, maximal batch per card,
# parameters in millions). The configs' global batch is the per-card batch times these
# cards (their comments say so); the demo configs are one card's.
TABLE2 = {
    "ELMo-C": ("elmo_c", "demo_elmo_c", 2.5, 4, 768, 76),
    "ELMo-A": ("elmo_a", "demo_elmo_a", 5.7, 4, 256, 196),
    "ELMo-Sub": ("elmo_sub", "demo_elmo_sub", 3.9, 4, 320, 92),
    "ELMo": ("elmo_sampled", "demo_elmo_sampled", 14.0, 3, 128, 499),
}
# §5.2.1: "breaking words into subwords leads to longer sequences, which increases the
# training time by 1.1x". Synthetic windows have no words: a SUBWORD window of n tokens is
# counted as n / 1.1 words.
SUBWORD_TOKENS_PER_WORD = 1.1
# Senay & Salin: 4 mask sets cost "+6%" training time (§3.1); the unclipped cell that runs
# on cuDNN "leads to a 20% speed-up" over ELMo's clipped one (§2.2).
MASKED_ELMO_PAPER = {"mask_sets": "+6% (§3.1)", "cudnn": "20% speed-up (§2.2)"}

# (part, Keras backend, group) in the order they run, after the suite's other parts.
PARTS = [("speed_li_table4_800k_jax", "jax", "table4_800k"),
         ("speed_li_table4_2m_jax", "jax", "table4_2m"),
         ("speed_li_table2_jax", "jax", "table2"),
         ("speed_li_table5_gpt_jax", "jax", "table5_gpt"),
         ("speed_masked_elmo_torch", "torch", "masked_elmo")]
BACKENDS = {group: backend for _, backend, group in PARTS}
TITLES = {
    "table4_800k": "Li et al., Table 4 at 800K words: five output layers on one encoder, one card",
    "table4_2m": "Li et al., Table 4 at 2,000K words: CONT, ADAPTIVE, SAMPLED, one card",
    "table2": "Li et al., Table 2: the configs at their own settings and per-card batches, "
              "and at 128 windows, one card",
    "table5_gpt": "Li et al., Table 5, GPT (n = 512): five output layers, one card",
    "masked_elmo": "Masked ELMo: mask sets and the cuDNN path (Senay & Salin, §2.2, §3.1)",
}
PRECISIONS = {"bf16": "bf16 (mixed_bfloat16)", "fp32": "fp32",
              "fp32_strict": "fp32, TF32 off (cuDNN and matmuls)"}
BACKEND_NAMES = {"jax": "JAX, XLA", "torch": "PyTorch eager"}


def steps_for_words(words, batch, length, tokens_per_word=1.0):
    """Training steps that cover `words` words at `batch` windows of `length` tokens,
    `tokens_per_word` tokens a word: `words x tokens_per_word / (batch x length)`,
    rounded up."""
    return math.ceil(round(words * tokens_per_word / (batch * length), 9))


def scaled_batch(batch, speed):
    """A paper batch at the preset's `batch_scale` (the CPU preset's are smaller), >= 1."""
    return max(1, round(batch * speed["batch_scale"]))


def config_path(name):
    return os.path.join(REPO, "configs", name + ".yaml")


def _load(name, overrides=()):
    from tfeff.config import load_config

    return load_config(config_path(name), list(overrides))


def batch_overrides(config_name, overrides, batch):
    """The overrides that set a config's batch to `batch`: `data.batch_size`, and where the
    config's `rnmt` schedule would refuse a batch below its base, `train.base_batch_size`
    (the schedule is not timed: the parts' optimizers keep the base rate)."""
    train = _load(config_name, overrides).train
    extra = ([f"train.base_batch_size={batch}"]
             if train.decay == "rnmt" and batch < train.base_batch_size else [])
    return [f"data.batch_size={batch}"] + extra


def _config_name(pair, speed):
    """The paper-size or demo config of a `(paper, demo)` pair, by the preset."""
    return pair[0] if speed["configs"] == "paper" else pair[1]


def _fmt_number(value):
    return f"{value:g}"


def describe_encoder(config):
    """The encoder's sizes and settings, in words."""
    m = config.model
    if config.family == "elmo":
        lstm = (f"LSTMP {m.num_layers} x {m.units} -> {m.projection_dim}" if m.projection_dim
                else f"LSTM {m.num_layers} x {m.units}")
        clip = (f"cell/proj clip {_fmt_number(m.cell_clip)}/{_fmt_number(m.proj_clip)}"
                if m.cell_clip or m.proj_clip else "no clipping")
        return (f"{lstm}, {clip}, {'layer norm' if m.layer_norm else 'no layer norm'}, "
                f"directions {m.direction_loss}")
    if config.family == "transformer_lm":
        stacks = "forward and backward stacks" if m.bidirectional else "forward stack"
        return (f"transformer {m.num_layers} x {m.hidden_dim}, {m.num_heads} heads, FFN "
                f"{m.intermediate_dim}, {m.position_embedding} positions, {stacks}")
    return (f"MaskedBiLSTM {m.num_layers} x {m.units} -> {m.projection_dim} per direction, "
            f"no clipping, use_cudnn {str(m.use_cudnn).lower()}")


def describe_output(config, vocabulary):
    """The input and output layers and the vocabulary, in words."""
    m, d = config.model, config.data
    if config.family == "masked_elmo" or d.tokenization == "wordpiece":
        where = f"{d.wordpiece_vocabulary_size:,} WordPieces"
    else:
        where = f"V {vocabulary:,}"
    if m.output_layer == "continuous":
        out = f"continuous ({m.output_loss})"
    elif m.output_layer == "adaptive":
        capacity = ("" if m.adaptive_tail_capacity is None
                    else f", tail capacity {_fmt_number(m.adaptive_tail_capacity)}")
        out = (f"adaptive, cutoffs {list(m.adaptive_cutoffs)}, divisor "
               f"{_fmt_number(m.adaptive_div_value)}{capacity}")
    elif m.output_layer in ("sampled", "fixed"):
        what = "sampled softmax" if m.output_layer == "sampled" else "fixed (sampled, frozen table)"
        out = f"{what}, {m.num_sampled:,} negatives"
    else:
        out = "full softmax" + (", tied" if getattr(m, "tie_output", True) else "")
    if config.family == "masked_elmo":
        return (f"{where}, {out}; {m.mask_accumulation} mask set"
                f"{'s' if m.mask_accumulation > 1 else ''} x {d.max_predictions_per_seq} "
                "predictions")
    return f"{where}, {m.input_embedding} input, {out}"


def describe_optimizer(train):
    """The optimizer the part builds from a `train` section, in words."""
    clip = f", global clipnorm {_fmt_number(train.clipnorm)}" if train.clipnorm else ""
    if getattr(train, "optimizer", "adam") == "adagrad":
        return (f"Adagrad (accumulators from "
                f"{_fmt_number(train.adagrad_initial_accumulator)}){clip}")
    epsilon = getattr(train, "adam_epsilon", 0.0) or 1e-7
    return f"Adam (epsilon {_fmt_number(epsilon)}){clip}"


def label(row):
    """A row's exact shapes: batch in windows, length, vocabulary, precision, backend,
    encoder sizes and settings, output layer, optimizer."""
    per_word = (f", {_fmt_number(row['tokens_per_word'])} tokens a word"
                if row["tokens_per_word"] != 1 else "")
    return (f"batch {row['batch']:,} x {row['length']} tokens{per_word}; {row['output']}; "
            f"{PRECISIONS[row['precision']]}, {BACKEND_NAMES[row['backend']]}; {row['encoder']}; "
            f"{row['optimizer']}" + (f"; {row['note']}" if row.get("note") else ""))


def _variant(key, config_name, overrides, batch, vocabulary, speed, backend, optimizer_config,
             paper=None, paper_params=None, note="", model_key=None, tokens_per_word=None,
             versus=None):
    """One row to time: the config with its overrides (the batch added), and its labels;
    `versus`: the row its ratio divides by (default: its scenario's reference)."""
    model_overrides = list(overrides)
    config = _load(config_name, model_overrides
                   + batch_overrides(config_name, model_overrides, batch))
    if tokens_per_word is None:
        tokens_per_word = (SUBWORD_TOKENS_PER_WORD
                           if getattr(config.data, "tokenization", "word") == "wordpiece"
                           else 1.0)
    train = _load(optimizer_config).train
    return {"key": key, "config": config_name, "overrides": model_overrides, "batch": batch,
            "length": config.data.max_sequence_length, "vocabulary": vocabulary,
            "tokens_per_word": tokens_per_word, "precision": speed["precision"]
            if backend == "jax" else speed["torch_precision"], "backend": backend,
            "encoder": describe_encoder(config), "output": describe_output(config, vocabulary),
            "optimizer": describe_optimizer(train), "optimizer_config": optimizer_config,
            "paper": paper, "paper_params": paper_params, "note": note, "versus": versus,
            "model_key": model_key or "|".join([config_name, str(vocabulary)] + model_overrides)}


def _output_overrides(output, speed):
    """The overrides that give a transformer LM config the output layer of `output`'s
    ELMo config (its cutoffs, divisor, tail capacity, negatives, WordPieces)."""
    if output == "CONT":
        return []
    m = _load(_config_name(OUTPUTS[output], speed))
    if output in ("FIXED", "SAMPLED"):
        return [f"model.output_layer={m.model.output_layer}",
                f"model.num_sampled={m.model.num_sampled}"]
    if output == "ADAPTIVE":
        capacity = m.model.adaptive_tail_capacity
        return ["model.output_layer=adaptive",
                f"model.adaptive_cutoffs={list(m.model.adaptive_cutoffs)}",
                f"model.adaptive_div_value={m.model.adaptive_div_value}",
                f"model.adaptive_tail_capacity={'null' if capacity is None else capacity}"]
    return ["data.tokenization=wordpiece",
            f"data.wordpiece_vocabulary_size={m.data.wordpiece_vocabulary_size}",
            "model.input_embedding=trainable", "model.output_layer=full", "model.tie_output=true"]


def plan(group, sizes):
    """The scenarios of one part: `[{"scenario", "reference", "compare", "variants"}]`, each
    variant a dict of `_variant`. `compare` is what the paper's figure is: `"batch"` (the
    time of one step) or `"million_words"`. Reads the configs; builds nothing."""
    speed = sizes["speed"]
    backend = BACKENDS[group]
    if group in ("table4_800k", "table4_2m"):
        slot = "800K" if group == "table4_800k" else "2000K"
        paper_vocabulary = 800_000 if slot == "800K" else 2_000_000
        vocabulary = speed["vocabularies"][slot]
        outputs = list(OUTPUTS) if slot == "800K" else ["CONT", "ADAPTIVE", "SAMPLED"]
        cont = _config_name(OUTPUTS["CONT"], speed)
        scenarios = []
        for scenario in ("S1", "S2"):
            variants = []
            for output in outputs:
                figures = TABLE4.get((output, paper_vocabulary)) or TABLE4[(output, None)]
                batch = 1 if scenario == "S1" else scaled_batch(figures["batch"], speed)
                overrides, note = [], ""
                if output == "SAMPLED":
                    overrides = ["model.layer_norm=true"]
                    note = ("model.layer_norm=true: Table 4's SAMPLED has CONT's input and "
                            "encoder (the config: ELMo's baseline, no layer norm, Adagrad)")
                if output == "ADAPTIVE" and slot == "2000K":
                    note = ("the config's cutoffs (the paper's at 2,000K are not given: "
                            "213M parameters)")
                if output == "CONT" and slot == "2000K":
                    note = "the reference of this vocabulary (its output does not grow with V)"
                variants.append(_variant(
                    output, _config_name(OUTPUTS[output], speed), overrides, batch, vocabulary,
                    speed, backend, cont, paper=figures[scenario], paper_params=figures["params"],
                    note=note))
            scenarios.append({"scenario": scenario, "reference": "CONT",
                              "compare": "batch" if scenario == "S1" else "million_words",
                              "variants": variants})
        return scenarios
    if group == "table2":
        vocabulary = speed["vocabularies"]["800K"]
        scenarios = []
        for scenario in ("per_card", "common"):
            variants = []
            for model, (paper_name, demo_name, days, cards, per_card, params) in TABLE2.items():
                name = _config_name((paper_name, demo_name), speed)
                if scenario == "per_card":
                    batch = config_batch_per_card(model, speed)
                else:
                    batch = speed["common_batch"]
                card_days = days * cards / (TABLE2["ELMo-C"][2] * TABLE2["ELMo-C"][3])
                paper = (f"{_fmt_number(days)} days x {cards} cards"
                         + ("" if model == "ELMo-C" else f" ({card_days:.2f}x card-days)"))
                note = ("ELMo's character CNN replaced by the fixed fastText input"
                        if model == "ELMo" else "")
                variants.append(_variant(model, name, [], batch, vocabulary, speed, backend,
                                         name, paper=paper if scenario == "per_card" else None,
                                         paper_params=params, note=note))
            scenarios.append({"scenario": scenario, "reference": "ELMo-C",
                              "compare": "million_words", "variants": variants})
        return scenarios
    if group == "table5_gpt":
        name = _config_name(("transformer_lm_gpt", "demo_transformer_lm"), speed)
        vocabulary = speed["vocabularies"]["800K"]
        batch = _load(name).data.batch_size
        variants = [_variant(output, name, _output_overrides(output, speed), batch, vocabulary,
                             speed, backend, name, paper=TABLE5_GPT[output])
                    for output in OUTPUTS]
        return [{"scenario": "config_batch", "reference": "CONT", "compare": "million_words",
                 "variants": variants}]
    if group == "masked_elmo":
        name = _config_name(("masked_elmo", "demo_masked_elmo"), speed)
        config = _load(name)
        batch, vocabulary = config.data.batch_size, config.data.wordpiece_vocabulary_size
        k = config.model.mask_accumulation
        one, cudnn = "cuDNN path, 1 mask set", f"cuDNN path, {k} mask sets"
        variants = [
            _variant(one, name, ["model.use_cudnn=auto", "model.mask_accumulation=1"], batch,
                     vocabulary, speed, backend, name, tokens_per_word=1.0,
                     note="the torch LSTM path (cuDNN on CUDA), one mask set"),
            _variant(cudnn, name, ["model.use_cudnn=auto"], batch, vocabulary, speed, backend,
                     name, paper=MASKED_ELMO_PAPER["mask_sets"], tokens_per_word=1.0,
                     note="the config's mask sets: each runs the encoder again"),
            _variant(f"portable path, {k} mask sets", name, ["model.use_cudnn=false"], batch,
                     vocabulary, speed, backend, name, paper=MASKED_ELMO_PAPER["cudnn"],
                     tokens_per_word=1.0, versus=cudnn,
                     note="the per-step loop an in-cell clip would need, without the clip "
                          "(MaskedBiLSTM has none): what cuDNN saves, not what clipping costs"),
        ]
        return [{"scenario": "config_batch", "reference": one, "compare": "batch",
                 "variants": variants}]
    raise ValueError(f"Received an invalid value for `group`, expected one of "
                     f"{', '.join(BACKENDS)}. Received: group={group!r}")


def config_batch_per_card(model, speed):
    """Table 2's per-card batch of `model` as its config holds it: the config's global
    `data.batch_size` over the cards of Table 2 (the demo configs: one card)."""
    paper_name, demo_name, _, cards, _, _ = TABLE2[model]
    name = _config_name((paper_name, demo_name), speed)
    batch = _load(name).data.batch_size
    cards = cards if speed["configs"] == "paper" else 1
    if batch % cards:
        raise ValueError(f"{name}.yaml: data.batch_size {batch} is not a multiple of its "
                         f"{cards} cards")
    return batch // cards


def summarize(scenario, times):
    """The rows of one timed scenario: each variant with its median step, words per step,
    steps and seconds per million words and its ratio to the reference (the median over
    rounds of the per-round step ratio, times the ratio of their steps per million words
    where the paper compares million words). `times`: `harness.interleaved_times`' lists
    of the variants that ran."""
    medians = harness.medians(times)
    by_key = {v["key"]: v for v in scenario["variants"]}

    def steps_of(v):
        return steps_for_words(MILLION, v["batch"], v["length"], v["tokens_per_word"])

    rows = []
    for v in scenario["variants"]:
        row = dict(v)
        versus = v.get("versus") or scenario["reference"]
        row["versus"] = versus
        if v["key"] in medians:
            step, steps = medians[v["key"]], steps_of(v)
            words = v["batch"] * v["length"] / v["tokens_per_word"]
            row.update(step_s=step, rounds=len(times[v["key"]]), words_per_step=words,
                       words_per_s=words / step, steps_per_million_words=steps,
                       seconds_per_million_words=steps * step)
            if versus in times:
                ratio = harness.median_ratios(times, versus)[v["key"]]
                row["step_ratio"] = ratio
                row["ratio"] = (ratio if scenario["compare"] == "batch"
                                else ratio * steps / steps_of(by_key[versus]))
        rows.append(row)
    return rows


# ------------------------------------------------------------------ running (in a part)


def _optimizer(train):
    """Keras' Adam or Adagrad of a `train` section at its base rate, with its epsilon,
    accumulators and global clipnorm (tfeff's `make_optimizer` needs TensorFlow)."""
    import keras

    clip = train.clipnorm or None
    if getattr(train, "optimizer", "adam") == "adagrad":
        return keras.optimizers.Adagrad(
            train.learning_rate, initial_accumulator_value=train.adagrad_initial_accumulator,
            global_clipnorm=clip)
    return keras.optimizers.Adam(train.learning_rate,
                                 epsilon=getattr(train, "adam_epsilon", 0.0) or 1e-7,
                                 global_clipnorm=clip)


def _out_of_memory(error):
    """True for JAX's RESOURCE_EXHAUSTED and PyTorch's CUDA out-of-memory errors."""
    text = str(error)
    return "RESOURCE_EXHAUSTED" in text or "out of memory" in text.lower()


def _lm_batch(rng, batch, length, vocabulary):
    """A language-model batch as `benchmarks/gpu.py`'s `build` makes one."""
    ids = harness.zipf_ids(rng, (batch, length), vocabulary, low=2)
    ids[:, 0] = 2  # <s>
    return ids


class _Models:
    """The part's compiled models, one per `model_key`, reused across its scenarios."""

    def __init__(self, work_dir, jit):
        self.work_dir, self.jit, self.models = work_dir, jit, {}

    def step(self, variant):
        """`(step, params)`: a zero-argument training step of `variant` (its batch made
        here) returning the loss as a float, which waits for the device, and the
        model's trainable parameters."""
        import keras

        from benchmarks import gpu as gpu_step

        rng = np.random.default_rng(0)
        config = _load(variant["config"], variant["overrides"] + batch_overrides(
            variant["config"], variant["overrides"], variant["batch"]))
        if variant["model_key"] not in self.models:
            keras.utils.set_random_seed(0)
            dim = getattr(getattr(config, "fasttext", None), "dim", 0)
            model, batch, _ = gpu_step.build(f"speed_{dim}d", config, variant["vocabulary"],
                                             rng, self.work_dir)
            model.build()
            model.compile(optimizer=_optimizer(_load(variant["optimizer_config"]).train),
                          jit_compile=self.jit)
            self.models[variant["model_key"]] = model
        else:
            model = self.models[variant["model_key"]]
            vocabulary = (variant["vocabulary"]
                          if getattr(config.data, "tokenization", "word") == "word"
                          else config.data.wordpiece_vocabulary_size)
            batch = _lm_batch(rng, variant["batch"], variant["length"], vocabulary)

        def step():
            return float(model.train_on_batch(batch, return_dict=True)["loss"])
        # Trainable, as the papers count them (not TBPTT's carried states, not fixed tables).
        return step, sum(int(np.prod(v.shape)) for v in model.trainable_variables)

    def drop(self, variant):
        """Frees a variant's model (after it ran out of memory)."""
        import gc

        self.models.pop(variant["model_key"], None)
        gc.collect()


def run_scenario(scenario, models, rounds, warmup):
    """Compiles (first step) every variant of `scenario`, then times them in interleaved
    rounds; a variant out of device memory, or with a non-finite first loss, is a row
    with its `error`. Returns `summarize`'s rows."""
    runs, extra = {}, {}
    for v in scenario["variants"]:
        try:
            step, params = models.step(v)
            loss = step()  # compiles
        except RuntimeError as e:  # XlaRuntimeError, torch.OutOfMemoryError
            if not _out_of_memory(e):
                raise
            models.drop(v)
            extra[v["key"]] = {"error": "out of device memory (OOM)", "detail": str(e)[:300]}
            continue
        extra[v["key"]] = {"params": params, "first_loss": loss}
        if not np.isfinite(loss):
            extra[v["key"]]["error"] = f"non-finite loss {loss}"
            continue
        runs[v["key"]] = step
    times = harness.interleaved_times(runs, rounds, warmup) if runs else {}
    return [{**row, **extra[row["key"]]} for row in summarize(scenario, times)]


def run(group, sizes, work_dir):
    """Runs part `group` in this process (its backend already chosen): every scenario of
    `plan`, timed. Returns the part's fields (`scenarios`: their rows)."""
    import keras

    from benchmarks import gpu as gpu_step

    speed = sizes["speed"]
    backend = keras.backend.backend()
    scenarios = plan(group, sizes)
    precision = scenarios[0]["variants"][0]["precision"]
    torch_flags = {}
    if backend == "torch":
        import torch

        if precision == "fp32_strict":  # both paths in float32: the ratio is the path's
            torch.backends.cudnn.allow_tf32 = False
            torch.backends.cuda.matmul.allow_tf32 = False
        torch_flags = {"cudnn_allow_tf32": torch.backends.cudnn.allow_tf32,
                       "matmul_allow_tf32": torch.backends.cuda.matmul.allow_tf32}
    keras.config.set_dtype_policy("mixed_bfloat16" if precision == "bf16" else "float32")
    rounds = speed["rounds"] if backend == "jax" else speed["torch_rounds"]
    warmup = speed["warmup"] if backend == "jax" else speed["torch_warmup"]
    try:
        gpu_step.reset_peak_memory()
        models = _Models(work_dir, jit=backend == "jax")
        timed = [{"scenario": s["scenario"], "reference": s["reference"],
                  "compare": s["compare"], "rows": run_scenario(s, models, rounds, warmup)}
                 for s in scenarios]
    finally:
        keras.config.set_dtype_policy("float32")
    device, _ = gpu_step.device_info()
    return {"group": group, "title": TITLES[group], "scenarios": timed, "rounds": rounds,
            "warmup": warmup, "device": device, "torch_flags": torch_flags,
            "peak_memory_bytes": gpu_step.peak_memory_bytes()}


# ------------------------------------------------------------------ the report


SCENARIOS = {
    "S1": "S1: batch 1, the loss read back after every step (one synchronization a step; the "
          "paper also turned off asynchronous execution), the time of one batch",
    "S2": "S2: the paper's maximal batch per card; time to train one million words = the steps "
          "for 10^6 words x the median step",
    "per_card": "the configs' per-card batches (their global batch over Table 2's cards); time "
                "to train one million words on one card",
    "common": "128 windows for every model (the published rows' batch), the configs' settings",
    "config_batch": "the config's batch",
}


def _fmt_ratio(row, reference):
    if row.get("ratio") is None:
        return ""
    versus = row.get("versus") or reference
    return f"{row['ratio']:.2f}x" + (f" of {versus}" if versus != reference else "")


def _fmt_paper(row):
    """The paper's figure: seconds for its reference rows, a ratio or its words else."""
    paper = row.get("paper")
    if paper is None:
        return ""
    if isinstance(paper, str):
        return paper
    return f"{paper:g} s" if row["key"] == "CONT" else f"{paper:.2f}x"


def tables(by_part):
    """The Markdown lines of the speed parts done so far (`by_part`: part -> its file)."""
    lines = []
    for part, _, group in PARTS:
        r = by_part.get(part)
        if not r:
            continue
        memory = (f"{r['peak_memory_bytes'] / 2**30:.1f} GiB"
                  if r.get("peak_memory_bytes") else "n/a")
        lines += [f"### {r['title']}", "",
                  f"{r['device']}; synthetic Zipfian windows; {r['rounds']} interleaved rounds "
                  f"after the compiling step and {r['warmup']} more, medians; the part's peak "
                  f"device memory {memory}."
                  + (f" torch flags: {r['torch_flags']}." if r.get("torch_flags") else ""), ""]
        if group.startswith("table4"):
            lines += ["S3 (four cards) cannot run on one GPU: not measured.", ""]
        if group == "table5_gpt":
            lines += ["The paper's figures are on four cards at each model's maximal batch "
                      "(S3, not given); these rows run one card at the config's batch.", ""]
        for s in r["scenarios"]:
            compare = "time of one batch" if s["compare"] == "batch" else "time per 10^6 words"
            lines += [f"{SCENARIOS[s['scenario']]} (ratio: {compare}, / {s['reference']}):", "",
                      "| row | ran | parameters | paper's parameters | step ms | steps per 10^6 "
                      "words | s per 10^6 words | ratio | paper |",
                      "|---|---|---|---|---|---|---|---|---|"]
            for row in s["rows"]:
                params = f"{row['params'] / 1e6:.1f}M" if row.get("params") else ""
                paper_params = f"{row['paper_params']}M" if row.get("paper_params") else ""
                if "step_s" not in row:
                    lines.append(f"| {row['key']} | {label(row)} | {params} | {paper_params} | "
                                 f"{row.get('error', 'not run')} | | | | {_fmt_paper(row)} |")
                    continue
                words = ("| | |" if group == "masked_elmo" else  # no words: WordPiece streams
                         f"| {row['steps_per_million_words']:,} | "
                         f"{row['seconds_per_million_words']:.2f} |")
                lines.append(
                    f"| {row['key']} | {label(row)} | {params} | {paper_params} | "
                    f"{1000 * row['step_s']:.1f} {words} {_fmt_ratio(row, s['reference'])} | "
                    f"{_fmt_paper(row)} |")
            lines.append("")
    return lines
