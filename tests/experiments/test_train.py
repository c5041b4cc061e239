"""experiments/train.py: --help lists every flag with help text; --validate_only accepts good
configs and rejects bad ones (clear error, nothing loaded or compiled); config overrides; every
bad input (problem files, model directory, weights, checkpoints, output directory, judge) is one
line on stderr with exit status 2 before a model is loaded, and nothing is written."""
import json
import os
import shutil
import subprocess
import sys

import pytest

from maxk_jax.data import Problem, StdioCase, StdioTests, save_problems
from tests.cpu_flags import xla_flags

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FLAGS = ("config", "method", "resume", "progress", "validate_only", "reward")


def train(*args, timeout=240):
    return subprocess.run([sys.executable, "-m", "experiments.train", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout,
                          env={**os.environ, "XLA_FLAGS": xla_flags(8)})


def test_help_lists_every_flag_with_help_text():
    out = train("--help")
    assert out.returncode == 0 and "Traceback" not in out.stderr, out.stderr
    lines = out.stdout.splitlines()
    for name in FLAGS:           # absl prints "  --name: help text" (help may continue on the next line)
        at = [i for i, line in enumerate(lines) if line.strip().startswith((f"--{name}:", f"--[no]{name}:"))]
        assert at, name
        text = lines[at[0]].split(":", 1)[1] + " " + lines[at[0] + 1]
        assert len(text.strip()) > 20, (name, text)


def test_validate_only_good_config_with_overrides():
    out = train("--config=experiments/configs/base.py:grpo", "--config.model.path=/m", "--config.output_dir=/o",
                "--config.algo.k=2", "--config.rollout.prompts=4", "--validate_only")
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["loss_kind"] == "clipped"
    assert report["config"]["algo"]["k"] == 2 and report["config"]["algo"]["estimator"] == "grpo"
    out = train("--config=experiments/configs/base.py:maxk_offpolicy", "--config.model.path=/m",
                "--config.output_dir=/o", "--validate_only")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["loss_kind"] == "clipped"           # the paper's pipeline, eq. 4
    out = train("--config=experiments/configs/base.py:maxk_offpolicy_is", "--config.model.path=/m",
                "--config.output_dir=/o", "--validate_only")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["loss_kind"] == "is_weighted"       # the §3.3 derivation's form
    out = train("--config=experiments/configs/base.py:nope", "--config.model.path=/m",
                "--config.output_dir=/o", "--validate_only")
    assert out.returncode == 2 and "method 'nope' is unknown" in out.stderr and len(out.stderr.splitlines()) == 1


def test_method_flag_picks_a_registry_method():
    """--method=<name> trains that method (the run named after it); the config's own method otherwise;
    the same one-line error as every entry point for an unknown name or a clashing --config override."""
    out = train("--method=grpo_lowlr", "--config.model.path=/m", "--config.output_dir=/o", "--validate_only")
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert (report["config"]["name"], report["config"]["algo"]["estimator"], report["loss_kind"]) == (
        "grpo_lowlr", "grpo", "clipped")
    assert report["config"]["optim"]["learning_rate"] == 2.5e-6     # half the config's 5e-6
    out = train("--config.model.path=/m", "--config.output_dir=/o", "--validate_only")
    config = json.loads(out.stdout)["config"]
    assert (config["name"], config["algo"]["estimator"]) == ("maxk_offpolicy_exact_loo1_rms", "maxk_offpolicy_exact")
    for args, message in ((["--method=nope"], "train: error: method 'nope' is unknown; valid methods: grpo, "),
                          (["--method=grpo", "--config.algo.loss.kind=is_weighted"],
                           "train: error: --method=grpo sets --config.algo.loss.kind too: give one")):
        out = train(*args, "--config.model.path=/m", "--config.output_dir=/o", "--validate_only")
        assert out.returncode == 2 and len(out.stderr.splitlines()) == 1, out.stderr
        assert out.stderr.startswith(message), out.stderr


def test_validate_only_typed_overrides():
    """Tuples, estimator options and chat are typed on the command line (no JSON / CSV strings)."""
    out = train("--config=experiments/configs/base.py:maxk_offpolicy", "--config.model.path=/m",
                "--config.output_dir=/o", "--config.eval.ks=(1,2,4)", "--config.rollout.eos_ids=(7,9)",
                "--config.data.chat=false", "--config.model.logprob_chunk=4096",
                "--config.algo.estimator_options=(('baseline','loo1'),('clamp_delta',None))", "--validate_only")
    assert out.returncode == 0, out.stderr
    c = json.loads(out.stdout)["config"]
    assert (c["eval"]["ks"], c["rollout"]["eos_ids"], c["data"]["chat"], c["model"]["logprob_chunk"]) == (
        [1, 2, 4], [7, 9], False, 4096)
    assert c["algo"]["estimator_options"] == [["baseline", "loo1"], ["clamp_delta", None]]
    out = train("--config=experiments/configs/base.py:grpo", "--config.model.path=/m", "--config.output_dir=/o",
                "--config.algo.estimator_options=(('clamp_delta',0.5),)", "--validate_only")
    assert out.returncode != 0 and "unknown option(s) ['clamp_delta']" in out.stderr


@pytest.mark.parametrize("args, message", [   # more cases in-process: tests/rl/test_loop.py
    (["--config.algo.k=9"], "k=9 must be an int with 1 <= k <= n=8"),
    (["--config.rollout.prompts=3", "--config.rollout.sampler.n=2", "--config.algo.k=2", "--config.mesh.fsdp=1",
      "--config.mesh.data=-1"], "not divisible across the data*fsdp=8"),
])
def test_bad_configs_are_rejected_with_a_clear_error(args, message):
    out = train("--config=experiments/configs/base.py", "--config.model.path=/m",
                "--config.output_dir=/o", *args)
    assert out.returncode == 2
    assert out.stderr.splitlines() == [f"train: error: {message}"] or (
        len(out.stderr.splitlines()) == 1 and message in out.stderr), out.stderr[-2000:]


@pytest.mark.parametrize("args, message", [
    (["--config=experiments/configs/base.py:grpo", "--config.algo.bogus=1"],
     "--config.algo.bogus: config.algo has no field 'bogus'; valid fields: "),
    (["--config.bogus=1"], "--config.bogus: config has no field 'bogus'; valid fields: algo, checkpoint, data"),
])
def test_unknown_config_field_names_it_and_the_valid_ones(args, message):
    """Without --config the default config is parsed (with the overrides) when the flag is
    defined, at import; with it, while absl parses the flags: both get the same clear message."""
    out = train(*args, "--validate_only")
    assert out.returncode == 2 and message in out.stderr, out.stderr[-2000:]
    assert len(out.stderr.splitlines()) == 1


# ------------------------------------------------------------------ checks before work -------

@pytest.fixture(scope="module")
def inputs(tmp_path_factory, tiny_ckpt):
    """A problem file, an empty one, a malformed one, an empty model dir, a model dir with a
    truncated safetensors file, and the tiny checkpoint."""
    d = tmp_path_factory.mktemp("train_inputs")
    save_problems([Problem(id=f"p/{i}", source="fixture", prompt=f"Print {i}.",
                           tests=StdioTests((StdioCase("", f"{i}\n"),))) for i in range(4)], d / "good.jsonl")
    (d / "empty.jsonl").write_text("")
    (d / "bad.jsonl").write_text('{"id": "x"}\n')
    (d / "empty_model").mkdir()
    shutil.copytree(tiny_ckpt, d / "corrupt_model")
    weights = d / "corrupt_model" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])
    return d


