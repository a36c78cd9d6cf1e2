"""What the benchmarks and studies share: their flags and presets, interleaved timing,
synthetic Zipfian ids and MLM batches, a training clock, writing results, pyplot."""

import json
import os
import statistics
import sys
import time

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Every benchmark's sizes are one of these, in this order: `tiny` runs in seconds (the
# tests), `cpu` in minutes on a 2-core CPU (`make bench`), `paper` at the papers' sizes
# (an accelerator, or hours).
PRESETS = ("tiny", "cpu", "paper")


def define_flags(presets=None, default_preset="cpu", output_dir="runs/bench"):
    """Defines the flags every benchmark shares: `--output_dir` (where its results and
    any reusable work go) and, given the names of its presets (some of `PRESETS`),
    `--preset`.

    Call it from the module's own `define_flags()`, which its `__main__` block calls
    before `absl.app.run`: flags defined at import would collide when two benchmarks
    are imported into one process (one uses the other's functions, or a test imports
    both).

    Args:
        presets: The names of the module's presets, or None if it has none.
        default_preset: The preset of a run without `--preset`.
        output_dir: The default of `--output_dir`.

    Raises:
        ValueError: If a preset is not one of `PRESETS`, or `default_preset` is not
            one of `presets`.
    """
    from absl import flags

    module = sys.argv[0]  # absl's name of the program's own flags (its --help)
    flags.DEFINE_string("output_dir", output_dir, "Where the results go (a Markdown table "
                        "and its JSON, a PNG where there is a chart; the module's docstring "
                        "names them) and the reusable work.", module_name=module)
    if presets is None:
        return
    unknown = [name for name in presets if name not in PRESETS]
    if unknown or default_preset not in presets:
        raise ValueError(f"presets {list(presets)} (default {default_preset!r}): each must be "
                         f"one of {PRESETS}, the default one of them")
    meaning = {"tiny": "seconds; the tests", "cpu": "minutes on a CPU",
               "paper": "the papers' sizes; an accelerator"}
    names = [p for p in PRESETS if p in presets]
    flags.DEFINE_enum("preset", default_preset, names, "Sizes: " + ", ".join(
        f"{p} ({meaning[p]})" for p in names) + ".", module_name=module)


def interleaved_times(runs, rounds, warmup=1):
    """Seconds of each run, timed round-robin: `{name: [seconds of round 1, ...]}`.

    `runs` maps a name to a zero-argument callable doing one step, which must
    block until its results are on the host (fetch a loss, `.numpy()` the
    gradients). Every run is called `warmup` times first (tracing, allocator),
    then each round calls every run once in order, so that the load changes of
    a shared machine fall on all of them alike instead of on whichever ran
    while it was busy.
    """
    for run in runs.values():
        for _ in range(warmup):
            run()
    times = {name: [] for name in runs}
    for _ in range(rounds):
        for name, run in runs.items():
            start = time.perf_counter()
            run()
            times[name].append(time.perf_counter() - start)
    return times


def median_step(step, steps, warmup=1):
    """`(median seconds, last result)` of `steps` timed calls of `step` after `warmup`
    untimed ones (compilation, allocator). `step` takes no argument and must block until
    its results are on the host (return a loss as a float). For one variant; compare
    variants with `interleaved_times`."""
    for _ in range(warmup):
        step()
    times, result = [], None
    for _ in range(steps):
        start = time.perf_counter()
        result = step()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def medians(times):
    """`{name: median}` of `interleaved_times`' lists."""
    return {name: statistics.median(t) for name, t in times.items()}


def median_ratios(times, reference):
    """`{name: median over rounds of time / the reference's time in the same round}`:
    a ratio robust to a slow round, which slows both sides of it."""
    return {name: statistics.median(a / b for a, b in zip(t, times[reference]))
            for name, t in times.items()}


def torch_adam_step(loss_fn, parameters, learning_rate=1e-4):
    """A training step of PyTorch: `loss_fn()`, its gradients, one Adam update of
    `parameters`; returns the loss as a float (which waits for the device)."""
    import torch

    optimizer = torch.optim.Adam(parameters, lr=learning_rate)

    def step():
        loss = loss_fn()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss.item()
    return step


