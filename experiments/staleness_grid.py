r"""Asynchronous rollouts: staleness s x correction, on the tiny pipeline (or the testbed) config.

    .venv/bin/python -m experiments.staleness_grid --seeds=0 --staleness=0,1,2,4           # main job's config
    .venv/bin/python -m experiments.staleness_grid --config=experiments/configs/tiny.py:testbed --seeds=0,1,2
    .venv/bin/python -m experiments.staleness_grid --aggregate_only --runs_dir=runs         # table + plot only
                                                   # (of the evaluated runs of --seeds, each cell re-aggregated)

One method comparison (experiments/compare_methods.py's `run_comparison`, resumable, same base and
evaluation keys) per cell of `maxk_jax.pipelines.staleness_grid.grid_cells`, with the max@k estimators of
``--baseline``. The default ``loo1_rms`` is the unbiased scale-free family (the default method's; the
only one the ``behaviour`` correction accepts): s = 0 synchronous (maxk_offpolicy_loo1_rms = first-order
r̃′, maxk_offpolicy_exact_loo1_rms = eq. 10); for every s > 0 ``none`` (first-order as if on-policy),
``behaviour`` (both, δ to the stale sampler) and ``tis`` (first-order with per-sample truncated IS, cap
``rl.algo.tis_cap``). ``--baseline=zscore``: the paper's z-scored maxk_offpolicy / maxk_offpolicy_exact
with GRPO beside them (a grid with s > 0 is refused before any work: its behaviour cells are biased;
the family is kept to re-aggregate runs made before); ``loo1``: the leave-one-out baseline in the clipped loss, without GRPO;
``--baseline=zscore,loo1_rms``: one grid of both families (each cell directory holds both families' runs).
Each cell's runs go to ``<runs_dir>/<prefix>_s<s>[_<correction>]``; the table (max@1, max@K, pass@1,
pass@K at equal RL steps, KL to the reference and the mean update norm, the behaviour ratios' statistics,
seconds per step and the learner's wait) and the plot (max@1 / max@K against s per method and
correction) go to ``<runs_dir>/<prefix>_grid.{md,json,png}``.
"""
from __future__ import annotations

import json
import os
from collections.abc import Sequence

from absl import app, flags
from ml_collections import config_flags

from maxk_jax import cli
from maxk_jax.cli import config_overrides, preflight
from maxk_jax.cli import parse_seeds
from maxk_jax.pipelines import from_config_dict, run_comparison, shortcut_overrides
from maxk_jax.pipelines.compare import saved_runs
from maxk_jax.pipelines.methods import apply_method
from maxk_jax.rl.method import check_method
from maxk_jax.pipelines.staleness_grid import (Cell, cell_config, cell_has_runs, cell_row_keys, collect_rows, grid_cells,
                                               grid_markdown, paired_tests, plot_grid)

CONFIG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "configs", "tiny.py")
FLAGS = flags.FLAGS


def define_flags() -> None:
    """Define the command-line flags (called by ``__main__`` only, so tests can import this module)."""
    with config_overrides.explained_errors("config", CONFIG):
        config_flags.DEFINE_config_file("config", CONFIG, "Shared settings of every run (the tiny pipeline config); "
                                        "override fields with --config.<field>=<value>.", lock_config=False)
    flags.DEFINE_list("staleness", ["0", "1", "2", "4"], "rollout.max_staleness values (0 = the synchronous cell).")
    flags.DEFINE_list("seeds", ["0"], "RL seeds; every (method, cell) runs once per seed.")
    flags.DEFINE_string("prefix", "async", "Name prefix of the cells' comparison directories and of the grid files.")
    flags.DEFINE_list("baseline", ["loo1_rms"], "Baselines of the max@k estimators (comma-separated; several give one "
                      "grid whose cells hold every family's runs): zscore (the paper's, with maxk_offpolicy / "
                      "maxk_offpolicy_exact and GRPO cells), loo1 (the unbiased leave-one-out baseline: "
                      "maxk_offpolicy_loo1 / maxk_offpolicy_exact_loo1, no GRPO cells) or loo1_rms (the unbiased "
                      "scale-free form, IS-weighted: maxk_offpolicy_loo1_rms / maxk_offpolicy_exact_loo1_rms, the "
                      "only family whose behaviour cells validate).")
    flags.DEFINE_list("methods", [], "Train only these of the cells' methods (names of the method registry "
                      "maxk_jax.rl.method, the --method names of every entry point that trains; each must be a "
                      "method of some cell of --baseline). Empty: every method of --baseline's families.")
    flags.DEFINE_string("runs_dir", None, "Runs directory (default: config.runs_dir); the base-model cache is shared "
                        "with experiments.tiny_pipeline and compare_methods.")
    flags.DEFINE_bool("aggregate_only", False, "Train nothing: re-aggregate each cell's evaluated (method, seed) runs "
                      "of --seeds (also runs started one by one, e.g. with compare_methods --name=<cell>) and build "
                      "the table and plot from them.")
    flags.DEFINE_string("reference_row", "", "A row <method>/<correction>/s<s> (correction 'sync' at s = 0, e.g. "
                        "maxk_offpolicy_exact_loo1_rms/behaviour/s1): add the paired Wilcoxon p of that row vs every "
                        "row at max@1 and max@K to the table (every cell has the same problems, keys and base). "
                        "Empty: no tests.")
    flags.DEFINE_bool("progress", True, "Show tqdm progress bars.")


