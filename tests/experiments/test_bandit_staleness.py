"""experiments/bandit_staleness.py: the exact max@k metric, the config checks and the --smoke run."""
import itertools
import json
import pathlib
import subprocess
import sys

import jax.numpy as jnp
import numpy as np
import pytest

from experiments import bandit_staleness as B

ROOT = pathlib.Path(__file__).resolve().parents[2]
CFG = dict(num_arms=10, k=4, n=8, prompts=4, lr=0.5, steps=6, seeds=2, seed=0, bandit_seed=0,
           staleness=[0, 1], report_steps=[2, 4])


def test_max_at_k_is_the_enumerated_expectation():
    rewards, logits = np.array([0.3, -1.2, 0.3, 2.0]), np.array([0.2, -0.5, 1.0, 0.1])   # a tie on purpose
    p = np.exp(logits) / np.exp(logits).sum()
    for k in (1, 3):
        want = sum(np.prod(p[list(t)]) * rewards[list(t)].max() for t in itertools.product(range(4), repeat=k))
        np.testing.assert_allclose(float(B.max_at_k(jnp.asarray(logits), jnp.asarray(rewards), k)), want, rtol=1e-5)


@pytest.mark.parametrize("change, message", [
    (dict(staleness=[1, 2]), r"--staleness=\[1, 2\] must start with 0"),
    (dict(prompts=1), "prompts >= 2"),
    (dict(k=9), "1 <= k <= n"),
    (dict(seeds=1), "seeds >= 2"),
    (dict(report_steps=[6]), r"--report_steps=\[6\] must be non-empty, each in \[1, steps=6\)"),
])
def test_bad_settings_fail_before_compiling(change, message):
    with pytest.raises(ValueError, match=message):
        B.check_config({**CFG, **change})


def test_smoke_run_writes_the_table_json_and_plot(tmp_path):
    """--smoke end to end (4 compiles, seconds): at s = 0 the three unbiased curves are the same run
    (μ = π_θ: no correction changes anything), every max@k is a max@k of the bandit's rewards, and
    staleness lowers the ESS fraction below 1."""
    proc = subprocess.run([sys.executable, "-m", "experiments.bandit_staleness", "--smoke", f"--out_dir={tmp_path}"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "| unbiased/behaviour | 1 |" in proc.stdout
    out = json.loads((tmp_path / "bandit_staleness.json").read_text())
    assert (tmp_path / "bandit_staleness.png").stat().st_size > 0
    summary = out["summary"]
    assert set(summary) == {f"{c}@s{s}" for c in B.CURVES for s in (0, 1)}
    sync = summary["unbiased/behaviour@s0"]["mean_curve"]
    assert summary["unbiased/none@s0"]["mean_curve"] == summary["unbiased/tis@s0"]["mean_curve"] == sync
    assert summary["unbiased/none@s1"]["mean_curve"] != sync
    rewards = np.asarray(B.bandit_rewards(out["config"]))
    for row in summary.values():
        assert len(row["mean_curve"]) == 6 and set(row["max_at_k"]) == {"2", "4", "6"}
        assert rewards.min() <= min(row["mean_curve"]) and max(row["mean_curve"]) <= rewards.max() + 1e-6
        assert (row["ess_early"] == pytest.approx(1.0)) == (row["s"] == 0)
        assert -1.0 <= row["cos_early"] <= 1.0
