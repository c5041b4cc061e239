"""models.decode_attention: the Pallas decode-attention kernels (run in interpret mode on CPU) equal
kv_cache.attend_decode -- left-padded prompts, an empty / partial / full own cache, slot counts that
are not a multiple of the block (the shifted last block), more queries per prompt than one tile --
and the decode step with ``decode_attention="pallas"`` gives the xla step's logits. With the CUDA
plugin, the kernels compile for a deviceless H100 as two Triton kernels."""
import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from maxk_jax.planning import gpu_plan
from maxk_jax.runtime import sharding as sh
from maxk_jax.models import decode, decode_attention, kv_cache, qwen2
from maxk_jax.models.kv_cache import attend_decode


def _inputs(p, n, kv, g, d, tp, s, dtype, seed=0):
    ks = jax.random.split(jax.random.key(seed), 7)
    b, h = p * n, kv * g
    normal = lambda key, shape: jax.random.normal(key, shape, jnp.float32).astype(dtype)
    pad = jnp.asarray([3, 0, 7, 1][:p])
    return dict(q=normal(ks[0], (b, h, d)), k_new=normal(ks[1], (b, kv, d)), v_new=normal(ks[2], (b, kv, d)),
                prompt_k=normal(ks[3], (p, kv, tp, d)), prompt_v=normal(ks[4], (p, kv, tp, d)),
                prompt_valid=jnp.arange(tp)[None, :] >= pad[:, None],
                cache_k=normal(ks[5], (b, kv, s, d)), cache_v=normal(ks[6], (b, kv, s, d)))


@pytest.mark.parametrize("length", [pytest.param(0, marks=pytest.mark.slow), 9, pytest.param(37, marks=pytest.mark.slow)])
def test_kernels_equal_attend_decode(length):
    x = _inputs(p=2, n=3, kv=2, g=3, d=16, tp=40, s=37, dtype=jnp.float32)
    want = attend_decode(**x, valid=jnp.arange(37) < length)
    got = decode_attention.attend_decode_pallas(**x, length=jnp.int32(length), block_k=16)
    chex.assert_shape(got, want.shape)
    chex.assert_type(got, jnp.float32)
    chex.assert_tree_all_finite(got)
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=2e-6)


@pytest.mark.slow
def test_kernels_bfloat16_many_queries_per_prompt():
    # n * G = 24 queries per prompt (two 16-row tiles padded to 32), bf16 K/V read in their dtype
    x = _inputs(p=1, n=4, kv=2, g=6, d=32, tp=64, s=70, dtype=jnp.bfloat16, seed=1)
    want = attend_decode(**x, valid=jnp.arange(70) < 33).astype(jnp.float32)
    got = decode_attention.attend_decode_pallas(**x, length=jnp.int32(33), block_k=32)
    chex.assert_type(got, jnp.bfloat16)
    np.testing.assert_allclose(got.astype(jnp.float32), want, atol=1.6e-2, rtol=1.6e-2)


def test_many_rows_per_prompt_tile_the_prompt_queries(monkeypatch):
    # n * G = 40 queries of one prompt in tiles of 16 rows: 4 programs per KV head, as the last row's
    # 16-row window (its G = 2 heads, padded to a Triton tile) ends at row 19 * 2 + 16 = 54
    monkeypatch.setattr(decode_attention, "Q_TILE", 16)
    calls = []
    real = decode_attention.pl.pallas_call
    monkeypatch.setattr(decode_attention.pl, "pallas_call", lambda *a, **k: calls.append(k["grid"]) or real(*a, **k))
    x = _inputs(p=1, n=20, kv=1, g=2, d=16, tp=32, s=20, dtype=jnp.float32, seed=3)
    want = attend_decode(**x, valid=jnp.arange(20) < 11)
    got = decode_attention.attend_decode_pallas(**x, length=jnp.int32(11), block_k=16)
    assert calls == [(1, 1, 4, 2), (20, 1)]   # and the 2 prompt blocks of 16 slots in 2 splits
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=2e-6)


