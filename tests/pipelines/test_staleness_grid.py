"""The staleness x correction grid: its cells, their configs, the rows read back from finished cells."""
import json

import numpy as np
import pytest

from maxk_jax.pipelines import default_config
from maxk_jax.pipelines.staleness_grid import (LABELS, cell_config, cell_has_runs, collect_rows, grid_cells,
                                               grid_markdown, plot_grid)


def test_cells_cover_every_correction_for_each_staleness():
    cells = grid_cells((0, 2))
    assert [(c.s, c.correction, c.methods, c.name) for c in cells] == [
        (0, "none", ("maxk_offpolicy", "maxk_offpolicy_exact", "grpo"), "async_s0"),
        (2, "none", ("maxk_offpolicy",), "async_s2_none"),
        (2, "behaviour", ("maxk_offpolicy", "maxk_offpolicy_exact"), "async_s2_behaviour"),
        (2, "tis", ("maxk_offpolicy", "grpo"), "async_s2_tis")]
    from experiments.configs.base import METHODS
    from maxk_jax.pipelines.methods import apply_method
    with pytest.raises(ValueError, match="needs algo.loss.kind='is_weighted'"):   # refused since issue 42
        cell_config(apply_method(default_config(), "maxk_offpolicy", METHODS), cells[2])
    unbiased = grid_cells((2,), baseline="loo1_rms")[1]
    assert unbiased.methods == ("maxk_offpolicy_loo1_rms", "maxk_offpolicy_exact_loo1_rms")
    for method in unbiased.methods:
        cfg = cell_config(apply_method(default_config(), method, METHODS), unbiased)
        assert (cfg.rl.rollout.max_staleness, cfg.rl.algo.stale_correction) == (2, "behaviour")
        assert cfg.rl.algo.loss.kind == "is_weighted"


def test_loo1_cells_swap_the_maxk_estimators_and_leave_grpo_out():
    cells = grid_cells((0, 4), "t", baseline="loo1")
    assert [(c.s, c.correction, c.methods, c.name) for c in cells] == [
        (0, "none", ("maxk_offpolicy_loo1", "maxk_offpolicy_exact_loo1"), "t_s0"),
        (4, "none", ("maxk_offpolicy_loo1",), "t_s4_none"),
        (4, "behaviour", ("maxk_offpolicy_loo1", "maxk_offpolicy_exact_loo1"), "t_s4_behaviour"),
        (4, "tis", ("maxk_offpolicy_loo1",), "t_s4_tis")]
    assert LABELS[("maxk_offpolicy_exact_loo1", "behaviour")] == "maxk_offpolicy_exact_loo1 exact"
    with pytest.raises(ValueError, match="baseline='mean' must be one of"):
        grid_cells((0,), baseline="mean")
    with pytest.raises(ValueError, match="baseline='mean' must be one of"):
        grid_cells((0,), baseline=("zscore", "mean"))


def test_several_baselines_give_one_grid_whose_cells_hold_every_family():
    cells = grid_cells((0, 1), "t", baseline=("zscore", "loo1_rms"))
    assert [(c.s, c.correction, c.methods, c.name) for c in cells] == [
        (0, "none", ("maxk_offpolicy", "maxk_offpolicy_exact", "grpo", "maxk_offpolicy_loo1_rms",
                     "maxk_offpolicy_exact_loo1_rms"), "t_s0"),
        (1, "none", ("maxk_offpolicy", "maxk_offpolicy_loo1_rms"), "t_s1_none"),
        (1, "behaviour", ("maxk_offpolicy", "maxk_offpolicy_exact", "maxk_offpolicy_loo1_rms",
                          "maxk_offpolicy_exact_loo1_rms"), "t_s1_behaviour"),
        (1, "tis", ("maxk_offpolicy", "grpo", "maxk_offpolicy_loo1_rms"), "t_s1_tis")]
    assert grid_cells((0, 1), "t", baseline=("zscore",)) == grid_cells((0, 1), "t", baseline="zscore")


