"""maxk_jax.pipelines.tiny: toy-size end-to-end runs of the laptop pipeline (synthetic route with
the base-model cache; the --model_path + --dataset=mbpp route in process), and the report text."""
import json
import pathlib
import shutil

import numpy as np
import pytest

from maxk_jax.pipelines import default_config
from maxk_jax.pipelines import smoke_config as pipeline_smoke_config
from maxk_jax.eval import compare_runs
from maxk_jax.pipelines import apply_overrides, prepare_base, prepare_data, report_markdown, run_pipeline
from maxk_jax.pipelines.phases import cpu_model
from maxk_jax.pipelines.tiny import check_run_dir, resume_note
from maxk_jax.cli.fields import replace_fields
from tests.pipelines.fixtures import (TEST_FUNCS, TRAIN_FUNCS, check_mbpp_run, eval_result,  # noqa: F401
                                     mbpp_route)


def smoke_config(runs_dir: str):
    return replace_fields(pipeline_smoke_config(), {"runs_dir": runs_dir})


def test_toy_pipeline_writes_the_report(tmp_path):
    cfg = replace_fields(smoke_config(str(tmp_path)), {"rl.checkpoint.interval": 1, "rl.checkpoint.keep": 2})
    out = run_pipeline(cfg, progress=False)
    run = pathlib.Path(out["run_dir"])
    for rel in ("report.md", "curves.png", "comparison.json", "comparison.md", "timings.json",
                "pipeline_config.json", "base/table.md", "base/per_problem.jsonl", "trained/table.md",
                "trained/summary.json", "rl/metrics.jsonl"):
        assert (run / rel).is_file(), rel
    report = (run / "report.md").read_text()
    for text in ("maxk_offpolicy", "| rl |", "| eval base |", "| eval trained |", "pass@1", "max@2",
                 "Wilcoxon"):
        assert text in report, text
    comparison = json.loads((run / "comparison.json").read_text())
    assert comparison["ks"] == [1, 2] and comparison["num_problems"] == 2
    assert set(comparison["means"]) == {"base", "maxk_offpolicy_exact_loo1_rms"}   # the default method, by name
    metrics = [json.loads(line) for line in (run / "rl/metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [1, 2]
    timings = json.loads((run / "timings.json").read_text())
    assert timings["judge"]["judged"] <= timings["judge"]["submissions"]
    # the warmed-up base model is cached: the next run with the same settings reuses it
    cache = [p for p in (tmp_path / "_cache").iterdir() if p.name.startswith("base-")]
    assert len(cache) == 1 and (cache[0] / "config.json").is_file() and (cache[0] / "warmup_loss.png").is_file()
    train_path, train, _ = prepare_data(cfg, str(tmp_path / "_cache"))
    path, record, cached = prepare_base(cfg, train, str(tmp_path / "_cache"))
    assert cached and path == str(cache[0]) and len(record["losses"]) == 4
    assert record["cpu"] == cpu_model() and record["cpu"]   # the warm-up is reproducible per CPU model
    # an existing run directory is refused without overwrite or resume
    with pytest.raises(ValueError, match="exists; pass --resume to continue it, --overwrite to start over"):
        run_pipeline(cfg, progress=False)
    check_resume(cfg, run)


def _rewards(run: pathlib.Path, which: str) -> list:
    return [json.loads(line)["rewards"] for line in (run / which / "per_problem.jsonl").read_text().splitlines()]


def check_resume(cfg, run: pathlib.Path) -> None:
    """A run interrupted after its step-1 checkpoint and the base evaluation resumes: the RL run from
    step 1 (metrics and the trained model's evaluation as uninterrupted), the base evaluation read back;
    a finished run resumes to the same report; other settings and a missing run are refused."""
    trained = _rewards(run, "trained")
    shutil.rmtree(run / "rl" / "checkpoints" / "2")
    shutil.rmtree(run / "trained")
    (run / "report.md").unlink()
    assert "step 1 of 2, the base model's evaluation; continue with the same command and --resume" in resume_note(cfg)
    out = run_pipeline(cfg, resume=True, progress=False)
    assert list(out["timings"]) == ["data", "base (tokenizer + model + warm-up)", "rl (resumed at step 1)",
                                    "eval trained"]
    assert _rewards(run, "trained") == trained
    assert [json.loads(line)["step"] for line in (run / "rl/metrics.jsonl").read_text().splitlines()] == [1, 2]
    assert "| rl (resumed at step 1) |" in (run / "report.md").read_text()
    out = run_pipeline(cfg, resume=True, progress=False)          # finished: nothing is trained or evaluated again
    assert list(out["timings"]) == ["data", "base (tokenizer + model + warm-up)"]
    assert _rewards(run, "trained") == trained and (run / "report.md").is_file()
    with pytest.raises(ValueError, match=r"was made with other settings \(sections seed differ\)"):
        run_pipeline(replace_fields(cfg, {"seed": 1}), resume=True, progress=False)
    with pytest.raises(ValueError, match="holds no tiny pipeline run"):
        run_pipeline(replace_fields(cfg, {"name": "other"}), resume=True, progress=False)
    with pytest.raises(ValueError, match="--overwrite deletes the run that --resume would continue"):
        check_run_dir(cfg, overwrite=True, resume=True)



def test_report_markdown_lists_setup_phases_and_tables():
    rng = np.random.default_rng(0)
    base = rng.choice([0.0, 0.5, 1.0], size=(3, 4))
    comparison = compare_runs([eval_result(base), eval_result(np.minimum(base + 0.5, 1.0))], ["base", "trained (x)"])
    cfg = default_config()
    timings = {"data": {"wall_s": 1.0, "cpu_s": 0.5}, "rl": {"wall_s": 2.5, "cpu_s": 4.0}}
    md = report_markdown(cfg, comparison, timings, {"description": "tiny model X"}, {"reward/mean": 0.25},
                         {"start": [1.0], "end": [2.0]})
    assert md.startswith("# Tiny pipeline run `tiny`")
    for text in ("- model: tiny model X", "method `maxk_offpolicy_exact_loo1_rms` (estimator `maxk_offpolicy_exact`, baseline=loo1, scale=loo_rms, "
                 "is_weighted loss, k = 4)", "reward mean 0.250",
                 "3 test problems, n = 64", "| data | 1.0 | 0.5 |", "| total | 3.5 | 4.5 |",
                 "each distinct (program, tests) judged once", "## Base vs trained:", "max@2"):
        assert text in md, text
    assert "# Comparison:" not in md
    cfg = replace_fields(cfg, {"executor_cache": False})
    assert "every submission judged" in report_markdown(cfg, comparison, timings, {}, {}, {"start": [], "end": []})


class _RecordingExecutor:
    """The embedded judge, recording the entry point of every submission it judges."""

    def __init__(self):
        from maxk_jax.execution import make_executor

        self.inner, self.entry_points = make_executor("embedded:2"), []

    def judge(self, subs):
        self.entry_points += [s["tests"]["entry_point"] for s in subs]
        return self.inner.judge(subs)

    def close(self):
        self.inner.close()


@pytest.fixture
def hf_datasets_cache(tmp_path, monkeypatch):
    """Keep the `datasets` cache of the fixture files out of the user's HF cache."""
    import datasets

    cache = str(tmp_path / "hf_datasets_cache")
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", cache)
    return cache


def test_real_checkpoint_and_mbpp_route(tmp_path, mbpp_route, hf_datasets_cache):  # noqa: F811
    data, ckpt = mbpp_route
    cfg = apply_overrides(smoke_config(str(tmp_path / "runs")), name="toy_mbpp", model_path=ckpt, dataset="mbpp",
                          dataset_path=data, estimator="grpo")
    cfg = replace_fields(cfg, {"data.train_split": "train", "data.eval_split": "test"})
    judge = _RecordingExecutor()
    try:
        out = run_pipeline(cfg, progress=False, executor=judge)
    finally:
        judge.close()
    check_mbpp_run(pathlib.Path(out["run_dir"]), ckpt, cfg.eval.sampler.n)
    assert not (tmp_path / "runs" / "_cache").exists()  # no synthetic data, no tiny base model built
    # RL sampled the train split (2 steps x 2 problems of 3), evaluation the first two test problems
    rl_funcs, eval_funcs = set(judge.entry_points) & TRAIN_FUNCS, set(judge.entry_points) - TRAIN_FUNCS
    assert len(rl_funcs) >= 2 and eval_funcs == set(TEST_FUNCS[:2])


@pytest.mark.slow   # ~65 CPU-s: the toy config's warm-up
def test_the_toy_config_learns_something(tmp_path):
    """The first run a user makes (tiny.py:toy) shows the method doing something: the warmed-up model
    writes some working programs (max@k > 0), the trained one too, labelled by its method's name."""
    from maxk_jax.pipelines import toy_config

    out = run_pipeline(replace_fields(toy_config(), {"runs_dir": str(tmp_path)}), progress=False)
    means = out["comparison"]["means"]
    assert set(means) == {"base", "maxk_offpolicy_exact_loo1_rms"}
    for name in means:
        assert max(v for v in means[name]["max_at_k"].values() if v is not None) > 0, (name, means[name])