@pytest.mark.parametrize("splits", [1, 2, 3, 8])
def test_prompt_block_split_along_its_slots_equals_attend_decode(splits):
    # tp = 70 in blocks of 16: 5 blocks (the last shifted back), 3 splits of 2 + 2 + 1 blocks, 8 capped at 5;
    # left padding leaves the first split's first block partly masked
    x = _inputs(p=2, n=2, kv=2, g=2, d=16, tp=70, s=24, dtype=jnp.float32, seed=5)
    want = attend_decode(**x, valid=jnp.arange(24) < 10)
    got = decode_attention.attend_decode_pallas(**x, length=jnp.int32(10), block_k=16, splits=splits)
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=2e-6)


def test_prompt_splits_fill_the_target_programs():
    assert decode_attention.prompt_splits(programs=32, blocks=8, target=128) == 4    # 1.5B, 16 prompts x 2 KV heads
    assert decode_attention.prompt_splits(programs=32, blocks=2, target=128) == 2    # capped by the blocks
    assert decode_attention.prompt_splits(programs=200, blocks=8, target=128) == 1   # enough programs already
    assert decode_attention.prompt_splits(programs=26, blocks=16, target=128) == 4   # 1 x 128 rows, 13 query tiles x 2
    with pytest.raises(ValueError, match="splits=-1"):
        decode_attention.attend_decode_pallas(**_inputs(p=1, n=2, kv=1, g=2, d=16, tp=32, s=20, dtype=jnp.float32),
                                              length=jnp.int32(3), splits=-1)


@pytest.mark.parametrize("d,s,length", [(16, 20, 0), (16, 20, 13), (16, 20, 20), (8, 20, 7)])
def test_write_cache_writes_the_token_into_slot_length(d, s, length):
    # the own kernel writes k_new / v_new into slot `length` of the cache it read (through outputs
    # aliased to it); nothing when length >= S; the attention is unchanged. d = 8: the fallback.
    x = _inputs(p=2, n=2, kv=2, g=2, d=d, tp=16, s=s, dtype=jnp.float32, seed=4)
    want = decode_attention.attend_decode_pallas(**x, length=jnp.int32(length), block_k=16)
    got, k, v = decode_attention.attend_decode_pallas(**x, length=jnp.int32(length), block_k=16, write_cache=True)
    assert decode_attention.supported(x["q"], x["prompt_k"], x["cache_k"]) == (d == 16)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(k, x["cache_k"].at[:, :, length].set(x["k_new"], mode="drop"))
    np.testing.assert_array_equal(v, x["cache_v"].at[:, :, length].set(x["v_new"], mode="drop"))
    if length < s:
        assert not np.array_equal(k, x["cache_k"])


def test_new_key_and_value_need_the_query_and_cache_dtypes():
    x = _inputs(p=1, n=2, kv=1, g=2, d=16, tp=16, s=16, dtype=jnp.float32)
    bf16 = {k: x[k].astype(jnp.bfloat16) for k in ("q", "k_new", "v_new")}
    with pytest.raises(ValueError, match="must have the cache's dtype"):
        decode_attention.attend_decode_pallas(**{**x, **bf16}, length=jnp.int32(1), write_cache=True)
    with pytest.raises(ValueError, match=r"must have the queries' dtype \(float32\)"):
        decode_attention.attend_decode_pallas(**{**x, "k_new": bf16["k_new"]}, length=jnp.int32(1))


def test_small_shapes_fall_back_to_attend_decode():
    x = _inputs(p=2, n=2, kv=1, g=4, d=16, tp=8, s=37, dtype=jnp.float32)   # 8 prompt slots < one tile
    assert not decode_attention.supported(x["q"], x["prompt_k"], x["cache_k"])
    want = attend_decode(**x, valid=jnp.arange(37) < 5)
    got = decode_attention.attend_decode_pallas(**x, length=jnp.int32(5))
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)   # the same function, jit-compiled


