"""EmbeddedExecutor: validates before judging and answers the typed result schema in request order."""
import pytest

from maxk_jax.execution import executor as executor_lib

from tests.execution.judge_fixtures import SUBS, WANT, verdicts


def test_embedded_rejects_malformed_submissions(executor) -> None:
    with pytest.raises(ValueError, match=r"submissions\[1\]\.mode"):
        executor.judge([SUBS[0], dict(SUBS[1], mode="java")])


def test_embedded_results_have_the_typed_fields(executor) -> None:
    results = executor.judge(SUBS)
    assert [r["id"] for r in results] == ["s", "f", "a"] and verdicts(results) == WANT
    assert isinstance(executor, executor_lib.Executor)
    for result in results:
        assert set(executor_lib.JudgeResult.__required_keys__) <= set(result)
        assert set(result) <= set(executor_lib.JudgeResult.__annotations__)
        assert result["memory_limit_by"] in ("cgroup", "rlimit")
        for test in result["tests"]:
            assert set(executor_lib.TestResult.__required_keys__) <= set(test)
            assert set(test) <= set(executor_lib.TestResult.__annotations__)
