"""The results of a method comparison (`maxk_jax.pipelines.compare`): each run's training
statistics, the aggregate over seeds (mean max@k / pass@k with bootstrap intervals, paired Wilcoxon
tests against the reference row), the in-loop evaluation curves and the results.md table.

    stats = training_stats(rl_dir)                              # one run's metrics.jsonl
    agg = aggregate(base, runs, large_k, stats_by_run, reference)   # runs[method][seed] = EvalResult
    curves = eval_curves(cfg, base, rl_dirs, large_k, runs)     # max@1 / max@large_k per RL step
    text = results_markdown(agg, setup_lines)
"""
from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Optional

import numpy as np

from maxk_jax.pipelines.config import PipelineConfig
from maxk_jax.pipelines.methods import REFERENCE
from maxk_jax.rl.metrics_log import read_metrics

if TYPE_CHECKING:
    from maxk_jax.eval.result import EvalResult

# Per-run training statistics read from the RL run's metrics.jsonl (see ``training_stats``).
TRAIN_STATS = ("kl_ref_final", "grad_norm_mean", "update_norm_mean", "clip_fraction_mean", "delta_gt_1_fraction_mean")


def training_stats(rl_dir: str) -> dict[str, float]:
    """Update-size statistics of one RL run from ``<rl_dir>/metrics.jsonl``: KL to the reference
    (initial) policy at the last step (``ppo/kl_ref``), mean grad norm before clipping, mean norm of
    the parameter update (``ppo/update_norm``), mean PPO clip fraction and mean fraction of samples
    with |rho - 1| > 1 (sequence level), over steps (NaN for a statistic the run did not log)."""
    path = os.path.join(rl_dir, "metrics.jsonl")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"no metrics.jsonl in {rl_dir!r}")
    with open(path, encoding="utf-8") as f:
        records = [json.loads(line) for line in f if line.strip()]
    if not records:
        raise ValueError(f"{path!r} is empty")

    def series(key: str) -> np.ndarray:
        return np.array([r[key] for r in records if r.get(key) is not None], dtype=np.float64)

    def mean(key: str) -> float:
        v = series(key)
        return float(v.mean()) if v.size else float("nan")

    kl = series("ppo/kl_ref")
    return {"kl_ref_final": float(kl[-1]) if kl.size else float("nan"),
            "grad_norm_mean": mean("ppo/grad_norm"), "update_norm_mean": mean("ppo/update_norm"),
            "clip_fraction_mean": mean("ppo/clip_fraction"),
            "delta_gt_1_fraction_mean": mean("ppo/is_delta_gt_1_fraction")}


