"""experiments.compare: two synthetic result directories -> side-by-side table, p-values, PNG."""
import json
import os
import subprocess
import sys

import numpy as np

from maxk_jax.eval.report import write_report
from maxk_jax.eval.result import EvalResult, ProblemResult

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _run(*args):
    return subprocess.run([sys.executable, "-m", "experiments.compare", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=300, env={**os.environ, "PYTHONPATH": ROOT})


def synthetic(seed, skill, n=8, problems=25):
    rng = np.random.default_rng(seed)
    out = []
    for i in range(problems):
        passed = rng.binomial(5, np.clip(skill + rng.normal(0, 0.15), 0, 1), size=n).tolist()
        out.append(ProblemResult(index=i, problem_id=f"p{i}", rewards=tuple(x / 5 for x in passed),
                                 passed=tuple(passed), total=(5,) * n, statuses=("ok",) * n, verdict_counts={}))
    return EvalResult(tuple(out), n, (1, 2, 4, 8), {"seed": seed})


def test_compare_two_runs(tmp_path):
    write_report(synthetic(0, 0.3), tmp_path / "base", name="base")
    write_report(synthetic(1, 0.5), tmp_path / "tuned", name="tuned")
    res = _run(f"--runs={tmp_path / 'base'},{tmp_path / 'tuned'}", f"--out_dir={tmp_path / 'cmp'}", "--title=t")
    assert res.returncode == 0, res.stderr[-3000:]
    md = (tmp_path / "cmp" / "comparison.md").read_text()
    assert md == res.stdout.rstrip("\n") + "\n" or md.strip() in res.stdout
    assert "| Method | pass@1 | pass@2 | pass@4 |\n" in md and "| Method | max@1 |" in md   # k <= n/2
    assert "| base | " in md and "| tuned | " in md and "| Run vs base | k=1 | k=2 | k=4 |\n" in md
    comp = json.loads((tmp_path / "cmp" / "comparison.json").read_text())
    assert comp["names"] == ["base", "tuned"] and comp["num_problems"] == 25
    test = comp["tests"]["tuned"]["max_at_k"]["1"]
    assert test["n_pairs"] == 25 and 0 <= test["p_value"] < 0.05 and test["mean_diff"] > 0
    assert (tmp_path / "cmp" / "comparison.png").read_bytes()[:4] == b"\x89PNG"


def test_compare_rejects_a_single_run(tmp_path):
    write_report(synthetic(0, 0.3), tmp_path / "base", name="base")
    res = _run(f"--runs={tmp_path / 'base'}", f"--out_dir={tmp_path / 'cmp'}")
    assert res.returncode == 2 and "at least two result directories" in res.stderr
    assert len(res.stderr.splitlines()) == 1 and res.stdout == ""   # no help text
    res = _run(f"--runs={tmp_path / 'base'},{tmp_path / 'absent'}", f"--out_dir={tmp_path / 'cmp'}")
    assert res.returncode == 2 and res.stderr.splitlines() == [
        f"compare: error: --runs entry '{tmp_path / 'absent'}' is not a finished evaluation directory (no summary.json)"]
    assert not (tmp_path / "cmp").exists()