def only_methods(cells: list[Cell], methods: Sequence[str]) -> list[Cell]:
    """The grid's cells restricted to `methods` (all when empty; cells left without a method are
    dropped). ValueError for a name that is not a method of the registry or of no cell."""
    if not methods:
        return cells
    in_grid = {m for cell in cells for m in cell.methods}
    for method in methods:
        check_method(method)
        if method not in in_grid:
            raise ValueError(f"--methods: {method!r} is not a method of this grid (its methods: "
                             f"{', '.join(sorted(in_grid))}; --baseline chooses the families)")
    kept = [cell._replace(methods=tuple(m for m in cell.methods if m in methods)) for cell in cells]
    return [cell for cell in kept if cell.methods]


def main(argv: Sequence[str]) -> None:
    """absl entry point: run every cell (resumable), then write the table and the plot."""
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    with cli.user_errors():
        cfg = from_config_dict(FLAGS.config, shortcut_overrides(runs_dir=FLAGS.runs_dir))
        seeds = parse_seeds(FLAGS.seeds)
        try:
            staleness = sorted({int(v) for v in FLAGS.staleness})
        except ValueError:
            raise ValueError(f"--staleness={','.join(FLAGS.staleness)} must be ints") from None
        if not staleness or staleness[0] < 0:
            raise ValueError(f"--staleness={','.join(FLAGS.staleness)} must be ints >= 0")
        cells = only_methods(grid_cells(staleness, FLAGS.prefix, FLAGS.baseline), FLAGS.methods)
        for cell in cells:
            cell_config(cfg, cell)   # every cell's config is valid before any work
            for method in ([] if FLAGS.aggregate_only else cell.methods):   # and every run it would train
                cell_config(apply_method(cfg, method), cell)
        if FLAGS.reference_row and FLAGS.reference_row not in cell_row_keys(cells):
            raise ValueError(f"--reference_row={FLAGS.reference_row!r} is not a row of this grid; rows: "
                             + ", ".join(cell_row_keys(cells)))
        preflight.check_writable_dir(cfg.runs_dir, "runs directory (--runs_dir)")
        preflight.check_executor(cfg.executor)
    cli.on_interrupt(lambda: "; ".join(saved_runs(os.path.abspath(os.path.join(cfg.runs_dir, c.name)), "repeat the "
                                                  "command to continue") for c in cells
                                       if os.path.isdir(os.path.join(cfg.runs_dir, c.name)))
                     or "no cell started (a finished base model stays cached under <runs_dir>/_cache)")
    for cell in cells:
        if FLAGS.aggregate_only and not cell_has_runs(cfg.runs_dir, cell, seeds):
            continue
        # --aggregate_only re-aggregates each cell's finished (method, seed) runs, however they were started
        run_comparison(cell_config(cfg, cell), cell.methods, seeds, name=cell.name, reference="base",
                       progress=FLAGS.progress, finished_only=FLAGS.aggregate_only)
    rows = collect_rows(cfg.runs_dir, cells)
    if FLAGS.reference_row:
        with cli.user_errors():
            paired_tests(cfg.runs_dir, rows, FLAGS.reference_row)
    text = grid_markdown(rows)
    stem = os.path.join(cfg.runs_dir, f"{FLAGS.prefix}_grid")
    with open(f"{stem}.md", "w", encoding="utf-8") as f:
        f.write(text)
    with open(f"{stem}.json", "w", encoding="utf-8") as f:
        json.dump(rows, f, indent=2)
    plot_grid(rows, f"{stem}.png", f"{cfg.name}: max@k after {cfg.rl.max_steps} RL steps vs rollout staleness "
              f"(seeds {seeds})")
    print(text)
    print(f"Table: {stem}.md\nPlot: {stem}.png")


if __name__ == "__main__":
    define_flags()
    cli.run_main(main)
