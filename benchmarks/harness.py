"""What the benchmark and study scripts share: interleaved timing, synthetic Zipfian ids and
MLM batches, writing results, pyplot."""

import json
import os
import statistics
import time

import numpy as np


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


def _write_text_atomic(path, text):
    """Writes `path` through a temporary sibling and a rename (no TensorFlow needed: the
    GPU benchmark runs where there is none)."""
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)


def write_results(results_dir, stem, text, data):
    """Writes `stem.md` (the markdown table) and `stem.json` (`data`) to `results_dir`,
    each atomically, creating the directory."""
    os.makedirs(results_dir, exist_ok=True)
    _write_text_atomic(os.path.join(results_dir, f"{stem}.md"), text)
    _write_text_atomic(os.path.join(results_dir, f"{stem}.json"),
                       json.dumps(data, indent=2) + "\n")


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
