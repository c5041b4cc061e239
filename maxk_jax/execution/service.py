"""HTTP judge service (FastAPI): ``GET /healthz``, ``POST /v1/judge``, OpenAPI at ``/openapi.json``.

The body is validated by :mod:`schema` (HTTP 400 ``{"error", "field"}`` naming the bad field;
FastAPI's 422 is overridden to 400 as well). Batches are judged concurrently across all worker
slots. Overload: more than ``max_inflight`` requests being judged -> 429, more than
``max_pending`` queued tests -> 503, both with ``Retry-After``; a single request with more tests
than ``max_pending`` -> 413. A repeated submission (same id and
same content) is answered from a bounded cache — or joins the identical judgement still running —
so a client retrying after a timeout gets the same result instead of a second execution. The cache
is keyed by a SHA-256 of the submission and bounded by entry count and by bytes of stored results.
A body over ``max_request_bytes`` -> 413 naming the limit; a body nested too deeply -> 400.

With a ``token`` every request but ``GET /healthz`` (liveness and queue depth, nothing about
submissions) needs ``Authorization: Bearer <token>``; without it or with a wrong one -> 401
``{"error", "field": "authorization"}`` before the body is read. A client that disconnects while its
request is judged stops the request's remaining tests (logged once). A client that half-closes
(``shutdown(SHUT_WR)`` after a complete request) is answered: serve runs uvicorn with
:class:`HalfCloseProtocol`. ``HEAD /healthz`` answers like ``GET`` without a body.
"""
import asyncio
import collections
import concurrent.futures
import json
import math
import logging
import socket
import threading

import anyio
import h11
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.requests import ClientDisconnect
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.protocols.utils import is_ssl

from maxk_jax.execution import schema
from maxk_jax.execution.auth import UNAUTHORIZED_BODY, BearerCheck
from maxk_jax.execution.executor import JudgeResult
from maxk_jax.execution.supervisor import ABANDONED, Supervisor

_TEST_RESULT = {
    "type": "object",
    "required": ["verdict", "cpu_s", "wall_s", "memory_mb", "exit_code", "signal", "message"],
    "properties": {
        "verdict": {"enum": ["AC", "WA", "RE", "TLE", "MLE", "OLE", "CE", "SE"]},
        "cpu_s": {"type": ["number", "null"]}, "wall_s": {"type": ["number", "null"]},
        "memory_mb": {"type": ["number", "null"],
                      "description": "peak memory: the slot cgroup's peak (all processes, memfds) or the main process's RSS"},
        "exit_code": {"type": ["integer", "null"]}, "signal": {"type": ["string", "null"]},
        "message": {"type": "string"}, "stderr": {"type": "string", "description": "excerpt, non-AC only"},
    },
}
_LIMITS = {"type": "object", "additionalProperties": False, "properties": {
    "cpu_s": {"type": "number", "minimum": 0.01, "maximum": 60},
    "wall_s": {"type": "number", "minimum": 0.05, "maximum": 300, "description": "default 2 * cpu_s + 1"},
    "memory_mb": {"type": "integer", "minimum": 32, "maximum": 16384, "description": "address space"},
    "output_mb": {"type": "integer", "minimum": 1, "maximum": 1024}}}
