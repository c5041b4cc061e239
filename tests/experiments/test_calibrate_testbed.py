"""experiments/calibrate_testbed.py end to end on the toy config: one point (cached split and base,
base-only evaluation, headroom at k), its JSONL row, the markdown table, and a bad --k refused
before any work."""
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _run(*args):
    return subprocess.run([sys.executable, "-m", "experiments.calibrate_testbed",
                           "--config=experiments/configs/tiny.py:smoke", "--progress=false", *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)


@pytest.mark.slow   # 28 s: the toy warm-up + an n = 8 evaluation in a subprocess
def test_one_point_row_and_table(tmp_path):
    table = tmp_path / "cal.jsonl"
    res = _run("--point=toy", "--k=2", f"--config.runs_dir={tmp_path}", f"--table={table}",
               "--config.synthetic.max_ops=2")
    assert res.returncode == 0, res.stderr[-3000:]
    (row,) = [json.loads(line) for line in table.read_text().splitlines()]
    assert (row["point"], row["k"], row["n"], row["num_problems"]) == ("toy", 2, 4, 2)
    # what the point changed against the main job's config (the toy's own changes included)
    assert row["changed"]["synthetic.max_ops"] == 2 and row["changed"]["eval.sampler.n"] == 4
    assert 0.0 <= row["pass_at_k"] <= row["max_at_k"] <= 1.0 and 0.0 <= row["undecided_share"] <= 1.0
    assert row["base_cpu"]   # the CPU the base was built on (the warm-up is reproducible per CPU model)
    assert os.path.isfile(os.path.join(str(tmp_path), "calibration", "toy", "summary.json"))
    printed = _run("--print_table", f"--table={table}", f"--config.runs_dir={tmp_path}")
    assert printed.returncode == 0 and "| toy | " in printed.stdout and "undecided at k=2" in printed.stdout


def test_k_above_half_of_n_is_refused_before_work(tmp_path):
    res = _run("--k=3", f"--config.runs_dir={tmp_path}")
    assert res.returncode == 2 and "--k=3 needs eval.sampler.n >= 2k" in res.stderr, res.stderr[-2000:]
    assert len(res.stderr.strip().splitlines()) == 1 and not os.listdir(tmp_path)
