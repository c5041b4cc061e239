"""bench_service_load: flags checked before work, every answer checked against its known verdicts."""
import json
import os
import subprocess
import sys

import pytest

from experiments import bench_service_load as bench

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _result(sub_id: str, verdicts: list, reward, status: str = "ok") -> dict:
    return {"id": sub_id, "status": status, "reward": reward, "tests": [{"verdict": v} for v in verdicts]}


def test_every_answer_is_checked_against_its_program() -> None:
    kinds = {tuple(bench.request_body(0, r)[1]) for r in range(len(bench.PROGRAMS))}
    assert kinds == {("AC", "AC"), ("AC", "WA"), ("RE", "RE")}          # the rotation covers every program
    assert bench.check_result(_result("a", ["AC", "AC"], 1.0), ["AC", "AC"]) is None
    assert bench.check_result(_result("b", ["AC", "WA"], 0.5), ["AC", "WA"]) is None
    assert bench.check_result(_result("k", ["SE", "SE"], None, "sandbox_error"), ["AC", "AC"]) is None
    for result, verdicts in ((_result("c", ["AC", "WA"], 1.0), ["AC", "WA"]),      # a wrong reward
                             (_result("d", ["AC", "AC"], 1.0), ["AC", "WA"]),      # a wrong verdict
                             (_result("e", ["SE", "SE"], 0.0, "sandbox_error"), ["AC", "AC"]),   # SE must be None
                             (_result("f", ["RE", "RE"], 0.0, "invalid"), ["RE", "RE"])):
        problem = bench.check_result(result, verdicts)
        assert problem is not None and problem.startswith(result["id"] + ":") and "\n" not in problem


@pytest.mark.parametrize("flag, message", [("--clients=0", "--clients must be >= 1"),
                                           ("--requests=-1", "--requests must be >= 1"),
                                           ("--kill_every_s=inf", "--kill_every_s must be a finite number >= 0"),
                                           ("--slots=0", "--slots must be in [1, 127]")])
def test_bad_counts_are_one_line_exit_2(flag: str, message: str) -> None:
    proc = subprocess.run([sys.executable, "-m", "experiments.bench_service_load", flag], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1 and message in proc.stderr, proc.stderr


def test_small_run_answers_every_request_right(tmp_path) -> None:
    proc = subprocess.run([sys.executable, "-m", "experiments.bench_service_load", "--clients=2", "--requests=3",
                           "--slots=1", "--kill_every_s=0", "--modes=noauth", f"--results_dir={tmp_path}"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    row, = json.loads((tmp_path / "results.json").read_text())["rows"]
    assert (row["answered"], row["wrong"], row["lost"]) == (6, 0, 0), row
