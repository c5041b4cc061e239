"""logprobs: the chunked, completion-only path equals today's full-logits path (values and
gradients wrt params, float32, padding, several vocabulary chunk sizes incl. ragged ones)."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from maxk_jax.rl import logprobs
from maxk_jax.rl import losses
from maxk_jax.models import qwen2

V = 60  # chunks 12, 20 divide it (strided chunks); 7, 16 do not (contiguous, ragged last chunk)
CONFIG = qwen2.Qwen2Config(vocab_size=V, hidden_size=32, intermediate_size=64, num_layers=2,
                           num_heads=4, num_kv_heads=2, rope_theta=10000.0)
TIED = CONFIG.replace(tie_word_embeddings=True)
B, SP, T = 3, 4, 5


def _batch(seed):
    rng = np.random.default_rng(seed)
    tokens = rng.integers(0, V, size=(B, SP + T)).astype(np.int32)
    attn = np.ones((B, SP + T), bool)
    attn[0, :2] = False  # left padding
    attn[1, SP + 3:] = False  # completion ended early (padding after EOS)
    return jnp.asarray(tokens), jnp.asarray(attn)


def _reference(config, params, tokens, attn, temperature, top_k=0, top_p=1.0):
    """Today's path: full [B, T, V] logits, sliced, then log-softmax / truncation, entropy."""
    logits = logprobs.completion_logits(config, params, tokens, attn, T, temperature)
    lp = logprobs.truncated_logprobs(logits, tokens[:, -T:], top_k, top_p)
    return lp, losses.token_entropy(logits)


def _loss(lp, ent, attn):
    """A scalar that weights every counted position differently (exercises all gradients)."""
    w = jnp.where(attn[:, -T:], jnp.linspace(0.5, 1.5, B * T).reshape(B, T), 0.0)
    return jnp.sum(w * lp) + 0.3 * jnp.sum(w * ent)


@pytest.mark.parametrize("config", [CONFIG, TIED], ids=["untied", "tied"])
@pytest.mark.parametrize("chunk", [7, 12, 16, 20, 60, 100])
def test_values_and_grads_match_full_logits(config, chunk):
    params = qwen2.init_params(config, jax.random.key(3))
    params = jax.tree.map(lambda x: x * 4.0 if x.ndim >= 2 else x, params)  # peakier softmax
    tokens, attn = _batch(0)
    temperature = 0.7

    def ours(p):
        lp, ent = logprobs.completion_logprobs(config, p, tokens, attn, T, temperature=temperature,
                                               with_entropy=True, vocab_chunk=chunk)
        return _loss(lp, ent, attn), (lp, ent)

    def ref(p):
        lp, ent = _reference(config, p, tokens, attn, temperature)
        return _loss(lp, ent, attn), (lp, ent)

    (l1, (lp1, e1)), g1 = jax.value_and_grad(ours, has_aux=True)(params)
    (l2, (lp2, e2)), g2 = jax.value_and_grad(ref, has_aux=True)(params)
    np.testing.assert_allclose(lp1, lp2, atol=1e-5, rtol=1e-5)
    np.testing.assert_allclose(e1, e2, atol=1e-5, rtol=1e-5)
    np.testing.assert_allclose(l1, l2, atol=1e-5, rtol=1e-5)
    for path, a in jax.tree_util.tree_leaves_with_path(g1):
        b = g2
        for key in path:
            b = b[key.key]
        scale = max(float(jnp.max(jnp.abs(b))), 1e-3)
        np.testing.assert_allclose(np.asarray(a) / scale, np.asarray(b) / scale, atol=1e-5,
                                   err_msg=jax.tree_util.keystr(path))


@pytest.mark.parametrize("top_k,top_p,row_chunk", [(5, 1.0, 4), (0, 0.7, 7), (6, 0.5, 256)])
def test_truncated_values_and_grads_match(top_k, top_p, row_chunk):
    params = qwen2.init_params(CONFIG, jax.random.key(4))
    params = jax.tree.map(lambda x: x * 4.0 if x.ndim >= 2 else x, params)
    tokens, attn = _batch(1)

    def ours(p):
        lp, ent = logprobs.completion_logprobs(CONFIG, p, tokens, attn, T, temperature=1.3,
                                               top_k=top_k, top_p=top_p, with_entropy=True,
                                               row_chunk=row_chunk)
        return _loss(lp, ent, attn), (lp, ent)

    def ref(p):
        lp, ent = _reference(CONFIG, p, tokens, attn, 1.3, top_k, top_p)
        return _loss(lp, ent, attn), (lp, ent)

    (_, (lp1, e1)), g1 = jax.value_and_grad(ours, has_aux=True)(params)
    (_, (lp2, e2)), g2 = jax.value_and_grad(ref, has_aux=True)(params)
    np.testing.assert_allclose(lp1, lp2, atol=1e-5, rtol=1e-5)
    np.testing.assert_allclose(e1, e2, atol=1e-5, rtol=1e-5)
    assert np.all(np.isfinite(np.asarray(lp1)))
    for a, b in zip(jax.tree.leaves(g1), jax.tree.leaves(g2)):
        scale = max(float(jnp.max(jnp.abs(b))), 1e-3)
        np.testing.assert_allclose(np.asarray(a) / scale, np.asarray(b) / scale, atol=1e-5)


def test_no_full_vocab_float32_buffer_in_the_chunked_grad():
    """With 4 / 5 chunks the HLO of the gradient holds no [B, T, V] (or larger) float32 value."""
    params = qwen2.init_params(CONFIG, jax.random.key(0))
    tokens, attn = _batch(2)

    for chunk in (16, 12):  # contiguous (ragged) and strided chunks
        def f(p, chunk=chunk):
            lp, ent = logprobs.completion_logprobs(CONFIG, p, tokens, attn, T, with_entropy=True,
                                                   vocab_chunk=chunk)
            return jnp.sum(lp) + jnp.sum(ent)

        hlo = jax.jit(jax.grad(f)).lower(params).as_text()
        assert f"{B}x{T}x{V}xf32" not in hlo and f"{B}x{SP + T}x{V}xf32" not in hlo
    ref = jax.jit(jax.grad(lambda p: jnp.sum(_reference(CONFIG, p, tokens, attn, 1.0)[0]))).lower(params)
    assert f"x{V}xf32" in ref.as_text()  # the check above can fail


def test_pick_vocab_chunk_and_errors():
    assert logprobs.pick_vocab_chunk(100, 8192) == 100
    for v in (152064, 151936, 32768):  # Qwen2.5-7B, Qwen2.5-0.5B, a power of two
        c = logprobs.pick_vocab_chunk(v, 8192)
        assert v % c == 0 and 4096 <= c <= 8192
    assert logprobs.pick_vocab_chunk(65537, 8192) == 8192  # prime: ragged last chunk
    h = jnp.zeros((2, 3, 8))
    w = jnp.zeros((10, 8))
    y = jnp.zeros((2, 3), jnp.int32)
    with pytest.raises(ValueError, match="vocab_chunk=0"):
        logprobs.token_logprobs(h, w, 0, y, vocab_chunk=0)
    with pytest.raises(ValueError, match="hidden"):
        logprobs.token_logprobs(h, w, 1, y)
    with pytest.raises(ValueError, match="temperature=0"):
        logprobs.token_logprobs(h, w, 0, y, temperature=0)
    with pytest.raises(ValueError, match="completion_len=9"):
        logprobs.completion_hidden(CONFIG, qwen2.init_params(CONFIG, jax.random.key(0)),
                                   *_batch(0), 9)
