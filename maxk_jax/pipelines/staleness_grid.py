"""The staleness x correction experiment: one method comparison per (s, correction) cell, then one table.

    cells = grid_cells((0, 1, 2, 4))          # [Cell(s, correction, methods, name), ...]
    for cell in cells: run_comparison(cell_config(cfg, cell), cell.methods, seeds, name=cell.name, ...)
    rows = collect_rows(runs_dir, cells)      # per (method, correction, s): max@1 / max@K, delta stats, time
    grid_markdown(rows, large_k); plot_grid(rows, path)

Cells: s = 0 is the synchronous loop (``sync``: maxk_offpolicy, maxk_offpolicy_exact, GRPO); for s > 0,
``none`` (maxk_offpolicy trained as if on-policy), ``behaviour`` (the paper's off-policy estimators take
δ to the stale sampler: maxk_offpolicy = first-order r̃′, maxk_offpolicy_exact = eq. 10) and ``tis``
(per-sample truncated IS on maxk_offpolicy and on GRPO, the peers' baseline). With
``baseline="loo1"`` the two max@k estimators use the unbiased leave-one-out baseline instead of the
paper's z-score (``maxk_offpolicy_loo1``, ``maxk_offpolicy_exact_loo1``) and GRPO is left out: its cells
do not depend on the max@k baseline (read them from the z-score grid).  ``baseline="loo1_rms"``: the
unbiased, scale-free form in the IS-weighted loss (``maxk_offpolicy_loo1_rms``,
``maxk_offpolicy_exact_loo1_rms`` of the run config's method table), the only family whose ``behaviour``
cells the run config accepts (``estimators.behaviour_refusal``; the clipped loss is refused with
behaviour at PPO iterations > 1): the other families' behaviour cells are kept for reading runs made before.
"""
from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from maxk_jax.pipelines.compare import aggregate, training_stats
from maxk_jax.pipelines.config import PipelineConfig
from maxk_jax.cli.fields import replace_fields

# the max@k estimators of the grid per baseline: (first-order r~', exact eq. 10)
FAMILIES = {"zscore": ("maxk_offpolicy", "maxk_offpolicy_exact"),
            "loo1": ("maxk_offpolicy_loo1", "maxk_offpolicy_exact_loo1"),
            "loo1_rms": ("maxk_offpolicy_loo1_rms", "maxk_offpolicy_exact_loo1_rms")}
PEER = "grpo"
LABELS = {(m, "behaviour"): f"{m} {kind}" for first, exact in FAMILIES.values()
          for m, kind in ((first, "first-order"), (exact, "exact"))}
STALE_KEYS = ("ppo/stale_log_ratio_abs_mean", "ppo/stale_clamped_fraction", "ppo/stale_ess_fraction_mean",
              "ppo/stale_ess_fraction_min")
TIME_KEYS = ("time/step_s", "time/wait_rollout_s")
UPDATE_KEYS = ("kl_ref_final", "update_norm_mean")   # update size, from `compare.training_stats`


class Cell(NamedTuple):
    """One comparison of the grid: staleness s, correction, the methods trained, the comparison's name."""

    s: int
    correction: str
    methods: tuple[str, ...]
    name: str


def grid_cells(staleness: Sequence[int], prefix: str = "async",
               baseline: str | Sequence[str] = "zscore") -> list[Cell]:
    """The comparisons of the grid for the staleness values (0 = the synchronous cell), with the max@k
    estimators of `baseline` (a `FAMILIES` key; "loo1" / "loo1_rms" leave GRPO out). Several
    baselines give one grid: each cell holds the union of their methods (in the order given), so one
    comparison directory reads the z-scored and the unbiased runs of the same (s, correction)."""
    families = [baseline] if isinstance(baseline, str) else list(baseline)
    if not families:
        raise ValueError("baseline=[] must name at least one of " + str(sorted(FAMILIES)))
    for name in families:
        if name not in FAMILIES:
            raise ValueError(f"baseline={name!r} must be one of {sorted(FAMILIES)}")
    cells: dict[str, Cell] = {}
    for name in families:
        first, exact = FAMILIES[name]
        peer = (PEER,) if name == "zscore" else ()
        for s in staleness:
            parts = [(0, "none", (first, exact) + peer, f"{prefix}_s0")] if s == 0 else [
                (s, "none", (first,), f"{prefix}_s{s}_none"),
                (s, "behaviour", (first, exact), f"{prefix}_s{s}_behaviour"),
                (s, "tis", (first,) + peer, f"{prefix}_s{s}_tis")]
            for cs, correction, methods, cell_name in parts:
                old = cells.get(cell_name)
                union = methods if old is None else old.methods + tuple(m for m in methods if m not in old.methods)
                cells[cell_name] = Cell(cs, correction, union, cell_name)
    return sorted(cells.values(), key=lambda c: (c.s, ("none", "behaviour", "tis").index(c.correction)))


