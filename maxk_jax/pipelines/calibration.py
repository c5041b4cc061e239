"""Calibrating a testbed: how much Best-of-N headroom a base policy leaves.

    row = calibrate_base(cfg)          # data + cached base + evaluation of the base only
    stats = headroom(result, k=128)    # the numbers a testbed is chosen by

A testbed is useful for max@k training when the base is neither hopeless nor saturated at large k:
its max@k is well inside (0, 1) AND many problems are individually undecided (their own pass@k is
neither ~0 nor ~1), since only those problems can move max@k / pass@k at all. `headroom` measures
both from one evaluation (n >= 2k samples per problem, so every k-subset estimate averages over
many subsets); `calibrate_base` runs one calibration point of the pipeline config.
"""
from __future__ import annotations

import os
import time
from typing import Any, Optional

import numpy as np

from maxk_jax.eval.result import EvalResult, problem_metrics
from maxk_jax.pipelines.config import PipelineConfig

# A testbed's target (the max@k paper evaluates n = 256 samples for k <= 128).
TARGET_MAX_AT_K = (0.40, 0.75)
UNDECIDED = (0.05, 0.95)
MIN_UNDECIDED_SHARE = 0.25


def headroom(result: EvalResult, k: int, *, undecided: tuple[float, float] = UNDECIDED) -> dict[str, Any]:
    """Large-k headroom of one evaluation at `k` (needs ``2 k <= result.n``).

    Returns ``{"k", "n", "num_problems", "max_at_1", "max_at_k", "pass_at_1", "pass_at_k",
    "undecided_share"}``: dataset means of the unbiased estimators, and the share of problems whose
    own pass@k lies strictly inside `undecided` (lo, hi); plus ``"correct_counts"``: per problem, how
    many of its n samples pass every test (problem order; what the undecided band is made of).
    ValueError for k outside [1, n/2] or an
    empty result."""
    if not isinstance(k, int) or isinstance(k, bool) or not 1 <= 2 * k <= result.n:
        raise ValueError(f"headroom needs 1 <= k <= n/2 (n={result.n}), got k={k!r}")
    lo, hi = undecided
    if not 0.0 <= lo < hi <= 1.0:
        raise ValueError(f"undecided={undecided!r} must satisfy 0 <= lo < hi <= 1")
    if not result.problems:
        raise ValueError("headroom of an evaluation with no problems")
    correct, rewards, valid = result.matrices()
    per = problem_metrics(correct, rewards, valid, (1, k))
    pass_k = per["pass_at_k"][:, 1]
    known = ~np.isnan(pass_k)
    return {"k": k, "n": result.n, "num_problems": int(known.sum()),
            "max_at_1": float(np.nanmean(per["max_at_k"][:, 0])), "max_at_k": float(np.nanmean(per["max_at_k"][:, 1])),
            "pass_at_1": float(np.nanmean(per["pass_at_k"][:, 0])), "pass_at_k": float(np.nanmean(pass_k)),
            "undecided_share": float(((pass_k[known] > lo) & (pass_k[known] < hi)).mean()),
            "correct_counts": [int(c) for c in (correct & valid).sum(axis=1)]}


def meets_target(stats: dict[str, Any]) -> bool:
    """Whether `headroom` stats meet the testbed target: max@k in `TARGET_MAX_AT_K` and at least
    `MIN_UNDECIDED_SHARE` of the problems undecided at k."""
    lo, hi = TARGET_MAX_AT_K
    return lo <= stats["max_at_k"] <= hi and stats["undecided_share"] >= MIN_UNDECIDED_SHARE


def calibrate_base(cfg: PipelineConfig, k: int, *, progress: bool = True,
                   out_dir: Optional[str] = None) -> dict[str, Any]:
    """One calibration point: the synthetic split and the warmed-up base of `cfg` (both cached
    under ``<runs_dir>/_cache`` as the pipeline does), then ``eval.sampler.n`` samples on each of
    the first ``eval.num_problems`` test problems of the base only. Returns the `headroom` stats at
    `k` plus ``"target_met"``, ``"base"`` (the cached checkpoint), ``"warmup_loss_last50"``,
    ``"base_cpu"`` (the CPU it was built on; None for a base cached before that was recorded) and
    wall seconds of the base build/reuse and of the evaluation. Per-problem results go to
    `out_dir` (`maxk_jax.eval.report` files; default ``<base>/calibration_eval``, which the next
    point on the same base overwrites)."""
    from maxk_jax.models import convert
    from maxk_jax.models.tokenizer import load_tokenizer
    from maxk_jax.pipelines.base_model import prepare_base, prepare_data
    from maxk_jax.pipelines.evaluation import eval_problems, eval_sampler, evaluate_model, open_judge

    if cfg.data.dataset != "synthetic" or cfg.model.path:
        raise ValueError("calibration builds the tiny base on the synthetic family: data.dataset must be "
                         f"'synthetic' and model.path empty (got {cfg.data.dataset!r}, {cfg.model.path!r})")
    if not 1 <= 2 * k <= cfg.eval.sampler.n:
        raise ValueError(f"calibration at k={k} needs eval.sampler.n >= 2k, got eval.sampler.n={cfg.eval.sampler.n}")
    cache_root = os.path.abspath(os.path.join(cfg.runs_dir, "_cache"))
    start = time.perf_counter()
    _, train, test = prepare_data(cfg, cache_root)
    model_path, record, cached = prepare_base(cfg, train, cache_root, progress=progress)
    base_s = time.perf_counter() - start
    tokenizer = load_tokenizer(model_path)
    model_config, params = convert.load_hf(model_path)
    problems = eval_problems(cfg, test, tokenizer)
    judge, own = open_judge(cfg)
    start = time.perf_counter()
    try:
        result = evaluate_model(cfg, eval_sampler(cfg, model_config, params, tokenizer), problems, judge,
                                out_dir or os.path.join(model_path, "calibration_eval"), "base",
                                progress=progress, ks=(1, k))
    finally:
        if own:
            judge.close()
    stats = headroom(result, k)
    return {**stats, "target_met": meets_target(stats), "base": model_path, "base_cached": cached,
            "warmup_loss_last50": record["loss_last50"], "base_cpu": record.get("cpu"), "base_s": round(base_s, 1),
            "eval_s": round(time.perf_counter() - start, 1)}


def calibration_markdown(rows: list[dict[str, Any]]) -> str:
    """The calibration table (as in docs/results/testbed_calibration.md) of `calibrate_base` rows (plus ``"point"`` and
    ``"changed"``: the fields that differ from the main job): one line per point with what it
    tried, the headroom numbers and whether it meets the target."""
    if not rows:
        raise ValueError("no calibration rows")
    k = rows[0]["k"]
    lines = [f"| point | changed (vs the main job) | problems × n | max@1 | max@{k} | pass@1 | pass@{k} | "
             f"undecided at k={k} | target |", "|:--|:--|--:|--:|--:|--:|--:|--:|:--|"]
    skip = {"runs_dir", "name"}
    for r in rows:
        changed = ", ".join(f"`{p}={v}`" for p, v in sorted(r.get("changed", {}).items()) if p not in skip) or "—"
        lines.append(f"| {r.get('point', '?')} | {changed} | {r['num_problems']} × {r['n']} | {r['max_at_1']:.3f} | "
                     f"{r['max_at_k']:.3f} | {r['pass_at_1']:.3f} | {r['pass_at_k']:.3f} | "
                     f"{r['undecided_share']:.2f} | {'met' if r['target_met'] else 'no'} |")
    return "\n".join(lines)
