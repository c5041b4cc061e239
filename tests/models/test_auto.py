"""What "auto" resolves to per device (maxk_jax.models.auto), on faked device descriptions, a real tiny
compile on CPU, and (slow, with the CUDA plugin) a deviceless H100."""
from __future__ import annotations

import dataclasses

import jax
import pytest
from absl import logging

from maxk_jax.planning import gpu_plan, memory_plan
from maxk_jax.models import auto, decode_attention, qwen2
from maxk_jax.rl.run_config import ModelSettings, RunConfig

GiB = 2 ** 30


@dataclasses.dataclass
class FakeDevice:
    """The attributes of a jax device the rules read."""

    platform: str
    device_kind: str = ""
    compute_capability: str | None = None
    limit: int | None = None

    def memory_stats(self):
        return None if self.limit is None else {"bytes_limit": self.limit, "bytes_in_use": 0}


T4 = FakeDevice("gpu", "Tesla T4", "7.5", 15 * GiB)
A100_40 = FakeDevice("gpu", "NVIDIA A100-SXM4-40GB", "8.0", 40 * GiB)
H200 = FakeDevice("gpu", "NVIDIA H200", "9.0", 139 * GiB)
TPU = FakeDevice("tpu", "TPU v5 lite", limit=16 * GiB)   # reports its memory, as TPUs do


def test_run_config_and_model_config_share_the_defaults():
    fields = {f.name: f.default for f in dataclasses.fields(qwen2.Qwen2Config)}
    for name in ("decode_attention", "remat_policy"):
        assert getattr(RunConfig().model, name) == getattr(ModelSettings(), name) == fields[name] == "auto"


def test_decode_attention_rule_per_device(caplog):
    auto._SAID.clear()
    with caplog.at_level(logging.INFO):
        assert auto.decode_attention("gpu", T4) == "xla"
        assert auto.decode_attention("gpu", T4) == "xla"
    assert sum("compute capability 7.5" in r.getMessage() for r in caplog.records) == 1   # said once
    assert auto.decode_attention("gpu", A100_40) == "pallas"
    assert auto.decode_attention("gpu", H200) == "pallas"
    assert auto.decode_attention("tpu", TPU) == "xla"
    assert auto.decode_attention("cpu", None) == "xla"
    assert auto.decode_attention("gpu", None) == "pallas"                         # deviceless: the planned card
    assert auto.decode_attention("gpu", FakeDevice("gpu", "MI300X", "gfx942")) == "xla"   # not a CUDA capability
    # the model's resolver goes through the same rule
    assert decode_attention.resolve("auto", "gpu", T4) == "xla"
    assert decode_attention.resolve("auto", "gpu", A100_40) == "pallas"
    assert decode_attention.resolve("auto", "tpu", TPU) == "xla"
    assert decode_attention.resolve("pallas", "gpu", T4) == "pallas"              # explicit wins
    assert decode_attention.resolve("auto") == "xla"                              # this CPU


def test_device_info_reads_capability_and_memory():
    info = auto.DeviceInfo.of(A100_40)
    assert info == auto.DeviceInfo("gpu", (8, 0), 40 * GiB, "NVIDIA A100-SXM4-40GB")
    cpu = auto.DeviceInfo.of(jax.devices("cpu")[0])
    assert cpu.platform == "cpu" and cpu.compute_capability is None
    assert auto.DeviceInfo.of(FakeDevice("cuda", compute_capability="8.6")).platform == "gpu"


def _memory(table):
    calls = []

    def memory_of(policy):
        calls.append(policy)
        return table[policy]

    return memory_of, calls


def test_remat_rule_picks_the_fastest_policy_that_fits():
    # the measured 1.5B shape: dots ~61 GiB, nothing ~34 GiB
    needs = {"dots": 61 * GiB, "nothing": 34 * GiB}
    memory_of, calls = _memory(needs)
    assert auto.remat_policy(H200, memory_of) == "dots" and calls == ["dots"]
    memory_of, calls = _memory(needs)
    assert auto.remat_policy(A100_40, memory_of) == "nothing" and calls == ["dots", "nothing"]
    memory_of, _ = _memory(needs)
    assert auto.remat_policy(T4, memory_of) == "nothing"          # neither fits: the least memory
    # the margin counts: 61 GiB on a 64 GiB card is over 90 %
    memory_of, _ = _memory(needs)
    assert auto.remat_policy(auto.DeviceInfo("gpu", (9, 0), 64 * GiB), memory_of) == "nothing"
    assert auto.remat_policy(auto.DeviceInfo("gpu", (9, 0), 64 * GiB), _memory(needs)[0], margin=1.0) == "dots"
    with pytest.raises(ValueError, match="margin"):
        auto.remat_policy(H200, memory_of, margin=0)


