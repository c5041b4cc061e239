"""A wrapper backend that judges each distinct submission once per process.

Only for deterministic judges (the synthetic stdio problems are): a warmed-up tiny model repeats
itself a lot, and re-running an identical (program, tests) pair cannot change its reward.
Infrastructure failures (any status other than ``ok``) are never cached.
"""
import hashlib
import json
import threading
from collections.abc import Sequence
from typing import Any

from maxk_jax.execution.executor import Executor, JudgeResult, SubmissionDict


class CachingExecutor(Executor):
    """Wraps an executor: each distinct submission (mode, code, tests, limits) is judged once per
    process; repeats get a copy of the first result under their own id. Only for deterministic
    judges (the synthetic stdio problems are). ``stats`` counts submissions and unique judgements."""

    def __init__(self, inner: Executor) -> None:
        self.inner = inner
        self._cache: dict[str, JudgeResult] = {}
        self._lock = threading.Lock()
        self.stats = {"submissions": 0, "judged": 0}

    @staticmethod
    def _key(sub: SubmissionDict) -> str:
        body: dict[str, Any] = {k: v for k, v in sub.items() if k != "id"}
        return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()

    def judge(self, submissions: Sequence[SubmissionDict]) -> list[JudgeResult]:
        """Judge the submissions not seen before (one inner call); S submissions -> S results in order."""
        with self._lock:
            keys = [self._key(s) for s in submissions]
            todo: dict[str, Any] = {}
            for key, sub in zip(keys, submissions):
                if key not in self._cache and key not in todo:
                    todo[key] = sub
            if todo:
                for key, res in zip(todo, self.inner.judge(list(todo.values()))):
                    if res.get("status") == "ok":  # never cache infrastructure failures
                        self._cache[key] = res
                    todo[key] = res
            self.stats["submissions"] += len(submissions)
            self.stats["judged"] += len(todo)
            return [{**self._cache.get(key, todo.get(key, {})), "id": sub["id"]}
                    for key, sub in zip(keys, submissions)]

    def close(self) -> None:
        """Close the wrapped executor."""
        self.inner.close()
