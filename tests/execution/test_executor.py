"""The Executor protocol and its typed dicts: structural typing, abstract judge, fields = wire schema."""
import pytest

from maxk_jax.execution import executor as executor_lib
from maxk_jax.execution.schema import parse_submissions
from maxk_jax.execution.service import REQUEST_SCHEMA, RESPONSE_SCHEMA, _TEST_RESULT


class _DuckExecutor:
    """Not a subclass: an executor by structure only."""

    def judge(self, submissions):
        return []

    def close(self):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def test_executor_is_structural_and_judge_is_abstract() -> None:
    assert isinstance(_DuckExecutor(), executor_lib.Executor)
    assert not isinstance(object(), executor_lib.Executor)

    class NoJudge(executor_lib.Executor):
        pass

    with pytest.raises(TypeError, match="judge"):
        NoJudge()


def test_subclasses_inherit_close_and_the_context_manager() -> None:
    closed = []

    class Recording(executor_lib.Executor):
        def judge(self, submissions):
            return [{"id": s["id"]} for s in submissions]

        def close(self):
            closed.append(True)

    with Recording() as ex:
        assert ex.judge([{"id": "x"}]) == [{"id": "x"}]
    assert closed == [True]


def test_typed_dicts_match_the_json_schemas_of_the_service() -> None:
    result = RESPONSE_SCHEMA["properties"]["results"]["items"]
    assert set(executor_lib.JudgeResult.__annotations__) == set(result["properties"])
    assert set(result["required"]) <= executor_lib.JudgeResult.__required_keys__
    assert set(executor_lib.TestResult.__annotations__) == set(_TEST_RESULT["properties"])
    assert executor_lib.TestResult.__required_keys__ == set(_TEST_RESULT["required"])
    submission = REQUEST_SCHEMA["properties"]["submissions"]["items"]
    assert set(executor_lib.SubmissionDict.__annotations__) == set(submission["properties"])
    assert executor_lib.SubmissionDict.__required_keys__ == set(submission["required"])
    assert set(executor_lib.LimitsDict.__annotations__) == set(submission["properties"]["limits"]["properties"])


def test_sandbox_error_result_has_null_reward_and_one_se_per_test() -> None:
    sub = parse_submissions([{"id": "q", "code": "print(1)", "mode": "stdio",
                              "tests": [{"expected": "1"}, {"expected": "2"}]}])[0]
    result = executor_lib.sandbox_error_result(sub, "service down")
    assert result["id"] == "q" and result["status"] == "sandbox_error" and result["reward"] is None
    assert (result["passed"], result["total"]) == (0, 2)
    assert [t["verdict"] for t in result["tests"]] == ["SE", "SE"]
    assert all(t["message"] == "service down" for t in result["tests"])