def _tiny_run(inputs, tiny_ckpt, out, *extra):
    return ("--config=experiments/configs/tiny_synthetic.py", f"--config.model.path={tiny_ckpt}",
            "--config.data.dataset=", f"--config.data.problems={inputs / 'good.jsonl'}", f"--config.output_dir={out}",
            "--config.rollout.prompts=2", "--config.rollout.sampler.n=4", "--config.algo.k=2", "--config.mesh.data=-1",
            "--config.log.tensorboard=false", "--config.max_steps=1", *extra)


@pytest.mark.parametrize("change, message", [
    ("--config.data.problems={d}/absent.jsonl", "problems file (data.problems) '{d}/absent.jsonl' does not exist"),
    ("--config.data.problems={d}/empty.jsonl", "problems file (data.problems) '{d}/empty.jsonl' is empty"),
    ("--config.data.problems={d}/bad.jsonl", "problems file (data.problems) '{d}/bad.jsonl' is not a Problem JSONL"),
    ("--config.model.path={d}/absent_model", "model directory '{d}/absent_model' does not exist"),
    ("--config.model.path={d}/empty_model", "model directory '{d}/empty_model' is empty"),
    ("--config.model.path={d}/corrupt_model", "corrupt safetensors file '{d}/corrupt_model/model.safetensors'"),
    ("--config.rollout.executor=http://127.0.0.1:1", "executor 'http://127.0.0.1:1' is unreachable"),
    ("--config.rollout.executor=htp://judge", "unknown executor spec 'htp://judge'"),
    ("--config.output_dir={d}/good.jsonl/run", "output directory (output_dir) '{d}/good.jsonl/run' cannot be created"),
])
def test_bad_inputs_fail_in_one_line_before_loading(inputs, tiny_ckpt, tmp_path, change, message):
    out_dir = tmp_path / "run"
    out = train(*_tiny_run(inputs, tiny_ckpt, out_dir), change.format(d=inputs), timeout=120)
    assert out.returncode == 2, out.stderr[-2000:]
    assert len(out.stderr.splitlines()) == 1 and message.format(d=inputs) in out.stderr, out.stderr[-2000:]
    assert not out_dir.exists()   # nothing written: no config.json, no checkpoints/


