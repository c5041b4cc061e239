"""maxk_jax.planning.sample_plan: HLO collective accounting (nested loops counted by trip count) and the
decode plans: decoding from the trainer's fsdp weights all-gathers them at every token, the
rollout copy moves (almost) no bytes; experiments/plan_sample end to end."""
import os
import subprocess
import sys

import pytest

from maxk_jax.planning import hlo, memory_plan
from maxk_jax.planning import sample_plan as sp
from maxk_jax.models import qwen2

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

HLO = """HloModule jit_decode_loop

%inner_body (p: (s32[], f32[4,8])) -> (s32[], f32[4,8]) {
  %p = (s32[], f32[4,8]{1,0}) parameter(0)
  %all-reduce.1 = f32[4,8]{1,0} all-reduce(%x), channel_id=1, replica_groups={{0,1}}, to_apply=%add
  ROOT %t = (s32[], f32[4,8]{1,0}) tuple(%a, %all-reduce.1)
}

%inner_cond (p: (s32[], f32[4,8])) -> pred[] {
  ROOT %c = pred[] compare(%a, %b), direction=LT
}

%outer_body (p: (s32[], /*index=1*/f32[4,8])) -> (s32[], f32[4,8]) {
  %w = (s32[], f32[4,8]{1,0}) while(%t0), condition=%inner_cond, body=%inner_body, backend_config={"known_trip_count":{"n":"3"}}
  %all-gather.2 = bf16[16,8]{1,0} all-gather(%y), channel_id=2, dimensions={0}
  %fusion.3 = f32[4]{0} fusion(%z), kind=kLoop, calls=%fused
  ROOT %t = (s32[], f32[4,8]{1,0}) tuple(%a, %b)
}

%fused (q: f32[4]) -> f32[4] {
  %all-to-all.4 = (f32[2]{0}, f32[2]{0}) all-to-all(%q0, %q1), channel_id=3
  ROOT %r = f32[4]{0} add(%q, %q)
}

%outer_cond (p: (s32[], f32[4,8])) -> pred[] {
  %all-reduce.5 = pred[] all-reduce(%d), channel_id=4, to_apply=%and
  ROOT %c = pred[] compare(%a, %b), direction=LT
}

ENTRY %main (a: f32[4,8]) -> f32[4,8] {
  %all-gather.9 = f32[64,8]{1,0} all-gather(%a), channel_id=9, dimensions={0}
  %loop = (s32[], f32[4,8]{1,0}) while(%t), condition=%outer_cond, body=%outer_body
  ROOT %r = f32[4,8]{1,0} get-tuple-element(%loop), index=1
}
"""


def test_shape_bytes_and_the_cpu_weight_copies():
    assert hlo.shape_bytes("f32[2,3]{1,0}") == 24
    assert hlo.shape_bytes("(bf16[4]{0}, /*index=1*/pred[], s32[2,2])") == 8 + 1 + 16
    import jax
    import jax.numpy as jnp

    mesh = jax.sharding.Mesh(jax.devices()[:1], ("x",))
    params = {"w": jax.ShapeDtypeStruct((16, 8), jnp.bfloat16, sharding=jax.sharding.NamedSharding(
        mesh, jax.sharding.PartitionSpec()))}
    text = ("HloModule m\n\nENTRY %main (p: bf16[16,8]) -> f32[16,8] {\n"
            "  %p = bf16[16,8]{1,0} parameter(0)\n  ROOT %c = f32[16,8]{1,0} convert(%p)\n}\n")
    assert memory_plan.cpu_weight_upcast(text, params) == 16 * 8 * 4
    assert memory_plan.cpu_weight_upcast(text.replace("f32[16,8]", "f32[8,8]"), params) == 0


def test_loop_collectives_counts_every_iteration_once_and_nested_loops_by_trip_count():
    got = sorted((c["op"], c["bytes"], c["times"]) for c in sp.loop_collectives(HLO))
    # outside the loop (all-gather.9) is not counted; the inner loop's all-reduce runs 3 times
    assert got == [("all-gather", 256, 1), ("all-reduce", 1, 1), ("all-reduce", 128, 3), ("all-to-all", 16, 1)]
    with pytest.raises(ValueError, match="no while loop"):
        sp.loop_collectives("HloModule m\n\nENTRY %main () -> f32[] {\n  ROOT %c = f32[] constant(0)\n}\n")


