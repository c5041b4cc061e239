"""maxk_jax.pipelines.compare: aggregation over seeds and Wilcoxon pairing on hand-made results,
training statistics from metrics.jsonl, the results table, settings checks, and (slow) a toy-size
comparison producing the table and the plots, resumed when repeated."""
import json
import pathlib

import numpy as np
import pytest

from maxk_jax.pipelines import default_config, smoke_config
from maxk_jax.pipelines import aggregate, results_markdown, run_comparison, training_stats
from maxk_jax.cli.fields import replace_fields
from tests.pipelines.fixtures import eval_result, method_table

METHODS = method_table()


def _max_at_k(rewards: list, k: int) -> float:
    """Unbiased max@k of one problem's n rewards (brute force over the k-subsets)."""
    import itertools

    return float(np.mean([max(c) for c in itertools.combinations(rewards, k)]))



def test_aggregate_means_stds_and_paired_tests():
    rng = np.random.default_rng(0)
    base = rng.choice([0.0, 0.25, 0.5, 1.0], size=(60, 8))  # > 50 pairs: scipy uses the fast normal approximation
    better = np.minimum(base + 0.25, 1.0)
    runs = {"grpo": {0: eval_result(base), 1: eval_result(base)},
            "maxk_offpolicy": {0: eval_result(better), 1: eval_result(np.minimum(better + 0.25, 1.0))}}
    agg = aggregate(eval_result(base), runs, large_k=4)
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
        aggregate(eval_result(base), runs, large_k=3)
    lo, hi = m["maxk_offpolicy"]["max_at_k"]["ci"][1]        # problems and seeds resampled
    assert lo < m["maxk_offpolicy"]["max_at_k"]["mean"][1] < hi and set(m["base"]["max_at_k"]["ci"]) == {1, 4}
    with pytest.raises(ValueError, match=r"large_k=4 is not one of the reported k values \[1, 2\]"):
        aggregate(eval_result(base[:, :4]), {}, large_k=4)      # n = 4: k <= 2 only
    md = results_markdown(agg, ["- setup line"])
    assert "| maxk_offpolicy (paper's method) |" in md and "max@4" in md and "- setup line" in md
    assert f"[{lo:.3f}, {hi:.3f}]" in md