def test_block_k_must_be_a_power_of_two():
    x = _inputs(p=1, n=2, kv=1, g=2, d=16, tp=16, s=16, dtype=jnp.float32)
    with pytest.raises(ValueError, match="block_k=24"):
        decode_attention.attend_decode_pallas(**x, length=jnp.int32(1), block_k=24)


@pytest.mark.parametrize("mesh_shape,kv,want_specs", [
    ((2, 1, 4), 4, (("data", "fsdp"), "tensor")),   # rows over data (x fsdp = 1), KV heads (+ query heads) on tensor
    pytest.param((2, 2, 2), 1, (("data", "fsdp"), None), marks=pytest.mark.slow),  # one KV head: replicated over tensor
    pytest.param((8, 1, 1), 2, (None, "tensor"), marks=pytest.mark.slow),   # 4 prompts on 8 shards: replicated
])
@pytest.mark.skipif(jax.device_count() < 8, reason="needs 8 (simulated) devices")
def test_sharded_mesh_runs_the_kernels_per_shard(mesh_shape, kv, want_specs):
    x = _inputs(p=4, n=2, kv=kv, g=8 // kv, d=16, tp=40, s=37, dtype=jnp.float32, seed=2)
    want = attend_decode(**x, valid=jnp.arange(37) < 9)
    mesh = sh.make_mesh(*mesh_shape)
    assert decode_attention.shard_specs(dict(mesh.shape), 4, kv) == want_specs
    with sh.activation_sharding(mesh):
        got = decode_attention.attend_decode_pallas(**x, length=jnp.int32(9), block_k=16)
        text = decode_attention.attend_decode_pallas.lower(**x, length=jnp.int32(9), block_k=16).as_text()
    assert "shard_map" in text or "sdy.manual_computation" in text
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=2e-6)


def test_shard_specs_keep_whole_prompts_per_shard():
    # 6 prompts on data=4 x fsdp=2: neither 8 nor 4 divides 6 -> rows replicated; 2 KV heads on tensor=4 -> None
    assert decode_attention.shard_specs({"data": 4, "fsdp": 2, "tensor": 1}, 6, 2) == (None, "tensor")
    assert decode_attention.shard_specs({"data": 2, "fsdp": 4, "tensor": 4}, 6, 2) == ("data", None)
    assert decode_attention.shard_specs({"data": 1, "fsdp": 4, "tensor": 2}, 8, 2) == (("data", "fsdp"), "tensor")


def test_shard_specs_follow_the_kv_cache_sharding():
    # the kernels split rows and heads exactly as the cache is split, wherever that split fits
    mesh_shape = {"data": 2, "fsdp": 2, "tensor": 2}
    prompt_k = kv_cache.cache_logical_axes(1).prompt_k[0]          # [P, K, Tp, D] of one layer
    cache = sh.fit_spec(sh.logical_to_mesh(prompt_k), (4, 2, 64, 16), mesh_shape, "prompt_k")
    assert decode_attention.shard_specs(mesh_shape, 4, 2) == (cache[0], cache[1]) == (("data", "fsdp"), "tensor")


def test_tpu_is_refused_rather_than_interpreted(monkeypatch):
    monkeypatch.setattr(decode_attention, "context_platform", lambda: "tpu")
    x = _inputs(p=1, n=3, kv=1, g=2, d=16, tp=16, s=17, dtype=jnp.float32)   # shapes no other test traces
    with pytest.raises(ValueError, match="use decode_attention='xla' on TPU"):
        decode_attention.attend_decode_pallas(**x, length=jnp.int32(1))


def test_heads_must_group_over_kv_heads():
    x = _inputs(p=1, n=2, kv=2, g=2, d=16, tp=16, s=16, dtype=jnp.float32)
    x["q"] = x["q"][:, :3]
    with pytest.raises(ValueError, match="3 query heads are not a multiple of 2 KV heads"):
        decode_attention.attend_decode_pallas(**x, length=jnp.int32(1))


