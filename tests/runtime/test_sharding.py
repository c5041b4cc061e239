"""Mesh construction, logical->mesh rules, and sharded forward == single-device forward."""
import os
import subprocess
import sys

import jax
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

from maxk_jax.runtime import sharding as sh
from maxk_jax.models import qwen2


def test_make_mesh_resolves_rest_and_rejects_bad_sizes():
    assert jax.device_count() == 8
    mesh = sh.make_mesh(data=-1, fsdp=2, tensor=2)
    assert dict(mesh.shape) == {"data": 2, "fsdp": 2, "tensor": 2}
    assert mesh.axis_names == sh.MESH_AXES
    assert all(t == jax.sharding.AxisType.Auto for t in mesh.axis_types)
    assert dict(sh.make_mesh(data=1, fsdp=-1, tensor=4).shape)["fsdp"] == 2
    assert dict(sh.make_mesh(devices=jax.devices()[:4], data=2, fsdp=2).shape)["data"] == 2
    with pytest.raises(ValueError, match="does not divide the 8 devices"):
        sh.make_mesh(data=-1, fsdp=3)
    with pytest.raises(ValueError, match="only one mesh axis may be -1"):
        sh.make_mesh(data=-1, fsdp=-1)
    with pytest.raises(ValueError, match="uses 4 devices but 8"):
        sh.make_mesh(data=1, fsdp=2, tensor=2)
    with pytest.raises(ValueError, match="positive ints or -1"):
        sh.make_mesh(data=0)


def test_logical_rules():
    assert sh.logical_to_mesh(P("layers", "embed", "heads", "head_dim")) == P(
        None, "fsdp", "tensor", None)
    assert sh.logical_to_mesh(P("batch", "length")) == P(("data", "fsdp"), None)
    # A mesh axis is used at most once per spec.
    assert sh.logical_to_mesh(P("heads", "mlp")) == P("tensor", None)
    with pytest.raises(ValueError, match="'nonsense'"):
        sh.logical_to_mesh(P("nonsense"))


def _tiny() -> qwen2.Qwen2Config:
    return qwen2.Qwen2Config(vocab_size=64, hidden_size=48, intermediate_size=64, num_layers=2,
                             num_heads=6, num_kv_heads=2, rope_theta=10000.0)


def test_param_shardings_fall_back_to_replication_when_not_divisible():
    config = _tiny()
    mesh = sh.make_mesh(data=1, fsdp=2, tensor=4)
    shard = sh.param_shardings(mesh, qwen2.logical_axes(config), qwen2.abstract_params(config))
    # 6 heads and 2 kv heads do not split 4 ways; embed (48) splits over fsdp.
    assert shard["layers"]["attn"]["q_kernel"].spec == P(None, "fsdp", None, None)
    assert shard["layers"]["attn"]["k_kernel"].spec == P(None, "fsdp", None, None)
    assert shard["layers"]["mlp"]["gate_kernel"].spec == P(None, "fsdp", "tensor")
    assert shard["embed"]["embedding"].spec == P("tensor", "fsdp")
    with pytest.raises(ValueError, match="leaves"):
        sh.param_shardings(mesh, qwen2.logical_axes(config), {"a": np.zeros(3)})


@pytest.fixture(scope="module")
def model():
    config = _tiny()
    params = qwen2.init_params(config, jax.random.key(0))
    tokens = np.asarray(jax.random.randint(jax.random.key(1), (8, 7), 0, config.vocab_size))
    mask = np.ones_like(tokens)
    mask[3, :4] = 0
    mask[6, :2] = 0
    ref = np.asarray(qwen2.logits(config, params, tokens, mask))
    return config, params, tokens, mask, ref


@pytest.mark.parametrize("data,fsdp,tensor", [(1, 2, 4), (1, 4, 2), (2, 2, 2)])
def test_sharded_forward_matches_single_device(model, data, fsdp, tensor):
    config, params, tokens, mask, ref = model
    mesh = sh.make_mesh(data=data, fsdp=fsdp, tensor=tensor)
    sharded = sh.shard_params(params, mesh, qwen2.logical_axes(config))
    gate = sharded["layers"]["mlp"]["gate_kernel"]
    assert gate.sharding.spec == P(None, "fsdp", "tensor")
    assert len({d for s in gate.addressable_shards for d in [s.device]}) == 8
    batch = sh.shard_batch({"tokens": tokens, "mask": mask}, mesh)
    assert batch["tokens"].sharding.spec == P(("data", "fsdp"), None)
    with sh.activation_sharding(mesh):
        out = qwen2.logits(config, sharded, batch["tokens"], batch["mask"])
    real = mask.astype(bool)
    assert np.abs(np.asarray(out) - ref)[real].max() <= 1e-5


def test_shard_batch_rejects_indivisible_batch():
    mesh = sh.make_mesh(data=2, fsdp=2, tensor=2)
    with pytest.raises(ValueError, match=r"shape \(6, 3\).*4 devices"):
        sh.shard_batch(np.zeros((6, 3)), mesh)


def test_maybe_initialize_distributed_disabled_is_noop():
    assert sh.maybe_initialize_distributed(False) is False
    assert not jax.distributed.is_initialized()


@pytest.mark.slow
def test_maybe_initialize_distributed_single_process(tmp_path):
    code = ("from maxk_jax.runtime import sharding as sh; import jax;"
            "assert sh.maybe_initialize_distributed(True, coordinator_address='127.0.0.1:29517',"
            " num_processes=1, process_id=0);"
            "assert jax.distributed.is_initialized() and jax.process_count() == 1; print('ok')")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    res = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True,
                         timeout=120, env={**os.environ, "JAX_PLATFORMS": "cpu"})
    assert res.returncode == 0 and "ok" in res.stdout, res.stderr[-2000:]
