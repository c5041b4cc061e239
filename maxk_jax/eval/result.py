"""Evaluation results: `ProblemResult` (one JSONL line per problem) and `EvalResult` (a run).

Rewards as the max@k paper defines them (§2, App. C.1): per completion the judge reports
``passed`` of ``total`` tests;

* max@k uses the continuous reward ``passed / total`` (the fraction of tests passed);
* pass@k uses the binary reward "all tests passed" (``passed == total``, i.e. reward == 1).

Both are computed with the unbiased estimators `maxk_jax.estimators.pass_at_k` / `max_at_k` over
the problem's valid samples; samples whose judgement failed (reward null, see
`maxk_jax.eval.run`) are masked out exactly as if they had not been drawn, and a problem with
fewer than k valid samples has no value at that k.
"""
from __future__ import annotations

import collections
import copy
import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

from maxk_jax import estimators
from maxk_jax.eval.bootstrap import bootstrap_ci, reported_ks
from maxk_jax.execution.completions import STATUSES, ProblemResult  # noqa: F401  (re-exported)

METRICS = ("pass_at_k", "max_at_k")


def problem_metrics(correct: np.ndarray, rewards: np.ndarray, valid: np.ndarray,
                    ks: Sequence[int]) -> dict[str, np.ndarray]:
    """Unbiased per-problem pass@k and max@k.

    correct, rewards, valid: [P, n] (binary reward, continuous reward, judged mask).
    Returns ``{"pass_at_k": [P, K], "max_at_k": [P, K]}`` float64, NaN where a problem has fewer
    than k valid samples.
    """
    correct, rewards, valid = (np.asarray(a) for a in (correct, rewards, valid))
    if not correct.shape == rewards.shape == valid.shape or correct.ndim != 2:
        raise ValueError(f"correct {correct.shape}, rewards {rewards.shape}, valid {valid.shape} must all be [P, n]")
    out = {m: np.full((correct.shape[0], len(ks)), np.nan) for m in METRICS}
    if correct.shape[0] == 0:
        return out
    for j, k in enumerate(ks):
        out["pass_at_k"][:, j] = np.asarray(estimators.pass_at_k(correct, k, mask=valid), dtype=np.float64)
        out["max_at_k"][:, j] = np.asarray(estimators.max_at_k(np.where(valid, rewards, 0.0), k, mask=valid),
                                           dtype=np.float64)
    return out