def training_clock(on_step=None):
    """A Keras callback that times `fit`'s training steps, from the start of a batch to
    its end, so that what runs between steps is not counted.

    It records `step_seconds` (each step's), `times` (the training seconds after each
    step), `elapsed` (their total) and `steps`. After each step it calls
    `on_step(model, step, elapsed)` if given: an evaluation there runs between two
    steps, outside the clock.

    Args:
        on_step: Called after every step, or None.

    Returns:
        The callback (a `keras.callbacks.Callback`).
    """
    import keras

    class TrainingClock(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.step_seconds, self.times, self.elapsed, self.steps = [], [], 0.0, 0
            self._began = None

        def on_train_batch_begin(self, batch, logs=None):
            self._began = time.perf_counter()

        def on_train_batch_end(self, batch, logs=None):
            seconds = time.perf_counter() - self._began
            self.step_seconds.append(seconds)
            self.elapsed += seconds
            self.steps += 1
            self.times.append(self.elapsed)
            if on_step is not None:
                on_step(self.model, self.steps, self.elapsed)

    return TrainingClock()


def zipf_ids(rng, shape, vocabulary, low=0, exponent=1.2):
    """int32 ids of a Zipfian language from `low` up (ids are frequency-ordered, as tfeff's
    vocabularies are; the long tail is clipped to `vocabulary - 1`)."""
    ranks = rng.zipf(exponent, size=shape) + low - 1
    return np.minimum(ranks, vocabulary - 1).astype("int32")


def mlm_batch(rng, batch, length, vocabulary, masked, low=5):
    """A BERT MLM batch as NumPy: Zipfian `token_ids` from `low` (the ids below are
    special tokens), two segments (the second half is segment 1), no padding, and `masked`
    distinct sorted positions per row whose `masked_ids` are the ids there."""
    ids = zipf_ids(rng, (batch, length), vocabulary, low=low)
    positions = np.sort(np.stack([rng.choice(length, masked, replace=False)
                                  for _ in range(batch)]), -1).astype("int32")
    return {"token_ids": ids,
            "segment_ids": (np.arange(length)[None, :] >= length // 2).repeat(batch, 0)
            .astype("int32"),
            "padding_mask": np.ones((batch, length), "int32"),
            "masked_positions": positions,
            "masked_ids": np.take_along_axis(ids, positions, 1),
            "masked_weights": np.ones((batch, masked), "float32")}


def write_text_atomic(path, text):
    """Writes `path` through a temporary sibling and a rename: a reader (or a run cut
    midway) sees the old file or the new one, never half of one. Plain Python: the GPU
    suite runs where there is no TensorFlow (`tfeff.io` needs it)."""
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)


def tfeff_bert(vocabulary_size, sequence_length, sizes, relaxed=None):
    """A tfeff `Bert` built as `tfeff-pretrain` builds one: `configs/bert_base.yaml` with
    `sizes`' `layers`, `hidden`, `heads` and `intermediate` (and `position_embedding` and
    `seed` where given), through `tfeff.models.from_config.bert`. `relaxed`: CoRe's
    relaxed model's `{"num_anchors", "ffn_rank"}`, or None for the standard one."""
    from tfeff.config import load_config
    from tfeff.models import from_config

    overrides = [f"data.max_sequence_length={sequence_length}",
                 "data.max_predictions_per_seq=1",  # the batches' business, not the model's
                 f"data.wordpiece_vocabulary_size={vocabulary_size}",
                 f"model.num_layers={sizes['layers']}", f"model.hidden_dim={sizes['hidden']}",
                 f"model.num_heads={sizes['heads']}",
                 f"model.intermediate_dim={sizes['intermediate']}",
                 f"model.position_embedding={sizes.get('position_embedding', 'learned')}",
                 f"train.seed={sizes.get('seed', 0)}"]
    if relaxed is not None:
        overrides.append("model.relaxed=" + json.dumps(relaxed))
    config = load_config(os.path.join(REPO, "configs", "bert_base.yaml"), overrides)
    return from_config.bert(config, vocabulary_size, relaxed=relaxed is not None)


def _plain(value):
    """NumPy scalars and arrays as JSON's numbers and lists."""
    if isinstance(value, (np.generic, np.ndarray)):
        return value.tolist()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def write_results(results_dir, stem, text, data):
    """Writes `stem.md` (the markdown table) and `stem.json` (`data`) to `results_dir`,
    each atomically, creating the directory."""
    os.makedirs(results_dir, exist_ok=True)
    write_text_atomic(os.path.join(results_dir, f"{stem}.md"), text)
    write_text_atomic(os.path.join(results_dir, f"{stem}.json"),
                      json.dumps(data, indent=2, default=_plain) + "\n")


def pyplot():
    """matplotlib's pyplot on the Agg backend, or None (said once) without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed (pip install -e '.[bench]'): no PNG")
        return None
    return plt