@pytest.mark.parametrize("mode,attention", [("decode", "xla"), ("full", "pallas")])
def test_write_cache_is_refused_outside_the_pallas_decode_step(mode, attention):
    config = qwen2.Qwen2Config(vocab_size=8, hidden_size=32, intermediate_size=8, num_layers=1, num_heads=2,
                               num_kv_heads=1, decode_attention=attention)
    layer = qwen2.Attention(config, mode, write_cache=True)
    x = jnp.zeros((2, 1, 32))
    rope = qwen2.rope_tables(jnp.zeros((2, 1), jnp.int32), config.head_dim_, config.rope_theta)
    with pytest.raises(ValueError, match=f"write_cache is for mode='decode' with decode_attention='pallas', "
                                         f"got mode='{mode}', decode_attention='{attention}'"):
        layer.init(jax.random.key(0), x, rope, jnp.ones((2, 1, 1), bool), None)


def test_config_rejects_unknown_decode_attention():
    with pytest.raises(ValueError, match="decode_attention='flash'"):
        qwen2.Qwen2Config(vocab_size=8, hidden_size=32, intermediate_size=8, num_layers=1, num_heads=2,
                          num_kv_heads=1, decode_attention="flash")
    with pytest.raises(ValueError, match="decode_attention_splits must be an int >= 0.*-1"):
        qwen2.Qwen2Config(vocab_size=8, hidden_size=32, intermediate_size=8, num_layers=1, num_heads=2,
                          num_kv_heads=1, decode_attention_splits=-1)


def test_auto_is_pallas_on_gpu_and_xla_elsewhere():
    assert qwen2.Qwen2Config(vocab_size=8, hidden_size=32, intermediate_size=8, num_layers=1, num_heads=2,
                             num_kv_heads=1).decode_attention == "auto"
    assert [decode_attention.resolve("auto", p) for p in ("gpu", "cuda", "cpu", "tpu")] == [
        "pallas", "pallas", "xla", "xla"]
    assert decode_attention.resolve("xla", "gpu") == "xla" and decode_attention.resolve("pallas", "cpu") == "pallas"
    assert decode_attention.resolve("auto") == "xla"     # compiled here, for the CPU
    with pytest.raises(ValueError, match="'flash'"):
        decode_attention.resolve("flash")


def test_the_decode_loop_runs_the_kernels_where_auto_picks_pallas():
    """What "auto" resolves to is what the decode loop runs: traced for a GPU (an abstract GPU mesh, as a
    deviceless compile sees it) the loop holds the prompt and own-cache kernels of every layer, compiled;
    for this CPU none; decode_attention="pallas" here runs them interpreted."""
    from maxk_jax.sampling import SamplerSettings
    from tests.sampling.decode_kernels import decode_loop_kernels
    config = qwen2.Qwen2Config(vocab_size=61, hidden_size=64, intermediate_size=64, num_layers=2, num_heads=4,
                               num_kv_heads=2, max_position_embeddings=128, rope_theta=10000.0)
    settings = SamplerSettings(n=2, max_new_tokens=17)     # 16 prompt and 16 own slots: shapes the kernels tile
    layers = [("decode_attention_prompt", "decode_attention_own")] * config.num_layers
    for platform in ("gpu", "cpu"):
        picks = decode_attention.resolve("auto", platform) == "pallas"
        got = decode_loop_kernels(config, settings, platform=platform)
        assert got == ([(name, False) for pair in layers for name in pair] if picks else []), (platform, got)
    assert decode_attention.resolve("auto", "gpu") == "pallas"
    interpreted = decode_loop_kernels(config.replace(decode_attention="pallas"), settings)
    assert interpreted == [(name, True) for pair in layers for name in pair]