REQUEST_SCHEMA = {
    "type": "object", "required": ["submissions"], "additionalProperties": False,
    "properties": {"submissions": {"type": "array", "items": {
        "type": "object", "required": ["id", "code", "mode", "tests"], "additionalProperties": False,
        "properties": {
            "id": {"type": "string"}, "code": {"type": "string"}, "language": {"enum": ["python", "python3"]},
            "mode": {"enum": ["stdio", "function", "assert"]},
            "tests": {"oneOf": [
                {"type": "array", "minItems": 1, "items": {
                    "type": "object", "required": ["expected"], "additionalProperties": False,
                    "properties": {"stdin": {"type": "string"}, "expected": {"type": "string"}}}},
                {"type": "object", "required": ["entry_point", "cases"], "additionalProperties": False,
                 "properties": {"entry_point": {"type": "string"}, "cases": {"type": "array", "minItems": 1, "items": {
                     "type": "object", "required": ["args", "expected"], "additionalProperties": False,
                     "properties": {"args": {"type": "array"}, "expected": {}}}}}},
                {"type": "object", "required": ["code"], "additionalProperties": False,
                 "properties": {"code": {"type": "string"}}},
                {"type": "array", "minItems": 1, "items": {
                    "type": "object", "required": ["code"], "additionalProperties": False,
                    "properties": {"code": {"type": "string"}}}}]},
            "limits": _LIMITS,
            "compare": {"type": "object", "additionalProperties": False, "properties": {
                "mode": {"enum": ["tokens", "lines", "exact"]}, "float_tol": {"type": "number", "minimum": 0}}},
            "checker": {"type": "object", "required": ["code"], "additionalProperties": False,
                        "properties": {"code": {"type": "string"}}},
        }}}},
}
RESPONSE_SCHEMA = {
    "type": "object", "required": ["results"],
    "properties": {"results": {"type": "array", "items": {
        "type": "object", "required": ["id", "status", "reward", "passed", "total", "tests"],
        "properties": {"id": {"type": "string"}, "status": {"enum": ["ok", "sandbox_error", "invalid"]},
                       "reward": {"type": ["number", "null"]}, "passed": {"type": "integer"},
                       "total": {"type": "integer"}, "tests": {"type": "array", "items": _TEST_RESULT},
                       # optional, additive: maxk_jax.execution.behaviour fingerprint (null = undetermined)
                       "behaviour": {"type": ["string", "null"]},
                       "memory_limit_by": {"enum": ["cgroup", "rlimit"],
                                           "description": "per-slot cgroup, or RLIMIT_AS per process (fallback)"}}}}},
}
_ERROR = {"type": "object", "properties": {"error": {"type": "string"}, "field": {"type": "string"}}}


class ResultCache:
    """LRU of finished results keyed by the submission's content hash, bounded by ``size`` entries
    and ``max_bytes`` of result JSON; joins identical in-flight work."""

    def __init__(self, supervisor: Supervisor, size: int, max_bytes: int = 64 << 20):
        if size < 0 or max_bytes < 0:
            raise ValueError(f"cache size and max_bytes must be >= 0, got {size}, {max_bytes}")
        self.supervisor, self.size, self.max_bytes = supervisor, size, max_bytes
        self._done: collections.OrderedDict = collections.OrderedDict()   # key -> (result, bytes)
        self._running: dict = {}
        self._lock = threading.Lock()
        self.hits = 0
        self.bytes = 0

    def __len__(self) -> int:
        return len(self._done)

    def _store(self, key: str, result: dict) -> None:
        size = len(json.dumps(result, allow_nan=True)) + len(key)
        if size > self.max_bytes or self.size == 0:
            return
        if key in self._done:
            self.bytes -= self._done.pop(key)[1]
        self._done[key] = (result, size)
        self.bytes += size
        while len(self._done) > self.size or self.bytes > self.max_bytes:
            self.bytes -= self._done.popitem(last=False)[1][1]

    def judge(self, subs: list[schema.Submission], cancel: threading.Event | None = None) -> list[JudgeResult]:
        """Judge ``subs`` (validated), reusing cached or running results for repeated submissions;
        ``cancel`` (set when the client went away) stops the tests this call started that have not run."""
        slots, todo = [], []
        with self._lock:
            for sub in subs:
                key = sub.cache_key
                if key in self._done:
                    self._done.move_to_end(key)
                    self.hits += 1
                    slots.append(self._done[key][0])
                elif key in self._running:
                    self.hits += 1
                    slots.append(self._running[key])
                else:
                    future = concurrent.futures.Future()
                    self._running[key] = future
                    todo.append((sub, future))
                    slots.append(future)
        if todo:
            try:
                fresh = [sub for sub, _ in todo]
                results = self.supervisor.judge(fresh) if cancel is None else self.supervisor.judge(fresh, cancel)
            except BaseException as err:
                with self._lock:
                    for sub, future in todo:
                        self._running.pop(sub.cache_key, None)
                        future.set_exception(err)
                raise
            with self._lock:
                for (sub, future), result in zip(todo, results):
                    self._running.pop(sub.cache_key, None)
                    future.set_result(result)
                    if result["status"] != "sandbox_error":
                        self._store(sub.cache_key, result)
        return [s.result() if isinstance(s, concurrent.futures.Future) else s for s in slots]


