"""experiments/tiny_pipeline.py, the absl main of `maxk_jax.pipelines.tiny`: --help lists every
flag, an unknown --config field is named with the valid ones, and (slow) the real-checkpoint route
(--model_path + --dataset=mbpp) from the command line. The library is tested in tests/pipelines."""
import os
import pathlib
import re
import subprocess
import sys

import pytest

from experiments.configs import tiny as tiny_config
from tests.pipelines.fixtures import check_mbpp_run, mbpp_route  # noqa: F401

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_help_lists_every_flag():
    out = subprocess.run([sys.executable, "-m", "experiments.tiny_pipeline", "--helpshort"], cwd=ROOT,
                         capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr
    for name in ("config", "name", "runs_dir", "estimator", "k", "model_path", "dataset", "dataset_path",
                 "overwrite", "progress", "reward"):
        match = re.search(rf"--(\[no\])?{name}: (.+)", out.stdout)
        assert match and len(match.group(2)) > 20, name


def test_unknown_config_field_names_it_and_the_valid_ones():
    out = subprocess.run([sys.executable, "-m", "experiments.tiny_pipeline", "--config.rl.algo.kk=3"], cwd=ROOT,
                         capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 2 and len(out.stderr.splitlines()) == 1, out.stderr[-2000:]
    assert "--config.rl.algo.kk: config.rl.algo has no field 'kk'; valid fields: " in out.stderr
    assert "(did you mean 'k'?)" in out.stderr


@pytest.mark.slow
def test_real_checkpoint_and_mbpp_route_from_the_command_line(tmp_path, mbpp_route):  # noqa: F811
    data, ckpt = mbpp_route
    toy = tiny_config.get_config("smoke")
    overrides = {"rl.max_steps": toy.rl.max_steps, "rl.rollout.prompts": toy.rl.rollout.prompts,
                 "rl.rollout.sampler.n": toy.rl.rollout.sampler.n,
                 "rl.rollout.sampler.max_new_tokens": toy.rl.rollout.sampler.max_new_tokens,
                 "rl.algo.ppo_iterations": toy.rl.algo.ppo_iterations, "eval.sampler.n": toy.eval.sampler.n,
                 "eval.num_problems": toy.eval.num_problems, "eval.sampler.max_new_tokens": toy.eval.sampler.max_new_tokens,
                 "eval.batch_size": toy.eval.batch_size, "data.train_split": "train", "data.eval_split": "test"}
    cmd = [sys.executable, "-m", "experiments.tiny_pipeline", f"--model_path={ckpt}", "--dataset=mbpp",
           f"--dataset_path={data}", "--estimator=grpo", f"--k={toy.rl.algo.k}", "--name=cli_mbpp",
           f"--runs_dir={tmp_path / 'runs'}", "--noprogress"] + [f"--config.{k}={v}" for k, v in overrides.items()]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_DATASETS_CACHE": str(tmp_path / "hf_datasets_cache")}
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    run = tmp_path / "runs" / "cli_mbpp"
    assert f"Report: {run / 'report.md'}" in out.stdout
    check_mbpp_run(run, ckpt, toy.eval.sampler.n)


@pytest.mark.parametrize("args, message", [
    (["--model_path={d}/absent"], "model directory '{d}/absent' does not exist"),
    (["--runs_dir={d}/file/runs"], "runs directory (--runs_dir) '{d}/file/runs' cannot be created"),
    (["--name=exists"], "run directory '{d}/exists' exists; pass --resume to continue it, --overwrite to start over, "
                        "or another --name"),
    (["--name=exists", "--resume"], "--resume: '{d}/exists' holds no tiny pipeline run (no pipeline_config.json)"),
    (["--method=grpo", "--estimator=rloo"], "--method=grpo and --estimator=rloo both choose the RL method: give one"),
    (["--method=nope"], "method 'nope' is unknown; valid methods: grpo, "),
    (["--config.executor=http://127.0.0.1:1"], "executor 'http://127.0.0.1:1' is unreachable"),
    (["--reward=nope_mod_xyz:f"], "--reward 'nope_mod_xyz:f': module 'nope_mod_xyz' cannot be imported"),
    (["--reward=maxk_jax.data.arithmetic"], "--reward 'maxk_jax.data.arithmetic' must be 'module:function'"),
    (["--reward=maxk_jax.data.arithmetic:closeness_reward", "--config.executor=embedded:1"],
     "--reward='maxk_jax.data.arithmetic:closeness_reward' and --config.executor='embedded:1' both choose the judge"),
])
def test_bad_inputs_fail_in_one_line_before_any_phase(tmp_path, args, message):
    (tmp_path / "file").write_text("")
    (tmp_path / "exists").mkdir()
    out = subprocess.run([sys.executable, "-m", "experiments.tiny_pipeline", "--config=experiments/configs/tiny.py:smoke",
                          f"--runs_dir={tmp_path}", *(a.format(d=tmp_path) for a in args)], cwd=ROOT,
                         capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 2 and len(out.stderr.splitlines()) == 1, out.stderr[-2000:]
    assert out.stderr.startswith(f"tiny_pipeline: error: {message.format(d=tmp_path)}"), out.stderr
    assert sorted(os.listdir(tmp_path)) == ["exists", "file"] and out.stdout == ""