@dataclasses.dataclass(frozen=True)
class EvalResult:
    """One evaluation run: per-problem results (sorted by index), n samples per problem, the k
    values of the tables, and the run's JSON config (sampling settings, dataset, checkpoint)."""

    problems: tuple[ProblemResult, ...]
    n: int
    ks: tuple[int, ...]
    config: dict[str, Any] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        problems = tuple(sorted(self.problems, key=lambda r: r.index))
        object.__setattr__(self, "problems", problems)
        object.__setattr__(self, "ks", tuple(int(k) for k in self.ks))
        seen: set[str] = set()
        for r in problems:
            if r.n_sampled != self.n:
                raise ValueError(f"problem {r.problem_id!r} has {r.n_sampled} samples, the run has n={self.n}")
            if r.problem_id in seen:
                raise ValueError(f"duplicate problem id {r.problem_id!r} in the results")
            seen.add(r.problem_id)
        bad = [k for k in self.ks if not 1 <= k <= self.n]
        if bad or not self.ks:
            raise ValueError(f"ks must be non-empty ints in [1, n={self.n}], got {list(self.ks)}")

    @property
    def reported_ks(self) -> tuple[int, ...]:
        """The k values tables and plots show: k <= n/2 (`maxk_jax.eval.bootstrap.reported_ks`)."""
        return reported_ks(self.ks, self.n)

    @property
    def ids(self) -> list[str]:
        """Problem ids in index order."""
        return [r.problem_id for r in self.problems]

    def matrices(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(correct [P, n] bool, rewards [P, n] float64, valid [P, n] bool)."""
        if not self.problems:
            empty = np.zeros((0, self.n))
            return empty.astype(bool), empty, empty.astype(bool)
        return (np.stack([r.correct_array() for r in self.problems]),
                np.stack([r.reward_array() for r in self.problems]),
                np.stack([r.valid() for r in self.problems]))

    def per_problem(self) -> dict[str, np.ndarray]:
        """``{"pass_at_k": [P, K], "max_at_k": [P, K]}`` (NaN where a problem has < k valid samples).
        Computed once per result (the result is immutable); copies are returned."""
        cached = self.__dict__.get("_per_problem")
        if cached is None:
            cached = problem_metrics(*self.matrices(), self.ks)
            object.__setattr__(self, "_per_problem", cached)
        return {m: v.copy() for m, v in cached.items()}

    def means(self) -> dict[str, Any]:
        """Dataset means per k: ``{"pass_at_k": {k: mean}, "max_at_k": {k: mean},
        "pass_at_k_stderr": {...}, "max_at_k_stderr": {...}, "pass_at_k_ci": {k: [low, high]},
        "max_at_k_ci": {...}, "num_problems": {k: count}}`` (count = problems with at least k valid
        samples; None means when it is 0; ci: 95 % bootstrap interval over problems,
        `maxk_jax.eval.bootstrap.bootstrap_ci`). Computed once per result (the bootstraps are
        the costly part; a report asks several times); copies are returned."""
        cached = self.__dict__.get("_means")
        if cached is None:
            cached = self._compute_means()
            object.__setattr__(self, "_means", cached)
        return copy.deepcopy(cached)

    def _compute_means(self) -> dict[str, Any]:
        per = self.per_problem()
        out: dict[str, Any] = {}
        for metric in METRICS:
            vals = per[metric]
            out[metric], out[metric + "_stderr"], out[metric + "_ci"] = {}, {}, {}
            for j, k in enumerate(self.ks):
                col = vals[:, j][~np.isnan(vals[:, j])]
                out[metric][k] = float(col.mean()) if col.size else None
                out[metric + "_stderr"][k] = float(col.std(ddof=1) / np.sqrt(col.size)) if col.size > 1 else None
                ci = bootstrap_ci(col) if col.size else None
                out[metric + "_ci"][k] = None if ci is None else [ci[0], ci[1]]
        out["num_problems"] = {k: int((~np.isnan(per["max_at_k"][:, j])).sum()) for j, k in enumerate(self.ks)}
        return out

    def totals(self) -> dict[str, Any]:
        """Counts over the run: samples, valid/excluded samples, statuses, verdicts, lengths."""
        statuses: collections.Counter = collections.Counter()
        verdicts: collections.Counter = collections.Counter()
        for r in self.problems:
            statuses.update(r.statuses)
            verdicts.update(r.verdict_counts)
        lengths = [x for r in self.problems if r.lengths is not None for x in r.lengths]
        return {
            "num_problems": len(self.problems), "samples": sum(r.n_sampled for r in self.problems),
            "valid_samples": sum(r.n for r in self.problems),
            "excluded_samples": sum(r.n_sampled - r.n for r in self.problems),
            "problems_with_excluded_samples": [r.problem_id for r in self.problems if r.n < r.n_sampled],
            "status_counts": dict(sorted(statuses.items())), "verdict_counts": dict(sorted(verdicts.items())),
            "no_code_samples": sum(r.n_no_code for r in self.problems),
            "sandbox_retries": sum(r.sandbox_retries for r in self.problems),
            "mean_completion_length": float(np.mean(lengths)) if lengths else None,
            "max_completion_length": int(max(lengths)) if lengths else None,
        }

    def summary(self) -> dict[str, Any]:
        """JSON summary: config, n, ks, dataset means per k (keys are str(k)), totals."""
        means = self.means()
        return {"config": self.config, "n": self.n, "ks": list(self.ks),
                **{name: {str(k): v for k, v in table.items()} for name, table in means.items()},
                "totals": self.totals()}
