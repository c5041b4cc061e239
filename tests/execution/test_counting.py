"""JudgeCounter: counts what the wrapped executor is asked to judge, forwards everything else."""
from maxk_jax.execution import Executor, JudgeCounter


class _Fake:
    name = "fake"

    def __init__(self) -> None:
        self.closed = False

    def judge(self, subs):
        return [{"id": s["id"]} for s in subs]

    def close(self) -> None:
        self.closed = True


def test_judge_counter_counts_submissions_and_forwards():
    inner = _Fake()
    counter = JudgeCounter(inner)
    assert isinstance(counter, Executor)
    assert counter.judge([{"id": "a"}, {"id": "b"}]) == [{"id": "a"}, {"id": "b"}]
    counter.judge([{"id": "c"}])
    counter.judge([])
    assert counter.count == 3 and counter.name == "fake"
    with counter:
        pass
    assert inner.closed
