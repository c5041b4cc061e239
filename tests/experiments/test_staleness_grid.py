"""experiments/staleness_grid.py on the toy config: every cell runs, the table and plot are written,
and a bad --staleness is refused before any work."""
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _run(tmp_path, *args):
    return subprocess.run([sys.executable, "-m", "experiments.staleness_grid", "--config=experiments/configs/tiny.py:smoke",
                           "--progress=false", f"--config.runs_dir={tmp_path}", *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=1200)


@pytest.mark.slow
def test_grid_on_the_toy_config(tmp_path):
    res = _run(tmp_path, "--staleness=0,1", "--seeds=0")
    assert res.returncode == 0, res.stderr[-3000:]
    table = (tmp_path / "async_grid.md").read_text()
    for label in ("maxk_offpolicy_exact_loo1_rms exact", "maxk_offpolicy_loo1_rms first-order",
                  "maxk_offpolicy_loo1_rms tis", "maxk_offpolicy_loo1_rms none"):      # the default: unbiased
        assert f"| {label} | 1 | 1 |" in table, table
    assert (tmp_path / "async_grid.png").is_file()
    again = _run(tmp_path, "--staleness=0,1", "--seeds=0", "--aggregate_only")
    assert again.returncode == 0 and (tmp_path / "async_grid.md").read_text() == table


def test_negative_staleness_is_refused_before_work(tmp_path):
    res = _run(tmp_path, "--staleness=0,-1")
    assert res.returncode == 2 and "must be ints >= 0" in res.stderr and not os.listdir(tmp_path), res.stderr[-2000:]


def test_an_unknown_baseline_in_the_list_is_refused_before_work(tmp_path):
    res = _run(tmp_path, "--baseline=zscore,mean")
    assert res.returncode == 2 and "baseline='mean' must be one of" in res.stderr and not os.listdir(tmp_path), \
        res.stderr[-2000:]


def test_a_grid_with_a_biased_behaviour_cell_is_refused_before_work(tmp_path):
    res = _run(tmp_path, "--baseline=zscore", "--staleness=0,1")
    assert res.returncode == 2 and "needs algo.loss.kind='is_weighted'" in res.stderr and not os.listdir(tmp_path), \
        res.stderr[-2000:]


def test_an_unknown_reference_row_is_refused_before_work(tmp_path):
    res = _run(tmp_path, "--staleness=0,1", "--reference_row=grpo/tis/s1")    # no GRPO in the default family
    assert res.returncode == 2 and "--reference_row='grpo/tis/s1' is not a row" in res.stderr \
        and not os.listdir(tmp_path), res.stderr[-2000:]


def test_methods_flag_restricts_the_cells():
    from experiments.staleness_grid import only_methods
    from maxk_jax.pipelines.staleness_grid import grid_cells

    cells = grid_cells([0, 1], "g", ["loo1_rms"])
    assert only_methods(cells, []) == cells
    kept = only_methods(cells, ["maxk_offpolicy_exact_loo1_rms"])
    assert [(c.name, c.methods) for c in kept] == [("g_s0", ("maxk_offpolicy_exact_loo1_rms",)),
                                                   ("g_s1_behaviour", ("maxk_offpolicy_exact_loo1_rms",))]
    with pytest.raises(ValueError, match="method 'nope' is unknown; valid methods: grpo, "):
        only_methods(cells, ["nope"])
    with pytest.raises(ValueError, match="--methods: 'grpo' is not a method of this grid"):
        only_methods(cells, ["grpo"])
