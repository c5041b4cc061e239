"""experiments/compare_methods.py: aggregation and Wilcoxon pairing on hand-made results, flag
validation, and a toy-size run producing the table and the plot."""
import json
import os
import pathlib
import re
import subprocess
import sys

import numpy as np
import pytest

from experiments import compare_methods as cm
from experiments.configs import tiny as tiny_config
from maxk_jax.eval.result import EvalResult, ProblemResult


def _result(rewards: np.ndarray) -> EvalResult:
    """EvalResult of a reward matrix [P, n] (reward 1 = all tests passed, of 4 tests)."""
    probs = []
    for i, row in enumerate(rewards):
        passed = tuple(int(round(r * 4)) for r in row)
        probs.append(ProblemResult(index=i, problem_id=f"p{i}", rewards=tuple(float(r) for r in row),
                                   passed=passed, total=(4,) * len(row), statuses=("ok",) * len(row),
                                   verdict_counts={}))
    return EvalResult(tuple(probs), rewards.shape[1], (1, 2, 4))


def test_aggregate_means_stds_and_paired_tests():
    rng = np.random.default_rng(0)
    base = rng.choice([0.0, 0.25, 0.5, 1.0], size=(60, 4))  # > 50 pairs: scipy uses the fast normal approximation
    better = np.minimum(base + 0.25, 1.0)
    runs = {"grpo": {0: _result(base), 1: _result(base)},
            "maxk_offpolicy": {0: _result(better), 1: _result(np.minimum(better + 0.25, 1.0))}}
    agg = cm.aggregate(_result(base), runs, large_k=4)
    assert agg["ks"] == [1, 2, 4] and agg["num_problems"] == 60
    m = agg["methods"]
    # max@1 = mean reward; two seeds -> mean and population std over the two dataset means
    s0, s1 = better.mean(), np.minimum(better + 0.25, 1.0).mean()
    np.testing.assert_allclose(m["maxk_offpolicy"]["max_at_k"]["mean"][1], (s0 + s1) / 2, rtol=1e-6)
    np.testing.assert_allclose(m["maxk_offpolicy"]["max_at_k"]["std"][1], abs(s0 - s1) / 2, rtol=1e-5)
    assert m["grpo"]["max_at_k"]["std"][1] == 0.0 and m["base"]["max_at_k"]["std"] is None
    np.testing.assert_allclose(m["base"]["pass_at_k"]["mean"][1], (base == 1.0).mean(), rtol=1e-6)
    tests = agg["wilcoxon_vs_maxk_offpolicy"]
    assert set(tests) == {"base", "grpo"} and set(tests["grpo"]["max_at_k"]) == {1, 4}
    assert tests["grpo"]["max_at_k"][1]["mean_diff"] > 0 and tests["grpo"]["max_at_k"][1]["p_value"] < 0.01
    with pytest.raises(ValueError, match="large_k=3"):
        cm.aggregate(_result(base), runs, large_k=3)
    md = cm.results_markdown(agg, ["- setup line"])
    assert "| maxk_offpolicy (paper's method) |" in md and "max@4" in md and "- setup line" in md


