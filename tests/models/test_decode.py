"""models.decode: the unrolled decode step over per-layer weights gives exactly the values of the
scanned model's decode path in float32 (tied and untied head), and generate() draws the same tokens
and log-probs as a decode loop built on the scanned step, for the same keys. In bfloat16 XLA may
keep an intermediate in float32 across a fusion (excess precision) where the other program rounds
it, so there the values agree to bfloat16 rounding and the drawn tokens are the same."""
import functools

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from maxk_jax import sampling
from maxk_jax.models import decode, qwen2
from maxk_jax.sampling import _sampler


def _config(**kw):
    base = dict(vocab_size=97, hidden_size=32, intermediate_size=64, num_layers=3, num_heads=4,
                num_kv_heads=2, max_position_embeddings=256, rope_theta=10000.0, rms_norm_eps=1e-6,
                tie_word_embeddings=False)
    base.update(kw)
    return qwen2.Qwen2Config(**base)


@functools.partial(jax.jit, static_argnums=0)
def scanned_decode_step(config, params, tokens, positions, cache):
    """The decode step as the model ran it before the unrolled step: the layers as ONE nn.scan over
    the stacked weights and the stacked cache (Qwen2(mode="decode")), then every layer's K/V written
    into slot length."""
    valid = jnp.arange(cache.max_len) < cache.length
    stacked = [jnp.stack(x) for x in (cache.prompt_k, cache.prompt_v, cache.k, cache.v)]
    out, (k_new, v_new) = qwen2.Qwen2(config, mode="decode").apply(
        {"params": params}, tokens[:, None], positions[:, None].astype(jnp.int32),
        (cache.prompt_valid, valid), tuple(stacked))
    out, k_new, v_new = jax.lax.optimization_barrier((out, k_new, v_new))
    k = stacked[2].at[:, :, :, cache.length].set(k_new.astype(stacked[2].dtype), mode="drop")
    v = stacked[3].at[:, :, :, cache.length].set(v_new.astype(stacked[3].dtype), mode="drop")
    return out[:, 0], cache.replace(k=tuple(k), v=tuple(v), length=cache.length + 1)


@pytest.mark.parametrize("dtype,tie", [("float32", True), pytest.param("float32", False, marks=pytest.mark.slow),
                                       pytest.param("bfloat16", False, marks=pytest.mark.slow)])
def test_unrolled_step_equals_scanned_step(dtype, tie):
    config = _config(dtype=dtype, tie_word_embeddings=tie)
    params = qwen2.init_params(config, jax.random.key(1))
    rng = np.random.default_rng(0)
    p, n, tp, steps = 2, 3, 8, 4
    tokens = jnp.asarray(rng.integers(3, config.vocab_size, (p, tp)), jnp.int32)
    mask = jnp.asarray(np.arange(tp)[None] >= np.array([[0], [3]]))   # the second prompt left-padded
    cache = qwen2.init_cache(config, p, tp, steps, n)
    _, cache = qwen2.prefill(config, params, tokens, mask, cache, last_only=True)
    ref_cache, layered = cache, decode.unstack_layers(params)
    positions = jnp.repeat(mask.sum(1), n).astype(jnp.int32)
    for step in range(steps + 1):    # the last step writes past the end: dropped by both
        tok = jnp.asarray(rng.integers(3, config.vocab_size, (p * n,)), jnp.int32)
        want, ref_cache = scanned_decode_step(config, params, tok, positions + step, ref_cache)
        got, cache = decode.decode_step(config, layered, tok, positions + step, cache)
        chex.assert_shape(got, (p * n, config.vocab_size))
        chex.assert_type(got, jnp.float32)
        if dtype == "float32":
            np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
            chex.assert_trees_all_equal(cache, ref_cache)
        else:   # bfloat16: one rounding step of the largest logit
            np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=0, atol=1e-2)
            chex.assert_trees_all_close(jax.tree.map(lambda x: x.astype(jnp.float32), cache),
                                        jax.tree.map(lambda x: x.astype(jnp.float32), ref_cache), atol=2e-2)