class HalfCloseProtocol(H11Protocol):
    """uvicorn's h11 protocol, answering a client that half-closes after a complete request.

    asyncio closes a connection at the client's EOF unless ``eof_received()`` returns True; uvicorn's
    returns None, so a client that sent its request and then ``shutdown(SHUT_WR)`` got no answer
    and its request was dropped as abandoned. Here an EOF while a fully received request is being
    answered keeps the connection open for the answer. A client that went away entirely sends the
    same EOF; to tell the two apart the server sends an interim ``100 Continue`` (HTTP/1.1 clients
    must ignore 1xx responses) and ``PROBE_S`` later reads the socket's error: a closed peer answers
    data with a reset, which counts as a disconnect (the request's remaining tests stop) as before.
    TLS connections and HTTP/1.0 keep uvicorn's behaviour (TLS has no half-close).
    """

    PROBE_S = 0.2

    def eof_received(self) -> bool | None:
        cycle = self.cycle
        if (cycle is None or cycle.response_complete or cycle.more_body or is_ssl(self.transport)
                or self.conn.their_http_version != b"1.1"):
            return None
        if getattr(self, "_half_closed", False) or cycle.response_started:
            return True
        self._half_closed = True
        try:
            self.transport.write(self.conn.send(h11.InformationalResponse(status_code=100, headers=[])))
        except h11.LocalProtocolError:
            return None
        asyncio.get_running_loop().call_later(self.PROBE_S, self._probe)
        return True

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if getattr(self, "_half_closed", False) and (self.cycle is None or self.cycle.response_complete):
            self.transport.close()      # nothing more can arrive: EOF once the answer is flushed

    def _probe(self) -> None:
        """After the interim response: a reset (SO_ERROR set) means the client is gone -> disconnect."""
        sock = self.transport.get_extra_info("socket")
        if sock is None or self.cycle is None or self.cycle.response_complete or self.transport.is_closing():
            return
        try:
            gone = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) != 0
        except OSError:
            gone = True
        if gone:
            self.transport.abort()


def _error(status: int, message: str, field: str, retry_after: float | None = None) -> JSONResponse:
    headers = {"Retry-After": str(max(1, math.ceil(retry_after)))} if retry_after is not None else None
    return JSONResponse({"error": message, "field": field}, status_code=status, headers=headers)


class BearerAuth:
    """ASGI middleware: 401 for every HTTP request but ``GET /healthz`` without the right bearer token."""

    OPEN = (("GET", "/healthz"), ("HEAD", "/healthz"))

    def __init__(self, app, check: BearerCheck):
        self.app, self.check = app, check
        self.refused = 0

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http" or (scope.get("method"), scope.get("path")) in self.OPEN:
            return await self.app(scope, receive, send)
        header = next((value for name, value in scope.get("headers", ()) if name == b"authorization"), None)
        if self.check.allows(header):
            return await self.app(scope, receive, send)
        self.refused += 1
        response = JSONResponse(UNAUTHORIZED_BODY, status_code=401, headers={"WWW-Authenticate": "Bearer"})
        await response(scope, receive, send)


async def _read_body(request: Request, max_request_bytes: int) -> bytes | Response:
    """The request's body, or the answer refusing it: 413 past ``max_request_bytes`` (by Content-Length,
    else while streaming), 499 when the client disconnects before the body is read."""
    too_big = _error(413, f"body: request exceeds the {max_request_bytes} bytes this service accepts "
                     "(serve --max_request_mb); split it", "body")
    length = request.headers.get("content-length", "")
    if length.isdigit() and int(length) > max_request_bytes:
        return too_big
    chunks, total = [], 0
    try:
        async for chunk in request.stream():
            total += len(chunk)
            if total > max_request_bytes:
                return too_big
            chunks.append(chunk)
    except ClientDisconnect:   # one line, not starlette's traceback
        client = request.client
        logging.warning("client %s disconnected after sending %d of %s request bytes",
                        f"{client.host}:{client.port}" if client else "?", total, length or "?")
        return Response(status_code=499)
    return b"".join(chunks)


def _parse_submissions(raw: bytes, default_output_mb: int) -> list | JSONResponse:
    """The body's submissions (`schema.parse_request`), or a 400 naming the field that is wrong."""
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as err:
        return _error(400, f"body: not valid JSON ({err})", "body")
    except RecursionError:
        return _error(400, "body: JSON nested too deeply to parse", "body")
    try:
        return schema.parse_request(body, default_output_mb)
    except schema.RequestError as err:
        return _error(400, str(err), err.field)
    except RecursionError:
        return _error(400, "body: nested too deeply", "body")


