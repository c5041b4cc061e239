"""The rollout copy: its mesh (tensor ways that never split a KV head, inside a host), dtype and
layout (replicated over data, split over tensor), and sampling from it on its mesh gives the same
samples as sampling from the trainer's fsdp/tensor-sharded weights."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from maxk_jax.runtime import sharding
from maxk_jax.models import decode, qwen2
from maxk_jax.sampling import generate
from maxk_jax.sampling.rollout_copy import (RolloutLayout, rollout_dtype, rollout_mesh,
                                            rollout_tensor_size)


def _config(**kw):
    base = dict(vocab_size=96, hidden_size=32, intermediate_size=64, num_layers=2, num_heads=4,
                num_kv_heads=2, max_position_embeddings=128)
    return qwen2.Qwen2Config(**{**base, **kw})


@pytest.mark.parametrize("kv, heads, devices, local, cap, want", [
    (4, 28, 8, 8, 0, 4), (2, 12, 8, 8, 0, 2), (4, 28, 8, 2, 0, 2), (4, 28, 8, 8, 2, 2), (1, 4, 8, 8, 0, 1),
    (8, 8, 6, 6, 0, 2)])
def test_tensor_size_never_splits_a_kv_head_nor_crosses_a_host(kv, heads, devices, local, cap, want):
    assert rollout_tensor_size(_config(num_kv_heads=kv, num_heads=heads, head_dim=8), devices, local, cap) == want


def test_bad_values_are_named():
    with pytest.raises(ValueError, match="max_tensor must be >= 0"):
        rollout_tensor_size(_config(), 8, 8, -1)
    with pytest.raises(ValueError, match="'float16'"):
        rollout_dtype(_config(), "float16")


def test_rollout_mesh_keeps_device_order():
    mesh = sharding.make_mesh(data=1, fsdp=8, tensor=1)
    rmesh = rollout_mesh(_config(), mesh)
    assert dict(rmesh.shape) == {"data": 4, "fsdp": 1, "tensor": 2}
    assert list(rmesh.devices.flat) == list(mesh.devices.flat)
    assert rollout_mesh(_config(), rmesh) is rmesh


def test_copy_dtype_and_layout():
    config = _config(dtype="bfloat16")
    mesh = sharding.make_mesh(data=1, fsdp=8, tensor=1)
    params = sharding.shard_params(qwen2.init_params(config, jax.random.key(0)), mesh, qwen2.logical_axes(config))
    layout = RolloutLayout.create(config, mesh)
    copy = layout.copy(params)
    for path, leaf in jax.tree_util.tree_leaves_with_path(copy):
        assert leaf.dtype == jnp.bfloat16, path
        spec = leaf.sharding.spec
        assert "fsdp" not in jax.tree.leaves(tuple(spec)) and "data" not in jax.tree.leaves(tuple(spec)), (path, spec)
    assert decode.is_unstacked(copy) and len(copy["layers"]) == config.num_layers   # per-layer, as decoding reads it
    wq = copy["layers"][1]["attn"]["q_kernel"]         # [E, H, D]: heads over tensor
    assert wq.sharding.shard_shape(wq.shape) == (32, 2, 8)
    for i in range(config.num_layers):                 # layer i of the copy = layer i of the params, cast
        np.testing.assert_array_equal(np.asarray(copy["layers"][i]["mlp"]["up_kernel"]),
                                      np.asarray(params["layers"]["mlp"]["up_kernel"][i].astype(jnp.bfloat16)))
    assert jax.tree.structure(layout.abstract()) == jax.tree.structure(copy)
    assert layout.bytes_per_device() == sum(
        int(np.prod(x.sharding.shard_shape(x.shape))) * 2 for x in jax.tree.leaves(copy))
    f32 = RolloutLayout.create(_config(), mesh)        # float32 compute: the copy keeps float32
    assert all(x.dtype == jnp.float32 for x in jax.tree.leaves(f32.copy(params)))


def test_sampling_from_the_copy_matches_the_trainers_weights():
    config = _config()
    params = qwen2.init_params(config, jax.random.key(1))
    mesh = sharding.make_mesh(data=1, fsdp=4, tensor=2)
    trainer = sharding.shard_params(params, mesh, qwen2.logical_axes(config))
    layout = RolloutLayout.create(config, mesh)
    prompts = [[5, 6, 7], [8, 9], [10, 11, 12, 13], [14]]
    kw = dict(n=2, max_new_tokens=6, key=jax.random.key(3), temperature=1.0)
    ref = generate(config, params, prompts, **kw)                           # unsharded
    out = generate(config, layout.copy(trainer), prompts, mesh=layout.mesh, **kw)
    np.testing.assert_array_equal(np.asarray(out.tokens), np.asarray(ref.tokens))
    np.testing.assert_allclose(np.asarray(out.logprobs), np.asarray(ref.logprobs), atol=1e-5)
