"""experiments/plan_memory.py as a script: bad layouts fail before compiling; a 1-layer 0.5B plan
writes its md/json/png (the planning itself is tested in tests/planning/test_memory_plan.py)."""
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_plan_memory_rejects_bad_layouts_before_compiling(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "experiments.plan_memory", "--layouts=fsdp8,fsdp4",
         f"--results_dir={tmp_path}"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode != 0 and "layout 'fsdp4' does not use exactly 8 devices" in out.stderr
    assert not (tmp_path / "plan_memory.json").exists()


@pytest.mark.slow
def test_plan_memory_small(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "experiments.plan_memory", "--preset=qwen2.5-coder-0.5b", "--layers=1",
         "--batch=8", "--seq=16", "--layouts=fsdp8,data2_fsdp4", f"--results_dir={tmp_path}"],
        cwd=ROOT, capture_output=True, text=True, timeout=1200)
    assert out.returncode == 0, out.stderr[-3000:]
    plan = json.loads((tmp_path / "plan_memory.json").read_text())
    assert [r["layout"] for r in plan["rows"]] == ["fsdp8", "data2_fsdp4"]
    assert plan["config"]["num_hidden_layers"] == 1 and (plan["batch"], plan["seq"]) == (8, 16)
    assert all(r["total"] == r["args"] + r["outputs"] + r["temps"] - r["alias"] > 0 for r in plan["rows"])
    assert (tmp_path / "plan_memory.md").read_text().count("| fsdp8 |") == 1
    assert (tmp_path / "plan_memory.png").stat().st_size > 0