async def _judge_until_disconnect(request: Request, cache: ResultCache, subs: list,
                                  limiter: anyio.CapacityLimiter) -> tuple[list, threading.Event]:
    """Judge ``subs`` through the cache on a worker thread; a client disconnect sets the returned event,
    which stops the tests not yet started."""
    cancel = threading.Event()

    async def watch_disconnect() -> None:      # the body is read: the next message is the disconnect
        while (await request.receive())["type"] != "http.disconnect":
            pass
        cancel.set()

    async with anyio.create_task_group() as group:
        group.start_soon(watch_disconnect)
        results = await anyio.to_thread.run_sync(cache.judge, subs, cancel, limiter=limiter)
        group.cancel_scope.cancel()
    return results, cancel


def create_app(supervisor: Supervisor, *, max_pending: int = 10000, max_inflight: int = 64,
               cache_size: int = 4096, cache_bytes: int = 64 << 20, max_request_bytes: int = 256 << 20,
               default_output_mb: int = 32, token: str | None = None) -> FastAPI:
    """The FastAPI application around ``supervisor`` (which the caller owns and closes); ``token``:
    the bearer token every request but ``GET /healthz`` must carry (None: no authentication)."""
    for name, value, low in (("max_pending", max_pending, 1), ("max_inflight", max_inflight, 1),
                             ("max_request_bytes", max_request_bytes, 1)):
        if not isinstance(value, int) or value < low:
            raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
    app = FastAPI(title="maxk-jax judge", version="1.0",
                  description="Sandboxed execution of model-written Python against tests (see docs/contracts.md).")
    cache = ResultCache(supervisor, cache_size, cache_bytes)
    limiter = anyio.CapacityLimiter(max_inflight)
    state = {"inflight": 0}
    app.state.cache, app.state.supervisor = cache, supervisor
    if token is not None:
        app.add_middleware(BearerAuth, check=BearerCheck(token))

    @app.exception_handler(RequestValidationError)
    async def _validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
        first = (exc.errors() or [{}])[0]
        field = ".".join(str(p) for p in first.get("loc", ("body",)))
        return _error(400, f"{field}: {first.get('msg', 'invalid request')}", field)

    @app.head("/healthz", include_in_schema=False)        # the same answer; uvicorn sends no body for HEAD
    @app.get("/healthz", summary="Liveness: worker slots alive, restarts, queue depth")
    def healthz() -> JSONResponse:
        """200 with the supervisor's health when every slot is alive, else 503 ("degraded")."""
        health = supervisor.health()
        ok = health["alive"] == health["slots"]
        health.update(status="ok" if ok else "degraded", inflight=state["inflight"], cache_hits=cache.hits,
                      cache_entries=len(cache), cache_bytes=cache.bytes)
        return JSONResponse(health, status_code=200 if ok else 503)

    @app.post("/v1/judge", summary="Judge a batch of submissions",
              openapi_extra={"requestBody": {"required": True, "content": {"application/json": {"schema": REQUEST_SCHEMA}}}},
              responses={200: {"content": {"application/json": {"schema": RESPONSE_SCHEMA}}, "description": "results in request order"},
                         400: {"content": {"application/json": {"schema": _ERROR}}, "description": "malformed request"},
                         413: {"description": "body larger than the service accepts, or more tests than the queue holds"},
                         429: {"description": "too many requests in flight (Retry-After)"},
                         503: {"description": "test queue full (Retry-After)"}})
    async def judge_endpoint(request: Request) -> JSONResponse:
        raw = await _read_body(request, max_request_bytes)
        if isinstance(raw, Response):
            return raw
        subs = _parse_submissions(raw, default_output_mb)
        if isinstance(subs, Response):
            return subs
        if state["inflight"] >= max_inflight:
            return _error(429, f"more than {max_inflight} requests in flight", "body", retry_after=1)
        units = sum(len(s.tests) for s in subs)
        if units > max_pending:
            return _error(413, f"request has {units} tests, more than the {max_pending} this service queues; "
                          "split it", "submissions")
        pending = supervisor.pending()
        if pending + units > max_pending:
            drain = (pending + units) * 0.02 / max(1, supervisor.num_slots)
            return _error(503, f"test queue full ({pending} queued, request adds {units}, limit {max_pending})",
                          "submissions", retry_after=drain)
        state["inflight"] += 1
        try:
            results, cancel = await _judge_until_disconnect(request, cache, subs, limiter)
        finally:
            state["inflight"] -= 1
        if cancel.is_set():
            client = request.client
            skipped = sum(t["message"] == ABANDONED for r in results for t in r["tests"])
            logging.warning("client %s disconnected while its request was judged; %d of %d tests not run",
                            f"{client.host}:{client.port}" if client else "?", skipped, units)
            return Response(status_code=499)
        return JSONResponse({"results": results})

    return app
