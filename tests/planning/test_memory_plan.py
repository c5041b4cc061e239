"""memory_plan: layout parsing, the NLL loss, HLO shapes, analytic state bytes, the markdown
tables, and one AOT memory plan of a tiny model (8 simulated devices, tests/conftest.py)."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from absl import flags
from jax.sharding import NamedSharding, PartitionSpec

from maxk_jax.planning import hlo, memory_plan, plan_flags, plan_report
from maxk_jax.runtime import sharding as sh
from maxk_jax.models import qwen2


def test_parse_layout():
    assert memory_plan.parse_layout("data2_fsdp4") == {"data": 2, "fsdp": 4, "tensor": 1}
    assert memory_plan.parse_layout("fsdp8") == {"data": 1, "fsdp": 8, "tensor": 1}
    with pytest.raises(ValueError, match="bad layout 'fsdp_x2'"):
        memory_plan.parse_layout("fsdp_x2")


def test_layout_sizes_requires_every_device():
    assert memory_plan.layout_sizes("fsdp4_tensor2", 8) == {"data": 1, "fsdp": 4, "tensor": 2}
    assert memory_plan.layout_sizes("fsdp4", 4) == {"data": 1, "fsdp": 4, "tensor": 1}
    with pytest.raises(ValueError, match="layout 'fsdp4' does not use exactly 8 devices"):
        memory_plan.layout_sizes("fsdp4", 8)
    with pytest.raises(ValueError, match="bad layout 'gpu8'"):
        memory_plan.layout_sizes("gpu8", 8)


def test_check_device_count_names_xla_flags():
    memory_plan.check_device_count(jax.device_count())
    with pytest.raises(ValueError, match=f"expected 3 simulated devices, got {jax.device_count()} "
                                         r"\(XLA_FLAGS="):
        memory_plan.check_device_count(3)


def test_planned_config_overrides_the_preset():
    full = qwen2.preset("qwen2.5-coder-0.5b")
    config = memory_plan.planned_config("qwen2.5-coder-0.5b", layers=2, dtype="float32",
                                        param_dtype="bfloat16", remat=False)
    assert (config.num_layers, config.dtype, config.param_dtype, config.remat) == (2, "float32",
                                                                                   "bfloat16", False)
    assert config.hidden_size == full.hidden_size and config.remat_policy == "nothing"
    assert memory_plan.planned_config("qwen2.5-coder-0.5b", layers=2, dtype="float32", param_dtype="float32",
                                      remat=True, remat_policy="dots").remat_policy == "dots"
    same = memory_plan.planned_config("qwen2.5-coder-0.5b", layers=0, dtype="bfloat16",
                                      param_dtype="float32", remat=True)
    assert same.num_layers == full.num_layers


def test_flags_give_the_planned_config():
    fv = flags.FlagValues()
    plan_flags.define_flags(param_dtype="float32", results_dir="runs/x", flag_values=fv)
    fv(["prog", "--preset=qwen2.5-coder-0.5b", "--layers=1", "--noremat", "--layouts=fsdp8,data2_fsdp4"])
    assert fv.results_dir == "runs/x" and fv.dtype == "bfloat16"
    config = plan_flags.config_from_flags(8, fv)
    assert (config.num_layers, config.param_dtype, config.remat) == (1, "float32", False)
    fv.layouts = ["fsdp8", "fsdp4"]
    with pytest.raises(ValueError, match="layout 'fsdp4' does not use exactly 8 devices"):
        plan_flags.config_from_flags(8, fv)


def _tiny() -> qwen2.Qwen2Config:
    return qwen2.Qwen2Config(vocab_size=64, hidden_size=32, intermediate_size=64, num_layers=2,
                             num_heads=4, num_kv_heads=2, remat=True)


def test_nll_loss_matches_numpy():
    config = _tiny()
    params = qwen2.init_params(config, jax.random.key(0))
    tokens = np.asarray(jax.random.randint(jax.random.key(1), (2, 6), 0, config.vocab_size))
    mask = np.ones_like(tokens)
    mask[1, :2] = 0
    loss = float(memory_plan.nll_loss(config, params, jnp.asarray(tokens), jnp.asarray(mask)))
    logits = np.asarray(qwen2.logits(config, params, tokens, mask), np.float64)
    logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    nll = [-logp[b, t, tokens[b, t + 1]] for b in range(2) for t in range(5) if mask[b, t + 1]]
    assert loss == pytest.approx(np.mean(nll), rel=1e-5)


def test_shape_dims():
    assert hlo.dims("f32[1,256,152064]") == [1, 256, 152064]
    assert hlo.dims("f32[]") == []
    assert hlo.dims("token") == []


def test_state_bytes_per_device_counts_one_shard():
    mesh = sh.make_mesh(fsdp=4, tensor=2)
    split = NamedSharding(mesh, PartitionSpec("fsdp", "tensor"))
    whole = NamedSharding(mesh, PartitionSpec())
    tree = {"a": jax.ShapeDtypeStruct((8, 6), jnp.float32, sharding=split),      # [2, 3] shard
            "b": jax.ShapeDtypeStruct((5,), jnp.bfloat16, sharding=whole)}       # replicated
    assert memory_plan.state_bytes_per_device(tree) == 2 * 3 * 4 + 5 * 2


def test_markdown_tables():
    gib = plan_report.GIB
    row = {"layout": "fsdp8", "compile_s": 1.5, "args": gib, "outputs": 2 * gib, "temps": gib // 2,
           "alias": 0, "total": 3.5 * gib, "state_analytic": gib // 4,
           "temp_breakdown": {"temp_bytes": gib, "vocab_f32": [
               {"shape": "f32[1,8,64]", "op": "dot", "bytes": gib // 8, "count": 2},
               {"shape": "f32[32,64]", "op": "transpose", "bytes": gib // 16, "count": 1}],
               "largest": [{"shape": "f32[1,8,64]", "op": "dot", "bytes": gib // 8, "count": 2}]}}
    assert "| fsdp8 | 1.00 | 2.00 | 0.50 | 3.50 | 1.5 |" in plan_report.to_markdown([row], "h")
    assert "| fsdp8 | 0.25 |" in plan_report.state_markdown([row])
    md = plan_report.breakdown_markdown([row], vocab=64, seq_lens=(8, 24))
    assert "| 0.125 | `f32[1,8,64]` | 2 | dot |" in md
    assert "`f32[1,8,64]` 0.125 GiB (**[mb, T, V] logits**), `f32[32,64]` 0.062 GiB." in md
    assert md.endswith("[micro-batch, T, V] float32 logits buffers: 1.\n")
    assert plan_report.breakdown_markdown([{**row, "temp_breakdown": None}], 64, (8,)) == ""


def test_temp_breakdown_without_a_dump_names_the_dir(tmp_path):
    with pytest.raises(FileNotFoundError, match=f"no buffer assignment of jit_step in {tmp_path}"):
        memory_plan.temp_breakdown(str(tmp_path), "jit_step", 3, 64)


@pytest.mark.slow
def test_plan_reports_per_device_memory():
    row = memory_plan.plan_nll_grad(_tiny(), "fsdp4_tensor2", batch=8, seq=16)
    assert row["layout"] == "fsdp4_tensor2"
    assert row["args"] > 0 and row["outputs"] > 0 and row["temps"] >= 0
    assert row["total"] == row["args"] + row["outputs"] + row["temps"] - row["alias"]
    # Params are sharded 8 ways (embed over fsdp, heads/mlp/vocab over tensor): the per-device
    # argument bytes are well below the replicated parameter bytes.
    full = 4 * qwen2.param_count(_tiny())
    assert row["args"] < full / 2
    assert "| fsdp4_tensor2 |" in plan_report.to_markdown([row], "h")
