"""experiments/bench_estimators.py at a tiny size: rows, ratios, agreement with the listings."""
import math

import jax
import jax.numpy as jnp
import pytest

from experiments import bench_estimators as bench


def test_tiny_benchmark_rows_agree_with_the_listings(tmp_path):
    rows = bench.run(batch=4, ns=[16], k=3, repeats=1, key=jax.random.key(0), levels=4,
                     log_ratio_scale=0.05, max_bytes=math.inf)
    assert [(r["n"], r["method"]) for r in rows] == [(16, m) for m in (
        "listing2", "listing2+sort", "maxk", "listing3", "listing3+sort", "maxk_offpolicy")]
    for r in rows:
        assert r["ms"] > 0 and r["cpu_ms"] > 0 and r["mem_bytes"] > 0
        if r["method"].startswith("maxk"):
            assert r["baseline"] in ("listing2", "listing3")
            assert r["speedup_vs_listing"] > 0 and r["speedup_vs_listing_sort"] > 0
            assert r["cpu_speedup_vs_listing"] > 0 and r["cpu_speedup_vs_listing_sort"] > 0
            assert r["mem_ratio_vs_listing"] > 0
            # Same inputs, same estimator: the library and the (corrected) listing agree, both
            # with the listing given pre-sorted rows and with its sort inside.
            assert r["max_abs_diff"] < 1e-5, r
    table = bench.markdown_table(rows)
    assert table.count("\n") == len(rows) + 1 and "| 16 | maxk_offpolicy |" in table
    bench.plot(rows, tmp_path / "bench.png")
    assert (tmp_path / "bench.png").stat().st_size > 10_000


def test_memory_cap_skips_timing_but_still_reports_memory():
    args = [jnp.ones((4, 8))]
    capped = bench.measure(lambda x: x.cumsum(-1), args, repeats=1, max_bytes=0)
    assert capped["seconds"] is None and capped["output"] is None
    assert capped["output_bytes"] == 4 * 8 * 4 and capped["mem_bytes"] >= capped["output_bytes"]
    timed = bench.measure(lambda x: x.cumsum(-1), args, repeats=2, max_bytes=math.inf)
    assert timed["seconds"] > 0 and timed["output"].shape == (4, 8)
    assert len(timed["wall_times"]) == len(timed["cpu_times"]) == 2 and timed["cpu_seconds"] > 0


def test_bad_settings_raise_value_errors():
    with pytest.raises(ValueError, match="n = 8"):
        bench.run(batch=2, ns=[8], k=9, repeats=1, key=jax.random.key(0), levels=4,
                  log_ratio_scale=0.05, max_bytes=math.inf)
    with pytest.raises(ValueError, match="repeats=0"):
        bench.run(batch=2, ns=[8], k=2, repeats=0, key=jax.random.key(0), levels=4,
                  log_ratio_scale=0.05, max_bytes=math.inf)
