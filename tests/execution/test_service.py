"""The HTTP service: schema, 400s naming the field, overload, repeat cache, concurrency."""
import concurrent.futures
import json
import socket
import threading
import time

import httpx
import jsonschema
import pytest

from maxk_jax.execution.service import REQUEST_SCHEMA, RESPONSE_SCHEMA, ResultCache, create_app

SUBS = [
    {"id": "s", "code": "print(int(input()) + 1)", "mode": "stdio",
     "tests": [{"stdin": "1", "expected": "2"}, {"stdin": "5", "expected": "7"}]},
    {"id": "f", "code": "def f(x):\n    return [x, x]", "mode": "function",
     "tests": {"entry_point": "f", "cases": [{"args": [3], "expected": [3, 3]}]}},
    {"id": "a", "code": "def f(x):\n    return x", "mode": "assert", "tests": {"code": "assert f(1) == 1"},
     "limits": {"cpu_s": 1, "wall_s": 2, "memory_mb": 256}},
]


@pytest.fixture(scope="module")
def app(executor):
    return create_app(executor.supervisor)


def test_healthz_and_judge_match_embedded(executor, app, serve_app) -> None:
    url = serve_app(app)
    health = httpx.get(f"{url}/healthz").json()
    assert health["status"] == "ok" and health["slots"] == health["alive"] == 2 and health["sandboxed"]
    assert health["memory_limit_by"] == executor.supervisor.memory_limit_by in ("cgroup", "rlimit")
    response = httpx.post(f"{url}/v1/judge", json={"submissions": SUBS}, timeout=60)
    assert response.status_code == 200
    body = response.json()
    jsonschema.validate(body, RESPONSE_SCHEMA)
    assert [r["id"] for r in body["results"]] == ["s", "f", "a"]
    assert [[t["verdict"] for t in r["tests"]] for r in body["results"]] == [["AC", "WA"], ["AC"], ["AC"]]
    assert [r["reward"] for r in body["results"]] == [0.5, 1.0, 1.0]
    embedded = executor.judge(SUBS)
    assert [[t["verdict"] for t in r["tests"]] for r in embedded] == \
        [[t["verdict"] for t in r["tests"]] for r in body["results"]]


@pytest.mark.parametrize("body, field", [
    (b"{not json", "body"),
    (b"[]", "body"),
    (json.dumps({"submission": []}).encode(), "body.submission"),
    (json.dumps({"submissions": [dict(SUBS[0], mode="cpp")]}).encode(), "submissions[0].mode"),
    (json.dumps({"submissions": [dict(SUBS[0], tests=[])]}).encode(), "submissions[0].tests"),
    (json.dumps({"submissions": [dict(SUBS[0], tests=[{"stdin": 1, "expected": "x"}])]}).encode(),
     "submissions[0].tests[0].stdin"),
    (json.dumps({"submissions": [dict(SUBS[0], limits={"memory_mb": "big"})]}).encode(),
     "submissions[0].limits.memory_mb"),
    (json.dumps({"submissions": [SUBS[0], {k: v for k, v in SUBS[1].items() if k != "code"}]}).encode(),
     "submissions[1].code"),
])
def test_malformed_requests_get_400_naming_the_field(app, serve_app, body: bytes, field: str) -> None:
    url = serve_app(app)
    response = httpx.post(f"{url}/v1/judge", content=body, headers={"content-type": "application/json"})
    assert response.status_code == 400
    assert response.json()["field"] == field
    assert field in response.json()["error"]


def test_openapi_publishes_the_contract(app, serve_app) -> None:
    url = serve_app(app)
    spec = httpx.get(f"{url}/openapi.json").json()
    judge = spec["paths"]["/v1/judge"]["post"]
    assert judge["requestBody"]["content"]["application/json"]["schema"] == json.loads(json.dumps(REQUEST_SCHEMA))
    assert set(judge["responses"]) >= {"200", "400", "413", "429", "503"} and "422" not in judge["responses"]
    assert "/healthz" in spec["paths"]


