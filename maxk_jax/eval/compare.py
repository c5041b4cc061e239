"""Compare evaluation runs: side-by-side pass@k / max@k tables, paired Wilcoxon tests, curves.

`compare_runs(results, names)` pairs runs over problem ids, at the shared k values with k <= n/2
(`maxk_jax.eval.bootstrap.reported_ks`); means come with 95 % bootstrap intervals over problems. The first run is the reference; for
every other run, every metric and every k, the per-problem values (unbiased pass@k / max@k of each
problem) are paired by problem and tested with the two-sided Wilcoxon signed-rank test
(``scipy.stats.wilcoxon``, ``zero_method="wilcox"``: zero differences are dropped). When every
difference is zero the test is undefined; the p-value is then reported as 1.0 with
``note = "all differences zero"``. Problems without a value at k in either run (fewer than k
valid samples) are left out of that pair and counted in ``n_pairs``.

Runs must cover the same problems; with ``intersect=True`` only the shared problems are compared
(means are recomputed on them) and the dropped counts are reported.
"""
from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Sequence
from typing import Any, Optional

import numpy as np

from maxk_jax.eval.bootstrap import reported_ks
from maxk_jax.eval.report import atomic_write, markdown_table, plot_curves
from maxk_jax.eval.result import METRICS, EvalResult

COMPARISON_JSON = "comparison.json"
COMPARISON_MD = "comparison.md"
COMPARISON_PNG = "comparison.png"


def wilcoxon_test(base: np.ndarray, other: np.ndarray) -> dict[str, Any]:
    """Two-sided paired Wilcoxon signed-rank test of `other` vs `base` ([P] each, NaN = missing).

    Returns ``{"p_value", "statistic", "n_pairs", "n_nonzero", "mean_diff", "note"}``; p_value is
    1.0 (note "all differences zero") when no pair differs, None when there are no pairs.
    """
    base, other = np.asarray(base, dtype=np.float64), np.asarray(other, dtype=np.float64)
    if base.shape != other.shape or base.ndim != 1:
        raise ValueError(f"base {base.shape} and other {other.shape} must be equal 1-D shapes")
    keep = ~(np.isnan(base) | np.isnan(other))
    diff = other[keep] - base[keep]
    out: dict[str, Any] = {"n_pairs": int(keep.sum()), "n_nonzero": int(np.count_nonzero(diff)),
                           "mean_diff": float(diff.mean()) if diff.size else None,
                           "p_value": None, "statistic": None, "note": ""}
    if diff.size == 0:
        out["note"] = "no pairs"
    elif out["n_nonzero"] == 0:
        out.update(p_value=1.0, note="all differences zero")
    else:
        import scipy.stats   # here, not at module level: it is 1 s of every entry point's start-up
        test = scipy.stats.wilcoxon(other[keep], base[keep], zero_method="wilcox", alternative="two-sided")
        out.update(p_value=float(test.pvalue), statistic=float(test.statistic))
    return out


def _restrict(result: EvalResult, ids: set[str]) -> EvalResult:
    kept = tuple(r for r in result.problems if r.problem_id in ids)
    return dataclasses.replace(result, problems=kept)