# ----------------------------------------------------------------------------------------------
# Aggregation
# ----------------------------------------------------------------------------------------------
def aggregate(base: EvalResult, runs: dict[str, dict[int, EvalResult]], large_k: int,
              train_stats: dict[str, dict[int, dict[str, float]]] | None = None,
              reference: str = REFERENCE) -> dict[str, Any]:
    """Table numbers from EvalResults: ``runs[method][seed]``, `base` (one result); all on the same
    P problems in the same order with the same K k values. Per method and metric (pass@k, max@k):
    dataset mean per seed, mean and std (ddof=0) over seeds for every k; Wilcoxon tests of
    `reference` (a method, or "base": the paper's Table 1 question) vs every other row on seed-averaged per-problem values [P] at k = 1 and
    `large_k`; 95 % bootstrap intervals (problems and seeds resampled) at k = 1 and `large_k`.
    Only k <= n/2 is reported (`maxk_jax.eval.bootstrap.reported_ks`). train_stats[method][seed]:
    `training_stats` records, aggregated the same way. Returns ``{"ks", "large_k", "num_problems",
    "methods": {name: {metric: {"mean", "std", "per_seed", "ci": {k: [low, high]}}, "train"?}},
    "reference": reference, "wilcoxon_vs_<reference>": {name: {metric: {k: test}}}}``."""
    from maxk_jax.eval.bootstrap import bootstrap_ci
    from maxk_jax.eval.compare import wilcoxon_test

    ks = list(base.reported_ks)
    if large_k not in ks:
        raise ValueError(f"large_k={large_k} is not one of the reported k values {ks} (k <= n/2, n={base.n})")
    columns = [j for j, k in enumerate(base.ks) if k in ks]
    ids = base.ids

    def per_problem(result: EvalResult) -> dict[str, np.ndarray]:
        if result.ids != ids:
            raise ValueError("evaluation results cover different problems or orders")
        return result.per_problem()

    rows: dict[str, Any] = {"base": {"seeds": {}, "per_problem": per_problem(base)}}
    for method, by_seed in runs.items():
        pp = {s: per_problem(r) for s, r in by_seed.items()}
        if any(r.ks != base.ks for r in by_seed.values()):
            raise ValueError(f"{method}: evaluated at other k values than the base")
        rows[method] = {"seeds": pp,
                        "per_problem": {m: np.mean([p[m] for p in pp.values()], axis=0) for m in ("pass_at_k", "max_at_k")}}
    if reference not in rows:
        raise ValueError(f"reference={reference!r} is neither 'base' nor one of the methods {sorted(runs)}")
    out: dict[str, Any] = {"ks": ks, "large_k": large_k, "num_problems": len(ids), "reference": reference,
                           "methods": {}}
    for name, row in rows.items():
        entry: dict[str, Any] = {}
        for metric in ("pass_at_k", "max_at_k"):
            blocks = ([p[metric][:, columns] for p in row["seeds"].values()] if row["seeds"]
                      else [row["per_problem"][metric][:, columns]])
            stacked = np.stack(blocks)                                 # [S, P, K]
            per_seed = dict(zip(row["seeds"] or ["base"], np.nanmean(stacked, axis=1)))
            values = np.array(list(per_seed.values()))  # [S, K]
            entry[metric] = {"mean": dict(zip(ks, values.mean(0).tolist())),
                             "std": dict(zip(ks, values.std(0).tolist())) if row["seeds"] else None,
                             "per_seed": {str(s): dict(zip(ks, v.tolist())) for s, v in per_seed.items()},
                             "ci": {k: list(bootstrap_ci(stacked[:, :, j]) or (np.nan, np.nan))
                                    for j, k in enumerate(ks) if k in (1, large_k)}}
        if train_stats and name in train_stats:
            by_seed = train_stats[name]
            entry["train"] = {key: {"mean": float(np.mean([st[key] for st in by_seed.values()])),
                                    "std": float(np.std([st[key] for st in by_seed.values()])),
                                    "per_seed": {str(sd): st[key] for sd, st in by_seed.items()}}
                              for key in TRAIN_STATS}
        out["methods"][name] = entry
    ref = rows[reference]["per_problem"]
    out["wilcoxon_vs_" + reference] = {
        name: {metric: {k: wilcoxon_test(row["per_problem"][metric][:, j], ref[metric][:, j])
                        for j, k in enumerate(base.ks) if k in (1, large_k)} for metric in ("pass_at_k", "max_at_k")}
        for name, row in rows.items() if name != reference}
    return out


def final_eval_extends_curves(cfg: PipelineConfig) -> bool:
    """Whether the in-loop evaluation samples exactly as the final one (same sampler settings and
    key, its ``rl.eval.limit`` problems a prefix of the ``eval.num_problems``): then its problems'
    samples are the first rows of the final evaluation's (per-sample keys), so the base evaluation
    is each curve's step-0 point and a run's final evaluation its last point, and the run need not
    evaluate after its last step (``rl.eval.at_end=False``). Synthetic data (what compare runs)."""
    final = min(cfg.eval.num_problems, cfg.synthetic.num_test)
    return (bool(cfg.rl.eval.interval) and cfg.rl.eval_sampler() == cfg.eval.sampler
            and cfg.rl.eval.seed == cfg.eval.seed and in_loop_problems(cfg) <= final)


