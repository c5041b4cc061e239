"""Judging completions: the one place where sampled texts of problems become executor submissions
and per-problem results -- used by the RL rollout (maxk_jax.rl.rollout) and by evaluation
(maxk_jax.eval), so neither depends on the other.

    results = judge_completions(executor, problems, indices, [Completions(texts), ...])
    results[0].rewards      # passed/total per sample, None = excluded (sandbox_error, invalid)

`Completions` holds one problem's generated texts; code is extracted from each
(`maxk_jax.data.extract.extract_code`), judged in one ``executor.judge`` call, and samples with
status ``sandbox_error`` are re-judged up to `sandbox_retries` times before being excluded (reward
None -- never a silent 0). `ProblemResult` is one problem's judged samples (one JSONL line of an
evaluation report).
"""
from __future__ import annotations

import collections
import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any, Optional

import numpy as np

from maxk_jax.data.extract import extract_code
from maxk_jax.data.problem import Problem
from maxk_jax.execution.executor import Executor
from maxk_jax.sampling.sampler import ProblemSamples

STATUSES = ("ok", "sandbox_error", "invalid")

def _is_fraction(r: float, p: int, t: int) -> bool:
    """The code judges' reward: passed / total tests."""
    return math.isfinite(r) and 0 <= p <= t and t >= 1 and math.isclose(r, p / t, rel_tol=1e-9, abs_tol=1e-12)


def _is_graded(r: float, p: int, t: int) -> bool:
    """A reward function's reward (``graded`` results): any r in [0, 1], total 1, passed = [r == 1]."""
    return math.isfinite(r) and 0.0 <= r <= 1.0 and t == 1 and p == int(r == 1.0)


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
            if r is not None and not (_is_fraction(r, p, t) or _is_graded(r, p, t)):
                raise ValueError(f"problem result {self.problem_id!r}: reward {r!r} is not passed/total = {p}/{t} "
                                 "(nor a graded reward in [0, 1] with total 1, passed 1 exactly at reward 1)")

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


@dataclasses.dataclass(frozen=True)
class Completions:
    """The completions of one problem.

    texts: generated texts (decoded, special tokens removed); lengths: generated token counts
    (None when unknown, e.g. replayed texts); inside_block: the prompt ended inside an opened
    ```python fence, so code is extracted with ``extract_code(text, inside_block=True)``.
    """

    texts: tuple[str, ...]
    lengths: Optional[tuple[int, ...]] = None
    inside_block: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "texts", tuple(self.texts))
        for i, t in enumerate(self.texts):
            if not isinstance(t, str):
                raise ValueError(f"Completions.texts[{i}] must be a str, got {type(t).__name__}")
        if self.lengths is not None:
            object.__setattr__(self, "lengths", tuple(int(x) for x in self.lengths))
            if len(self.lengths) != len(self.texts):
                raise ValueError(f"Completions has {len(self.texts)} texts but {len(self.lengths)} lengths")

    @classmethod
    def of_samples(cls, samples: ProblemSamples) -> list[Completions]:
        """One `Completions` per problem of a `maxk_jax.sampling.Sampler.sample` result [P]."""
        return [cls(texts, tuple(int(x) for x in samples.lengths[i]), samples.inside_block[i])
                for i, texts in enumerate(samples.texts)]

    def concat(self, other: Completions) -> Completions:
        """This problem's completions followed by `other`'s (sample chunks of one problem)."""
        if self.inside_block != other.inside_block:
            raise ValueError("cannot concatenate completions of prompts with different inside_block")
        lengths = None if self.lengths is None or other.lengths is None else self.lengths + other.lengths
        return Completions(self.texts + other.texts, lengths, self.inside_block)


