"""The benchmarks' shared timing helper: round-robin order, warm-up, medians and ratios."""

from tests.tools import load_tool


def test_runs_are_warmed_then_timed_round_robin():
    bench = load_tool("bench_results")
    calls = []
    runs = {name: (lambda name=name: calls.append(name)) for name in ("a", "b", "c")}
    times = bench.interleaved_times(runs, rounds=3, warmup=2)
    # Warm-up: each run `warmup` times in turn; then every round visits a, b, c in order.
    assert calls == ["a", "a", "b", "b", "c", "c"] + ["a", "b", "c"] * 3
    assert {k: len(v) for k, v in times.items()} == {"a": 3, "b": 3, "c": 3}
    assert all(t >= 0 for v in times.values() for t in v)


def test_medians_and_per_round_ratios():
    bench = load_tool("bench_results")
    # Round 2 was slow for both: the per-round ratio ignores it, a ratio of medians not.
    times = {"ref": [1.0, 10.0, 1.0, 1.0], "x": [2.0, 20.0, 2.0, 30.0]}
    assert bench.medians(times) == {"ref": 1.0, "x": 11.0}
    assert bench.median_ratios(times, "ref") == {"ref": 1.0, "x": 2.0}