def in_loop_problems(cfg: PipelineConfig) -> int:
    """How many test problems the in-loop evaluation covers: the first ``rl.eval.limit`` (0 = all)
    of the synthetic test split."""
    return min(cfg.rl.eval.limit or cfg.synthetic.num_test, cfg.synthetic.num_test)


def eval_curves(cfg: PipelineConfig, base: EvalResult, rl_dirs: dict[str, dict[int, str]],
                large_k: int, finals: Optional[dict[str, dict[int, EvalResult]]] = None) -> dict[str, Any]:
    """max@1 and max@`large_k` against the RL step, from the periodic evaluations in each run's
    ``<rl_dir>/metrics.jsonl`` (``rl_dirs[method][seed]``): per method the steps, the per-seed
    values and their mean / std (ddof=0) per k. When `final_eval_extends_curves`, the base
    model's values on the same problems are the step-0 point, and a run that did not evaluate
    after its last step (``rl.eval.at_end=False``) gets that point (step ``rl.max_steps``) from its
    final evaluation ``finals[method][seed]`` on the same first problems. Returns
    ``{"ks", "num_problems", "base": {k: value} | None, "methods": {name: {"steps", "mean", "std",
    "per_seed"}}}``."""
    ks = [1, large_k]
    limit = in_loop_problems(cfg)
    extends = final_eval_extends_curves(cfg) and limit <= len(base.problems)

    def prefix_means(result: EvalResult) -> dict[int, float]:
        per = result.per_problem()["max_at_k"]
        return {k: float(np.nanmean(per[:limit, result.ks.index(k)])) for k in ks}

    out: dict[str, Any] = {"ks": ks, "num_problems": limit, "base": None, "methods": {}}
    for method, by_seed in rl_dirs.items():
        per_seed: dict[str, dict[int, list[float]]] = {}
        steps: list[int] | None = None
        for seed, rl_dir in by_seed.items():
            evals = [r for r in read_metrics(os.path.join(rl_dir, "metrics.jsonl"))
                     if r.get(f"eval/max_at_k/{large_k}") is not None]
            these = [int(r["step"]) for r in evals]
            values = {k: [float(r[f"eval/max_at_k/{k}"]) for r in evals] for k in ks}
            final = (finals or {}).get(method, {}).get(seed)
            if extends and final is not None and cfg.rl.max_steps not in these:
                these.append(cfg.rl.max_steps)
                for k, v in prefix_means(final).items():
                    values[k].append(v)
            if not these:
                raise ValueError(f"{rl_dir!r} has no periodic evaluation with max@{large_k} (rl.eval.ks)")
            if steps is not None and these != steps:
                raise ValueError(f"{method}: seeds were evaluated at different steps ({steps} vs {these})")
            steps = these
            per_seed[str(seed)] = values
        stacked = {k: np.array([v[k] for v in per_seed.values()]) for k in ks}   # [S, E]
        out["methods"][method] = {"steps": steps, "per_seed": per_seed,
                                  "mean": {k: stacked[k].mean(0).tolist() for k in ks},
                                  "std": {k: stacked[k].std(0).tolist() for k in ks}}
    if extends:
        out["base"] = prefix_means(base)
    return out


def _cell(entry: dict[str, Any], metric: str, k: int) -> str:
    mean = entry[metric]["mean"][k]
    std = entry[metric]["std"]
    ci = (entry[metric].get("ci") or {}).get(k)
    cell = f"{mean:.3f}" if std is None else f"{mean:.3f} ± {std[k]:.3f}"
    return cell if ci is None else f"{cell} [{ci[0]:.3f}, {ci[1]:.3f}]"


def _pval(test: dict[str, Any]) -> str:
    p = test["p_value"]
    if p is None:
        return "n/a"
    sign = "" if test["mean_diff"] is None else ("+" if test["mean_diff"] > 0 else "-" if test["mean_diff"] < 0 else "=")
    return (f"{p:.2g}" if p < 0.001 else f"{p:.3f}") + f" ({sign})"


