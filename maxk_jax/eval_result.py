"""Evaluation results: `ProblemResult` (one JSONL line per problem) and `EvalResult` (a run).

Rewards as the max@k paper defines them (§2, App. C.1): per completion the judge reports
``passed`` of ``total`` tests;

* max@k uses the continuous reward ``passed / total`` (the fraction of tests passed);
* pass@k uses the binary reward "all tests passed" (``passed == total``, i.e. reward == 1).

Both are computed with the unbiased estimators `maxk_jax.estimators.pass_at_k` / `max_at_k` over
the problem's valid samples; samples whose judgement failed (reward null, see
`maxk_jax.evaluation`) are masked out exactly as if they had not been drawn, and a problem with
fewer than k valid samples has no value at that k.
"""
from __future__ import annotations

import collections
import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any, Optional

import numpy as np

from maxk_jax import estimators

STATUSES = ("ok", "sandbox_error", "invalid")
METRICS = ("pass_at_k", "max_at_k")


@dataclasses.dataclass(frozen=True)
class ProblemResult:
    """Judged samples of one problem (one line of the per-problem JSONL).

    index: position of the problem in the evaluated list; rewards[j] = passed[j] / total[j] for
    judged samples, None for excluded ones (status ``sandbox_error`` after retries, or
    ``invalid``); verdict_counts: per-test verdicts summed over all samples; lengths: generated
    token counts (None when unknown); n_no_code: samples in which no Python code was found;
    sandbox_retries: re-judging rounds used; completions: the texts, kept only on request;
    behaviours: each sample's behaviour fingerprint (`maxk_jax.execution.behaviour`; None =
    undetermined), kept only on request (the trainer's majority vote uses them).
    """

    index: int
    problem_id: str
    rewards: tuple[Optional[float], ...]
    passed: tuple[int, ...]
    total: tuple[int, ...]
    statuses: tuple[str, ...]
    verdict_counts: dict[str, int]
    lengths: Optional[tuple[int, ...]] = None
    n_no_code: int = 0
    sandbox_retries: int = 0
    completions: Optional[tuple[str, ...]] = None
    behaviours: Optional[tuple[Optional[str], ...]] = None

    def __post_init__(self) -> None:
        m = len(self.rewards)
        for name in ("passed", "total", "statuses"):
            if len(getattr(self, name)) != m:
                raise ValueError(f"problem result {self.problem_id!r}: {name} has {len(getattr(self, name))} "
                                 f"entries, rewards has {m}")
        for name in ("lengths", "completions", "behaviours"):
            value = getattr(self, name)
            if value is not None and len(value) != m:
                raise ValueError(f"problem result {self.problem_id!r}: {name} has {len(value)} entries, "
                                 f"rewards has {m}")
        bad = [s for s in self.statuses if s not in STATUSES]
        if bad:
            raise ValueError(f"problem result {self.problem_id!r}: unknown status {bad[0]!r}; valid: {STATUSES}")
        for r, s, p, t in zip(self.rewards, self.statuses, self.passed, self.total):
            if (r is None) != (s != "ok"):
                raise ValueError(f"problem result {self.problem_id!r}: reward {r!r} does not match status {s!r} "
                                 "(only status 'ok' has a reward)")
            if r is not None and (not math.isfinite(r) or not 0 <= p <= t or t < 1
                                  or not math.isclose(r, p / t, rel_tol=1e-9, abs_tol=1e-12)):
                raise ValueError(f"problem result {self.problem_id!r}: reward {r!r} is not passed/total = {p}/{t}")

    @property
    def n_sampled(self) -> int:
        """Completions sampled."""
        return len(self.rewards)

    @property
    def n(self) -> int:
        """Valid (judged) samples: the n of the pass@k / max@k estimators."""
        return sum(r is not None for r in self.rewards)

    def valid(self) -> np.ndarray:
        """[n_sampled] bool: the sample was judged (reward not null)."""
        return np.array([r is not None for r in self.rewards], dtype=bool)

    def reward_array(self) -> np.ndarray:
        """[n_sampled] float64 continuous reward passed/total (0.0 at excluded samples; see `valid`)."""
        return np.array([0.0 if r is None else r for r in self.rewards], dtype=np.float64)

    def correct_array(self) -> np.ndarray:
        """[n_sampled] bool binary reward: judged and all tests passed (passed == total)."""
        return np.array([r is not None and p == t for r, p, t in zip(self.rewards, self.passed, self.total)],
                        dtype=bool)

    def to_json(self) -> dict[str, Any]:
        """The JSONL record (fixed key order)."""
        out = {"index": self.index, "id": self.problem_id, "n_sampled": self.n_sampled, "n": self.n,
               "rewards": list(self.rewards), "passed": list(self.passed), "total": list(self.total),
               "statuses": list(self.statuses),
               "status_counts": dict(sorted(collections.Counter(self.statuses).items())),
               "verdict_counts": dict(sorted(self.verdict_counts.items())),
               "completion_lengths": None if self.lengths is None else list(self.lengths),
               "n_no_code": self.n_no_code, "sandbox_retries": self.sandbox_retries}
        if self.completions is not None:
            out["completions"] = list(self.completions)
        if self.behaviours is not None:
            out["behaviours"] = list(self.behaviours)
        return out

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> ProblemResult:
        """Inverse of `to_json`; ValueError naming the missing or inconsistent field."""
        if not isinstance(obj, Mapping):
            raise ValueError(f"problem result must be a JSON object, got {obj!r:.80}")
        for key in ("index", "id", "rewards", "passed", "total", "statuses", "verdict_counts"):
            if key not in obj:
                raise ValueError(f"problem result is missing field {key!r}")
        try:
            lengths, completions = obj.get("completion_lengths"), obj.get("completions")
            behaviours = obj.get("behaviours")
            return cls(index=int(obj["index"]), problem_id=str(obj["id"]),
                       rewards=tuple(None if r is None else float(r) for r in obj["rewards"]),
                       passed=tuple(int(x) for x in obj["passed"]), total=tuple(int(x) for x in obj["total"]),
                       statuses=tuple(obj["statuses"]),
                       verdict_counts={str(k): int(v) for k, v in obj["verdict_counts"].items()},
                       lengths=None if lengths is None else tuple(int(x) for x in lengths),
                       n_no_code=int(obj.get("n_no_code", 0)), sandbox_retries=int(obj.get("sandbox_retries", 0)),
                       completions=None if completions is None else tuple(completions),
                       behaviours=None if behaviours is None else tuple(behaviours))
        except (TypeError, AttributeError) as e:
            raise ValueError(f"malformed problem result {obj.get('id')!r}: {e}") from e


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
        "pass_at_k_stderr": {...}, "max_at_k_stderr": {...}, "num_problems": {k: count}}``
        (count = problems with at least k valid samples; None means when it is 0)."""
        per = self.per_problem()
        out: dict[str, Any] = {}
        for metric in METRICS:
            vals = per[metric]
            out[metric], out[metric + "_stderr"] = {}, {}
            for j, k in enumerate(self.ks):
                col = vals[:, j][~np.isnan(vals[:, j])]
                out[metric][k] = float(col.mean()) if col.size else None
                out[metric + "_stderr"][k] = float(col.std(ddof=1) / np.sqrt(col.size)) if col.size > 1 else None
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