def cell_config(cfg: PipelineConfig, cell: Cell) -> PipelineConfig:
    """`cfg` with the cell's ``rl.rollout.max_staleness`` and ``rl.algo.stale_correction``."""
    rl = replace_fields(cfg.rl, {"rollout.max_staleness": cell.s, "algo.stale_correction": cell.correction})
    return dataclasses.replace(cfg, rl=rl)


def _run_means(rl_dir: str) -> dict[str, float]:
    """Means over the RL steps of a run's staleness statistics and times (NaN when not logged), and
    ``time/rl_step_s``: seconds per RL step without the in-loop evaluation (step_s − eval_s)."""
    with open(os.path.join(rl_dir, "metrics.jsonl"), encoding="utf-8") as f:
        records = [json.loads(line) for line in f if line.strip()]
    out = {}
    for key in STALE_KEYS + TIME_KEYS:
        values = [r[key] for r in records if r.get(key) is not None]
        out[key] = float(np.mean(values)) if values else float("nan")
    steps = [r["time/step_s"] - (r.get("time/eval_s") or 0.0) for r in records if r.get("time/step_s") is not None]
    out["time/rl_step_s"] = float(np.mean(steps)) if steps else float("nan")
    return out


def _curve(res: dict[str, Any], method: str, large: str) -> tuple[list[float], list[float]]:
    """(RL steps, max@K) of a method's in-loop evaluation curve, mean over seeds, the base model as
    step 0 (``results.json``'s ``curves``; ([], []) when the comparison has none)."""
    curves = res.get("curves") or {}
    entry = (curves.get("methods") or {}).get(method)
    if not entry or large not in entry["mean"]:
        return [], []
    return [0.0] + [float(t) for t in entry["steps"]], [float(curves["base"][large])] + list(entry["mean"][large])


def add_equal_wall_time(rows: Sequence[dict[str, Any]]) -> None:
    """The equal-wall-time reading, in place: for each s > 0 row whose method has a synchronous row
    with a curve, ``sync_steps_at_equal_time`` = the RL steps the synchronous run makes in the time
    this run took for all of its steps (from both runs' measured seconds per RL step,
    ``time/rl_step_s``; capped at the run's length) and ``sync_curveK_at_equal_time`` = the
    synchronous run's curve max@K there (linear between its evaluation points); ``curveK_end`` =
    this run's own last curve point (the same evaluation problems). NaN where not defined."""
    sync = {r["method"]: r for r in rows if r["s"] == 0}
    for r in rows:
        r["curveK_end"] = r["curve_maxK"][-1] if r["curve_maxK"] else float("nan")
        r["sync_steps_at_equal_time"] = r["sync_curveK_at_equal_time"] = float("nan")
        ref = sync.get(r["method"])
        if not r["s"] or ref is None or not ref["curve_maxK"] or not r["curve_steps"]:
            continue
        total = r["curve_steps"][-1]
        steps = min(total, total * r["time/rl_step_s"] / ref["time/rl_step_s"])
        if np.isfinite(steps):
            r["sync_steps_at_equal_time"] = float(steps)
            r["sync_curveK_at_equal_time"] = float(np.interp(steps, ref["curve_steps"], ref["curve_maxK"]))


def cell_has_runs(runs_dir: str, cell: Cell, seeds: Sequence[int]) -> bool:
    """Whether the cell's comparison directory holds the base model's evaluation and at least one
    evaluated (method, seed) run of `cell.methods` x `seeds`: what a re-aggregation needs."""
    root = os.path.join(runs_dir, cell.name)
    return os.path.isfile(os.path.join(root, "base", "summary.json")) and any(
        os.path.isfile(os.path.join(root, m, f"seed{s}", "eval", "summary.json")) for m in cell.methods for s in seeds)


