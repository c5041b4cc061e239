"""targets.tpu: MaxText's slice names -> libtpu topology, chips, HBM and bf16 peak; with libtpu
installed (an optional environment: skipped without it) the names give compile-only TPU devices,
and a tiny model's RL step and decode loop compile for v5e:2x2 (slow)."""
import pytest

from maxk_jax.planning.targets import tpu

needs_libtpu = pytest.mark.skipif(not tpu.libtpu_available(), reason="libtpu (the TPU compiler) not installed")


@pytest.mark.parametrize("name, topology, chips, hbm_gib, config", [
    ("v5e-16", "v5e:4x4", 16, 16, "default"), ("v5e-1", "v5e:1x1", 1, 16, "default"),
    ("v5e-4", "v5e:2x2", 4, 16, "default"), ("v6e-8", "v6e:2x4", 8, 32, "default"),
    ("v6e-1", "v6e:1x1", 1, 32, "default"), ("v4-8", "v4:2x2x1", 4, 32, "megacore"),
    ("v4-16", "v4:2x2x2", 8, 32, "megacore"), ("v5p-8", "v5:2x2x1", 4, 95, "megacore"),
    ("v2-8", "v2:2x2", 8, 8, "default")])
def test_slice_names(name, topology, chips, hbm_gib, config):
    s = tpu.get_slice(name)
    assert (s.topology, s.chips, s.chip.hbm_gib, s.chip.chip_config) == (topology, chips, hbm_gib, config)
    assert s.hbm_bytes == hbm_gib * 1024 ** 3
    assert tpu.is_tpu_target(name)


def test_time_floor_is_flops_at_the_bf16_peak():
    assert tpu.get_slice("v5e-16").time_floor_s(197e12) == pytest.approx(1.0)
    assert tpu.get_slice("v6e-8").time_floor_s(918e12 * 2) == pytest.approx(2.0)


def test_unknown_names_are_named():
    assert not tpu.is_tpu_target("h100") and not tpu.is_tpu_target("v5e-3")
    with pytest.raises(ValueError, match="unknown TPU slice 'v5e-3'.*v5e-1"):
        tpu.get_slice("v5e-3")


def test_devices_without_libtpu_say_how_to_install(monkeypatch):
    monkeypatch.setattr(tpu, "libtpu_available", lambda: False)
    with pytest.raises(ValueError, match="libtpu==0.0.42"):
        tpu.devices(tpu.get_slice("v5e-4"))


@needs_libtpu
@pytest.mark.parametrize("name", ["v5e-4", "v6e-1", "v4-8", "v5p-8", "v2-8"])
def test_names_give_compile_only_tpu_devices(name):
    s = tpu.get_slice(name)
    devices = tpu.devices(s)
    assert len(devices) == s.chips and devices[0].platform == "tpu"


@needs_libtpu
@pytest.mark.slow
def test_tiny_model_plans_compile_for_v5e_2x2():
    """The RL train step and the decode loop of a tiny model, compiled by XLA:TPU for v5e:2x2: the
    walker's matmul FLOPs of the reference pass equal the analytic count, the decode program holds
    no second copy of the rollout weights, and the step's HBM bytes are at least its weights."""
    import jax
    from maxk_jax.planning import memory_plan, sample_plan
    from maxk_jax.models import qwen2
    from maxk_jax.rl import training
    from maxk_jax.rl.losses import LossConfig
    from maxk_jax.sampling import SamplerSettings
    from maxk_jax.planning import hlo_cost, tpu_plan

    tpu.setup_environment()
    s = tpu.get_slice("v5e-4")
    devices = tpu.devices(s)
    config = qwen2.Qwen2Config(vocab_size=512, hidden_size=256, intermediate_size=512, num_layers=2, num_heads=4,
                               num_kv_heads=2, max_position_embeddings=256, dtype="bfloat16", remat=True)
    cfg = training.StepConfig(estimator="maxk_offpolicy", k=2, sampler=SamplerSettings(n=2, max_new_tokens=16),
                              loss=LossConfig(kind=training.loss_kind("maxk_offpolicy"), kl_beta=0.01),
                              micro_batches=1)
    rows = memory_plan.plan_train_step(config, cfg, "fsdp4", sequences=8, prompt_len=32, completion_len=16,
                                       dump_dir="", breakdown=0, ref=True, devices=tpu_plan.layout_devices(devices,
                                                                                                          "fsdp4"))
    flops = [hlo_cost.matmul_flops(r.pop("hlo"))["flops"] for r in rows]
    assert all(f > 0 for f in flops) and all(r["total"] < s.hbm_bytes for r in rows)
    assert flops[0] > 2 * flops[1]                                     # the update: forward + remat + backward
    r = tpu_plan.decode_row(config.replace(dtype="bfloat16"), s, devices, "fsdp4", prompts=4, n=2, prompt_len=32,
                            new_tokens=16)
    embedding = 512 * 256 * 2 // 2                                   # a gather reads rows, not the table
    assert r["decode_mesh"] == "data2_tensor2" and r["tpu_step"]["hbm_bytes"] >= r["weights"] - embedding
    assert jax.devices()[0].platform == "cpu"                          # the default backend stays the CPU
    # one chip: the decode program on per-layer weights (the rollout copy) holds no copy of them; on
    # the stacked weights XLA:TPU materialises split layer weights (here a part of them)
    import jax.numpy as jnp
    from maxk_jax.runtime import sharding as sh
    from maxk_jax.models import decode
    from maxk_jax.sampling import decode_loop
    mesh = sh.make_mesh(1, 1, 1, devices=devices[:1])
    dcfg = config.replace(hidden_size=1024, intermediate_size=4096, num_heads=8, num_layers=4)   # weights XLA:TPU
    settings = SamplerSettings(n=2, max_new_tokens=16)                        # cannot keep on chip
    layered, args, _ = sample_plan.abstract_decode_inputs(dcfg, settings, mesh, "rollout", 4, 32)
    stacked = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, jnp.bfloat16, sharding=jax.sharding.NamedSharding(
        mesh, jax.sharding.PartitionSpec())), qwen2.abstract_params(dcfg))
    assert decode.is_unstacked(layered) and not decode.is_unstacked(stacked)

    def temps(params):
        with sh.activation_sharding(mesh):
            return decode_loop.lower(dcfg, settings, mesh, params, *args).compile().memory_analysis().temp_size_in_bytes
    layer_bytes = sum(x.size * 2 for x in jax.tree.leaves(stacked["layers"]))
    assert temps(layered) < min(temps(stacked), layer_bytes // 10)   # (at 7B the split copy is 3 GiB per chip)
