"""benchmarks/xla_profile.py on a real JAX trace."""

import time

import jax
import jax.numpy as jnp


from benchmarks import xla_profile


def test_busy_time_is_the_union_of_overlapping_intervals():
    assert xla_profile.busy_ns([(0, 10), (5, 10), (20, 5), (21, 1)]) == 20
    assert xla_profile.busy_ns([]) == 0


def test_a_traced_step_is_summarized_per_step(tmp_path):
    step = jax.jit(lambda a: jnp.tanh(a @ a).sum())
    a = jnp.ones((256, 256))
    step(a).block_until_ready()
    began = time.perf_counter()
    with jax.profiler.trace(str(tmp_path)):
        for _ in range(4):
            step(a).block_until_ready()
    wall = time.perf_counter() - began
    summary = xla_profile.summarize(str(tmp_path), 4, step_s=wall / 4)
    assert 0 < summary["busy_ms_per_step"] <= 1000 * wall / 4
    assert summary["ops_per_step"] >= 1 and summary["top"]
    assert abs(sum(op["share"] for op in summary["top"]) - 1) < 1e-9  # all ops listed
    for op in summary["top"]:
        assert op["calls_per_step"] * 4 == round(op["calls_per_step"] * 4) > 0
    kinds = {op["name"]: op for op in summary["kinds"]}
    for op in summary["top"]:  # each op is counted in its kind
        assert kinds[xla_profile.kind(op["name"])]["ms_per_step"] >= op["ms_per_step"]
    assert abs(sum(op["share"] for op in summary["kinds"]) - 1) < 1e-9
    assert sum(op["calls_per_step"] for op in summary["kinds"]) == summary["ops_per_step"]
    assert "ops per step" in xla_profile.table(summary, wall / 4)
    assert "op kind" in xla_profile.table(summary, wall / 4)


def test_an_ops_kind_drops_only_its_xla_numbers():
    assert xla_profile.kind("fusion.12") == "fusion"
    assert xla_profile.kind("loop_add_fusion.3.1") == "loop_add_fusion"
    assert xla_profile.kind("cublas-gemm") == "cublas-gemm"
    assert xla_profile.kind("gemm_fusion_dot.2") == "gemm_fusion_dot"
    # GPU kernels (an H200's trace): XLA's fusions end in _N, cuBLAS' in their tiling
    assert xla_profile.kind("loop_convert_multiply_fusion_11") == "loop_convert_multiply_fusion"
    assert xla_profile.kind("fusion_2486") == "fusion"
    assert (xla_profile.kind("nvjet_sm90_tst_128x128_64x6_2x1_v_bz_TNT")
            == "nvjet_sm90_tst_128x128_64x6_2x1_v_bz_TNT")
