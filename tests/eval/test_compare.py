"""maxk_jax.eval.compare: paired Wilcoxon tests (all-zero differences, missing pairs), side-by-side
tables, problem-set checks, written files."""
import json

import numpy as np
import pytest
import scipy.stats

from maxk_jax.eval.compare import compare_runs, comparison_markdown, wilcoxon_test, write_comparison
from maxk_jax.eval.result import EvalResult, ProblemResult


def synthetic_run(seed, n=8, problems=30, skill=0.3, ids=None):
    """Problems with 4 tests; each sample passes Binomial(4, skill_p) tests."""
    rng = np.random.default_rng(seed)
    out = []
    for i, pid in enumerate(ids or [f"p{j}" for j in range(problems)]):
        p = np.clip(skill + rng.normal(0, 0.2), 0.0, 1.0)
        passed = rng.binomial(4, p, size=n).tolist()
        out.append(ProblemResult(index=i, problem_id=pid, rewards=tuple(x / 4 for x in passed), passed=tuple(passed),
                                 total=(4,) * n, statuses=("ok",) * n, verdict_counts={}))
    return EvalResult(tuple(out), n, (1, 2, 4, 8))


def test_wilcoxon_matches_scipy_and_handles_degenerate_cases():
    rng = np.random.default_rng(1)
    a, b = rng.random(40), rng.random(40) + 0.1
    got = wilcoxon_test(a, b)
    want = scipy.stats.wilcoxon(b, a)
    assert got["p_value"] == pytest.approx(want.pvalue) and got["n_pairs"] == 40
    assert got["mean_diff"] == pytest.approx(np.mean(b - a))
    same = wilcoxon_test(a, a.copy())
    assert same["p_value"] == 1.0 and same["note"] == "all differences zero" and same["n_nonzero"] == 0
    a2, b2 = a.copy(), b.copy()
    a2[:5] = np.nan
    assert wilcoxon_test(a2, b2)["n_pairs"] == 35
    empty = wilcoxon_test(np.full(3, np.nan), np.zeros(3))
    assert empty["p_value"] is None and empty["note"] == "no pairs"
    with pytest.raises(ValueError, match="equal 1-D"):
        wilcoxon_test(np.zeros(3), np.zeros(4))


def test_compare_runs_tables_and_pvalues(tmp_path):
    base, better, same = synthetic_run(0), synthetic_run(1, skill=0.6), synthetic_run(0)
    comp = compare_runs([base, better, same], ["base", "better", "same"])
    assert comp["ks"] == [1, 2, 4] and comp["num_problems"] == 30        # k <= n/2 of n = 8
    assert comp["means"]["better"]["max_at_k"][1] > comp["means"]["base"]["max_at_k"][1]
    assert comp["tests"]["better"]["max_at_k"][1]["p_value"] < 0.01
    assert all(t["p_value"] == 1.0 for t in comp["tests"]["same"]["pass_at_k"].values())
    per_b, per_a = better.per_problem()["max_at_k"][:, 0], base.per_problem()["max_at_k"][:, 0]
    assert comp["tests"]["better"]["max_at_k"][1]["p_value"] == pytest.approx(scipy.stats.wilcoxon(per_b, per_a).pvalue)
    md = comparison_markdown(comp)
    assert "| Method | pass@1 | pass@2 | pass@4 |" in md and "| Run vs base | k=1 | k=2 | k=4 |" in md
    assert "| same | 1.000* | 1.000* | 1.000* |" in md
    lo, hi = comp["means"]["better"]["max_at_k_ci"][1]
    assert lo < comp["means"]["better"]["max_at_k"][1] < hi and "bootstrap interval" in md
    paths = write_comparison(comp, tmp_path)
    assert json.loads(open(paths["json"]).read())["tests"]["better"]["max_at_k"]["1"]["n_pairs"] == 30
    assert open(paths["curves"], "rb").read(4) == b"\x89PNG"


def test_compare_runs_problem_sets_and_arguments():
    a = synthetic_run(0, ids=["x", "y", "z", "w"])
    b = synthetic_run(1, ids=["y", "z", "w", "v"])
    with pytest.raises(ValueError, match="different problems"):
        compare_runs([a, b], ["a", "b"])
    comp = compare_runs([a, b], ["a", "b"], intersect=True)
    assert comp["num_problems"] == 3 and comp["dropped"] == {"a": 1, "b": 1}
    assert comp["tests"]["b"]["pass_at_k"][1]["n_pairs"] == 3
    with pytest.raises(ValueError, match="at least two runs"):
        compare_runs([a], ["a"])
    with pytest.raises(ValueError, match="distinct"):
        compare_runs([a, a], ["a", "a"])
    with pytest.raises(ValueError, match="share no problem ids"):
        compare_runs([a, synthetic_run(2, ids=["q"])], ["a", "q"], intersect=True)