def test_auto_decodes_on_cpu_exactly_as_xla():
    from maxk_jax import sampling
    base = qwen2.Qwen2Config(vocab_size=61, hidden_size=32, intermediate_size=64, num_layers=2, num_heads=4,
                             num_kv_heads=2, max_position_embeddings=128, rope_theta=10000.0)
    params = qwen2.init_params(base, jax.random.key(0))
    outs = [sampling.generate(base.replace(decode_attention=a), params, [[3, 4, 5], [6, 7]], n=2, max_new_tokens=6,
                              key=jax.random.key(1)) for a in ("auto", "xla")]
    np.testing.assert_array_equal(outs[0].tokens, outs[1].tokens)
    np.testing.assert_array_equal(outs[0].logprobs, outs[1].logprobs)


@pytest.mark.parametrize("cache_dtype", [None, pytest.param("bfloat16", marks=pytest.mark.slow)])
def test_decode_step_with_pallas_equals_xla(cache_dtype):
    # a cache in the compute dtype is written by the attention kernel in place; another dtype after the step
    base = qwen2.Qwen2Config(vocab_size=61, hidden_size=64, intermediate_size=64, num_layers=2, num_heads=4,
                             num_kv_heads=2, max_position_embeddings=256, rope_theta=10000.0)
    params = qwen2.init_params(base, jax.random.key(3))
    p, n, tp, steps = 2, 2, 16, 17
    rng = np.random.default_rng(0)
    tokens = jnp.asarray(rng.integers(3, base.vocab_size, (p, tp)), jnp.int32)
    mask = jnp.asarray(np.arange(tp)[None] >= np.array([[0], [5]]))
    cache = qwen2.init_cache(base, p, tp, steps, n, dtype=cache_dtype)
    _, cache = qwen2.prefill(base, params, tokens, mask, cache, last_only=True)
    positions = jnp.repeat(mask.sum(1), n).astype(jnp.int32)
    cache = cache.replace(length=jnp.int32(6))    # six generated slots live (their values: zeros and earlier K/V)
    tok = jnp.asarray(rng.integers(3, base.vocab_size, (p * n,)), jnp.int32)
    params = decode.unstack_layers(params)
    want, want_cache = decode.decode_step(base, params, tok, positions + 6, cache)
    got, got_cache = decode.decode_step(base.replace(decode_attention="pallas"), params, tok, positions + 6, cache)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    for a, b in zip(jax.tree.leaves(got_cache), jax.tree.leaves(want_cache)):
        assert a.dtype == b.dtype
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("p,n,tp", [
    (16, 8, 512),      # the RL rollout: 16 prompts x n = 8 on 512-token prompts
    # 1 prompt x n = 128 rows on a 1,024-token prompt (the paper's evaluation, 1.5B heads): 768 prompt
    # queries per KV head; untiled, one program held them all and asked for 328 KB of shared memory
    (1, 128, 1024),
])
@pytest.mark.gpu_plugin
def test_compiles_for_a_deviceless_h100_as_triton_kernels(p, n, tp):
    mesh = gpu_plan.target_mesh("h100")
    rep = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
    shapes = jax.eval_shape(lambda: _inputs(p=p, n=n, kv=2, g=6, d=128, tp=tp, s=255, dtype=jnp.bfloat16))
    args = {k: jax.ShapeDtypeStruct(v.shape, v.dtype, sharding=rep) for k, v in shapes.items()}
    args["length"] = jax.ShapeDtypeStruct((), jnp.int32, sharding=rep)
    with sh.activation_sharding(mesh):
        text = jax.jit(lambda a: decode_attention.attend_decode_pallas(**a)).lower(args).compile().as_text()
    assert text.count('custom_call_target="__gpu$xla.gpu.triton"') == 2


@pytest.mark.gpu_plugin
def test_write_cache_compiles_to_an_in_place_write_for_a_deviceless_h100():
    # with the cache donated, the own kernel's aliased outputs reuse its buffers: no copy of the
    # cache and no separate write kernel (dynamic-update-slice), only the two Triton kernels
    mesh = gpu_plan.target_mesh("h100")
    rep = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
    shapes = jax.eval_shape(lambda: _inputs(p=16, n=8, kv=2, g=6, d=128, tp=512, s=255, dtype=jnp.bfloat16))
    args = {k: jax.ShapeDtypeStruct(v.shape, v.dtype, sharding=rep) for k, v in shapes.items()}
    args["length"] = jax.ShapeDtypeStruct((), jnp.int32, sharding=rep)
    step = jax.jit(lambda a: decode_attention.attend_decode_pallas(**a, write_cache=True), donate_argnums=0)
    with sh.activation_sharding(mesh):
        text = step.lower(args).compile().as_text()
    assert text.count('custom_call_target="__gpu$xla.gpu.triton"') == 2
    assert "output_to_operand_aliasing" in text
    assert not any(op in text for op in (" copy(", "copy-start", "dynamic-update-slice"))