def test_remat_rule_compiles_nothing_off_gpu_or_without_a_memory_limit():
    def never(policy):
        raise AssertionError("compiled")

    assert auto.remat_policy(jax.devices("cpu")[0], never) == "nothing"
    assert auto.remat_policy(TPU, never) == "nothing"
    assert auto.remat_policy(FakeDevice("gpu", "unknown", "9.0", None), never) == "nothing"


def _tiny_run():
    run = RunConfig()
    from maxk_jax.cli.fields import replace_fields
    return replace_fields(run, {"rollout.prompts": 2, "rollout.sampler.n": 4, "rollout.sampler.max_new_tokens": 16,
                                "algo.k": 2, "mesh.data": 1, "mesh.fsdp": 1, "mesh.tensor": 1})


@pytest.mark.slow   # five train-step compiles (~40 s on 2 cores)
def test_train_step_remat_by_a_real_compile_on_cpu():
    config = qwen2.Qwen2Config(vocab_size=128, hidden_size=32, intermediate_size=128, num_layers=1, num_heads=2,
                               num_kv_heads=1, remat=True)
    run = _tiny_run()
    from maxk_jax.runtime import sharding as sh
    mesh = sh.make_mesh(1, 1, 1, devices=jax.devices("cpu")[:1])
    shape = dict(sequences=8, prompt_len=32, completion_len=32)
    needs = {}
    for policy in ("dots", "nothing"):
        row, _ = memory_plan.compile_train_step(config.replace(remat_policy=policy), run.step_config(), mesh, policy,
                                                **shape)
        needs[policy] = row["total"]
    assert needs["dots"] > needs["nothing"]          # dots keeps the projections' outputs
    between = auto.DeviceInfo("gpu", (9, 0), int((needs["dots"] + needs["nothing"]) / 2 / auto.MEMORY_MARGIN))
    large = auto.DeviceInfo("gpu", (9, 0), int(needs["dots"] / auto.MEMORY_MARGIN) + 1)
    assert memory_plan.train_step_remat(config, run.step_config(), mesh, **shape, device=between) == "nothing"
    assert memory_plan.train_step_remat(config, run.step_config(), mesh, **shape, device=large) == "dots"
    assert memory_plan.train_step_remat(config, run.step_config(), mesh, **shape) == "nothing"     # this CPU
    assert memory_plan.train_step_remat(config.replace(remat_policy="dots"), run.step_config(), mesh, **shape,
                                          device=between) == "dots"                                   # explicit wins


@pytest.mark.gpu_plugin
@pytest.mark.slow
def test_deviceless_h100_resolves_auto_to_pallas_and_compiles_the_remat_candidates():
    mesh = gpu_plan.target_mesh("h100")
    with jax.sharding.use_mesh(mesh) if hasattr(jax.sharding, "use_mesh") else jax.set_mesh(mesh):
        assert decode_attention.resolve("auto") == "pallas"
    config = qwen2.Qwen2Config(vocab_size=512, hidden_size=64, intermediate_size=128, num_layers=2, num_heads=4,
                               num_kv_heads=2, dtype="bfloat16", remat=True)
    run = _tiny_run()
    shape = dict(sequences=8, prompt_len=64, completion_len=64)
    h100 = auto.DeviceInfo("gpu", (9, 0), 80 * GiB, "NVIDIA H100 80GB HBM3")
    assert memory_plan.train_step_remat(config, run.step_config(), mesh, **shape, device=h100) == "dots"
    assert memory_plan.train_step_remat(config, run.step_config(), mesh, **shape,
                                          device=dataclasses.replace(h100, bytes_limit=1)) == "nothing"
