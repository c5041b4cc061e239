"""Sandboxed execution of model-written code: the ``Executor`` protocol and its backends.

Public API::

    with make_executor("embedded") as ex:          # or "http://host:port[,...]", "sandboxfusion+http://..."
        results = ex.judge([{"id": "a", "code": "print(2)", "mode": "stdio",
                             "tests": [{"stdin": "", "expected": "2"}]}])

Protocol:   Executor (judge / close / context manager), typed dicts SubmissionDict -> JudgeResult
            (one TestResult per test), sandbox_error_result
Backends:   EmbeddedExecutor (in-process supervisor, the default), HttpExecutor (judge services),
            SandboxFusionExecutor (an existing SandboxFusion deployment), CachingExecutor (judges
            each distinct submission once; wraps another executor), JudgeCounter (counts the
            submissions judged; wraps another executor), RewardFunctionExecutor (a Python reward
            function scores the completions: "reward:module:function")
Factory:    make_executor(spec)
Errors:     RequestError (a ValueError naming the offending field), SandboxUnavailableError,
            JudgeAuthError (a judge service refused the client's token: HTTP 401)

Modules: ``executor`` (the protocol and typed dicts), one per backend (``embedded``,
``http_client``, ``sandboxfusion``, ``caching``, ``counting``), ``factory``; the judge itself: ``schema``
(request validation), ``judge`` (output comparison, verdicts), ``behaviour`` (output
fingerprints), ``supervisor`` (slots, queue, results), ``sandbox`` (bubblewrap slots, uid blocks,
reaper), ``cgroups`` (per-slot memory/pids/CPU groups), ``worker``/``harness``/``harness_assert``/
``protocol`` (the stdlib-only code that runs inside the sandbox), ``seccomp`` (the system-call
filter of judged programs); ``service``/``serve`` (the FastAPI app and ``python -m
maxk_jax.execution.serve``), ``auth`` (bearer tokens between clients and the service).
"""
from maxk_jax.execution.auth import JudgeAuthError
from maxk_jax.execution.caching import CachingExecutor
from maxk_jax.execution.counting import JudgeCounter
from maxk_jax.execution.embedded import EmbeddedExecutor
from maxk_jax.execution.executor import (Executor, JudgeResult, SubmissionDict, TestResult,
                                         sandbox_error_result)
from maxk_jax.execution.factory import make_executor
from maxk_jax.execution.http_client import HttpExecutor
from maxk_jax.execution.reward_executor import CompletionSubmission, RewardFunctionExecutor
from maxk_jax.execution.sandbox import SandboxConfig, SandboxUnavailableError
from maxk_jax.execution.sandboxfusion import SandboxFusionExecutor
from maxk_jax.execution.schema import RequestError

__all__ = [
    "CachingExecutor", "CompletionSubmission", "EmbeddedExecutor", "Executor", "HttpExecutor", "JudgeAuthError", "JudgeCounter", "JudgeResult",
    "RequestError", "RewardFunctionExecutor", "SandboxConfig", "SandboxFusionExecutor", "SandboxUnavailableError", "SubmissionDict",
    "TestResult", "make_executor", "sandbox_error_result",
]