def _judge_checked(executor: Executor, submissions: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """executor.judge with the docs/contracts.md contract checked (same ids in order, known statuses)."""
    results = executor.judge(submissions)
    if len(results) != len(submissions):
        raise RuntimeError(f"executor returned {len(results)} results for {len(submissions)} submissions")
    for sub, res in zip(submissions, results):
        if not isinstance(res, Mapping) or res.get("id") != sub["id"]:
            raise RuntimeError(f"executor result {res!r:.120} does not answer submission {sub['id']!r}")
        if res.get("status") not in STATUSES:
            raise RuntimeError(f"executor result {sub['id']!r} has unknown status {res.get('status')!r}")
    return results


def _problem_result(index: int, problem: Problem, comps: Completions, codes: list[str],
                    results: list[dict[str, Any]], retried: int, keep_completions: bool,
                    keep_behaviours: bool = False) -> ProblemResult:
    rewards, passed, total, statuses = [], [], [], []
    verdicts: collections.Counter = collections.Counter()
    for res in results:
        p, t, status = int(res["passed"]), int(res["total"]), res["status"]
        reward = None
        if status == "ok" and res.get("graded") is True:   # a reward function's score (reward_executor)
            reward = res.get("reward")
            if isinstance(reward, bool) or not isinstance(reward, (int, float)) or not _is_graded(float(reward), p, t):
                raise RuntimeError(f"executor result {res['id']!r}: graded reward {reward!r} with passed/total "
                                   f"{p}/{t} is not a value in [0, 1] with total 1 and passed = [reward == 1]")
            reward = float(reward)
        elif status == "ok":
            if t < 1 or res.get("reward") is None or not math.isclose(float(res["reward"]), p / t, abs_tol=1e-9):
                raise RuntimeError(f"executor result {res['id']!r}: status ok but reward {res.get('reward')!r} "
                                   f"is not passed/total = {p}/{t}")
            reward = p / t
        rewards.append(reward)
        passed.append(p)
        total.append(t)
        statuses.append(status)
        verdicts.update(str(test.get("verdict")) for test in res.get("tests") or ())
    return ProblemResult(index=index, problem_id=problem.id, rewards=tuple(rewards), passed=tuple(passed),
                         total=tuple(total), statuses=tuple(statuses), verdict_counts=dict(verdicts),
                         lengths=comps.lengths, n_no_code=sum(not c.strip() for c in codes),
                         sandbox_retries=retried, completions=comps.texts if keep_completions else None,
                         behaviours=tuple(_behaviour(res) for res in results) if keep_behaviours else None)


def _behaviour(res: Mapping[str, Any]) -> Optional[str]:
    """The result's behaviour fingerprint; None when missing (older service), undetermined or not ok."""
    value = res.get("behaviour")
    return value if isinstance(value, str) and value and res.get("status") == "ok" else None


def judge_completions(executor: Executor, problems: Sequence[Problem], indices: Sequence[int],
                      completions: Sequence[Completions], *, sandbox_retries: int = 2,
                      keep_completions: bool = False, keep_behaviours: bool = False) -> list[ProblemResult]:
    """Extract code from every completion, judge them all in one ``executor.judge`` call, and
    re-judge samples with status ``sandbox_error`` up to `sandbox_retries` more times. An executor
    whose ``judges_completions`` is true (a reward function, ``execution.RewardFunctionExecutor``)
    gets ``{"id", "problem", "completion"}`` per sample instead of code (``n_no_code`` then counts
    empty completions) and answers graded rewards in [0, 1].
    `keep_behaviours` stores each sample's behaviour fingerprint (``ProblemResult.behaviours``).

    problems, indices, completions: aligned, one entry per problem. Returns one `ProblemResult`
    per problem; samples still failing (or ``invalid``) have reward None (excluded, not 0).
    """
    if not len(problems) == len(indices) == len(completions):
        raise ValueError(f"{len(problems)} problems, {len(indices)} indices, {len(completions)} completions")
    if isinstance(sandbox_retries, bool) or not isinstance(sandbox_retries, int) or sandbox_retries < 0:
        raise ValueError(f"sandbox_retries must be an int >= 0, got {sandbox_retries!r}")
    graded = getattr(executor, "judges_completions", False) is True   # a reward function: the raw texts
    subs, owner, codes = [], [], []
    for slot, (problem, index, comps) in enumerate(zip(problems, indices, completions)):
        if graded:
            codes.append(list(comps.texts))
            subs.extend({"id": f"{index}/{j}", "problem": problem, "completion": text}
                        for j, text in enumerate(comps.texts))
        else:
            codes.append([extract_code(t, inside_block=comps.inside_block) for t in comps.texts])
            subs.extend(problem.to_submission(code, f"{index}/{j}") for j, code in enumerate(codes[-1]))
        owner.extend([slot] * len(comps.texts))
    results = _judge_checked(executor, subs) if subs else []
    retried = [0] * len(problems)
    for _ in range(sandbox_retries):
        redo = [s for s, res in enumerate(results) if res["status"] == "sandbox_error"]
        if not redo:
            break
        for s, res in zip(redo, _judge_checked(executor, [subs[s] for s in redo])):
            results[s] = res
            retried[owner[s]] += 1
    out, start = [], 0
    for slot, (problem, index, comps) in enumerate(zip(problems, indices, completions)):
        m = len(comps.texts)
        out.append(_problem_result(index, problem, comps, codes[slot], results[start:start + m], retried[slot],
                                   keep_completions, keep_behaviours))
        start += m
    return out