def collect_rows(runs_dir: str, cells: Sequence[Cell]) -> list[dict[str, Any]]:
    """One row per (method, correction, s) of the finished cells (a cell without results.json is
    skipped, and so is a method its results.json lacks: a partly finished cell): max@1 / max@K /
    pass@1 / pass@K (mean, per seed, and the comparison's 95 % bootstrap interval ``*_ci`` = [low, high]
    or None), the base's, the runs' means of `STALE_KEYS`, `TIME_KEYS`
    and ``time/rl_step_s``, the update size (`UPDATE_KEYS`: KL to the reference at the last step, mean
    parameter-update norm; mean over seeds), the in-loop max@K curve (``curve_steps``,
    ``curve_maxK``) and the equal-wall-time reading (`add_equal_wall_time`)."""
    rows = []
    for cell in cells:
        path = os.path.join(runs_dir, cell.name, "results.json")
        if not os.path.isfile(path):
            continue
        with open(path, encoding="utf-8") as f:
            res = json.load(f)
        large = str(res["large_k"])
        base = res["methods"]["base"]
        for method in cell.methods:
            entry = res["methods"].get(method)
            if entry is None:
                continue
            seeds = sorted(entry["max_at_k"]["per_seed"])
            runs = [_run_means(os.path.join(runs_dir, cell.name, method, f"seed{s}", "rl")) for s in seeds]
            row = {"s": cell.s, "correction": "sync" if cell.s == 0 else cell.correction, "method": method,
                   "label": LABELS.get((method, cell.correction), f"{method} {cell.correction}") if cell.s else method,
                   "large_k": res["large_k"], "seeds": len(seeds), "seed_ids": [int(s) for s in seeds],
                   "cell": cell.name,
                   "base_max1": base["max_at_k"]["mean"]["1"], "base_maxK": base["max_at_k"]["mean"][large]}
            for metric, short in (("max_at_k", "max"), ("pass_at_k", "pass")):
                row[f"{short}1"] = entry[metric]["mean"]["1"]
                row[f"{short}K"] = entry[metric]["mean"][large]
                ci = entry[metric].get("ci") or {}       # 95 % bootstrap over problems and seeds
                row[f"{short}1_ci"], row[f"{short}K_ci"] = ci.get("1"), ci.get(large)
                row[f"{short}K_per_seed"] = [entry[metric]["per_seed"][s][large] for s in seeds]
            row.update({key: float(np.mean([r[key] for r in runs])) for key in runs[0]})
            trained = [training_stats(os.path.join(runs_dir, cell.name, method, f"seed{s}", "rl")) for s in seeds]
            row.update({key: float(np.mean([st[key] for st in trained])) for key in UPDATE_KEYS})
            row["curve_steps"], row["curve_maxK"] = _curve(res, method, large)
            rows.append(row)
    add_equal_wall_time(rows)
    return rows


def row_key(row: dict[str, Any]) -> str:
    """A grid row's name for `paired_tests`: ``<method>/<correction>/s<s>`` (correction ``sync`` at s = 0)."""
    return f"{row['method']}/{row['correction']}/s{row['s']}"


def cell_row_keys(cells: Sequence[Cell]) -> list[str]:
    """The `row_key` of every (cell, method) row the cells can give."""
    return [row_key({"method": m, "correction": "sync" if c.s == 0 else c.correction, "s": c.s})
            for c in cells for m in c.methods]


def paired_tests(runs_dir: str, rows: list[dict[str, Any]], reference: str) -> None:
    """Add ``p_max1`` / ``p_maxK`` to every row, in place: the two-sided Wilcoxon signed-rank test of
    the row `reference` (a `row_key`) against it, paired over problems (each problem's max@k averaged
    over the row's seeds), across cells: every cell evaluates the same problems with the same sample
    keys from the same base (``compare.aggregate``'s test). ValueError naming `reference` and the
    row keys when it is not one of them."""
    from maxk_jax.eval.report import read_report

    keys = [row_key(r) for r in rows]
    if reference not in keys:
        raise ValueError(f"reference row {reference!r} is not in the grid; rows: {', '.join(keys)}")
    runs = {}
    for key, r in zip(keys, rows):
        d = os.path.join(runs_dir, r["cell"], r["method"])
        runs[key] = {s: read_report(os.path.join(d, f"seed{s}", "eval"))[0] for s in r["seed_ids"]}   # the row's seeds
    ref = rows[keys.index(reference)]
    base = read_report(os.path.join(runs_dir, ref["cell"], "base"))[0]
    tests = aggregate(base, runs, ref["large_k"], None, reference)["wilcoxon_vs_" + reference]
    for key, r in zip(keys, rows):
        got = tests.get(key, {}).get("max_at_k", {})
        r["p_max1"] = got[1]["p_value"] if got else float("nan")
        r["p_maxK"] = got[r["large_k"]]["p_value"] if got else float("nan")
    for r in rows:
        r["p_reference"] = reference


def _fmt(v: float, digits: int = 3) -> str:
    return "–" if v is None or not np.isfinite(v) else f"{v:.{digits}f}"


def _p(v: float) -> str:
    return "–" if not np.isfinite(v) else f"{v:.2g}"


def _with_ci(r: dict[str, Any], key: str) -> str:
    ci = r.get(f"{key}_ci")
    return _fmt(r[key]) + (f" [{_fmt(ci[0])}, {_fmt(ci[1])}]" if ci else "")