def test_unstack_layers_splits_every_layer_once():
    config = _config()
    params = qwen2.init_params(config, jax.random.key(0))
    layered = decode.unstack_layers(params)
    assert decode.is_unstacked(layered) and not decode.is_unstacked(params)
    assert len(layered["layers"]) == config.num_layers
    for i, layer in enumerate(layered["layers"]):
        chex.assert_trees_all_equal(layer, jax.tree.map(lambda x: x[i], params["layers"]))
    assert decode.unstack_layers(layered) is layered
    chex.assert_trees_all_equal(layered["embed"], params["embed"])
    cache = qwen2.init_cache(config, 1, 4, 2, 1)
    short = {**layered, "layers": layered["layers"][:2]}
    with pytest.raises(ValueError, match="params have 2 layers, the cache 3"):
        decode.decode_step(config, short, jnp.zeros((1,), jnp.int32), jnp.zeros((1,), jnp.int32), cache)


def _reference_generate(config, params, prompts, n, t, key, settings, eos):
    """generate()'s loop in Python over the scanned decode step: the prefill, draw and record of
    the sampler, one jitted scanned step per token."""
    keys = jax.random.split(key, (len(prompts), n)).reshape(-1)
    tp = sampling.prompt_length_bucket(max(map(len, prompts)))
    tokens, mask = sampling.pad_prompts(prompts, tp, len(prompts), 0)
    first, cache = _sampler.prefill_prompts(config, settings, None, params, tokens, mask)
    lens = jnp.asarray(np.repeat(mask.sum(1), n), jnp.int32)
    stop = jnp.asarray(sampling.stop_id_array(eos, config.vocab_size))
    b = len(prompts) * n
    state = _sampler._LoopState(step=jnp.zeros((), jnp.int32), cache=cache, done=jnp.zeros((b,), bool),
                                tokens=jnp.zeros((b, t), jnp.int32), logprobs=jnp.zeros((b, t), jnp.float32),
                                lengths=jnp.zeros((b,), jnp.int32))
    draw = jax.jit(_sampler.draw, static_argnums=3)
    record = jax.jit(_sampler.record)
    pad = jnp.asarray(0, jnp.int32)
    state = record(state, *draw(keys, state.step, first, settings), stop, pad)
    while int(state.step) < t and not bool(jnp.all(state.done)):
        prev = state.tokens[:, int(state.step) - 1]
        logits, cache = scanned_decode_step(config, params, prev, lens + state.step - 1, state.cache)
        state = record(state.replace(cache=cache), *draw(keys, state.step, logits, settings), stop, pad)
    return state.tokens.reshape(len(prompts), n, t), state.logprobs.reshape(len(prompts), n, t)


@pytest.mark.parametrize("dtype", ["float32", pytest.param("bfloat16", marks=pytest.mark.slow)])
def test_generate_draws_what_the_scanned_decode_loop_draws(dtype):
    config = _config(dtype=dtype, tie_word_embeddings=True)
    params = qwen2.init_params(config, jax.random.key(2))
    prompts = [[5, 6, 7, 8, 9], [11, 12]]
    settings = sampling.SamplerSettings(n=4, max_new_tokens=10, temperature=0.9, top_k=40, top_p=0.95)
    key = jax.random.key(7)
    out = sampling.generate(config, params, prompts, n=4, max_new_tokens=10, key=key, temperature=0.9,
                            top_k=40, top_p=0.95, eos_id=3, pad_id=0)
    tokens, logprobs = _reference_generate(config, params, prompts, 4, 10, key, settings, 3)
    np.testing.assert_array_equal(np.asarray(out.tokens), np.asarray(tokens))
    if dtype == "float32":
        np.testing.assert_array_equal(np.asarray(out.logprobs), np.asarray(logprobs))
    else:
        np.testing.assert_allclose(np.asarray(out.logprobs), np.asarray(logprobs), rtol=0, atol=2e-2)