def test_training_stats_and_their_aggregate(tmp_path):
    rl = tmp_path / "rl"
    rl.mkdir()
    recs = [{"step": 1, "ppo/kl_ref": 0.01, "ppo/grad_norm": 0.5, "ppo/update_norm": 0.02, "ppo/clip_fraction": 0.1,
             "ppo/is_delta_gt_1_fraction": 0.0},
            {"step": 2, "ppo/kl_ref": 0.04, "ppo/grad_norm": 1.5, "ppo/update_norm": 0.04, "ppo/clip_fraction": 0.3,
             "ppo/is_delta_gt_1_fraction": 0.2}]
    (rl / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    st = training_stats(str(rl))
    assert st == pytest.approx({"kl_ref_final": 0.04, "grad_norm_mean": 1.0, "update_norm_mean": 0.03,
                                "clip_fraction_mean": 0.2, "delta_gt_1_fraction_mean": 0.1})
    with pytest.raises(FileNotFoundError, match="no metrics.jsonl"):
        training_stats(str(tmp_path))
    # aggregate + table with the stats
    rng = np.random.default_rng(1)
    base = rng.choice([0.0, 0.5, 1.0], size=(8, 8))
    runs = {m: {0: eval_result(base), 1: eval_result(np.minimum(base + 0.5, 1.0))} for m in ("grpo", "maxk_offpolicy")}
    stats = {m: {0: st, 1: {**st, "kl_ref_final": 0.08}} for m in runs}
    agg = aggregate(eval_result(base), runs, large_k=4, train_stats=stats)
    assert agg["methods"]["grpo"]["train"]["kl_ref_final"]["mean"] == pytest.approx(0.06)
    assert "train" not in agg["methods"]["base"]
    assert "## Update size" in results_markdown(agg, [])


def test_large_k_and_dataset_validation(tmp_path):
    cfg = replace_fields(default_config(), {"runs_dir": str(tmp_path)})
    with pytest.raises(ValueError, match="large_k=65"):
        run_comparison(cfg, ["grpo", "maxk_offpolicy"], [0], name="x", large_k=65, method_table=METHODS)
    cfg = replace_fields(cfg, {"data.dataset": "mbpp", "model.path": "/ckpt"})
    with pytest.raises(ValueError, match="synthetic task"):
        run_comparison(cfg, ["grpo", "maxk_offpolicy"], [0], name="x", method_table=METHODS)


@pytest.mark.slow
def test_toy_comparison_writes_table_and_plot(tmp_path):
    cfg = smoke_config()   # + the in-loop evaluation of the final one's sampler and key after step 1
    cfg = replace_fields(cfg, {"runs_dir": str(tmp_path), "rl.eval.interval": 1, "rl.eval.dataset": "synthetic",
                               "rl.eval.limit": 1, "rl.eval.sampler": cfg.eval.sampler, "rl.eval.seed": cfg.eval.seed,
                               "rl.eval.batch_size": cfg.eval.batch_size})
    run = lambda: run_comparison(cfg, ["grpo", "maxk_offpolicy"], [0, 1], name="cmp", large_k=2,  # noqa: E731
                                 progress=False, method_table=METHODS)
    out = run()
    root = pathlib.Path(out["out_dir"])
    for rel in ("results.md", "results.json", "max_at_k.png", "frontier.png", "compare_config.json",
                "base/summary.json", "grpo/seed0/eval/summary.json", "maxk_offpolicy/seed1/rl/metrics.jsonl"):
        assert (root / rel).is_file(), rel
    table = (root / "results.md").read_text()
    assert "| grpo |" in table and "± " in table and "p max@2" in table
    assert "distinct programs judged for" in table    # synthetic task: the judge cache is on
    data = json.loads((root / "results.json").read_text())
    assert set(data["methods"]) == {"base", "grpo", "maxk_offpolicy"}
    assert set(data["methods"]["grpo"]["max_at_k"]["per_seed"]) == {"0", "1"}
    # the runs skip the in-loop evaluation after their last step: that point is the final evaluation's
    metrics = [json.loads(line) for line in (root / "grpo/seed1/rl/metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in metrics if "eval/max_at_k/2" in r] == [1]
    assert not (root / "grpo/seed1/rl/eval/step_2").exists() and (root / "grpo/seed1/rl/eval/step_1").is_dir()
    curve = data["curves"]["methods"]["grpo"]
    final = json.loads((root / "grpo/seed1/eval/per_problem.jsonl").read_text().splitlines()[0])
    assert curve["steps"] == [1, 2] and data["curves"]["base"] is not None
    assert curve["per_seed"]["1"]["2"][1] == pytest.approx(_max_at_k(final["rewards"], 2))
    # repeating the command resumes: nothing is trained or evaluated again
    again = run()
    assert [k for k in again["timings"] if k.startswith(("rl", "eval"))] == []
    assert again["aggregate"]["methods"] == out["aggregate"]["methods"]
    cfg = replace_fields(cfg, {"rl.max_steps": 3})
    with pytest.raises(ValueError, match="different settings"):
        run()


@pytest.mark.slow
def test_an_interrupted_run_continues_from_its_last_checkpoint(tmp_path):
    cfg = replace_fields(smoke_config(), {"runs_dir": str(tmp_path), "rl.checkpoint.interval": 1,
                                        "rl.checkpoint.keep": 2})
    run = lambda: run_comparison(cfg, ["grpo"], [0], name="cmp", large_k=2, progress=False,  # noqa: E731
                                 method_table=METHODS, reference="base")
    run()
    rl_dir = tmp_path / "cmp" / "grpo" / "seed0" / "rl"
    first_rewards = (rl_dir.parent / "eval" / "per_problem.jsonl").read_text()
    first_metrics = [json.loads(line) for line in (rl_dir / "metrics.jsonl").read_text().splitlines()]
    import shutil

    from maxk_jax.pipelines.compare import checkpoint_steps

    assert checkpoint_steps(str(rl_dir)) == [1, 2]
    shutil.rmtree(rl_dir / "checkpoints" / "2")     # as if killed after step 1's checkpoint
    shutil.rmtree(rl_dir.parent / "eval")
    from maxk_jax.pipelines.compare import saved_runs

    assert saved_runs(str(tmp_path / "cmp")) == (f"{tmp_path / 'cmp'}: 0 finished run(s), RL checkpoints of "
                                                 "grpo/seed0 (step 1); continue with the same command and --resume")
    again = run()
    assert [k for k in again["timings"] if k.startswith("rl")] == ["rl grpo seed 0 (resumed at step 1)"]
    assert (rl_dir.parent / "eval" / "per_problem.jsonl").read_text() == first_rewards
    metrics = [json.loads(line) for line in (rl_dir / "metrics.jsonl").read_text().splitlines()]
    untimed = lambda rows: [{k: v for k, v in r.items() if not k.startswith(("time/", "perf/"))}  # noqa: E731
                            for r in rows]
    assert untimed(metrics) == untimed(first_metrics)
    # with no checkpoint an interrupted run starts over, and the save interval is not a setting
    shutil.rmtree(rl_dir / "checkpoints")
    shutil.rmtree(rl_dir.parent / "eval")
    cfg = replace_fields(cfg, {"rl.checkpoint.interval": 1000, "rl.checkpoint.keep": 1})
    again = run()
    assert [k for k in again["timings"] if k.startswith("rl")] == ["rl grpo seed 0"]
    assert (rl_dir.parent / "eval" / "per_problem.jsonl").read_text() == first_rewards
    # aggregating the finished runs only: seed 1 never ran, nothing is trained or evaluated
    partial = lambda seeds: run_comparison(cfg, ["grpo"], seeds, name="cmp", large_k=2, progress=False,  # noqa: E731
                                           method_table=METHODS, reference="base", finished_only=True)
    out = partial([0, 1])
    assert [k for k in out["timings"] if k.startswith(("rl", "eval"))] == []
    assert not (tmp_path / "cmp" / "grpo" / "seed1").exists()
    data = json.loads((tmp_path / "cmp" / "results.json").read_text())
    assert data["unfinished"] == ["grpo seed 1"] and set(data["methods"]["grpo"]["max_at_k"]["per_seed"]) == {"0"}
    assert "not finished: grpo seed 1" in (tmp_path / "cmp" / "results.md").read_text()
    with pytest.raises(ValueError, match="no finished run of any method"):
        partial([1])
    shutil.rmtree(tmp_path / "cmp" / "base")
    with pytest.raises(ValueError, match="no base-model evaluation yet"):
        partial([0])


def test_checkpoint_steps_are_the_finished_saves(tmp_path):
    from maxk_jax.pipelines.compare import checkpoint_steps

    assert checkpoint_steps(str(tmp_path)) == []
    folder = tmp_path / "checkpoints"
    for name in ("16", "32", "48.orbax-checkpoint-tmp-7"):
        (folder / name).mkdir(parents=True)
    (folder / "64").write_text("not a folder")
    assert checkpoint_steps(str(tmp_path)) == [16, 32]


def test_settings_written_before_the_typed_options_still_resume():
    from maxk_jax.pipelines.compare import _upgraded, comparison_settings

    new = json.loads(json.dumps(comparison_settings(default_config(), ["grpo", "maxk_offpolicy"], [0], 64)["config"]))
    assert "logprob_chunk" not in new["warmup"] and new["data"]["options"] == []
    old = {**new, "data": {**{k: v for k, v in new["data"].items() if k != "options"}, "options_json": "{}"}}
    assert _upgraded(old) == new
    old["data"]["options_json"] = '{"seed": 1}'
    assert _upgraded(old) != new
    before = json.loads(json.dumps(new))     # written before rollout.reward / loss.ratio_level / kl_target
    del before["rl"]["rollout"]["reward"]    # and before asynchronous rollouts
    del before["rl"]["algo"]["loss"]["ratio_level"], before["rl"]["algo"]["loss"]["kl_target"]
    del before["rl"]["rollout"]["max_staleness"], before["rl"]["algo"]["stale_correction"], before["rl"]["algo"]["tis_cap"]
    del before["rl"]["eval"]["at_end"], before["rl"]["rollout"]["devices"]   # and before these two
    assert _upgraded(before) == new
    assert "checkpoint" not in new["rl"]     # when to save is not a setting (an interrupted run resumes)
    saved_with_checkpoints = {**new, "rl": {**new["rl"], "checkpoint": {"interval": 1000, "keep": 1}}}
    assert _upgraded(saved_with_checkpoints) == new


def test_the_base_model_as_the_reference_of_the_tests():
    rng = np.random.default_rng(2)
    base = rng.choice([0.0, 0.25, 0.5, 1.0], size=(60, 8))
    worse = np.maximum(base - 0.25, 0.0)
    agg = aggregate(eval_result(base), {"grpo": {0: eval_result(worse)}}, large_k=4, reference="base")
    tests = agg["wilcoxon_vs_base"]
    assert agg["reference"] == "base" and set(tests) == {"grpo"}
    assert tests["grpo"]["max_at_k"][1]["mean_diff"] > 0 and tests["grpo"]["max_at_k"][1]["p_value"] < 0.01
    assert "| base (reference of the tests) |" in results_markdown(agg, [])
    with pytest.raises(ValueError, match="reference='bon_mean' is neither 'base' nor one of the methods"):
        aggregate(eval_result(base), {"grpo": {0: eval_result(worse)}}, large_k=4, reference="bon_mean")


def test_eval_curves_from_the_periodic_evaluations(tmp_path):
    from maxk_jax.pipelines import testbed_config
    from maxk_jax.pipelines.compare import eval_curves

    cfg = testbed_config()   # in-loop evaluation = the final one's sampler and key: base at step 0
    dirs = {}
    for seed, shift in ((0, 0.0), (1, 0.1)):
        rl = tmp_path / f"seed{seed}"
        rl.mkdir()
        recs = [{"step": 1, "ppo/kl_ref": 0.0}, {"step": 48, "eval/max_at_k/1": 0.2 + shift, "eval/max_at_k/128": 0.7},
                {"step": 96, "eval/max_at_k/1": 0.3 + shift, "eval/max_at_k/128": 0.6 - shift}]
        (rl / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
        dirs[seed] = str(rl)
    import dataclasses

    row = np.repeat([0.0, 0.25, 0.5, 0.75], 64)        # mean reward 0.375, max@128 ~ 0.75
    base = dataclasses.replace(eval_result(np.tile(row, (40, 1))), ks=(1, 128))   # 40 problems x n = 256
    curves = eval_curves(cfg, base, {"grpo": dirs}, 128)
    g = curves["methods"]["grpo"]
    assert g["steps"] == [48, 96] and curves["num_problems"] == 32 and curves["ks"] == [1, 128]
    assert g["mean"][1] == pytest.approx([0.25, 0.35]) and g["std"][128] == pytest.approx([0.0, 0.05])
    assert curves["base"][1] == pytest.approx(0.375) and curves["base"][128] == pytest.approx(0.75)
    other = replace_fields(cfg, {"rl.eval.seed": 0})   # another key: no base point
    assert eval_curves(other, base, {"grpo": dirs}, 128)["base"] is None
    # runs with rl.eval.at_end=False: the last point is the final evaluation's first 32 problems
    short = {}
    for seed in (0, 1):
        rl = tmp_path / f"short{seed}"
        rl.mkdir()
        recs = [{"step": 48, "eval/max_at_k/1": 0.2, "eval/max_at_k/128": 0.7}, {"step": 96, "ppo/kl_ref": 0.1}]
        (rl / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
        short[seed] = str(rl)
    good = np.full((40, 256), 1.0)
    good[32:] = 0.0                                      # only the first 32 problems count
    finals = {"grpo": {0: dataclasses.replace(eval_result(good), ks=(1, 128)),
                       1: dataclasses.replace(eval_result(np.tile(row, (40, 1))), ks=(1, 128))}}
    g = eval_curves(cfg, base, {"grpo": short}, 128, finals)["methods"]["grpo"]
    assert g["steps"] == [48, 96]
    assert g["per_seed"]["0"][1] == pytest.approx([0.2, 1.0]) and g["per_seed"]["1"][128] == pytest.approx([0.7, 0.75])
    # a run that evaluated after its last step keeps its own point
    assert eval_curves(cfg, base, {"grpo": dirs}, 128, finals)["methods"]["grpo"]["mean"][1] == pytest.approx([0.25, 0.35])
    # another key: the final evaluation is not the in-loop one, so no last point from it
    assert eval_curves(other, base, {"grpo": short}, 128, finals)["methods"]["grpo"]["steps"] == [48]
    with pytest.raises(ValueError, match="no periodic evaluation with max@64"):
        eval_curves(cfg, base, {"grpo": dirs}, 64)
    from maxk_jax.pipelines import plot_eval_curves

    plot_eval_curves(curves, str(tmp_path / "curves.png"), "t")
    assert (tmp_path / "curves.png").stat().st_size > 0


def test_the_final_evaluation_extends_the_curves_only_when_it_samples_the_same_keys():
    from maxk_jax.pipelines import testbed_config
    from maxk_jax.pipelines.compare import final_eval_extends_curves

    cfg = testbed_config()
    assert final_eval_extends_curves(cfg)
    assert not final_eval_extends_curves(replace_fields(cfg, {"rl.eval.seed": 1}))
    assert not final_eval_extends_curves(replace_fields(cfg, {"rl.eval.sampler.temperature": 1.0}))
    assert not final_eval_extends_curves(replace_fields(cfg, {"eval.num_problems": 16}))   # 32 in the loop
    assert not final_eval_extends_curves(replace_fields(cfg, {"rl.eval.limit": 0, "eval.num_problems": 48}))
    assert not final_eval_extends_curves(replace_fields(cfg, {"rl.eval.interval": 0}))


def test_the_comparison_directory_and_its_setup_lines(tmp_path):
    from maxk_jax.pipelines.compare import setup_lines, start_out_dir

    out = tmp_path / "cmp"
    start_out_dir(str(out), {"methods": ["grpo"]}, overwrite=False)
    (out / "old.txt").write_text("x")
    start_out_dir(str(out), {"methods": ["grpo", "maxk"]}, overwrite=False)   # kept: a resume
    assert (out / "old.txt").is_file()
    start_out_dir(str(out), {"methods": ["maxk"]}, overwrite=True)            # emptied first
    assert sorted(p.name for p in out.iterdir()) == ["compare_config.json"]
    assert json.loads((out / "compare_config.json").read_text()) == {"methods": ["maxk"]}

    class Judge:
        stats = {"judged": 3, "submissions": 10}

    cfg = smoke_config()
    lines = setup_lines(cfg, [0, 1], base_record={"param_count": 12345}, model_path="/m", num_problems=4,
                        unfinished=["grpo seed 1"], judge=Judge())
    assert lines[0].startswith("- base: 12,345-parameter tiny Qwen2") and "(`/m`)" in lines[0]
    assert "seeds [0, 1] (finished runs only; not finished: grpo seed 1)" in lines[1]
    assert lines[2].startswith("- evaluation: 4 synthetic test problems")
    assert lines[3] == "- judge: 3 distinct programs judged for 10 submissions in this invocation"
    cfg = replace_fields(cfg, {"executor_cache": False})
    lines = setup_lines(cfg, [0], base_record={"param_count": 1}, model_path="/m", num_problems=4, unfinished=[],
                        judge=Judge())
    assert lines[3] == "- judge: every submission judged (executor_cache off)" and "not finished" not in lines[1]


def test_reference_validation():
    from maxk_jax.pipelines import validate_methods

    cfg = smoke_config()
    assert validate_methods(["grpo_binary"], cfg, METHODS, "base") == ["grpo_binary"]
    with pytest.raises(ValueError, match="--reference='maxk_offpolicy' must be one of --methods"):
        validate_methods(["grpo", "grpo_binary"], cfg, METHODS)
    with pytest.raises(ValueError, match="at least two distinct"):
        validate_methods(["grpo"], cfg, METHODS, "grpo")