def test_json_schema_agrees_with_the_validator() -> None:
    jsonschema.validate({"submissions": SUBS}, REQUEST_SCHEMA)
    for bad in ({"submissions": [dict(SUBS[0], mode="cpp")]}, {"submissions": [dict(SUBS[0], extra=1)]},
                {"submissions": [dict(SUBS[0], tests=[])]}, {}):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, REQUEST_SCHEMA)


SLOW = {"code": "import time\ntime.sleep(1.0)\nprint(1)", "mode": "stdio", "limits": {"cpu_s": 1, "wall_s": 3}}


def wait_until(condition, what: str, timeout: float = 30.0) -> None:
    """Poll `condition` until it holds (a loaded machine may take long to admit a request)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.02)


def test_overload_answers_429_and_503_with_retry_after(executor, serve_app) -> None:
    url = serve_app(create_app(executor.supervisor, max_inflight=1, max_pending=3))
    slow = dict(SLOW, id="slow", tests=[{"stdin": "", "expected": "1"}] * 3)
    inflight = lambda u: httpx.get(f"{u}/healthz").json()["inflight"]  # noqa: E731
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        first = pool.submit(httpx.post, f"{url}/v1/judge", json={"submissions": [slow]}, timeout=60)
        wait_until(lambda: inflight(url) == 1, "the slow request to be admitted")
        busy = httpx.post(f"{url}/v1/judge", json={"submissions": [SUBS[1]]})
        assert busy.status_code == 429 and int(busy.headers["retry-after"]) >= 1
        assert first.result().status_code == 200
    too_big = httpx.post(f"{url}/v1/judge", json={"submissions": [dict(SUBS[0], tests=SUBS[0]["tests"] * 2)]})
    assert too_big.status_code == 413 and too_big.json()["field"] == "submissions"

    url2 = serve_app(create_app(executor.supervisor, max_inflight=4, max_pending=4))
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        a = pool.submit(httpx.post, f"{url2}/v1/judge", json={"submissions": [dict(slow, id="a")]}, timeout=60)
        wait_until(lambda: executor.supervisor.pending() == 1, "both slots busy, one test of 'a' queued")
        b = pool.submit(httpx.post, f"{url2}/v1/judge", json={"submissions": [dict(slow, id="b")]}, timeout=60)
        wait_until(lambda: executor.supervisor.pending() == 4, "4 tests queued: the limit")
        full = httpx.post(f"{url2}/v1/judge", json={"submissions": [SUBS[1]]})
        assert full.status_code == 503 and int(full.headers["retry-after"]) >= 1
        assert a.result().status_code == 200 and b.result().status_code == 200


def test_repeated_submission_returns_the_same_result(app, serve_app) -> None:
    url = serve_app(app)
    coin = {"id": "coin", "code": "import random\nprint(random.choice('ab'))", "mode": "stdio",
            "tests": [{"stdin": "", "expected": "a"}] * 4}
    first = httpx.post(f"{url}/v1/judge", json={"submissions": [coin]}, timeout=60).json()["results"][0]
    hits = app.state.cache.hits
    for _ in range(4):
        again = httpx.post(f"{url}/v1/judge", json={"submissions": [coin]}, timeout=60).json()["results"][0]
        assert again == first
    assert app.state.cache.hits == hits + 4
    other = httpx.post(f"{url}/v1/judge", json={"submissions": [dict(coin, id="coin-2")]}, timeout=60)
    assert other.json()["results"][0]["id"] == "coin-2"


def test_identical_inflight_requests_share_one_execution(app, serve_app) -> None:
    url = serve_app(app)
    sub = dict(SLOW, id="shared", tests=[{"stdin": "", "expected": "1"}], code=SLOW["code"] + "\n# shared")
    hits = app.state.cache.hits
    with concurrent.futures.ThreadPoolExecutor(3) as pool:
        futures = [pool.submit(httpx.post, f"{url}/v1/judge", json={"submissions": [sub]}, timeout=60)
                   for _ in range(3)]
        results = [f.result().json()["results"][0] for f in futures]
    assert results[0] == results[1] == results[2]
    assert app.state.cache.hits == hits + 2


class _FakeSupervisor:
    def __init__(self, statuses: list):
        self.statuses, self.calls = statuses, 0

    def judge(self, subs: list) -> list:
        self.calls += 1
        return [{"id": s.id, "status": self.statuses.pop(0)} for s in subs]


def test_cache_does_not_keep_sandbox_errors() -> None:
    from maxk_jax.execution.schema import parse_submissions

    fake = _FakeSupervisor(["sandbox_error", "ok"])
    cache = ResultCache(fake, size=2)
    subs = parse_submissions([SUBS[0]])
    assert cache.judge(subs)[0]["status"] == "sandbox_error"
    assert cache.judge(subs)[0]["status"] == "ok"
    assert cache.judge(subs)[0]["status"] == "ok" and fake.calls == 2


def _concurrent_clients(url: str, clients: int, per_client: int, batch: int) -> None:
    errors = []

    def client(c: int) -> None:
        with httpx.Client(timeout=120) as http:
            for start in range(0, per_client, batch):
                subs = [{"id": f"c{c}-{i}", "code": f"print({c} * 100000 + {i})", "mode": "stdio",
                         "tests": [{"stdin": "", "expected": str(c * 100000 + i)}]}
                        for i in range(start, min(per_client, start + batch))]
                results = http.post(f"{url}/v1/judge", json={"submissions": subs}).json()["results"]
                if [r["id"] for r in results] != [s["id"] for s in subs]:
                    errors.append(f"client {c}: ids out of order")
                errors.extend(f"{r['id']}: {r['tests']}" for r in results if r["reward"] != 1.0)

    threads = [threading.Thread(target=client, args=(c,)) for c in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[:5]


def test_concurrent_clients_small(app, serve_app) -> None:
    _concurrent_clients(serve_app(app), clients=4, per_client=40, batch=10)


@pytest.mark.slow
def test_concurrent_clients_2000_executions(serve_app, executor) -> None:
    url = serve_app(create_app(executor.supervisor, cache_size=0))
    start = time.monotonic()
    _concurrent_clients(url, clients=8, per_client=250, batch=25)
    print(f"2000 executions over HTTP in {time.monotonic() - start:.1f}s")
    assert executor.supervisor.stray_processes() == []


def test_deeply_nested_body_is_400_not_500(app, serve_app) -> None:
    url = serve_app(app)
    body = b'{"submissions": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    response = httpx.post(f"{url}/v1/judge", content=body, headers={"content-type": "application/json"}, timeout=60)
    assert response.status_code == 400 and response.json()["field"] == "body", response.text
    assert "nested" in response.json()["error"]


def test_oversized_body_is_413_naming_the_limit(executor, serve_app) -> None:
    url = serve_app(create_app(executor.supervisor, max_request_bytes=4096))
    body = json.dumps({"submissions": [dict(SUBS[0], code="# " + "x" * 8000 + "\nprint(1)")]}).encode()
    for headers in ({"content-type": "application/json"},
                    {"content-type": "application/json", "transfer-encoding": "chunked"}):
        content = body if "transfer-encoding" not in headers else iter([body[:3000], body[3000:]])
        response = httpx.post(f"{url}/v1/judge", content=content, headers=headers, timeout=60)
        assert response.status_code == 413 and "4096 bytes" in response.json()["error"], response.text
    small = httpx.post(f"{url}/v1/judge", json={"submissions": [SUBS[0]]}, timeout=60)
    assert small.status_code == 200


def test_cache_keys_are_hashes_and_bytes_are_bounded() -> None:
    from maxk_jax.execution.schema import parse_submissions

    class Echo:
        def judge(self, subs):
            return [{"id": s.id, "status": "ok", "payload": "y" * 1000} for s in subs]

    cache = ResultCache(Echo(), size=1000, max_bytes=5000)
    subs = parse_submissions([dict(SUBS[0], id=f"s{i}", tests=[{"stdin": "x" * 100_000, "expected": "1"}])
                              for i in range(10)])
    assert all(len(s.cache_key) == 64 and "x" * 100 not in s.cache_key for s in subs)
    cache.judge(subs)
    assert 0 < cache.bytes <= 5000 and len(cache) == 4       # ~1.1 KB per result
    assert cache.judge(subs[-1:])[0]["id"] == "s9" and cache.hits == 1


def test_create_app_rejects_zero_inflight(executor) -> None:
    with pytest.raises(ValueError, match="max_inflight"):
        create_app(executor.supervisor, max_inflight=0)


def test_client_disconnecting_mid_judging_stops_its_remaining_tests(executor, serve_app, caplog) -> None:
    """10 tests of 1 s on 2 slots take 5 s; the client leaves after 0.5 s: the tests not started are
    dropped (a request sent then does not wait for them: at least 6 of the 10 never run) and one line is
    logged."""
    import logging

    url = serve_app(create_app(executor.supervisor, cache_size=0))
    slow = {"id": "slow", "code": "import time\ntime.sleep(1)\nprint(1)", "mode": "stdio",
            "tests": [{"stdin": str(i), "expected": "1"} for i in range(10)], "limits": {"cpu_s": 1, "wall_s": 3}}
    with caplog.at_level(logging.WARNING):
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(f"{url}/v1/judge", json={"submissions": [slow]}, timeout=0.5)
        quick = httpx.post(f"{url}/v1/judge", json={"submissions": [SUBS[0]]}, timeout=30)
        assert quick.status_code == 200     # not queued behind the dropped tests: the count of those not run below
        deadline = time.monotonic() + 10
        while "disconnected while its request was judged" not in caplog.text and time.monotonic() < deadline:
            time.sleep(0.05)
    lines = [r.getMessage() for r in caplog.records if "disconnected while its request" in r.getMessage()]
    assert len(lines) == 1 and lines[0].endswith("of 10 tests not run"), lines
    assert int(lines[0].split(";")[1].split()[0]) >= 6, lines      # at most 2 running + 2 more started
    assert executor.supervisor.pending() == 0


def _raw_request(url: str, request: bytes, half_close: bool) -> bytes:
    host, port = url.rsplit("/", 1)[1].split(":")
    with socket.create_connection((host, int(port)), timeout=60) as sock:
        sock.sendall(request)
        if half_close:
            sock.shutdown(socket.SHUT_WR)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def test_half_closed_client_is_answered(app, serve_app) -> None:
    """shutdown(SHUT_WR) after a complete request is not a disconnect (issue 58): the client gets its
    results (after an interim 100 Continue it must ignore)."""
    url = serve_app(app)
    body = json.dumps({"submissions": [SUBS[0]]}).encode()
    request = (b"POST /v1/judge HTTP/1.1\r\nHost: judge\r\nContent-Type: application/json\r\n"
               b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    answer = _raw_request(url, request, half_close=True)
    assert b"HTTP/1.1 200 OK" in answer, answer[:300]
    results = json.loads(answer.split(b"\r\n\r\n")[-1])["results"]
    assert results[0]["id"] == SUBS[0]["id"] and results[0]["status"] == "ok", results


def test_head_healthz_is_200_without_a_body(app, serve_app) -> None:
    url = serve_app(app)
    response = httpx.head(f"{url}/healthz", timeout=30)
    assert response.status_code == 200 and response.content == b""
    raw = _raw_request(url, b"HEAD /healthz HTTP/1.1\r\nHost: judge\r\nConnection: close\r\n\r\n", half_close=False)
    assert raw.startswith(b"HTTP/1.1 200 OK") and raw.endswith(b"\r\n\r\n"), raw
