"""experiments/bench_async.py: the summary against s = 0, and end to end on the toy config."""
import json
import os
import subprocess
import sys

import pytest

from experiments import bench_async

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_summary_medians_and_speedup_against_synchronous():
    def run(step):
        return {"step_s": step, "wall_s": 10 * step, "wait_rollout_s": 0.1, "train_s": 1.0, "sample_s": 0.5,
                "judge_s": 0.2}

    rows = bench_async.summarise({0: [run(2.0), run(4.0), run(3.0)], 2: [run(1.0), run(2.0), run(1.5)]})
    assert [(r["s"], r["step_s"], r["speedup"]) for r in rows] == [(0, 3.0, 1.0), (2, 1.5, 2.0)]
    text = bench_async.markdown(rows, "header")
    assert "| 2 | 1.50 | 2.00x | 0.10 |" in text


@pytest.mark.slow
def test_bench_async_toy(tmp_path):
    res = subprocess.run([sys.executable, "-m", "experiments.bench_async", "--config=experiments/configs/tiny.py:smoke",
                          "--progress=false", "--staleness=0,1", "--steps=3", "--skip=1", "--rounds=1",
                          "--rollout_devices=4",   # 8 simulated devices (tests/conftest.py): 4 + 4 for s = 1
                          f"--config.runs_dir={tmp_path}", f"--results_dir={tmp_path / 'bench'}"],
                         cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads((tmp_path / "bench" / "bench_async.json").read_text())
    assert [r["s"] for r in out["rows"]] == [0, 1] and out["rows"][0]["speedup"] == 1.0
    assert (tmp_path / "bench" / "bench_async.png").is_file()
    metrics = [json.loads(line) for line in (tmp_path / "bench" / "run_s1" / "metrics.jsonl").read_text().splitlines()]
    assert [m["rollout/weight_version"] for m in metrics] == [0, 0, 1]
    devices = {s: json.loads((tmp_path / "bench" / f"run_s{s}" / "config.json").read_text())["rollout"]["devices"]
               for s in (0, 1)}
    assert devices == {0: 0, 1: 4} and out["rollout_devices"] == 4
    assert "s > 0 with 4 of 8 devices for the rollout" in (tmp_path / "bench" / "bench_async.md").read_text()


def test_staleness_without_the_baseline_is_refused(tmp_path):
    res = subprocess.run([sys.executable, "-m", "experiments.bench_async", "--config=experiments/configs/tiny.py:smoke",
                          "--staleness=1,2", f"--config.runs_dir={tmp_path}"], cwd=ROOT, capture_output=True,
                         text=True, timeout=300)
    assert res.returncode == 2 and "must hold 0" in res.stderr and not os.listdir(tmp_path), res.stderr[-2000:]
