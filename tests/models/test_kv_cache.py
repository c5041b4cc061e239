"""Shared-prefix KV cache: layout of init_cache, logical axes, and attend_decode against plain
attention over the n-fold repeated prompt + the row's own cache + the token."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from maxk_jax.models import kv_cache, qwen2


def test_init_cache_shapes_and_errors():
    config = qwen2.Qwen2Config(vocab_size=16, hidden_size=16, intermediate_size=32, num_layers=3,
                               num_heads=4, num_kv_heads=2)
    cache = kv_cache.init_cache(config, 2, 5, 7, n=3, dtype="bfloat16")
    assert cache.num_layers == len(cache.prompt_k) == len(cache.v) == 3   # one array per layer
    assert {x.shape for x in cache.prompt_k + cache.prompt_v} == {(2, 2, 5, 4)}
    assert {x.shape for x in cache.k + cache.v} == {(6, 2, 7, 4)} and cache.k[0].dtype == jnp.bfloat16
    assert cache.prompt_valid.shape == (2, 5) and not np.asarray(cache.prompt_valid).any()
    assert int(cache.length) == 0 and (cache.n, cache.prompt_len, cache.max_len) == (3, 5, 7)
    axes = kv_cache.cache_logical_axes(3)
    is_spec = lambda x: isinstance(x, jax.sharding.PartitionSpec)  # noqa: E731
    assert jax.tree.structure(axes, is_leaf=is_spec) == jax.tree.structure(cache)
    assert axes.prompt_k[2][0] == axes.k[0][0] == axes.prompt_valid[0] == "cache_batch"
    for bad in (dict(batch=0), dict(prompt_len=0), dict(new_len=-1), dict(n=0)):
        kw = dict(batch=2, prompt_len=5, new_len=7, n=1) | bad
        with pytest.raises(ValueError, match=f"{next(iter(bad))} > 0"):
            kv_cache.init_cache(config, **kw)


def test_attend_decode_equals_attend_over_prompt_cache_and_token():
    rng = np.random.default_rng(7)
    p, n, h, kv, tp, s, d = 2, 3, 4, 2, 5, 6, 8
    b = p * n
    q, k_new, v_new = (jnp.asarray(rng.normal(size=shape), jnp.float32)
                       for shape in ((b, h, d), (b, kv, d), (b, kv, d)))
    pk, pv = (jnp.asarray(rng.normal(size=(p, kv, tp, d)), jnp.float32) for _ in range(2))
    ck, cv = (jnp.asarray(rng.normal(size=(b, kv, s, d)), jnp.float32) for _ in range(2))
    prompt_valid = jnp.asarray(rng.random((p, tp)) < 0.6).at[0].set(False)
    valid = jnp.asarray(rng.random((b, s)) < 0.6).at[0].set(False)  # row 0 sees only itself
    out = kv_cache.attend_decode(q, k_new, v_new, pk, pv, prompt_valid, ck, cv, valid)
    # Reference: the n-fold repeated prompt block, the row's cache and the token concatenated.
    keys = jnp.concatenate([jnp.repeat(pk, n, 0), ck, k_new[:, :, None]], axis=2).swapaxes(1, 2)
    vals = jnp.concatenate([jnp.repeat(pv, n, 0), cv, v_new[:, :, None]], axis=2).swapaxes(1, 2)
    mask = jnp.concatenate([jnp.repeat(prompt_valid, n, 0), valid, jnp.ones((b, 1), bool)],
                           axis=1)[:, None, :]
    ref = qwen2.attend(q[:, None], keys, vals, mask)[:, 0]
    assert out.shape == (b, h, d)
    np.testing.assert_allclose(np.asarray(out), np.asarray(ref), atol=1e-5)
    g = h // kv
    np.testing.assert_allclose(np.asarray(out[0]), np.repeat(np.asarray(v_new[0]), g, axis=0),
                               atol=1e-6)
    # valid [S] (one row of slots for every sample) broadcasts like the [B, S] form.
    shared = kv_cache.attend_decode(q, k_new, v_new, pk, pv, prompt_valid, ck, cv, valid[1])
    each = kv_cache.attend_decode(q, k_new, v_new, pk, pv, prompt_valid, ck, cv,
                               jnp.broadcast_to(valid[1], (b, s)))
    np.testing.assert_array_equal(np.asarray(shared), np.asarray(each))
    with pytest.raises(ValueError, match="not a multiple of 4 prompts"):
        zeros = jnp.zeros((4, kv, tp, d))
        kv_cache.attend_decode(q, k_new, v_new, zeros, zeros, jnp.ones((4, tp), bool), ck, cv, valid)


def test_write_slot_writes_one_slot_and_drops_past_the_end():
    block = jnp.zeros((2, 1, 3, 4), jnp.bfloat16)
    new = jnp.arange(8, dtype=jnp.float32).reshape(2, 1, 4)
    got = kv_cache.write_slot(block, new, jnp.int32(1))
    assert got.dtype == jnp.bfloat16
    np.testing.assert_array_equal(got[:, :, 1], new)
    np.testing.assert_array_equal(got[:, :, [0, 2]], 0)
    np.testing.assert_array_equal(kv_cache.write_slot(block, new, jnp.int32(3)), block)   # length == S: dropped
