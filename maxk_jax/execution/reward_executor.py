"""A judge backend that scores completions with a Python reward function (``make_executor("reward:m:f")``).

    ex = RewardFunctionExecutor(my_reward)            # my_reward(problem, completion) -> float in [0, 1]
    rl_loop.run(cfg, executor=ex)                     # or rollout.executor="reward:my_module:my_reward"

Unlike the code judges it sees the raw completion, not extracted code: `maxk_jax.execution.completions.
judge_completions` sends executors whose ``judges_completions`` is true one
`CompletionSubmission` per sample, ``{"id", "problem", "completion"}`` (in-process only: a
`Problem` object is no JSON). Each answer is a graded `JudgeResult`: status ``ok``, the reward,
``total = 1`` and ``passed = 1`` exactly when the reward is 1 (so pass@k counts reward-1 samples as
solved and max@k uses the reward itself), ``graded: True`` (an in-process key, not part of the service's wire schema: only this backend
answers it, and `judge_completions` checks it), no behaviour fingerprint. A reward
that is not a finite number in [0, 1] stops the run with an error naming the problem and the
completion; an exception inside the function propagates with a note naming them too.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypedDict

from maxk_jax.execution.executor import Executor, JudgeResult

if TYPE_CHECKING:   # maxk_jax.data is imported when a reward function is used, not with the judge package
    from maxk_jax.data.problem import Problem


class CompletionSubmission(TypedDict):
    """One sample to score: ``id`` = ``"<problem index>/<sample index>"`` (judge_completions' ids)."""

    id: str
    problem: Problem
    completion: str


def _describe(sub: CompletionSubmission) -> str:
    index, _, sample = str(sub["id"]).partition("/")
    where = f"problem {index}, completion {sample}" if sample else f"submission {sub['id']!r}"
    return f"{where} (problem id {sub['problem'].id!r}, completion {sub['completion'][:60]!r})"


class RewardFunctionExecutor(Executor):
    """Scores `CompletionSubmission`s with ``fn(problem, completion) -> float`` or, when
    ``batched`` (default: ``fn`` marked with ``maxk_jax.data.rewards.batched_reward``), with one
    call ``fn(problems, completions) -> rewards`` per ``judge`` call. ``name`` labels errors."""

    judges_completions = True   # judge_completions sends raw completions, not extracted code

    def __init__(self, fn: Callable[..., Any], *, batched: bool | None = None, name: str | None = None) -> None:
        from maxk_jax.data.rewards import is_batched

        if not callable(fn):
            raise ValueError(f"reward function must be callable, got {type(fn).__name__} {fn!r:.60}")
        self.fn = fn
        self.batched = is_batched(fn) if batched is None else bool(batched)
        self.name = name or getattr(fn, "__qualname__", None) or repr(fn)

    def judge(self, submissions: Sequence[CompletionSubmission]) -> list[JudgeResult]:  # type: ignore[override]
        """Score S completion submissions -> S graded results in order (ValueError for a
        submission without ``problem``/``completion`` or a reward outside [0, 1])."""
        from maxk_jax.data.problem import Problem

        subs = list(submissions)
        for sub in subs:
            if not isinstance(sub, dict) or not isinstance(sub.get("problem"), Problem) \
                    or not isinstance(sub.get("completion"), str):
                raise ValueError(f"the reward function {self.name} scores completions: each submission must be "
                                 "{'id', 'problem': Problem, 'completion': str} "
                                 "(maxk_jax.execution.completions.judge_completions sends those), "
                                 f"got {sub!r:.120}")
        return [self._result(sub, r) for sub, r in zip(subs, self._rewards(subs))]

    def _rewards(self, subs: list[CompletionSubmission]) -> list[Any]:
        if not subs:
            return []
        if self.batched:
            try:
                rewards = self.fn([s["problem"] for s in subs], [s["completion"] for s in subs])
            except Exception as err:
                err.add_note(f"in the batched reward function {self.name} scoring {len(subs)} completions")
                raise
            try:
                rewards = list(rewards)
            except TypeError as err:
                raise ValueError(f"the batched reward function {self.name} returned a {type(rewards).__name__}, "
                                 "not a sequence of rewards") from err
            if len(rewards) != len(subs):
                raise ValueError(f"the batched reward function {self.name} returned {len(rewards)} rewards for "
                                 f"{len(subs)} completions")
            return rewards
        out = []
        for sub in subs:
            try:
                out.append(self.fn(sub["problem"], sub["completion"]))
            except Exception as err:
                err.add_note(f"in the reward function {self.name} scoring {_describe(sub)}")
                raise
        return out

    def _result(self, sub: CompletionSubmission, value: Any) -> JudgeResult:
        from maxk_jax.data.rewards import check_reward

        reward = check_reward(value, f"reward function {self.name} on {_describe(sub)}")
        solved = reward == 1.0
        return {"id": sub["id"], "status": "ok", "reward": reward, "passed": int(solved), "total": 1,
                "graded": True, "behaviour": None,
                "tests": [{"verdict": "AC" if solved else "WA", "cpu_s": None, "wall_s": None, "memory_mb": None,
                           "exit_code": None, "signal": None, "message": f"reward {reward:.6g}"}]}