def test_rollout_copy_removes_the_weight_gathers_from_the_decode_loop():
    config = qwen2.Qwen2Config(vocab_size=512, hidden_size=128, intermediate_size=256, num_layers=2, num_heads=4,
                               num_kv_heads=2, max_position_embeddings=512, dtype="bfloat16")
    kw = dict(prompts=8, n=4, prompt_len=40, new_tokens=16)
    before = sp.plan_decode(config, "fsdp8", "training", **kw)
    after = sp.plan_decode(config, "fsdp8", "rollout", **kw)
    count = qwen2.param_count(config)
    # The decode loop splits the weights into per-layer arrays once, before the loop; XLA gathers the
    # fsdp-split training weights there too, so no weight is gathered per token with either layout --
    # the training layout pays with a whole float32 copy per device in temps, the rollout copy does not.
    for row in (before, after):
        gathered = sum(c["bytes"] * c["times"] for c in row["collectives"] if c["op"] == "all-gather")
        assert gathered < 0.01 * 2 * count
    assert before["temps"] > 4 * count * 0.9 > after["temps"]
    assert after["decode_mesh"] == "data4_tensor2" and before["decode_mesh"] == "fsdp8"
    # bf16 = 2 bytes, split two tensor ways (norms replicated)
    assert count <= after["weights"] < 1.01 * count
    per_device = sp.kv_cache_bytes(config, 8, 4, 40, 16) / 8   # split over rows (and heads), nothing copied
    assert before["kv_cache"] == pytest.approx(per_device, rel=1e-2)
    assert after["kv_cache"] == pytest.approx(per_device, rel=1e-2)
    roof = sp.roofline(after)
    assert roof["bytes_read"] == after["weights"] + after["kv_cache"] + after["collective_bytes_per_token"]


def test_kv_cache_of_the_issue_example():
    config = qwen2.preset("qwen2.5-coder-7b", dtype="bfloat16")
    assert sp.repeated_kv_bytes(config, 1, 128, 1024, 256) / 2 ** 30 == pytest.approx(8.743, abs=1e-3)
    assert sp.kv_cache_bytes(config, 1, 128, 1024, 256) / 2 ** 30 < 2.0


def _plan(*args, timeout=600):
    return subprocess.run([sys.executable, "-m", "experiments.plan_sample", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, "XLA_FLAGS": ""})


def test_cli_rejects_bad_flags_in_one_line(tmp_path):
    out = _plan("--presets=qwen9", f"--results_dir={tmp_path}/r")
    assert out.returncode == 2 and "unknown preset 'qwen9'" in out.stderr and len(out.stderr.splitlines()) == 1
    assert not (tmp_path / "r").exists()


def test_cli_prints_one_collective_line_per_mesh_under_one_percent(tmp_path):
    out = _plan("--presets=qwen2.5-coder-1.5b", "--params_layouts=rollout", f"--results_dir={tmp_path}")
    assert out.returncode == 0, out.stderr
    lines = [line for line in out.stdout.splitlines() if "decode-loop collective bytes per token" in line]
    assert len(lines) == 3
    for line in lines:
        assert float(line.rsplit("(", 1)[1].split("%")[0]) < 1.0, line
    assert (tmp_path / "plan_sample.md").exists() and (tmp_path / "plan_sample.json").exists()


def test_cli_gpu_target_without_the_plugin_says_what_to_install(tmp_path):
    from maxk_jax.planning import gpu_plan
    if gpu_plan.plugin_available():
        pytest.skip("the CUDA plugin is installed here (tests/planning/test_gpu_plan.py compiles for the H100)")
    out = _plan("--target=h100", "--presets=qwen2.5-coder-1.5b", f"--results_dir={tmp_path}/r")
    assert out.returncode == 2 and "jax-cuda12-plugin" in out.stderr and len(out.stderr.splitlines()) == 1
    assert not (tmp_path / "r").exists()


def test_cli_tpu_target_without_libtpu_says_what_to_install(tmp_path):
    from maxk_jax.planning.targets import tpu
    if tpu.libtpu_available():
        pytest.skip("libtpu is installed here (tests/planning/targets/test_tpu.py compiles for TPU)")
    out = _plan("--target=v5e-1", "--presets=qwen2.5-coder-1.5b", f"--results_dir={tmp_path}/r")
    assert out.returncode == 2 and "libtpu==0.0.42" in out.stderr and len(out.stderr.splitlines()) == 1
    assert not (tmp_path / "r").exists()
