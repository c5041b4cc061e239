"""A wrapper backend that counts the submissions this process's judge receives.

The RL loop wraps its executor in one per step: with several hosts each judges only its share of
the step's completions, and the per-host counts (gathered by the loop) show the split.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from maxk_jax.execution.executor import Executor, JudgeResult, SubmissionDict


class JudgeCounter(Executor):
    """Wraps an executor and counts the submissions this process's judge received (``count``;
    retries included). Every other attribute is the wrapped executor's; closing closes it."""

    def __init__(self, executor: Executor) -> None:
        self.executor, self.count = executor, 0

    def judge(self, submissions: Sequence[SubmissionDict]) -> list[JudgeResult]:
        """``executor.judge`` (S submissions -> S results in order), counting S."""
        self.count += len(submissions)
        return self.executor.judge(submissions)

    def close(self) -> None:
        """Close the wrapped executor."""
        self.executor.close()

    def __getattr__(self, name: str) -> Any:
        if name == "executor":   # not set yet (e.g. during unpickling): no recursion
            raise AttributeError(name)
        return getattr(self.executor, name)
