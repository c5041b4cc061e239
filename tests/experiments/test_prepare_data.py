"""experiments.prepare_data: absl entry point caches problems + report (+ plot) from an upstream-schema file."""
import json
import os
import subprocess
import sys

from maxk_jax.data import load_problems

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _run(*args):
    return subprocess.run([sys.executable, "-m", "experiments.prepare_data", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=300, env={**os.environ, "PYTHONPATH": ROOT})


def test_prepare_mbpp_cache_report_and_plot(tmp_path):
    rows = [{"task_id": 1, "text": "Add.", "code": "def add(a, b): return a + b",
             "test_list": ["assert add(1, 2) == 3"], "test_setup_code": "", "challenge_test_list": []},
            {"task_id": 2, "text": "Close.", "code": "", "test_list": ["assert isclose(f(1), 2)"],
             "test_setup_code": "", "challenge_test_list": []}]
    src = tmp_path / "mbpp.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "cache" / "mbpp.jsonl.gz"
    res = _run("--dataset=mbpp", f"--path={src}", f"--out={out}", f"--plot={tmp_path / 'mbpp.png'}",
               '--options={"mode": "function"}')
    assert res.returncode == 0, res.stderr
    assert "skipped unconvertible_assert: 1" in res.stdout
    (p,) = load_problems(out)
    assert p.id == "mbpp/1" and p.mode == "function"
    report = json.loads((tmp_path / "cache" / "mbpp.jsonl.gz.report.json").read_text())
    assert report["skipped"] == {"unconvertible_assert": 1} and report["n_rows"] == 2
    assert (tmp_path / "mbpp.png").stat().st_size > 0


def test_unwritable_output_fails_in_one_line_before_loading(tmp_path):
    (tmp_path / "file").write_text("")
    res = _run("--dataset=mbpp", f"--path={tmp_path / 'absent.jsonl'}", f"--out={tmp_path / 'file' / 'x.jsonl'}")
    assert res.returncode == 2 and res.stderr.splitlines() == [
        f"prepare_data: error: directory of --out '{tmp_path / 'file'}' cannot be created: '{tmp_path / 'file'}' "
        "is not a directory"], res.stderr