@pytest.mark.slow
@pytest.mark.skipif(jax.device_count() < 8, reason="needs 8 (simulated) devices")
def test_generate_with_pallas_on_a_tensor_parallel_mesh_equals_xla_on_one_device(monkeypatch):
    from maxk_jax import sampling
    tiled = []   # the per-shard shapes the kernels ran at (traced inside shard_map)
    local = decode_attention._attend_local

    def spy(q, k_new, v_new, prompt_k, *rest, **kw):
        tiled.append((q.shape, prompt_k.shape, decode_attention.supported(q, prompt_k, rest[2])))
        return local(q, k_new, v_new, prompt_k, *rest, **kw)

    monkeypatch.setattr(decode_attention, "_attend_local", spy)
    config = qwen2.Qwen2Config(vocab_size=61, hidden_size=64, intermediate_size=64, num_layers=2, num_heads=4,
                               num_kv_heads=2, max_position_embeddings=256, rope_theta=10000.0)
    params = qwen2.init_params(config, jax.random.key(5))
    rng = np.random.default_rng(1)
    prompts = [rng.integers(3, 61, size=m).tolist() for m in (9, 16, 4, 12)]
    kw = dict(n=2, max_new_tokens=20, key=jax.random.key(8), temperature=1.0)
    want = sampling.generate(config, params, prompts, **kw)
    mesh = sh.make_mesh(data=2, fsdp=1, tensor=2, devices=jax.devices()[:4])
    got = sampling.generate(config.replace(decode_attention="pallas"), params, prompts, mesh=mesh, **kw)
    np.testing.assert_array_equal(np.asarray(got.tokens), np.asarray(want.tokens))
    np.testing.assert_allclose(np.asarray(got.logprobs), np.asarray(want.logprobs), atol=2e-5)
    # 4 prompts x 2 rows over data=2, 2 KV heads (4 query heads) over tensor=2, on the kernels' tiles
    assert tiled and all(t == ((4, 2, 16), (2, 1, 16, 16), True) for t in tiled), tiled


@pytest.mark.gpu_plugin
def test_compiles_for_two_deviceless_h100s_per_device_without_collectives():
    # tensor parallel: the 2 KV heads (and their 12 query heads) split over 2 GPUs, each running both
    # Triton kernels on its own cache shard: nothing gathered or reduced
    mesh = gpu_plan.target_mesh("h100", tensor=2)
    shapes = jax.eval_shape(lambda: _inputs(p=16, n=8, kv=2, g=6, d=128, tp=512, s=255, dtype=jnp.bfloat16))
    spec = {"prompt_valid": jax.sharding.PartitionSpec()}
    args = {k: jax.ShapeDtypeStruct(v.shape, v.dtype, sharding=jax.sharding.NamedSharding(
        mesh, spec.get(k, jax.sharding.PartitionSpec(None, "tensor")))) for k, v in shapes.items()}
    args["length"] = jax.ShapeDtypeStruct((), jnp.int32, sharding=jax.sharding.NamedSharding(
        mesh, jax.sharding.PartitionSpec()))
    with sh.activation_sharding(mesh):
        text = jax.jit(lambda a: decode_attention.attend_decode_pallas(**a)).lower(args).compile().as_text()
    assert text.count('custom_call_target="__gpu$xla.gpu.triton"') == 2
    assert not any(op in text for op in ("all-gather", "all-reduce", "all-to-all", "collective-permute"))
