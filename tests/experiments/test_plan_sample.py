"""experiments/plan_sample --target=h100 --cases: bad cases named in one line; (slow, with the CUDA plugin) the
RL batch sizes compiled for a deviceless H100 with their analytic floors."""
import os
import subprocess
import sys

import pytest


ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _plan(*args, timeout=1200):
    return subprocess.run([sys.executable, "-m", "experiments.plan_sample", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, "XLA_FLAGS": ""})


def test_bad_cases_fail_in_one_line(tmp_path):
    out = _plan("--target=h100", "--cases=16x32:512", f"--results_dir={tmp_path}/r")
    assert out.returncode == 2 and "'16x32:512'" in out.stderr and len(out.stderr.splitlines()) == 1
    assert not (tmp_path / "r").exists()


def test_default_cases_are_the_flags_case_then_the_rl_batch_sizes():
    from maxk_jax.benchmarks.decode import cases_or_default
    assert cases_or_default([], (16, 8, 512, 256)) == [(16, 8, 512, 256), (16, 32, 512, 256), (4, 256, 512, 256)]
    assert cases_or_default([], (16, 32, 512, 256)) == [(16, 32, 512, 256), (4, 256, 512, 256)]
    assert cases_or_default(["4x256:512/256"], (16, 8, 512, 256)) == [(4, 256, 512, 256)]


@pytest.mark.gpu_plugin
@pytest.mark.slow
def test_h100_plan_of_the_rl_batch_size(tmp_path):
    out = _plan("--target=h100", "--presets=qwen2.5-coder-1.5b", "--cases=16x32:512/256", "--decode_attention=pallas",
                f"--results_dir={tmp_path}")
    assert out.returncode == 0, out.stderr[-3000:]
    assert "16 prompts x n=32" in out.stdout and "matmul-bound" in out.stdout