def _fake_cell(root, cell, values, step_s=2.0):
    """A finished comparison directory: results.json (with in-loop curves at steps 2 and 4) and each
    run's metrics.jsonl (4 steps of `step_s` seconds plus 10 s of evaluation after step 2)."""
    d = root / cell.name
    methods = {"base": {"max_at_k": {"mean": {"1": 0.1, "4": 0.5}}, "pass_at_k": {"mean": {"1": 0.0, "4": 0.2}}}}
    curves = {"ks": [1, 4], "num_problems": 2, "base": {"1": 0.1, "4": 0.4}, "methods": {}}
    for m in cell.methods:
        v = values[m]
        methods[m] = {metric: {"mean": {"1": v, "4": 2 * v}, "per_seed": {"0": {"1": v, "4": 2 * v}},
                               "ci": {"1": [v - 0.1, v + 0.1], "4": [2 * v - 0.2, 2 * v + 0.1]}}
                      for metric in ("max_at_k", "pass_at_k")}
        curves["methods"][m] = {"steps": [2, 4], "mean": {"1": [v, v], "4": [0.4 + v, 0.4 + 2 * v]}}
        rl = d / m / "seed0" / "rl"
        rl.mkdir(parents=True)
        rows = [{"ppo/kl_ref": 0.01 * (s + 1), "ppo/update_norm": 0.1 + 0.1 * s,
                 "ppo/stale_log_ratio_abs_mean": 0.1 * s, "ppo/stale_clamped_fraction": 0.0,
                 "ppo/stale_ess_fraction_mean": 1.0 - 0.1 * s, "ppo/stale_ess_fraction_min": 0.5,
                 "time/step_s": step_s + (10.0 if s == 1 else 0.0), "time/eval_s": 10.0 if s == 1 else 0.0,
                 "time/wait_rollout_s": 0.0} for s in range(4)]
        (rl / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    (d / "results.json").write_text(json.dumps({"large_k": 4, "methods": methods, "curves": curves}))


def test_rows_table_and_plot_from_finished_cells(tmp_path):
    cells = grid_cells((0, 1))
    _fake_cell(tmp_path, cells[0], {"maxk_offpolicy": 0.3, "maxk_offpolicy_exact": 0.31, "grpo": 0.35})
    _fake_cell(tmp_path, cells[2], {"maxk_offpolicy": 0.28, "maxk_offpolicy_exact": 0.29}, step_s=1.5)
    rows = collect_rows(str(tmp_path), cells)        # cells 1 and 3 are not finished: skipped
    assert [(r["label"], r["s"], r["correction"]) for r in rows] == [
        ("maxk_offpolicy", 0, "sync"), ("maxk_offpolicy_exact", 0, "sync"), ("grpo", 0, "sync"),
        ("maxk_offpolicy first-order", 1, "behaviour"), ("maxk_offpolicy_exact exact", 1, "behaviour")]
    r = rows[3]
    assert (r["max1"], r["maxK"], r["maxK_per_seed"], r["base_maxK"]) == (0.28, 0.56, [0.56], 0.5)
    np.testing.assert_allclose(r["ppo/stale_log_ratio_abs_mean"], 0.15)
    np.testing.assert_allclose((r["kl_ref_final"], r["update_norm_mean"]), (0.04, 0.25))   # last KL, mean norm
    np.testing.assert_allclose((r["time/step_s"], r["time/rl_step_s"]), (4.0, 1.5))   # without the evaluation
    # equal wall time: 4 steps at 1.5 s = 6 s, in which the synchronous run (2 s/step) makes 3 steps;
    # its curve (0.4 at 0, 0.7 at 2, 1.0 at 4) is 0.85 there; this run's own curve ends at 0.96
    np.testing.assert_allclose((r["sync_steps_at_equal_time"], r["sync_curveK_at_equal_time"], r["curveK_end"]),
                               (3.0, 0.85, 0.96))
    assert np.isnan(rows[0]["sync_steps_at_equal_time"]) and rows[0]["curveK_end"] == 1.0
    text = grid_markdown(rows)
    assert ("| maxk_offpolicy first-order | 1 | 1 | 0.280 [0.180, 0.380] | 0.560 [0.360, 0.660] | 0.280 | 0.560 | "
            "0.040 | 0.2500 |") in text
    assert r["maxK_ci"] == pytest.approx([0.36, 0.66])
    assert "max@4" in text and "KL to ref" in text
    assert "| 1.50 | 0.00 | 0.960 | 0.850 (3) |" in text
    plot_grid(rows, str(tmp_path / "grid.png"), "t")
    assert (tmp_path / "grid.png").stat().st_size > 0


def test_a_partly_finished_cell_gives_the_rows_of_its_finished_methods(tmp_path):
    cells = grid_cells((0, 2))
    behaviour = cells[2]
    _fake_cell(tmp_path, behaviour._replace(methods=("maxk_offpolicy",)), {"maxk_offpolicy": 0.2})
    rows = collect_rows(str(tmp_path), cells)        # the exact estimator's run is not in results.json yet
    assert [(r["label"], r["s"]) for r in rows] == [("maxk_offpolicy first-order", 2)]
    assert not cell_has_runs(str(tmp_path), behaviour, [0])      # no base evaluation
    (tmp_path / behaviour.name / "base").mkdir()
    (tmp_path / behaviour.name / "base" / "summary.json").write_text("{}")
    assert not cell_has_runs(str(tmp_path), behaviour, [0])      # no evaluated run
    ev = tmp_path / behaviour.name / "maxk_offpolicy_exact" / "seed1" / "eval"
    ev.mkdir(parents=True)
    (ev / "summary.json").write_text("{}")
    assert cell_has_runs(str(tmp_path), behaviour, [0, 1]) and not cell_has_runs(str(tmp_path), behaviour, [0])


def test_paired_tests_across_cells_against_a_reference_row(tmp_path):
    from maxk_jax.eval.report import write_report
    from maxk_jax.pipelines.staleness_grid import cell_row_keys, paired_tests, row_key
    from tests.pipelines.fixtures import eval_result

    cells = grid_cells((0, 1))
    _fake_cell(tmp_path, cells[0], {"maxk_offpolicy": 0.3, "maxk_offpolicy_exact": 0.31, "grpo": 0.35})
    _fake_cell(tmp_path, cells[2], {"maxk_offpolicy": 0.28, "maxk_offpolicy_exact": 0.29})
    rng = np.random.default_rng(0)
    base = rng.choice([0.0, 0.5, 1.0], size=(24, 8))
    better = np.minimum(base + 0.5, 1.0)
    for cell in (cells[0], cells[2]):
        write_report(eval_result(base), tmp_path / cell.name / "base", plot=False)
        for m in cell.methods:
            # the stale exact run is better on every problem; every other row equals the base
            write_report(eval_result(better if (cell.s, m) == (1, "maxk_offpolicy_exact") else base),
                         tmp_path / cell.name / m / "seed0" / "eval", plot=False)
    rows = collect_rows(str(tmp_path), cells)
    assert "maxk_offpolicy_exact/behaviour/s1" in cell_row_keys(cells)
    with pytest.raises(ValueError, match="reference row 'nope' is not in the grid"):
        paired_tests(str(tmp_path), rows, "nope")
    paired_tests(str(tmp_path), rows, "maxk_offpolicy_exact/behaviour/s1")
    by_key = {row_key(r): r for r in rows}
    assert np.isnan(by_key["maxk_offpolicy_exact/behaviour/s1"]["p_max1"])          # the reference itself
    assert by_key["maxk_offpolicy/sync/s0"]["p_max1"] < 0.01 and by_key["grpo/sync/s0"]["p_maxK"] < 0.01
    text = grid_markdown(rows)
    assert "p max@1 / max@4 vs maxk_offpolicy_exact/behaviour/s1 |" in text and "Wilcoxon" in text
