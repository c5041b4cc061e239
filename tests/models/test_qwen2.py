"""Qwen2 forward pass vs transformers' PyTorch oracle, KV cache, config parsing, presets."""
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from maxk_jax.models import convert, decode, qwen2
from tests.models.hf_fixtures import make_tiny_hf_checkpoint, make_tiny_hf_model


def _left_padded(rng: np.random.Generator, batch: int, length: int, vocab: int):
    tokens = rng.integers(0, vocab, (batch, length))
    mask = np.ones((batch, length), np.int32)
    for b in range(1, batch):
        mask[b, : rng.integers(1, length - 1)] = 0
    return tokens, mask


def _torch_logits(model, tokens: np.ndarray, mask: np.ndarray) -> np.ndarray:
    positions = np.maximum(np.cumsum(mask, -1) - 1, 0)
    with torch.no_grad():
        out = model(input_ids=torch.tensor(tokens), attention_mask=torch.tensor(mask),
                    position_ids=torch.tensor(positions))
    return out.logits.numpy()


@pytest.mark.parametrize("tie,heads,kv_heads,seed", [
    (False, 4, 2, 0),   # GQA 2:1, untied
    (True, 4, 2, 1),    # GQA, tied
    (False, 4, 4, 2),   # MHA
    (True, 4, 1, 3),    # MQA
    (False, 8, 2, 4),   # GQA 4:1, head_dim 4
])
def test_logits_match_transformers(tmp_path, tie, heads, kv_heads, seed):
    path = make_tiny_hf_checkpoint(tmp_path / "ckpt", tie_word_embeddings=tie, seed=seed,
                                   num_attention_heads=heads, num_key_value_heads=kv_heads)
    model = make_tiny_hf_model(seed=seed, tie_word_embeddings=tie, num_attention_heads=heads,
                               num_key_value_heads=kv_heads)
    config, params = convert.load_hf(path)
    assert config.tie_word_embeddings == tie and ("lm_head" in params) == (not tie)
    tokens, mask = _left_padded(np.random.default_rng(seed), 4, 11, config.vocab_size)
    ref = _torch_logits(model, tokens, mask)
    out = np.asarray(qwen2.logits(config, params, jnp.asarray(tokens), jnp.asarray(mask)))
    assert out.dtype == np.float32 and out.shape == ref.shape
    real = mask.astype(bool)
    assert np.abs(out - ref)[real].max() <= 1e-4
    # A left-padded row equals the same tokens run unpadded.
    row = 3
    alone = np.asarray(qwen2.logits(config, params, jnp.asarray(tokens[row:, real[row]])))
    np.testing.assert_allclose(out[row, real[row]], alone[0], atol=1e-5)


def _tiny(**kw) -> qwen2.Qwen2Config:
    base = dict(vocab_size=64, hidden_size=32, intermediate_size=48, num_layers=2, num_heads=4,
                num_kv_heads=2, rope_theta=10000.0)
    base.update(kw)
    return qwen2.Qwen2Config(**base)


def test_no_mask_equals_all_ones_mask():
    config = _tiny(tie_word_embeddings=True)
    params = qwen2.init_params(config, jax.random.key(0))
    tokens = jax.random.randint(jax.random.key(1), (2, 6), 0, config.vocab_size)
    a = qwen2.logits(config, params, tokens)
    b = qwen2.logits(config, params, tokens, jnp.ones_like(tokens))
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


@pytest.mark.parametrize("kv_heads", [2])
def test_prefill_and_decode_reproduce_full_forward(kv_heads):
    config = _tiny(num_kv_heads=kv_heads)
    params = qwen2.init_params(config, jax.random.key(kv_heads))
    rng = np.random.default_rng(kv_heads)
    prompt_len, steps = 6, 5
    tokens, mask = _left_padded(rng, 3, prompt_len + steps, config.vocab_size)
    mask[:, prompt_len:] = 1  # generated tokens are always real
    mask[1:, : prompt_len - 4] = 0
    full = np.asarray(qwen2.logits(config, params, tokens, mask))
    cache = qwen2.init_cache(config, 3, prompt_len + 2, steps)  # 2 spare prompt slots, n = 1
    pre, cache = qwen2.prefill(config, params, jnp.asarray(tokens[:, :prompt_len]),
                               jnp.asarray(mask[:, :prompt_len]), cache)
    real = mask[:, :prompt_len].astype(bool)
    assert np.abs(np.asarray(pre) - full[:, :prompt_len])[real].max() <= 1e-5
    assert int(cache.length) == 0 and cache.n == 1
    np.testing.assert_array_equal(np.asarray(cache.prompt_valid[:, :prompt_len]), real)
    assert not np.asarray(cache.prompt_valid[:, prompt_len:]).any()
    positions = mask[:, :prompt_len].sum(-1)
    for i in range(steps):
        step, cache = decode.decode_step(config, params, jnp.asarray(tokens[:, prompt_len + i]),
                                        jnp.asarray(positions + i), cache)
        assert step.shape == (3, config.vocab_size) and step.dtype == jnp.float32
        np.testing.assert_allclose(np.asarray(step), full[:, prompt_len + i], atol=1e-5)
    assert int(cache.length) == steps
    # A write past the last slot is dropped: the cache is unchanged, only length advances.
    _, after = decode.decode_step(config, params, jnp.asarray(tokens[:, 0]),
                                 jnp.asarray(positions + steps), cache)
    np.testing.assert_array_equal(np.asarray(after.k), np.asarray(cache.k))