def grid_markdown(rows: Sequence[dict[str, Any]]) -> str:
    """The s x correction table (one line per method/correction/s)."""
    if not rows:
        return "(no finished cell)\n"
    k = rows[0]["large_k"]
    ref = rows[0].get("p_reference")
    lines = [f"| method / correction | s | seeds | max@1 | max@{k} | pass@1 | pass@{k} | KL to ref | update norm "
             f"| |log π_old/μ| | clamped | ESS/n mean (min) | s/step | learner wait s/step | curve max@{k} at the end "
             "| sync at equal time (its steps) |" + (f" p max@1 / max@{k} vs {ref} |" if ref else ""),
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|" + ("---|" if ref else "")]
    for r in sorted(rows, key=lambda r: (r["label"].split()[0], r["s"], r["correction"])):
        steps = r.get("sync_steps_at_equal_time", float("nan"))
        lines.append(
            f"| {r['label']} | {r['s']} | {r['seeds']} | {_with_ci(r, 'max1')} | {_with_ci(r, 'maxK')} | "
            f"{_fmt(r['pass1'])} | "
            f"{_fmt(r['passK'])} | {_fmt(r.get('kl_ref_final', float('nan')))} | "
            f"{_fmt(r.get('update_norm_mean', float('nan')), 4)} | {_fmt(r['ppo/stale_log_ratio_abs_mean'], 2)} | "
            f"{_fmt(r['ppo/stale_clamped_fraction'], 2)} | {_fmt(r['ppo/stale_ess_fraction_mean'], 2)} "
            f"({_fmt(r['ppo/stale_ess_fraction_min'], 2)}) | {_fmt(r.get('time/rl_step_s', float('nan')), 2)} | "
            f"{_fmt(r['time/wait_rollout_s'], 2)} | {_fmt(r.get('curveK_end', float('nan')))} | "
            f"{_fmt(r.get('sync_curveK_at_equal_time', float('nan')))}"
            + (f" ({steps:.0f})" if np.isfinite(steps) else "") + " |"
            + (f" {_p(r['p_max1'])} / {_p(r['p_maxK'])} |" if ref else ""))
    lines.append(f"\nBase model: max@1 {_fmt(rows[0]['base_max1'])}, max@{k} {_fmt(rows[0]['base_maxK'])}. "
                 "[low, high]: 95 % bootstrap interval over problems and seeds (the cell's comparison). "
                 + (f"p: two-sided Wilcoxon signed-rank of {ref} vs the row, paired over problems (seed-averaged; "
                    "every cell has the same problems, sample keys and base). " if ref else "") +
                 "KL to ref: at the last RL step; update norm: the mean parameter-update norm per step. s/step: "
                 "seconds per RL step without the in-loop evaluation. The two curve columns read the "
                 f"in-loop max@{k} curves (the periodic evaluation's problems; the base model at step 0): this "
                 "run's last point, and the synchronous run of the same method after the RL steps it makes in "
                 "the time this run took (from the two s/step; linear between evaluation points).")
    return "\n".join(lines) + "\n"


def plot_grid(rows: Sequence[dict[str, Any]], path: str, title: str) -> None:
    """max@1, max@K (with the 95 % intervals where every point has one) and seconds per RL step
    (without the in-loop evaluation) against s, one line per method / correction (the s = 0 point is
    each method's synchronous run), the base dashed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    sync = {r["method"]: r for r in rows if r["s"] == 0}
    lines: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        if r["s"]:
            lines.setdefault(r["label"], []).append(r)
    for label, pts in sorted(lines.items()):
        method = pts[0]["method"]
        pts = ([sync[method]] if method in sync else []) + sorted(pts, key=lambda r: r["s"])
        for ax, key in zip(axes, ("max1", "maxK", "time/rl_step_s")):
            ys = [p.get(key, float("nan")) for p in pts]
            cis = [p.get(f"{key}_ci") for p in pts]
            err = None if not all(cis) else np.array([[y - ci[0] for y, ci in zip(ys, cis)],
                                                      [ci[1] - y for y, ci in zip(ys, cis)]])
            ax.errorbar([p["s"] for p in pts], ys, yerr=err, marker="o", capsize=3, label=label)
    if rows:
        for ax, key, name in zip(axes, ("base_max1", "base_maxK"), ("max@1", f"max@{rows[0]['large_k']}")):
            ax.axhline(rows[0][key], color="gray", linestyle="--", label="base")
            ax.set_xlabel("staleness s (RL steps)")
            ax.set_ylabel(name)
    axes[2].set_xlabel("staleness s (RL steps)")
    axes[2].set_ylabel("seconds per RL step (no evaluation)")
    axes[1].legend(fontsize=7)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
