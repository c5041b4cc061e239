"""HttpExecutor: same results as embedded, load spread over URLs, retries, failure -> null reward."""
import time

import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from maxk_jax.execution.http_client import HttpExecutor
from maxk_jax.execution.service import create_app

from tests.execution.judge_fixtures import SUBS, WANT, verdicts


def test_http_backend_matches_embedded_and_spreads_load(executor, serve_app) -> None:
    apps = [create_app(executor.supervisor), create_app(executor.supervisor)]
    urls = [serve_app(app) for app in apps]
    with HttpExecutor(urls, max_batch=1) as client:
        results = client.judge(SUBS * 2)
        assert [r["id"] for r in results] == ["s", "f", "a"] * 2
        assert verdicts(results) == WANT * 2
        assert [r["reward"] for r in results[:3]] == [0.5, 1.0, 0.0]
        with pytest.raises(ValueError, match=r"submissions\[0\]\.tests"):
            client.judge([dict(SUBS[0], tests=[])])
        with pytest.raises(ValueError, match="bytes are only accepted in-process"):
            client.judge([dict(SUBS[0], tests=[{"stdin": b"1 2", "expected": "3"}])])
        assert all(h["status"] == "ok" for h in client.health())
    assert all(len(app.state.cache._done) > 0 for app in apps)          # both services got work


def test_http_retries_on_the_next_url(executor, serve_app) -> None:
    good = serve_app(create_app(executor.supervisor))
    with HttpExecutor(["http://127.0.0.1:9", good], retries=2, backoff_s=0.01) as client:
        assert verdicts(client.judge(SUBS)) == WANT


def _stub(status: int, calls: list, retry_after: str = "0") -> FastAPI:
    stub = FastAPI()

    @stub.post("/v1/judge")
    async def judge(request: Request) -> JSONResponse:
        calls.append(time.monotonic())
        return JSONResponse({"error": "busy"}, status_code=status, headers={"Retry-After": retry_after})

    return stub


def test_http_failure_gives_sandbox_error_with_null_reward(serve_app) -> None:
    calls: list = []
    url = serve_app(_stub(503, calls))
    with HttpExecutor([url], retries=2, backoff_s=0.05) as client:
        results = client.judge(SUBS)
    assert len(calls) == 3
    assert calls[2] - calls[1] >= 0.09                                   # exponential backoff
    for result, sub in zip(results, SUBS):
        assert result["id"] == sub["id"] and result["status"] == "sandbox_error" and result["reward"] is None
        assert all(t["verdict"] == "SE" for t in result["tests"]) and result["passed"] == 0
    with HttpExecutor(["http://127.0.0.1:9"], retries=0) as client:
        assert client.judge(SUBS[:1])[0]["reward"] is None


def test_http_honours_retry_after(serve_app) -> None:
    calls: list = []
    url = serve_app(_stub(429, calls, retry_after="1"))
    with HttpExecutor([url], retries=1, backoff_s=0.01) as client:
        client.judge(SUBS[:1])
    assert len(calls) == 2 and calls[1] - calls[0] >= 0.95
