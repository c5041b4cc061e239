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


def _attend_inputs(rng, p=2, n=3, h=4, kv=2, tp=5, s=7, d=8):
    b = p * n
    q, k_new, v_new = (jnp.asarray(rng.normal(size=shape), jnp.float32)
                       for shape in ((b, h, d), (b, kv, d), (b, kv, d)))
    pk, pv = (jnp.asarray(rng.normal(size=(p, kv, tp, d)), jnp.float32) for _ in range(2))
    ck, cv = (jnp.asarray(rng.normal(size=(b, kv, s, d)), jnp.float32) for _ in range(2))
    prompt_valid = jnp.asarray(rng.random((p, tp)) < 0.7)
    return q, k_new, v_new, pk, pv, prompt_valid, ck, cv


@pytest.mark.parametrize("length, block", [(0, 3), (4, 3), (7, 3), (6, 4),
                                           *(pytest.param(*c, marks=pytest.mark.slow)
                                             for c in [(1, 3), (3, 3), (5, 7), (2, 64)])])
def test_live_slot_path_equals_reading_every_slot(length, block):
    """The TPU path (own cache read in blocks up to the live slots, online softmax) gives the full
    path's values; the last block overlaps the previous one when block does not divide S."""
    rng = np.random.default_rng(length * 10 + block)
    args = _attend_inputs(rng)
    s = args[-1].shape[2]
    for valid in (jnp.arange(s) < length, jnp.asarray(rng.random(s) < 0.5) & (jnp.arange(s) < length)):
        want = kv_cache.attend_decode(*args, valid, live=False)
        got = kv_cache.attend_decode(*args, valid, live=True, block=block)
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-5, atol=1e-6)


def test_live_slot_path_never_reads_blocks_past_the_live_slots():
    """NaN in the own-cache blocks after the live ones: the full path reads them (0 x NaN = NaN),
    the live path does not touch them."""
    q, k_new, v_new, pk, pv, prompt_valid, ck, cv = _attend_inputs(np.random.default_rng(3), s=12)
    valid = jnp.arange(12) < 5                          # live: blocks 0, 1 of 3 slots (slots 0..5)
    ck, cv = ck.at[:, :, 6:].set(jnp.nan), cv.at[:, :, 6:].set(jnp.nan)
    args = (q, k_new, v_new, pk, pv, prompt_valid, ck, cv, valid)
    assert np.isnan(np.asarray(kv_cache.attend_decode(*args, live=False))).all()
    got = kv_cache.attend_decode(*args, live=True, block=3)
    want = kv_cache.attend_decode(q, k_new, v_new, pk, pv, prompt_valid, ck[:, :, :6], cv[:, :, :6], valid[:6],
                                  live=False)
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-5, atol=1e-6)


def test_live_slot_path_is_the_default_only_when_compiling_for_tpu(monkeypatch):
    from maxk_jax.models import attention
    calls = []
    monkeypatch.setattr(kv_cache, "_attend_live", lambda *a: calls.append(a) or a[0])
    args = _attend_inputs(np.random.default_rng(0))
    kv_cache.attend_decode(*args, jnp.arange(7) < 3)
    assert not calls                                    # CPU: every slot, as before
    monkeypatch.setattr(attention, "context_platform", lambda: "tpu")
    kv_cache.attend_decode(*args, jnp.arange(7) < 3)
    assert len(calls) == 1


def test_mean_live_blocks():
    assert kv_cache.mean_live_blocks(5, block=2) == (0 + 1 + 1 + 2) / 4       # steps see 0, 1, 2, 3 live slots
    assert kv_cache.mean_live_blocks(1) == 0.0
