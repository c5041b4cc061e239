"""CachingExecutor: each distinct submission judged once, repeats answered under their own id,
infrastructure failures never cached, the wrapped executor closed with it."""
from maxk_jax.execution.caching import CachingExecutor
from maxk_jax.execution.executor import Executor

from tests.execution.judge_fixtures import SUBS, WANT, verdicts


class _ScriptedExecutor(Executor):
    """Answers the statuses it is given, in order; records the ids of every call."""

    def __init__(self, statuses: list) -> None:
        self.statuses, self.calls, self.closed = list(statuses), [], False

    def judge(self, submissions):
        self.calls.append([s["id"] for s in submissions])
        out = []
        for s in submissions:
            status = self.statuses.pop(0)
            out.append({"id": s["id"], "status": status, "reward": 1.0 if status == "ok" else None,
                        "passed": 1 if status == "ok" else 0, "total": 1, "tests": []})
        return out

    def close(self) -> None:
        self.closed = True


def _sub(sub_id: str, code: str, **extra) -> dict:
    return dict({"id": sub_id, "code": code, "mode": "stdio", "tests": [{"stdin": "", "expected": "1"}]}, **extra)


def test_each_program_is_judged_once_and_failures_are_not_cached() -> None:
    inner = _ScriptedExecutor(["ok", "sandbox_error", "ok"])
    ex = CachingExecutor(inner)
    first = ex.judge([_sub("a", "print(1)"), _sub("b", "print(1)"), _sub("c", "bad")])
    assert inner.calls == [["a", "c"]]
    assert [r["id"] for r in first] == ["a", "b", "c"]
    assert [r["status"] for r in first] == ["ok", "ok", "sandbox_error"]
    second = ex.judge([_sub("d", "bad"), _sub("e", "print(1)")])
    assert inner.calls[-1] == ["d"]                      # the sandbox_error is judged again, the ok reused
    assert [r["id"] for r in second] == ["d", "e"] and second[1]["reward"] == 1.0
    assert ex.stats == {"submissions": 5, "judged": 3}
    assert first[0] is not first[1]                       # each repeat gets its own copy


def test_limits_and_tests_are_part_of_the_key() -> None:
    inner = _ScriptedExecutor(["ok"] * 3)
    ex = CachingExecutor(inner)
    ex.judge([_sub("a", "print(1)"), _sub("b", "print(1)", limits={"cpu_s": 1.0}),
              dict(_sub("c", "print(1)"), tests=[{"stdin": "x", "expected": "1"}])])
    assert inner.calls == [["a", "b", "c"]]


def test_is_an_executor_and_closes_the_wrapped_one() -> None:
    inner = _ScriptedExecutor([])
    with CachingExecutor(inner) as ex:
        assert isinstance(ex, Executor)
        assert ex.judge([]) == [] and inner.calls == []
    assert inner.closed


def test_wrapping_the_embedded_executor_keeps_its_verdicts(executor) -> None:
    ex = CachingExecutor(executor)
    results = ex.judge(SUBS + [dict(SUBS[0], id="s2")])
    assert verdicts(results) == WANT + WANT[:1] and results[-1]["id"] == "s2"
    assert ex.stats == {"submissions": 4, "judged": 3}
