"""The ``Executor`` protocol and the typed submissions / results every backend speaks.

An executor judges a batch of submissions and answers one result per submission, in request
order, in the wire schema of docs/contracts.md. Submissions and results stay plain dicts
(so the in-process and the HTTP path carry the same objects and a result is its own JSON), typed
as ``TypedDict`` classes: :class:`SubmissionDict` in, :class:`JudgeResult` (with one
:class:`TestResult` per test) out. ``Executor`` is a ``typing.Protocol``: any object with
``judge``/``close``/``__enter__``/``__exit__`` is one; backends subclass it to inherit the
context-manager methods and a no-op ``close``.

This module imports no backend; the backends (``embedded``, ``http_client``, ``sandboxfusion``,
``caching``) import it, and ``factory.make_executor`` imports the backends.
"""
import abc
from collections.abc import Sequence
from typing import Any, Literal, NotRequired, Protocol, Self, TypedDict, runtime_checkable

from maxk_jax.execution import schema

Mode = Literal["stdio", "function", "assert"]
Status = Literal["ok", "sandbox_error", "invalid"]
Verdict = Literal["AC", "WA", "RE", "TLE", "MLE", "OLE", "CE", "SE"]


class LimitsDict(TypedDict, total=False):
    """Per-test limits of a submission (all optional; bounds in ``schema.LIMIT_BOUNDS``)."""

    cpu_s: float
    wall_s: float
    memory_mb: int
    output_mb: int


class StdioTest(TypedDict):
    """One stdio test: the program's stdin and the expected stdout."""

    stdin: NotRequired[str | bytes]
    expected: str | bytes


class FunctionCase(TypedDict):
    """One function-mode case: JSON arguments and the expected JSON return value."""

    args: list[Any]
    expected: Any


class FunctionTests(TypedDict):
    """Function-mode tests: the function to call and its cases."""

    entry_point: str
    cases: list[FunctionCase]


class AssertTest(TypedDict):
    """Assert-mode test code, run after the program."""

    code: str | bytes


class CompareDict(TypedDict, total=False):
    """Output comparison of stdio tests (``schema`` module doc)."""

    mode: Literal["tokens", "lines", "exact"]
    float_tol: float


class SubmissionDict(TypedDict):
    """One submission in the wire schema (``bytes`` fields are accepted in-process only)."""

    id: str
    code: str | bytes
    mode: Mode
    tests: list[StdioTest] | FunctionTests | AssertTest | list[AssertTest]
    limits: NotRequired[LimitsDict | None]
    compare: NotRequired[CompareDict | None]
    checker: NotRequired[AssertTest | None]
    language: NotRequired[Literal["python", "python3"]]


class TestResult(TypedDict):
    """The outcome of one test (``stderr``: an excerpt, on non-AC verdicts only)."""

    __test__ = False  # not a pytest test class

    verdict: Verdict
    cpu_s: float | None
    wall_s: float | None
    memory_mb: float | None
    exit_code: int | None
    signal: str | None
    message: str
    stderr: NotRequired[str]


class JudgeResult(TypedDict):
    """The outcome of one submission: ``reward = passed / total`` when ``status`` is ``ok``, else None.

    ``behaviour`` is the program's output fingerprint (``behaviour`` module; None = undetermined);
    ``memory_limit_by`` (``cgroup``/``rlimit``) is set by sandboxes that enforce memory themselves.
    """

    id: str
    status: Status
    reward: float | None
    passed: int
    total: int
    tests: list[TestResult]
    behaviour: NotRequired[str | None]
    memory_limit_by: NotRequired[Literal["cgroup", "rlimit"]]


@runtime_checkable
class Executor(Protocol):
    """Judges code submissions; results follow the docs/contracts.md schema, in request order."""

    @abc.abstractmethod
    def judge(self, submissions: Sequence[SubmissionDict]) -> list[JudgeResult]:
        """Judge ``submissions`` (len S); returns S results in order.

        Malformed submissions raise ValueError naming the field; infrastructure failures give
        status ``sandbox_error`` with reward None (never a silent 0).
        """

    def close(self) -> None:
        """Release the backend's resources (idempotent)."""

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def sandbox_error_result(sub: schema.Submission, message: str) -> JudgeResult:
    """The result of a submission the infrastructure could not judge (reward None, all tests SE)."""
    tests: list[TestResult] = [{"verdict": "SE", "cpu_s": None, "wall_s": None, "memory_mb": None,
                                "exit_code": None, "signal": None, "message": message} for _ in sub.tests]
    return {"id": sub.id, "status": "sandbox_error", "reward": None, "passed": 0, "total": len(sub.tests),
            "tests": tests, "behaviour": None}
