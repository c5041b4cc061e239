"""experiments/train.py: --help lists every flag with help text; --validate_only accepts good
configs and rejects bad ones (clear error, nothing loaded or compiled); config overrides."""
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FLAGS = ("config", "resume", "progress", "validate_only")


def train(*args, timeout=240):
    return subprocess.run([sys.executable, "-m", "experiments.train", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout,
                          env={**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=8"})


def test_help_lists_every_flag_with_help_text():
    out = train("--help")   # absl prints the help and exits with status 1
    assert "Traceback" not in out.stderr, out.stderr
    for name in FLAGS:
        assert f"--{name}" in out.stdout or f"--[no]{name}" in out.stdout, name
    from absl import flags

    import experiments.train  # noqa: F401  (defines the flags)
    for name in FLAGS:
        assert len(flags.FLAGS[name].help) > 20, name


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
    assert out.returncode != 0 and "unknown method 'nope'" in out.stderr


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
    (["--config.rollout.prompts=3", "--config.rollout.n=2", "--config.algo.k=2", "--config.mesh.fsdp=1",
      "--config.mesh.data=-1"], "not divisible across the data*fsdp=8"),
])
def test_bad_configs_are_rejected_with_a_clear_error(args, message):
    out = train("--config=experiments/configs/base.py", "--config.model.path=/m",
                "--config.output_dir=/o", *args)
    assert out.returncode != 0
    assert message in out.stderr, out.stderr[-2000:]
    assert "Traceback" in out.stderr and "ValueError" in out.stderr


@pytest.mark.parametrize("args, message", [
    (["--config=experiments/configs/base.py:grpo", "--config.algo.bogus=1"],
     "--config.algo.bogus: config.algo has no field 'bogus'; valid fields: "),
    (["--config.bogus=1"], "--config.bogus: config has no field 'bogus'; valid fields: algo, checkpoint, data"),
])
def test_unknown_config_field_names_it_and_the_valid_ones(args, message):
    """Without --config the default config is parsed (with the overrides) when the flag is
    defined, at import; with it, while absl parses the flags: both get the same clear message."""
    out = train(*args, "--validate_only")
    assert out.returncode == 1 and message in out.stderr, out.stderr[-2000:]
    assert "Traceback" not in out.stderr