def compare_runs(results: Sequence[EvalResult], names: Sequence[str], *, intersect: bool = False) -> dict[str, Any]:
    """Compare two or more runs (the first is the reference).

    Returns a JSON dict: ``names``, ``ks`` (k values present in every run), ``num_problems``,
    ``dropped`` (problems per run not shared, with `intersect`), ``means`` (per run:
    ``{"pass_at_k": {k: mean}, "max_at_k": ..., "*_stderr", "*_ci", "num_problems"}``) and ``tests``
    (per other run, per metric, per k: `wilcoxon_test` against the first run).
    """
    if len(results) < 2:
        raise ValueError(f"compare needs at least two runs, got {len(results)}")
    if len(names) != len(results):
        raise ValueError(f"{len(names)} names for {len(results)} runs")
    if len(set(names)) != len(names):
        raise ValueError(f"run names must be distinct, got {list(names)}")
    id_sets = [set(r.ids) for r in results]
    shared = set.intersection(*id_sets)
    dropped = {name: len(ids - shared) for name, ids in zip(names, id_sets)}
    if any(dropped.values()) and not intersect:
        raise ValueError(f"runs cover different problems (not shared per run: {dropped}); "
                         "pass intersect=True (--intersect) to compare the shared ones")
    if not shared:
        raise ValueError("the runs share no problem ids")
    runs = [_restrict(r, shared) for r in results]
    ks = list(reported_ks(sorted(set.intersection(*(set(r.ks) for r in runs))), min(r.n for r in runs)))
    if not ks:
        raise ValueError(f"the runs share no k value <= n/2: {[list(r.ks) for r in runs]}, "
                         f"n = {[r.n for r in runs]}")
    runs = [dataclasses.replace(r, ks=tuple(ks)) for r in runs]
    order = sorted(shared)
    per = []
    for r in runs:
        values = r.per_problem()
        pos = {pid: i for i, pid in enumerate(r.ids)}
        per.append({m: values[m][[pos[pid] for pid in order]] for m in METRICS})
    tests = {}
    for name, values in zip(names[1:], per[1:]):
        tests[name] = {m: {k: wilcoxon_test(per[0][m][:, j], values[m][:, j]) for j, k in enumerate(ks)}
                       for m in METRICS}
    return {"names": list(names), "ks": ks, "num_problems": len(shared), "dropped": dropped,
            "means": {name: r.means() for name, r in zip(names, runs)}, "tests": tests}


def _p(test: dict[str, Any]) -> str:
    if test["p_value"] is None:
        return "n/a"
    p = f"{test['p_value']:.2g}" if test["p_value"] < 0.001 else f"{test['p_value']:.3f}"
    return p + ("*" if test["note"] else "")


def comparison_markdown(comparison: dict[str, Any]) -> str:
    """comparison.md: pass@k and max@k side by side (one row per run) and Wilcoxon p-values."""
    names, ks, means = comparison["names"], comparison["ks"], comparison["means"]
    parts = [f"# Comparison: {', '.join(names)}",
             f"- problems compared: {comparison['num_problems']}"
             + (f" (not shared, dropped per run: {comparison['dropped']})" if any(comparison["dropped"].values()) else "")]
    for metric, label in (("pass_at_k", "pass@k"), ("max_at_k", "max@k")):
        cis = [means[n].get(metric + "_ci") or {} for n in names]
        parts.append(f"## {label}\n\n" + markdown_table([(n, means[n][metric]) for n in names], ks, metric, cis)
                     + "\n\n[low, high]: 95 % bootstrap interval over problems.")
    base = names[0]
    header = "| Run vs " + base.replace("|", "\\|") + " | " + " | ".join(f"k={k}" for k in ks) + " |"
    sep = "|:--" + "|--:" * len(ks) + "|"
    for metric, label in (("pass_at_k", "pass@k"), ("max_at_k", "max@k")):
        rows = [header, sep]
        for name in names[1:]:
            tests = comparison["tests"][name][metric]
            rows.append("| " + name.replace("|", "\\|") + " | " + " | ".join(_p(tests[k]) for k in ks) + " |")
        parts.append(f"## Wilcoxon signed-rank p-values, {label} (paired over problems, two-sided)\n\n"
                     + "\n".join(rows))
    parts.append("`*` all paired differences are zero (test undefined, reported as p = 1). n/a: no pairs.")
    return "\n\n".join(parts) + "\n"


def _jsonable(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    return obj


def write_comparison(comparison: dict[str, Any], out_dir: str | os.PathLike,
                     title: Optional[str] = None) -> dict[str, str]:
    """Write comparison.json, comparison.md and comparison.png (all runs' curves) to `out_dir`."""
    out_dir = os.fspath(out_dir)
    os.makedirs(out_dir, exist_ok=True)
    paths = {"json": os.path.join(out_dir, COMPARISON_JSON), "table": os.path.join(out_dir, COMPARISON_MD),
             "curves": os.path.join(out_dir, COMPARISON_PNG)}
    atomic_write(paths["json"], (json.dumps(_jsonable(comparison), indent=2, allow_nan=False) + "\n").encode())
    atomic_write(paths["table"], comparison_markdown(comparison).encode("utf-8"))
    plot_curves([(n, comparison["means"][n]) for n in comparison["names"]], comparison["ks"], paths["curves"],
                title=title or "")
    return paths
