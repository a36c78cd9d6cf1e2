"""The benchmarks' shared timing helper: round-robin order, warm-up, medians and ratios."""

import numpy as np
import pytest

from benchmarks import harness as bench


def test_runs_are_warmed_then_timed_round_robin():
    calls = []
    runs = {name: (lambda name=name: calls.append(name)) for name in ("a", "b", "c")}
    times = bench.interleaved_times(runs, rounds=3, warmup=2)
    # Warm-up: each run `warmup` times in turn; then every round visits a, b, c in order.
    assert calls == ["a", "a", "b", "b", "c", "c"] + ["a", "b", "c"] * 3
    assert {k: len(v) for k, v in times.items()} == {"a": 3, "b": 3, "c": 3}
    assert all(t >= 0 for v in times.values() for t in v)


def test_medians_and_per_round_ratios():
    # Round 2 was slow for both: the per-round ratio ignores it, a ratio of medians not.
    times = {"ref": [1.0, 10.0, 1.0, 1.0], "x": [2.0, 20.0, 2.0, 30.0]}
    assert bench.medians(times) == {"ref": 1.0, "x": 11.0}
    assert bench.median_ratios(times, "ref") == {"ref": 1.0, "x": 2.0}


def test_zipf_ids_start_at_low_and_stay_in_the_vocabulary():

    ids = bench.zipf_ids(np.random.default_rng(0), (50, 40), 30, low=5)
    assert ids.dtype == np.int32 and ids.min() == 5 and ids.max() == 29
    # Zipfian: rank 1 (id 5) has probability 1 / zeta(1.2) (the sum to 10^6 plus the
    # integral of the rest); 2,000 draws give it to about +-0.009 (one standard deviation).
    zeta = np.sum(np.arange(1, 10**6, dtype=float) ** -1.2) + (10**6) ** -0.2 / 0.2
    share = np.mean(ids == 5)
    assert abs(share - 1 / zeta) < 0.05, (share, 1 / zeta)
    assert np.mean(ids == 6) < share  # rank 2: 2^-1.2 of rank 1's


def test_the_mlm_batch_masks_distinct_sorted_positions_of_its_own_ids():

    data = bench.mlm_batch(np.random.default_rng(0), 3, 20, 50, masked=3)
    ids, positions = data["token_ids"], data["masked_positions"]
    assert ids.shape == (3, 20) and ids.min() >= 5 and ids.max() < 50
    assert positions.shape == (3, 3) and positions.dtype == np.int32
    assert all(np.all(np.diff(row) > 0) for row in positions)
    np.testing.assert_array_equal(data["masked_ids"], np.take_along_axis(ids, positions, 1))
    np.testing.assert_array_equal(data["segment_ids"][0], [0] * 10 + [1] * 10)
    assert data["padding_mask"].all() and data["masked_weights"].shape == (3, 3)


def test_median_step_warms_up_then_times_each_call(monkeypatch):
    ticks = iter([0.0, 1.0, 10.0, 13.0, 20.0, 22.0])  # the timed calls take 1, 3, 2 s
    monkeypatch.setattr(bench.time, "perf_counter", lambda: next(ticks))
    calls = []
    median, last = bench.median_step(lambda: calls.append(len(calls)) or len(calls), 3,
                                     warmup=2)
    assert len(calls) == 5 and last == 5  # two untimed calls first, the last result kept
    assert median == 2.0


def test_training_clock_counts_the_steps_but_not_what_runs_between_them():
    import time

    import keras

    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse", run_eagerly=True)
    seen, pause = [], 0.5

    def slow_evaluation(model_, step, seconds):
        seen.append((step, seconds))
        time.sleep(pause)  # an evaluation between steps: not training time

    clock = bench.training_clock(slow_evaluation)
    x = np.zeros((12, 4), "float32")
    began = time.perf_counter()
    model.fit(x, x[:, :1], batch_size=4, epochs=1, verbose=0, callbacks=[clock])
    wall = time.perf_counter() - began
    assert clock.steps == 3 and len(clock.step_seconds) == 3
    assert np.allclose(clock.times, np.cumsum(clock.step_seconds))
    assert seen == [(step, clock.times[step - 1]) for step in (1, 2, 3)]
    # The clock and the three pauses both fit in the fit's wall time: the clock left the
    # pauses out (counted in, it would exceed that by whatever else `fit` did).
    assert clock.elapsed == clock.times[-1] <= wall - 3 * pause


@pytest.mark.parametrize("relaxed", [None, {"num_anchors": 4, "ffn_rank": 8}])
def test_tfeff_bert_is_the_bert_of_those_sizes_through_the_config_builder(relaxed):
    from tfeff.models import Bert
    from tfeff.models import BertBackbone

    sizes = dict(layers=2, hidden=32, heads=4, intermediate=64, position_embedding="rotary",
                 seed=3)
    built = bench.tfeff_bert(500, 16, sizes, relaxed)
    direct = Bert(BertBackbone(500, num_layers=2, hidden_dim=32, num_heads=4,
                               intermediate_dim=64, max_sequence_length=16, dropout_rate=0.1,
                               activation="gelu", position_embedding="rotary",
                               relaxed=relaxed, seed=3, name="bert_backbone"), name="bert")
    for model in (built, direct):
        model.build()
    assert built.get_config() == direct.get_config()
    assert [(v.path, tuple(v.shape)) for v in built.weights] \
        == [(v.path, tuple(v.shape)) for v in direct.weights]
