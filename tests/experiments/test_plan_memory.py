"""plan_memory: layout parsing, the NLL loss, and one AOT memory plan of a tiny model."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from experiments import plan_memory
from maxk_jax.models import qwen2


def test_parse_layout():
    assert plan_memory.parse_layout("data2_fsdp4") == {"data": 2, "fsdp": 4, "tensor": 1}
    assert plan_memory.parse_layout("fsdp8") == {"data": 1, "fsdp": 8, "tensor": 1}
    with pytest.raises(ValueError, match="bad layout 'fsdp_x2'"):
        plan_memory.parse_layout("fsdp_x2")


def test_layout_sizes_requires_every_simulated_device():
    assert plan_memory.layout_sizes("fsdp4_tensor2") == {"data": 1, "fsdp": 4, "tensor": 2}
    with pytest.raises(ValueError, match="layout 'fsdp4' does not use exactly 8 devices"):
        plan_memory.layout_sizes("fsdp4")
    with pytest.raises(ValueError, match="bad layout 'gpu8'"):
        plan_memory.layout_sizes("gpu8")


def _tiny() -> qwen2.Qwen2Config:
    return qwen2.Qwen2Config(vocab_size=64, hidden_size=32, intermediate_size=64, num_layers=2,
                             num_heads=4, num_kv_heads=2, remat=True)


def test_nll_loss_matches_numpy():
    config = _tiny()
    params = qwen2.init_params(config, jax.random.key(0))
    tokens = np.asarray(jax.random.randint(jax.random.key(1), (2, 6), 0, config.vocab_size))
    mask = np.ones_like(tokens)
    mask[1, :2] = 0
    loss = float(plan_memory.nll_loss(config, params, jnp.asarray(tokens), jnp.asarray(mask)))
    logits = np.asarray(qwen2.logits(config, params, tokens, mask), np.float64)
    logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    nll = [-logp[b, t, tokens[b, t + 1]] for b in range(2) for t in range(5) if mask[b, t + 1]]
    assert loss == pytest.approx(np.mean(nll), rel=1e-5)


@pytest.mark.slow
def test_plan_reports_per_device_memory():
    row = plan_memory.plan(_tiny(), "fsdp4_tensor2", batch=8, seq=16)
    assert row["layout"] == "fsdp4_tensor2"
    assert row["args"] > 0 and row["outputs"] > 0 and row["temps"] >= 0
    assert row["total"] == row["args"] + row["outputs"] + row["temps"] - row["alias"]
    # Params are sharded 8 ways (embed over fsdp, heads/mlp/vocab over tensor): the per-device
    # argument bytes are well below the replicated parameter bytes.
    full = 4 * qwen2.param_count(_tiny())
    assert row["args"] < full / 2
    assert "| fsdp4_tensor2 |" in plan_memory.to_markdown([row], "h")
