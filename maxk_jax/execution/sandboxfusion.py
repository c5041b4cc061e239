"""Executor backend for an existing SandboxFusion deployment (its ``POST /run_code`` API).

Each test is one ``/run_code`` call (``language: python``, ``stdin``, ``run_timeout`` = wall_s,
``memory_limit_MB``). Expected outputs stay here and are compared locally with the same judge
as the embedded backend. Function mode appends a driver that prints the JSON return value after a
random marker; assert mode appends the test code and a marker print. Those two modes therefore
run the tests in the same file as the program, without our harness's nonce/normalisation
defences: isolation and anti-cheating are whatever that deployment provides. CPU time and peak
memory are not reported by /run_code (None in the results). Infrastructure failures (HTTP
errors after retries, status ``SandboxError``) give status ``sandbox_error``, reward None.
"""
import concurrent.futures
import secrets
import time
from collections.abc import Sequence

import httpx

from maxk_jax.execution import behaviour, judge, schema
from maxk_jax.execution.executor import Executor, JudgeResult, SubmissionDict

_DRIVER = """

def __maxk_default(obj):
    if isinstance(obj, (set, frozenset)):
        return sorted(obj)
    raise TypeError(f"return value of type {{type(obj).__name__}} is not JSON-serialisable")

import json as __maxk_json, sys as __maxk_sys
__maxk_value = {entry}(*__maxk_json.loads({args!r}))
__maxk_sys.stdout.write("\\n{marker}" + __maxk_json.dumps(__maxk_value, default=__maxk_default) + "\\n")
"""
_CE_NAMES = ("SyntaxError", "IndentationError", "TabError")


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""


class SandboxFusionExecutor(Executor):
    """Judges through SandboxFusion's ``/run_code`` (one call per test, ``concurrency`` in flight)."""

    def __init__(self, url: str, *, retries: int = 3, backoff_s: float = 0.5, concurrency: int = 8,
                 connect_timeout_s: float = 5.0):
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"SandboxFusion URL must start with http:// or https://, got {url!r}")
        self.url, self.retries, self.backoff_s = url.rstrip("/"), retries, backoff_s
        self._client = httpx.Client(timeout=httpx.Timeout(60.0, connect=connect_timeout_s))
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="maxk-sf")

    def _call(self, code: str, stdin: str, limits: schema.Limits) -> tuple:
        """One /run_code call with retries: (response dict, None) or (None, error message)."""
        payload = {"code": code, "language": "python", "stdin": stdin, "run_timeout": limits.wall_s,
                   "compile_timeout": 10, "memory_limit_MB": limits.memory_mb}
        error = ""
        for attempt in range(self.retries + 1):
            try:
                response = self._client.post(f"{self.url}/run_code", json=payload, timeout=limits.wall_s + 30)
                body = response.json()
                if response.status_code == 200 and isinstance(body, dict) and body.get("status") != "SandboxError":
                    return body, None
                error = f"HTTP {response.status_code}: {str(body)[:300]}"
            except (httpx.HTTPError, ValueError) as err:
                error = f"{type(err).__name__}: {err}"
            if attempt < self.retries:
                time.sleep(self.backoff_s * 2 ** attempt)
        return None, f"SandboxFusion at {self.url} failed: {error}"

    def _test(self, sub: schema.Submission, test: schema.Test) -> dict:
        code = sub.code.decode("utf-8", "surrogateescape")
        marker = "__maxk_" + secrets.token_hex(16) + "__"
        if sub.mode == "function":
            code += _DRIVER.format(entry=sub.entry_point, args=test.args_json, marker=marker)
        elif sub.mode == "assert":
            code += "\n\n" + test.test_code.decode("utf-8", "surrogateescape") + f"\nprint({marker!r})\n"
        body, error = self._call(code, test.stdin.decode("utf-8", "surrogateescape"), sub.limits)
        result = {"verdict": "SE", "cpu_s": None, "wall_s": None, "memory_mb": None, "exit_code": None,
                  "signal": None, "message": error or ""}
        if body is None:
            return result
        run = body.get("run_result") or {}
        stdout, stderr = run.get("stdout") or "", run.get("stderr") or ""
        result.update(wall_s=run.get("execution_time"), exit_code=run.get("return_code"))
        last = _last_line(stderr)
        if run.get("status") == "TimeLimitExceeded":
            return dict(result, verdict="TLE", message="time limit exceeded")
        if run.get("return_code") not in (0, None) or run.get("status") == "Error":
            if last.startswith(_CE_NAMES):
                return dict(result, verdict="CE", message=last[:300])
            failed_assert = sub.mode == "assert" and last.startswith("AssertionError")
            verdict = "MLE" if last.startswith("MemoryError") else "WA" if failed_assert else "RE"
            return dict(result, verdict=verdict, message=last[:300] or f"exit status {run.get('return_code')}",
                        **{behaviour.FIELD: behaviour.run_token(sub.mode, verdict)})
        record = None   # function mode: the reported return value, for the behaviour fingerprint
        if sub.mode == "stdio":
            ok, message = judge.compare_output(test.expected, stdout.encode("utf-8", "surrogateescape"),
                                               sub.compare_mode, sub.float_tol)
        elif sub.mode == "assert":
            ok, message = marker in stdout.splitlines()[-1:], "the tests did not run to completion"
        else:
            _, found, tail = stdout.rpartition(marker)
            try:
                record = {"k": "value", "v": judge.parse_value(tail.strip())} if found else None
                ok, message = judge.compare_values(test.expected_value, record["v"], sub.float_tol) \
                    if found else (False, "no return value reported")
            except (ValueError, RecursionError):
                ok, message = False, "unreadable return value"
        verdict = "AC" if ok else "WA"
        token = behaviour.run_token(sub.mode, verdict, stdout=stdout.encode("utf-8", "surrogateescape"),
                                    record=record, compare_mode=sub.compare_mode)
        return dict(result, verdict=verdict, message="" if ok else message, **{behaviour.FIELD: token})

    def judge(self, submissions: Sequence[SubmissionDict]) -> list[JudgeResult]:
        """Validate, run every test through /run_code, and summarise like the embedded backend;
        S submissions -> S results in order."""
        subs = schema.parse_submissions(submissions)
        for i, sub in enumerate(subs):
            if sub.checker is not None:
                raise ValueError(f"submissions[{i}].checker: custom checkers are not supported by the "
                                 "SandboxFusion backend")
        futures = [[self._pool.submit(self._test, sub, test) for test in sub.tests] for sub in subs]
        results: list[JudgeResult] = []
        for sub, tests in zip(subs, futures):
            tests = [f.result() for f in tests]
            passed = sum(t["verdict"] == "AC" for t in tests)
            status = "sandbox_error" if any(t["verdict"] == "SE" for t in tests) else "ok"
            fingerprint = behaviour.summarise(tests)
            results.append({"id": sub.id, "status": status, "reward": passed / len(tests) if status == "ok" else None,
                            "passed": passed, "total": len(tests), "tests": tests,
                            "behaviour": fingerprint if status == "ok" else None})
        return results

    def close(self) -> None:
        """Close the HTTP client and the request pool."""
        self._pool.shutdown(wait=False)
        self._client.close()