def test_shared_prefix_cache_decodes_n_samples_per_prompt():
    config = _tiny()
    params = qwen2.init_params(config, jax.random.key(5))
    rng = np.random.default_rng(5)
    prompts, mask = _left_padded(rng, 2, 5, config.vocab_size)
    n, steps = 3, 3
    cache = qwen2.init_cache(config, 2, 5, steps, n)
    last, cache = qwen2.prefill(config, params, jnp.asarray(prompts), jnp.asarray(mask), cache,
                                last_only=True)
    assert last.shape == (2, config.vocab_size)
    np.testing.assert_allclose(np.asarray(last), np.asarray(
        qwen2.logits(config, params, prompts, mask))[:, -1], atol=1e-5)
    # The prompt block holds each prompt once; only the samples' own block has P * n rows.
    assert cache.prompt_k[0].shape[0] == 2 and cache.k[0].shape[0] == 6 and cache.n == n
    new = rng.integers(0, config.vocab_size, (6, steps))  # a different completion per sample
    positions = np.repeat(mask.sum(-1), n)
    seqs = np.concatenate([np.repeat(prompts, n, 0), new], 1)
    seq_mask = np.concatenate([np.repeat(mask, n, 0), np.ones((6, steps), np.int32)], 1)
    full = np.asarray(qwen2.logits(config, params, seqs, seq_mask))
    for i in range(steps):
        step, cache = decode.decode_step(config, params, jnp.asarray(new[:, i]),
                                        jnp.asarray(positions + i), cache)
        np.testing.assert_allclose(np.asarray(step), full[:, prompts.shape[1] + i], atol=1e-5)


def test_bad_inputs_raise_clear_errors():
    config = _tiny()
    params = qwen2.init_params(config, jax.random.key(0))
    with pytest.raises(ValueError, match="tokens must be"):
        qwen2.logits(config, params, jnp.zeros((5,), jnp.int32))
    with pytest.raises(ValueError, match="attention_mask shape"):
        qwen2.logits(config, params, jnp.zeros((2, 5), jnp.int32), jnp.ones((2, 4)))
    cache = qwen2.init_cache(config, 2, 4, 3)
    with pytest.raises(ValueError, match="exceeds cache prompt_len 4"):
        qwen2.prefill(config, params, jnp.zeros((2, 5), jnp.int32), jnp.ones((2, 5)), cache)
    with pytest.raises(ValueError, match="new_len > 0"):
        qwen2.init_cache(config, 2, 4, 0)
    with pytest.raises(ValueError, match="sample batch 4 != tokens batch 3"):
        decode.decode_step(config, params, jnp.zeros((3,), jnp.int32), jnp.zeros((3,), jnp.int32),
                          qwen2.init_cache(config, 2, 4, 3, n=2))


def test_bfloat16_policy():
    config = _tiny(tie_word_embeddings=True)
    params = qwen2.init_params(config, jax.random.key(3))
    tokens = jax.random.randint(jax.random.key(4), (2, 7), 0, config.vocab_size)
    ref = qwen2.logits(config, params, tokens)
    out = qwen2.logits(config.replace(dtype="bfloat16"), params, tokens)
    assert out.dtype == jnp.float32
    assert float(jnp.abs(out - ref).max()) < 0.05 * float(jnp.abs(ref).max())
    shapes = qwen2.abstract_params(config.replace(param_dtype="bfloat16"))
    assert all(x.dtype == jnp.bfloat16 for x in jax.tree.leaves(shapes))


def _loss(params, config, tokens):
    return jnp.mean(qwen2.logits(config, params, tokens) ** 2)


def test_remat_flag_rematerialises_layers():
    config = _tiny()
    shapes = qwen2.abstract_params(config)
    tokens = jnp.zeros((1, 4), jnp.int32)
    grad = jax.grad(_loss)
    assert "remat" not in str(jax.make_jaxpr(grad, static_argnums=1)(shapes, config, tokens))
    assert "remat" in str(jax.make_jaxpr(grad, static_argnums=1)(
        shapes, config.replace(remat=True), tokens))


@pytest.mark.slow
def test_remat_gradients_equal_plain_gradients():
    config = _tiny()
    params = qwen2.init_params(config, jax.random.key(3))
    tokens = jax.random.randint(jax.random.key(4), (2, 7), 0, config.vocab_size)
    grad = jax.jit(jax.grad(_loss), static_argnums=1)
    g_plain = grad(params, config, tokens)
    g_remat = grad(params, config.replace(remat=True), tokens)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6),
                 g_plain, g_remat)