def results_markdown(agg: dict[str, Any], setup: Sequence[str]) -> str:
    """results.md of an `aggregate` output: the Table 2/3 analogue (after the `setup` bullet
    lines), the update-size table when training statistics are present, the p-value legend, then
    max@k and pass@k for every power-of-two k."""
    ks, big = agg["ks"], agg["large_k"]
    methods = agg["methods"]
    best = {(m, k): max(methods[n][m]["mean"][k] for n in methods) for m in ("max_at_k", "pass_at_k") for k in (1, big)}
    reference = agg.get("reference", REFERENCE)
    tests = agg["wilcoxon_vs_" + reference]
    head = ["Method", "seeds", "max@1", f"max@{big}", "pass@1", f"pass@{big}", "p max@1", f"p max@{big}"]
    lines = ["# Method comparison (max@k paper, Tables 2-3, at laptop scale)", "", *setup, "",
             "| " + " | ".join(head) + " |", "|:--" + "|--:" * (len(head) - 1) + "|"]
    for name, entry in methods.items():
        cells = ["—" if name == "base" else str(len(entry["max_at_k"]["per_seed"]))]
        for metric, k in (("max_at_k", 1), ("max_at_k", big), ("pass_at_k", 1), ("pass_at_k", big)):
            c = _cell(entry, metric, k)
            cells.append(f"**{c}**" if np.isclose(entry[metric]["mean"][k], best[(metric, k)]) else c)
        if name == reference:
            cells += ["—", "—"]
        else:
            cells += [_pval(tests[name]["max_at_k"][1]), _pval(tests[name]["max_at_k"][big])]
        label = f"{name} (paper's method)" if name == REFERENCE else name
        label = f"{label} (reference of the tests)" if name == reference != REFERENCE else label
        lines.append("| " + " | ".join([label] + cells) + " |")
    if any("train" in e for e in methods.values()):
        lines += ["", "## Update size (the same learning rate for every method)", "",
                  "| Method | KL to reference (last step) | grad norm (mean) | update norm (mean) | PPO clip fraction | "
                  "share of samples with abs(delta) > 1 |", "|:--|--:|--:|--:|--:|--:|"]
        for name, entry in methods.items():
            if "train" in entry:
                t = entry["train"]
                lines.append(f"| {name} | " + " | ".join(f"{t[key]['mean']:.4f} ± {t[key]['std']:.4f}"
                                                         for key in TRAIN_STATS) + " |")
    shown = [k for k in ks if k & (k - 1) == 0 or k == ks[-1]]       # powers of two (+ n/2)
    lines += ["", f"Values: dataset mean over {agg['num_problems']} test problems; mean ± std over RL seeds (the base "
              "model is evaluated once); [low, high]: 95 % bootstrap interval over problems and seeds. Only k <= n/2 "
              "is reported. Bold: best mean in the column. p: two-sided Wilcoxon signed-rank test of "
              f"{reference} vs the row, paired over problems (per-problem unbiased max@k averaged over seeds); the sign "
              f"says whether {reference} is higher (+) or lower (-) on average.", "",
              "## max@k for every k (mean over seeds)", "",
              "| Method | " + " | ".join(f"max@{k}" for k in shown) + " |", "|:--" + "|--:" * len(shown) + "|"]
    for name, entry in methods.items():
        lines.append(f"| {name} | " + " | ".join(f"{entry['max_at_k']['mean'][k]:.3f}" for k in shown) + " |")
    lines += ["", "## pass@k (mean over seeds)", "",
              "| Method | " + " | ".join(f"pass@{k}" for k in shown) + " |", "|:--" + "|--:" * len(shown) + "|"]
    for name, entry in methods.items():
        lines.append(f"| {name} | " + " | ".join(f"{entry['pass_at_k']['mean'][k]:.3f}" for k in shown) + " |")
    return "\n".join(lines) + "\n"