@pytest.mark.parametrize("tie", [True, False])
def test_prefill_over_layers_equals_the_scanned_prefill(tie):
    config = _config(tie_word_embeddings=tie)
    params = qwen2.init_params(config, jax.random.key(4))
    rng = np.random.default_rng(1)
    tokens = jnp.asarray(rng.integers(3, config.vocab_size, (2, 8)), jnp.int32)
    mask = jnp.asarray(np.arange(8)[None] >= np.array([[0], [5]]))
    cache = qwen2.init_cache(config, 2, 8, 3, 2)
    for last_only in (True, False):
        want = qwen2.prefill(config, params, tokens, mask, cache, last_only=last_only)
        got = decode.prefill(config, decode.unstack_layers(params), tokens, mask, cache, last_only=last_only)
        chex.assert_trees_all_equal(got, want)          # float32: bit for bit, logits and cache
    # stacked params go to the scanned prefill as they are
    chex.assert_trees_all_equal(decode.prefill(config, params, tokens, mask, cache), qwen2.prefill(
        config, params, tokens, mask, cache))
    short = {**decode.unstack_layers(params), "layers": decode.unstack_layers(params)["layers"][:2]}
    with pytest.raises(ValueError, match="params have 2 layers, the cache 3"):
        decode.prefill(config, short, tokens, mask, cache)


def test_generate_from_per_layer_weights_draws_what_stacked_weights_draw():
    """The one-copy path (per-layer weights, as the rollout copy hands them) gives the same tokens
    and log-probs as the stacked path (split inside the decode program) for the same keys."""
    config = _config()
    params = qwen2.init_params(config, jax.random.key(5))
    kw = dict(n=3, max_new_tokens=7, key=jax.random.key(8), temperature=0.8, top_p=0.9, eos_id=3)
    want = sampling.generate(config, params, [[5, 6, 7], [9, 10, 11, 12]], **kw)
    got = sampling.generate(config, decode.unstack_layers(params), [[5, 6, 7], [9, 10, 11, 12]], **kw)
    np.testing.assert_array_equal(np.asarray(got.tokens), np.asarray(want.tokens))
    np.testing.assert_array_equal(np.asarray(got.logprobs), np.asarray(want.logprobs))
    np.testing.assert_array_equal(np.asarray(got.lengths), np.asarray(want.lengths))


def test_decode_program_holds_no_second_copy_of_per_layer_weights():
    """The compiled decode loop's temporaries: stacked weights are split inside the program (a copy
    of the layer weights); per-layer weights are read as they are (temporaries far below them)."""
    config = _config(hidden_size=64, intermediate_size=256, num_layers=4, vocab_size=64)
    settings = sampling.SamplerSettings(n=2, max_new_tokens=4)
    stacked = jax.eval_shape(lambda: qwen2.init_params(config, jax.random.key(0)))
    layered = jax.eval_shape(decode.unstack_layers, stacked)
    layer_bytes = sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(stacked["layers"]))
    first, cache = jax.eval_shape(lambda: _sampler.prefill_prompts(
        config, settings, None, qwen2.init_params(config, jax.random.key(0)), jnp.ones((2, 16), jnp.int32),
        jnp.ones((2, 16), bool)))
    b = first.shape[0]
    args = (first, cache, jax.eval_shape(lambda: jax.random.split(jax.random.key(0), b)),
            jax.ShapeDtypeStruct((b,), jnp.int32), jax.ShapeDtypeStruct((b,), bool),
            jax.ShapeDtypeStruct((8,), jnp.int32), jax.ShapeDtypeStruct((), jnp.int32))

    def temps(params):
        return _sampler.decode_loop.lower(config, settings, None, params, *args).compile(
        ).memory_analysis().temp_size_in_bytes

    assert temps(stacked) >= layer_bytes                 # the split: a second copy of the layer weights
    assert temps(layered) < layer_bytes // 4             # none


@pytest.mark.slow
def test_generate_with_the_tpu_live_slot_attention_draws_the_same_tokens(monkeypatch):
    """The decode attention TPU compiles (own cache read up to the live slots, kv_cache._attend_live),
    forced on CPU: the same tokens, log-probs equal to float rounding."""
    config = _config()
    params = qwen2.init_params(config, jax.random.key(6))
    kw = dict(n=2, max_new_tokens=9, key=jax.random.key(9), temperature=0.8)
    want = sampling.generate(config, params, [[5, 6, 7], [9, 10]], **kw)
    monkeypatch.setattr(qwen2, "attend_decode", functools.partial(qwen2.attend_decode, live=True, block=4))
    jax.clear_caches()
    got = sampling.generate(config, params, [[5, 6, 7], [9, 10]], **kw)
    jax.clear_caches()
    np.testing.assert_array_equal(np.asarray(got.tokens), np.asarray(want.tokens))
    np.testing.assert_allclose(np.asarray(got.logprobs), np.asarray(want.logprobs), rtol=0, atol=1e-5)
