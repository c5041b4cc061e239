"""Submissions with known verdicts and a stand-in SandboxFusion service, shared by the backend tests.

    from tests.execution.judge_fixtures import SUBS, WANT, fake_sandboxfusion, verdicts
"""
import subprocess
import sys

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

SUBS = [
    {"id": "s", "code": "print(sum(map(int, input().split())))", "mode": "stdio",
     "tests": [{"stdin": "1 2", "expected": "3"}, {"stdin": "2 2", "expected": "5"}]},
    {"id": "f", "code": "def add(a, b):\n    return a + b", "mode": "function",
     "tests": {"entry_point": "add", "cases": [{"args": [1, 2], "expected": 3}, {"args": [0.1, 0.2], "expected": 0.3}]}},
    {"id": "a", "code": "def add(a, b):\n    return a - b", "mode": "assert", "tests": {"code": "assert add(1, 2) == 3"}},
]
WANT = [["AC", "WA"], ["AC", "AC"], ["WA"]]


def verdicts(results: list) -> list:
    """Each result's per-test verdicts: [S][T_s] strings."""
    return [[t["verdict"] for t in r["tests"]] for r in results]


def fake_sandboxfusion(fail: bool = False) -> FastAPI:
    """A stand-in for SandboxFusion's /run_code (runs the code with this Python; test code is trusted)."""
    fake = FastAPI()

    @fake.post("/run_code")
    async def run_code(request: Request) -> JSONResponse:
        body = await request.json()
        if fail:
            return JSONResponse({"status": "SandboxError", "message": "pod lost", "run_result": None})
        assert body["language"] == "python" and "expected" not in str(body.keys())
        try:
            proc = subprocess.run([sys.executable, "-c", body["code"]], input=body["stdin"], capture_output=True,
                                  text=True, timeout=body["run_timeout"])
            run = {"status": "Finished", "execution_time": 0.01, "return_code": proc.returncode,
                   "stdout": proc.stdout, "stderr": proc.stderr}
        except subprocess.TimeoutExpired:
            run = {"status": "TimeLimitExceeded", "execution_time": body["run_timeout"], "return_code": None,
                   "stdout": "", "stderr": ""}
        status = "Success" if run["return_code"] == 0 else "Failed"
        return JSONResponse({"status": status, "message": "", "compile_result": None, "run_result": run})

    return fake