def test_remat_policy_dots_keeps_the_projections_and_recomputes_no_matmul_but_attention():
    config = _tiny()
    params = qwen2.init_params(config, jax.random.key(3))
    tokens = jax.random.randint(jax.random.key(4), (2, 7), 0, config.vocab_size)
    grad = jax.jit(jax.grad(_loss), static_argnums=1)
    dots = {}
    for name, cfg in (("plain", config), ("nothing", config.replace(remat=True)),
                      ("dots", config.replace(remat=True, remat_policy="dots"))):
        dots[name] = grad.lower(params, cfg, tokens).as_text().count("dot_general")
    # (the layers are one scanned body: counts are per layer) under "nothing" the backward pass runs
    # the projections whose outputs it needs (q, k, v, gate, up) and the attention again; under "dots"
    # only the attention's two matmuls (scores, weighted values)
    assert dots["dots"] - dots["plain"] == 2
    assert dots["nothing"] - dots["dots"] >= 5
    g_plain = grad(params, config, tokens)
    g_dots = grad(params, config.replace(remat=True, remat_policy="dots"), tokens)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7), g_plain, g_dots)


def test_remat_policy_auto_is_dots_on_gpu_and_nothing_elsewhere():
    assert _tiny().remat_policy == "auto"
    assert [qwen2.resolve_remat_policy("auto", p) for p in ("gpu", "cuda", "cpu", "tpu")] == [
        "dots", "dots", "nothing", "nothing"]
    assert qwen2.resolve_remat_policy("auto") == "nothing"      # compiled here, for the CPU
    assert qwen2.resolve_remat_policy("dots", "cpu") == "dots"
    assert qwen2.remat_policy("auto") is qwen2.remat_policy("nothing")


def test_remat_policy_is_checked():
    with pytest.raises(ValueError, match="remat_policy='some'"):
        _tiny().replace(remat_policy="some")
    with pytest.raises(ValueError, match="remat_policy='some'"):
        qwen2.remat_policy("some")


def test_every_param_has_logical_axes():
    config = _tiny()
    shapes = qwen2.abstract_params(config)
    axes = qwen2.logical_axes(config)
    flat_s = jax.tree_util.tree_leaves_with_path(shapes)
    flat_a = jax.tree.leaves(axes, is_leaf=lambda x: isinstance(x, jax.sharding.PartitionSpec))
    assert len(flat_s) == len(flat_a)
    for (path, s), a in zip(flat_s, flat_a):
        assert len(a) == len(s.shape) and all(isinstance(n, str) for n in a), (path, a)
    assert math.prod(shapes["embed"]["embedding"].shape) == 64 * 32


@pytest.mark.parametrize("k,n", [(8, 24), (24, 8)])  # both branches of the weight gradient
def test_dense_gradients_equal_einsum_gradients(k, n):
    x = jax.random.normal(jax.random.key(0), (3, 5, k))
    w = jax.random.normal(jax.random.key(1), (k, n))
    g = jax.random.normal(jax.random.key(2), (3, 5, n))
    ours = jax.vjp(qwen2.dense, x, w)[1](g)
    ref = jax.vjp(lambda a, b: jnp.einsum("btk,kn->btn", a, b), x, w)[1](g)
    for a, b in zip(ours, ref):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
    # bf16 operands, float32 output (the LM head): float32 cotangent, grads in the operand dtype
    xb, wb = x.astype(jnp.bfloat16), w.astype(jnp.bfloat16)
    out, vjp = jax.vjp(lambda a, b: qwen2.dense(a, b, jnp.float32), xb, wb)
    assert out.dtype == jnp.float32
    dx, dw = vjp(g)
    assert dx.dtype == dw.dtype == jnp.bfloat16
    np.testing.assert_allclose(dw.astype(jnp.float32), ref[1], rtol=0.05, atol=0.05 * float(jnp.abs(ref[1]).max()))


@pytest.mark.parametrize("tie", [False, True])
def test_hidden_states_times_lm_head_weight_are_the_logits(tie):
    config = _tiny(tie_word_embeddings=tie)
    params = qwen2.init_params(config, jax.random.key(5))
    tokens, mask = _left_padded(np.random.default_rng(0), 3, 6, config.vocab_size)
    h = qwen2.hidden_states(config, params, jnp.asarray(tokens), jnp.asarray(mask))
    w, axis = qwen2.lm_head_weight(config, params)
    got = jnp.einsum("bte,ve->btv" if axis == 0 else "bte,ev->btv", h, w)
    np.testing.assert_allclose(got, qwen2.logits(config, params, jnp.asarray(tokens), jnp.asarray(mask)),
                               rtol=1e-5, atol=1e-5)
