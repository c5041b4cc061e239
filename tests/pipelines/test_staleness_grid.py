"""The staleness x correction grid: its cells, their configs, the rows read back from finished cells."""
import json

import numpy as np

from maxk_jax.pipelines import default_config
from maxk_jax.pipelines.staleness_grid import cell_config, collect_rows, grid_cells, grid_markdown, plot_grid


def test_cells_cover_every_correction_for_each_staleness():
    cells = grid_cells((0, 2))
    assert [(c.s, c.correction, c.methods, c.name) for c in cells] == [
        (0, "none", ("maxk_offpolicy", "maxk_offpolicy_exact", "grpo"), "async_s0"),
        (2, "none", ("maxk_offpolicy",), "async_s2_none"),
        (2, "behaviour", ("maxk_offpolicy", "maxk_offpolicy_exact"), "async_s2_behaviour"),
        (2, "tis", ("maxk_offpolicy", "grpo"), "async_s2_tis")]
    cfg = cell_config(default_config(), cells[2])
    assert (cfg.rl.rollout.max_staleness, cfg.rl.algo.stale_correction) == (2, "behaviour")


def _fake_cell(root, cell, values):
    """A finished comparison directory: results.json and each run's metrics.jsonl."""
    d = root / cell.name
    methods = {"base": {"max_at_k": {"mean": {"1": 0.1, "4": 0.5}}, "pass_at_k": {"mean": {"1": 0.0, "4": 0.2}}}}
    for m in cell.methods:
        v = values[m]
        methods[m] = {metric: {"mean": {"1": v, "4": 2 * v}, "per_seed": {"0": {"1": v, "4": 2 * v}}}
                      for metric in ("max_at_k", "pass_at_k")}
        rl = d / m / "seed0" / "rl"
        rl.mkdir(parents=True)
        rows = [{"ppo/stale_log_ratio_abs_mean": 0.1 * s, "ppo/stale_clamped_fraction": 0.0,
                 "ppo/stale_ess_fraction_mean": 1.0 - 0.1 * s, "ppo/stale_ess_fraction_min": 0.5,
                 "time/step_s": 2.0 + s, "time/wait_rollout_s": 0.0} for s in range(3)]
        (rl / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    (d / "results.json").write_text(json.dumps({"large_k": 4, "methods": methods}))


def test_rows_table_and_plot_from_finished_cells(tmp_path):
    cells = grid_cells((0, 1))
    _fake_cell(tmp_path, cells[0], {"maxk_offpolicy": 0.3, "maxk_offpolicy_exact": 0.31, "grpo": 0.35})
    _fake_cell(tmp_path, cells[2], {"maxk_offpolicy": 0.28, "maxk_offpolicy_exact": 0.29})
    rows = collect_rows(str(tmp_path), cells)        # cells 1 and 3 are not finished: skipped
    assert [(r["label"], r["s"], r["correction"]) for r in rows] == [
        ("maxk_offpolicy", 0, "sync"), ("maxk_offpolicy_exact", 0, "sync"), ("grpo", 0, "sync"),
        ("maxk_offpolicy first-order", 1, "behaviour"), ("maxk_offpolicy_exact exact", 1, "behaviour")]
    r = rows[3]
    assert (r["max1"], r["maxK"], r["maxK_per_seed"], r["base_maxK"]) == (0.28, 0.56, [0.56], 0.5)
    np.testing.assert_allclose(r["ppo/stale_log_ratio_abs_mean"], 0.1)
    np.testing.assert_allclose(r["time/step_s"], 3.0)
    text = grid_markdown(rows)
    assert "| maxk_offpolicy first-order | 1 | 1 | 0.280 | 0.560 |" in text and "max@4" in text
    plot_grid(rows, str(tmp_path / "grid.png"), "t")
    assert (tmp_path / "grid.png").stat().st_size > 0