def test_method_variants_and_training_stats(tmp_path):
    cfg = tiny_config.get_config()
    cm.apply_method(cfg, "maxk_offpolicy_is")
    assert (cfg.rl.algo.estimator, cfg.rl.algo.loss_kind) == ("maxk_offpolicy", "is_weighted")
    cm.apply_method(cfg, "maxk_offpolicy")
    assert (cfg.rl.algo.estimator, cfg.rl.algo.loss_kind) == ("maxk_offpolicy", "clipped")
    cm.apply_method(cfg, "bon_mean")
    assert (cfg.rl.algo.estimator, cfg.rl.algo.loss_kind, cfg.rl.algo.estimator_options_json) == (
        "bon_mean", "clipped", "{}")
    assert cm.validate_methods(list(cm.TABLE2_METHODS), tiny_config.get_config()) == list(cm.TABLE2_METHODS)
    cm.apply_method(cfg, "maxk_offpolicy_loo1_is")
    assert (cfg.rl.algo.loss_kind, json.loads(cfg.rl.algo.estimator_options_json)) == (
        "is_weighted", {"baseline": "loo1"})
    lr = cfg.rl.optim.learning_rate
    cm.apply_method(cfg, "grpo_lowlr")
    assert cfg.rl.algo.estimator == "grpo" and cfg.rl.optim.learning_rate == 1.5e-4 != lr
    rl = tmp_path / "rl"
    rl.mkdir()
    recs = [{"step": 1, "ppo/kl_ref": 0.01, "ppo/grad_norm": 0.5, "ppo/clip_fraction": 0.1,
             "ppo/is_delta_gt_1_fraction": 0.0},
            {"step": 2, "ppo/kl_ref": 0.04, "ppo/grad_norm": 1.5, "ppo/clip_fraction": 0.3,
             "ppo/is_delta_gt_1_fraction": 0.2}]
    (rl / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    st = cm.training_stats(str(rl))
    assert st == pytest.approx({"kl_ref_final": 0.04, "grad_norm_mean": 1.0, "clip_fraction_mean": 0.2,
                                "delta_gt_1_fraction_mean": 0.1})
    with pytest.raises(FileNotFoundError, match="no metrics.jsonl"):
        cm.training_stats(str(tmp_path))
    # aggregate + table + frontier plot with the stats
    rng = np.random.default_rng(1)
    base = rng.choice([0.0, 0.5, 1.0], size=(8, 4))
    runs = {m: {0: _result(base), 1: _result(np.minimum(base + 0.5, 1.0))} for m in ("grpo", "maxk_offpolicy")}
    stats = {m: {0: st, 1: {**st, "kl_ref_final": 0.08}} for m in runs}
    agg = cm.aggregate(_result(base), runs, large_k=4, train_stats=stats)
    assert agg["methods"]["grpo"]["train"]["kl_ref_final"]["mean"] == pytest.approx(0.06)
    assert "## Update size" in cm.results_markdown(agg, [])
    cm.plot_frontier(agg, str(tmp_path / "frontier.png"))
    assert (tmp_path / "frontier.png").stat().st_size > 1000


@pytest.mark.parametrize("methods,match", [
    (["grpo", "bon_mean"], "must include 'maxk_offpolicy'"),
    (["maxk_offpolicy"], "at least two"),
    (["maxk_offpolicy", "grpo", "grpo"], "distinct"),
    (["maxk_offpolicy", "nope"], "estimator='nope' is unknown"),
])
def test_method_validation(methods, match):
    with pytest.raises(ValueError, match=match):
        cm.validate_methods(methods, tiny_config.get_config())


@pytest.mark.parametrize("seeds,match", [(["a"], "not an int"), (["-1"], ">= 0"), (["0", "0"], "distinct"),
                                         ([], "non-empty")])
def test_seed_validation(seeds, match):
    with pytest.raises(ValueError, match=match):
        cm.parse_seeds(seeds)


def test_large_k_and_dataset_validation(tmp_path):
    cfg = tiny_config.get_config()
    cfg.runs_dir = str(tmp_path)
    with pytest.raises(ValueError, match="large_k=65"):
        cm.run_comparison(cfg, ["grpo", "maxk_offpolicy"], [0], name="x", large_k=65)
    cfg.data.dataset = "mbpp"
    with pytest.raises(ValueError, match="synthetic task"):
        cm.run_comparison(cfg, ["grpo", "maxk_offpolicy"], [0], name="x")


@pytest.mark.slow
def test_toy_comparison_writes_table_and_plot(tmp_path):
    cfg = tiny_config.get_toy_config()
    cfg.runs_dir = str(tmp_path)
    out = cm.run_comparison(cfg, ["grpo", "maxk_offpolicy"], [0, 1], name="cmp", large_k=4, progress=False)
    root = pathlib.Path(out["out_dir"])
    for rel in ("results.md", "results.json", "max_at_k.png", "frontier.png", "compare_config.json",
                "base/summary.json", "grpo/seed0/eval/summary.json", "maxk_offpolicy/seed1/rl/metrics.jsonl"):
        assert (root / rel).is_file(), rel
    table = (root / "results.md").read_text()
    assert "| grpo |" in table and "± " in table and "p max@4" in table
    assert "distinct programs judged for" in table    # synthetic task: the judge cache is on
    data = json.loads((root / "results.json").read_text())
    assert set(data["methods"]) == {"base", "grpo", "maxk_offpolicy"}
    assert set(data["methods"]["grpo"]["max_at_k"]["per_seed"]) == {"0", "1"}
    # repeating the command resumes: nothing is trained or evaluated again
    again = cm.run_comparison(cfg, ["grpo", "maxk_offpolicy"], [0, 1], name="cmp", large_k=4, progress=False)
    assert [k for k in again["timings"] if k.startswith(("rl", "eval"))] == []
    assert again["aggregate"]["methods"] == out["aggregate"]["methods"]
    cfg.rl.max_steps = 3
    with pytest.raises(ValueError, match="different settings"):
        cm.run_comparison(cfg, ["grpo", "maxk_offpolicy"], [0, 1], name="cmp", large_k=4, progress=False)


def test_help_lists_every_flag():
    root = pathlib.Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-m", "experiments.compare_methods", "--helpshort"], cwd=root,
                         capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(root)})
    assert out.returncode in (0, 1), out.stderr  # absl exits 1 after printing the help
    for name in ("config", "methods", "seeds", "name", "runs_dir", "large_k", "overwrite", "progress"):
        match = re.search(rf"--(\[no\])?{name}: (.+)", out.stdout)
        assert match and len(match.group(2)) > 20, name