def test_existing_and_corrupt_checkpoints(inputs, tiny_ckpt, tmp_path):
    out_dir = tmp_path / "run"
    step = out_dir / "checkpoints" / "3"
    (step / "state").mkdir(parents=True)
    (step / "metadata").mkdir()
    (step / "state" / "_METADATA").write_bytes(b"\x00garbage")
    (step / "metadata" / "metadata").write_text("{}")
    out = train(*_tiny_run(inputs, tiny_ckpt, out_dir), timeout=120)
    assert out.returncode == 2 and len(out.stderr.splitlines()) == 1, out.stderr[-2000:]
    assert "already holds checkpoints (latest step 3); pass --resume" in out.stderr
    out = train(*_tiny_run(inputs, tiny_ckpt, out_dir), "--resume", timeout=120)
    assert out.returncode == 2 and len(out.stderr.splitlines()) == 1, out.stderr[-2000:]
    assert f"corrupt orbax checkpoint state metadata '{step}/state/_METADATA' is not valid JSON" in out.stderr
    assert sorted(os.listdir(out_dir)) == ["checkpoints"]


def test_resume_without_checkpoints_says_so(inputs, tiny_ckpt, tmp_path):
    out_dir = tmp_path / "run"
    (out_dir / "checkpoints").mkdir(parents=True)   # the directory of a run stopped before its first save
    out = train(*_tiny_run(inputs, tiny_ckpt, out_dir), "--resume", timeout=120)
    assert out.returncode == 2 and len(out.stderr.splitlines()) == 1, out.stderr[-2000:]
    assert out.stderr.startswith(f"train: error: --resume: '{out_dir}/checkpoints' holds no checkpoint to resume "
                                 "from; drop --resume to start the run"), out.stderr
    assert sorted(os.listdir(out_dir)) == ["checkpoints"]


