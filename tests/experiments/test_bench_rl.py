"""experiments/bench_rl.py and maxk_jax.rl.bench: the --smoke run on CPU (the json's structure, the parts
adding up to each step), the reference-share judge, bad flags; the torch peer at tiny size (slow)."""
import json
import os
import subprocess
import sys

import pytest

from maxk_jax.rl import bench
from tests.cpu_flags import xla_flags

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
STEP_KEYS = {"weight_copy_s", "rollout_s", "judge_s", "logprob_s", "update_s", "other_s", "step_s",
             "generated_tokens", "trained_tokens", "reward_mean"}


def _run(tmp_path, *args, timeout=600):
    env = dict(os.environ, XLA_FLAGS=xla_flags(fast_compile=True))
    return subprocess.run([sys.executable, "-m", "experiments.bench_rl", "--smoke", *args,
                           f"--results_dir={tmp_path}"], cwd=ROOT, capture_output=True, text=True, timeout=timeout,
                          env=env)


def _check_result(r, steps=2):
    assert len(r["steps"]) == steps and len(r["warmup_steps"]) == 1
    for rec in r["steps"]:
        assert set(rec) == STEP_KEYS
        parts = sum(rec[p] for p in bench.PARTS)
        assert parts == pytest.approx(rec["step_s"], rel=0.10)          # the parts add up to the step
        assert rec["weight_copy_s"] >= 0 and all(rec[p] > 0 for p in bench.PARTS if p != "weight_copy_s")
        assert rec["other_s"] == pytest.approx(rec["step_s"] - parts)
        assert rec["trained_tokens"] > rec["generated_tokens"] > 0
    assert r["tokens_per_s_per_device"] > 0 and r["first_step_s"] > 0 and r["compile_s"] >= 0
    assert r["device"]["count"] >= 1 and r["judged_completions"] == 2 * 4 * 3
    assert (r["peak_device_memory_bytes"] is None) == bool(r["peak_device_memory_note"])


def test_smoke_writes_the_step_split(tmp_path):
    out = _run(tmp_path, "--reference_share=0.5")
    assert out.returncode == 0, out.stderr[-3000:]
    r = json.loads((tmp_path / "bench_rl.json").read_text())
    _check_result(r)
    assert r["reference_share"] == 0.5 and r["replaced_completions"] == 2 * 2 * 3   # 2 of n=4, 2 prompts, 3 steps
    assert r["peer"] is None and r["ratio_peer_over_ours"] is None
    md = (tmp_path / "bench_rl.md").read_text()
    assert "| median |" in md and "12 of 24 completions judged as the reference solution" in md
    # the RL step of the default method (not RunConfig()'s bare estimator)
    assert r["settings"]["method"] == "maxk_offpolicy_exact_loo1_rms" and r["run"]["estimator"] == "maxk_offpolicy_exact"
    assert "maxk_offpolicy_exact_loo1_rms (k = 2)" in md


def test_bad_flags_fail_in_one_line(tmp_path):
    for flag, text in (("--reference_share=1.5", "reference_share=1.5"), ("--judge_slots=-1", "judge_slots=-1")):
        out = _run(tmp_path, flag)
        assert out.returncode == 2 and text in out.stderr and len(out.stderr.strip().splitlines()) == 1, out.stderr


class _Recorder:
    def __init__(self):
        self.codes = {}

    def judge(self, subs):
        self.codes.update({s["id"]: s["code"] for s in subs})
        return [{"id": s["id"]} for s in subs]

    def close(self):
        pass


def test_reference_share_replaces_the_first_samples_of_each_problem():
    from maxk_jax.data import synthetic
    from maxk_jax.data.synthetic_solutions import canonical_solution
    problems = synthetic.make_split(synthetic.SyntheticConfig(seed=0, num_train=3, num_test=1))[0]
    inner = _Recorder()
    judge = bench.ReferenceShare(inner, problems, 0.25, n=8)
    subs = [p.to_submission(f"print({i})", f"{i}/{j}") for i, p in enumerate(problems) for j in range(8)]
    judge.judge(subs)
    assert judge.replaced == 3 * 2
    for i, p in enumerate(problems):
        for j in range(8):
            want = p.assemble_code(canonical_solution(p)) if j < 2 else p.assemble_code(f"print({i})")
            assert inner.codes[f"{i}/{j}"] == want
    none = bench.ReferenceShare(_Recorder(), problems, 0.0, n=8)
    none.judge(subs)
    assert none.replaced == 0


def test_settings_are_checked_before_work():
    with pytest.raises(ValueError, match="preset='gpt2'"):
        bench.BenchSettings(preset="gpt2")
    with pytest.raises(ValueError, match="n=1"):
        bench.BenchSettings(n=1)
    assert bench.run_config(bench.smoke_settings(), "/tmp/x").rollout.executor == f"embedded:{os.cpu_count()}"


@pytest.mark.slow
def test_smoke_with_the_torch_peer(tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    out = _run(tmp_path, "--peer=torch")
    assert out.returncode == 0, out.stderr[-3000:]
    r = json.loads((tmp_path / "bench_rl.json").read_text())
    _check_result(r)
    assert r["peer"]["model_s"] > 0 and r["ratio_peer_over_ours"] == pytest.approx(r["peer"]["model_s"] / r["model_s"])
    assert "PyTorch peer" in (tmp_path / "bench_rl.md").read_text()