@pytest.mark.slow
def test_one_step_console_is_quiet(inputs, tiny_ckpt, tmp_path):
    """A real (one-step) run: the console holds the start line, the metrics table and the path of
    the full metrics; no library INFO (orbax, jax platform probing) and no JSON record. --resume on
    its checkpoint with damaged array data: one line naming the checkpoint."""
    out = train(*_tiny_run(inputs, tiny_ckpt, tmp_path / "run"), "--noprogress", "--config.rollout.sampler.max_new_tokens=8",
                timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stderr == "", out.stderr[-3000:]
    lines = out.stdout.splitlines()
    assert lines[0].startswith("training 'tiny_synthetic' (method maxk_offpolicy_exact_loo1_rms) -> ")
    assert lines[-1].endswith("metrics.jsonl")
    assert "| reward/mean |" in out.stdout and len(lines) < 20 and "{" not in out.stdout
    for root, _, files in os.walk(tmp_path / "run" / "checkpoints" / "1" / "state" / "ocdbt.process_0"):
        for name in files:   # damage the array data (the metadata stays intact)
            path = os.path.join(root, name)
            with open(path, "r+b") as f:
                f.truncate(min(100, os.path.getsize(path)))
    out = train(*_tiny_run(inputs, tiny_ckpt, tmp_path / "run"), "--noprogress", "--config.rollout.sampler.max_new_tokens=8",
                "--config.max_steps=2", "--resume", timeout=600)
    assert out.returncode == 2 and len(out.stderr.splitlines()) == 1, out.stderr[-3000:]
    assert f"cannot resume from the orbax checkpoint {tmp_path / 'run' / 'checkpoints' / '1'} (corrupt" in out.stderr


# ------------------------------------------------------------------ --reward ------------------

def test_reward_sets_the_judge_to_the_function():
    out = train("--config=experiments/configs/base.py:grpo", "--config.model.path=/m", "--config.output_dir=/o",
                "--config.data.dataset=arithmetic", "--reward=maxk_jax.data.arithmetic:first_integer_reward",
                "--validate_only")
    assert out.returncode == 0, out.stderr
    config = json.loads(out.stdout)["config"]
    assert config["rollout"]["executor"] == "reward:maxk_jax.data.arithmetic:first_integer_reward"
    assert config["data"]["dataset"] == "arithmetic"


@pytest.mark.parametrize("value, message", [
    ("first_integer_reward", "--reward 'first_integer_reward' must be 'module:function'"),
    ("no_such_module_xyz:f", "--reward 'no_such_module_xyz:f': module 'no_such_module_xyz' cannot be imported"),
    ("maxk_jax.data.arithmetic:nope", "--reward 'maxk_jax.data.arithmetic:nope': 'maxk_jax.data.arithmetic' has "
                                      "no attribute 'nope'"),
    ("maxk_jax.data.arithmetic:first_integer_reward --config.rollout.executor=embedded:2",
     "--reward='maxk_jax.data.arithmetic:first_integer_reward' and --config.rollout.executor='embedded:2' both "
     "choose the judge; give one"),
])
def test_bad_reward_is_one_line_before_work(tmp_path, value, message):
    value, *more = value.split(" ")
    out = train("--config=experiments/configs/base.py:grpo", "--config.model.path=/m",
                f"--config.output_dir={tmp_path / 'run'}", f"--reward={value}", *more)
    assert out.returncode == 2 and len(out.stderr.splitlines()) == 1 and message in out.stderr, out.stderr[-2000:]
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_reward_trains_on_the_arithmetic_task_from_the_command_line(inputs, tiny_ckpt, tmp_path):
    out = train("--config=experiments/configs/tiny_synthetic.py", f"--config.model.path={tiny_ckpt}",
                "--config.data.dataset=arithmetic", "--config.data.prompt_format=statement",
                f"--config.output_dir={tmp_path / 'run'}", "--config.rollout.prompts=2", "--config.rollout.sampler.n=4",
                "--config.algo.k=2", "--config.mesh.data=-1", "--config.log.tensorboard=false", "--config.max_steps=1",
                "--config.eval.interval=0", "--config.rollout.sampler.max_new_tokens=8", "--noprogress",
                "--reward=maxk_jax.data.arithmetic:closeness_reward", timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    [record] = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert record["status/ok"] == 8 and record["samples/masked"] == 0 and 0.0 <= record["reward/mean"] <= 1.0
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    assert config["rollout"]["executor"] == "reward:maxk_jax.data.arithmetic:closeness_reward"


def test_wandb_project_without_wandb_is_one_line(inputs, tiny_ckpt, tmp_path):
    import importlib.util

    if importlib.util.find_spec("wandb") is not None:
        pytest.skip("wandb is installed")
    out = train(*_tiny_run(inputs, tiny_ckpt, tmp_path / "run"), "--config.log.wandb_project=maxk", timeout=120)
    assert out.returncode == 2 and len(out.stderr.splitlines()) == 1, out.stderr[-2000:]
    assert "log.wandb_project='maxk' needs the optional package wandb, which is not installed (pip install wandb)" \
        in out.stderr
    assert not (tmp_path / "run").exists()
