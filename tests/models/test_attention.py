"""models.attention: the chunked and dot_product implementations equal the float32 reference
(values and gradients, grouped-query heads, left padding with fully masked query rows), and the
whole model's logits and gradients do not depend on the implementation."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from maxk_jax.models import attention as attn
from maxk_jax.models import qwen2


def _inputs(b=2, t=32, h=4, kv=2, d=8, seed=0):
    kq, kk, kv_, _ = jax.random.split(jax.random.key(seed), 4)
    q = jax.random.normal(kq, (b, t, h, d), jnp.float32)
    k = jax.random.normal(kk, (b, t, kv, d), jnp.float32)
    v = jax.random.normal(kv_, (b, t, kv, d), jnp.float32)
    valid = np.ones((b, t), bool)
    valid[-1, :11] = False                                  # left padding: 11 query rows see no key
    mask = jnp.tril(jnp.ones((t, t), bool))[None] & jnp.asarray(valid)[:, None, :]
    return q, k, v, mask


@pytest.mark.parametrize("impl, chunk", [("chunked", 8), ("chunked", 16), ("dot_product", 0)])
def test_values_and_gradients_match_the_reference(impl, chunk):
    q, k, v, mask = _inputs()
    ref = attn.attend(q, k, v, mask)
    out = attn.attention(q, k, v, mask, impl, chunk or 512)
    np.testing.assert_allclose(np.asarray(out), np.asarray(ref), atol=1e-5)
    w = jax.random.normal(jax.random.key(9), ref.shape)

    def loss(f):
        return lambda q, k, v: jnp.sum(f(q, k, v) * w)

    g_ref = jax.grad(loss(lambda q, k, v: attn.attend(q, k, v, mask)), argnums=(0, 1, 2))(q, k, v)
    g = jax.grad(loss(lambda q, k, v: attn.attention(q, k, v, mask, impl, chunk or 512)), argnums=(0, 1, 2))(q, k, v)
    for a, b in zip(g, g_ref):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-5)


def test_query_blocks_and_the_fallback():
    assert [attn.query_block(t, 512) for t in (300, 512, 768, 1024, 2048, 1031)] == [300, 512, 384, 512, 512, 1031]
    q, k, v, mask = _inputs(t=23)                           # prime length: one block
    np.testing.assert_array_equal(np.asarray(attn.attend_chunked(q, k, v, mask, 16)),
                                  np.asarray(attn.attend(q, k, v, mask)))
    q, k, v, mask = _inputs(t=24)                           # blocks of 8 of a 24-token sequence
    np.testing.assert_allclose(np.asarray(attn.attend_chunked(q, k, v, mask, 10)),
                               np.asarray(attn.attend(q, k, v, mask)), atol=1e-6)
    with pytest.raises(ValueError, match="chunk must be >= 1, got 0"):
        attn.attend_chunked(q, k, v, mask, 0)
    with pytest.raises(ValueError, match="'flash' is not one of"):
        attn.attention(q, k, v, mask, "flash")


def test_chunked_keeps_no_square_score_tensor():
    """The compiled gradient of the chunked path holds no [.., T, S] float32 buffer."""
    q, k, v, mask = _inputs(b=1, t=256, h=4, kv=2, d=8)

    def grad_text(impl):
        f = jax.grad(lambda q: jnp.sum(attn.attention(q, k, v, mask, impl, 32)))
        return jax.jit(f).lower(q).compile().as_text()

    assert "256,256]" in grad_text("xla") and "256,256]" not in grad_text("chunked")


def test_model_logits_and_gradients_do_not_depend_on_the_implementation():
    base = qwen2.Qwen2Config(vocab_size=64, hidden_size=32, intermediate_size=64, num_layers=2, num_heads=4,
                             num_kv_heads=2, max_position_embeddings=128, attention="xla")
    params = qwen2.init_params(base, jax.random.key(0))
    tokens = jax.random.randint(jax.random.key(1), (2, 32), 0, 64)
    mask = jnp.ones((2, 32), jnp.int32).at[0, :5].set(0)
    ref = qwen2.logits(base, params, tokens, mask)
    for impl in ("chunked", "dot_product"):
        cfg = base.replace(attention=impl, attention_chunk=8)
        np.testing.assert_allclose(np.asarray(qwen2.logits(cfg, params, tokens, mask)), np.asarray(ref), atol=1e-5)

    def loss(cfg):
        return lambda p: jnp.sum(jax.nn.log_softmax(qwen2.logits(cfg, p, tokens, mask))[..., 3] * mask)

    g_ref = jax.grad(loss(base))(params)
    g = jax.grad(loss(base.replace(attention="chunked", attention_chunk=8)))(params)
    for a, b in zip(jax.tree.leaves(g), jax.tree.leaves(g_ref)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-5)


def test_config_validation():
    with pytest.raises(ValueError, match="attention='flash'"):
        qwen2.preset("qwen2.5-coder-0.5b", attention="flash")
    with pytest.raises(ValueError, match="attention_chunk must be an int >= 1, got 0"):
        qwen2.preset("qwen2.5-coder-0.5b", attention_chunk=0)


def test_auto_is_dot_product_when_compiling_for_a_gpu_and_chunked_elsewhere():
    from jax.sharding import AbstractDevice, AbstractMesh, AxisType
    assert [attn.resolve("auto", p) for p in ("gpu", "cpu", "tpu")] == ["dot_product", "chunked", "chunked"]
    assert attn.resolve("xla", "gpu") == "xla" and attn.resolve("auto") == "chunked"   # this CPU machine
    with pytest.raises(ValueError, match="'flash' is not one of"):
        attn.resolve("flash", "gpu")

    def mesh(platform):
        return AbstractMesh((1,), ("x",), axis_types=(AxisType.Auto,),
                            abstract_device=AbstractDevice(device_kind=platform, num_cores=None, platform=platform))

    seen = []
    for platform in ("gpu", "cpu"):
        with jax.sharding.use_abstract_mesh(mesh(platform)):   # e.g. a deviceless H100 mesh, seen inside jit
            jax.jit(lambda: seen.append(attn.resolve("auto")) or 0).lower()
    assert seen == ["dot_product", "chunked"]


def test_auto_is_the_default_and_the_same_program_as_chunked_on_cpu():
    assert qwen2.Qwen2Config(vocab_size=8, hidden_size=8, intermediate_size=8, num_layers=1, num_heads=2,
                             num_kv_heads=1).attention == "auto"
    base = qwen2.Qwen2Config(vocab_size=64, hidden_size=32, intermediate_size=64, num_layers=2, num_heads=4,
                             num_kv_heads=2, max_position_embeddings=128, attention="chunked", attention_chunk=8)
    params = qwen2.init_params(base, jax.random.key(0))
    tokens = jax.random.randint(jax.random.key(1), (2, 32), 0, 64)
    mask = jnp.ones((2, 32), jnp.int32).at[0, :5].set(0)

    def program(cfg):   # forward and gradient: the same StableHLO means the same bits
        loss = lambda p: jnp.sum(jax.nn.log_softmax(qwen2.logits(cfg, p, tokens, mask))[..., 3] * mask)  # noqa: E731
        return jax.jit(jax.value_and_grad(loss)).lower(params).as_text()

    chunked, auto = program(base), program(base.replace(attention="auto"))
    assert auto == chunked and chunked != program(base.replace(attention="dot_product"))


def test_compiling_for_gpu_names_the_gpu_platforms_and_defaults_to_the_one_compiled_for():
    from maxk_jax.models.attention import compiling_for_gpu
    assert compiling_for_gpu("gpu") and compiling_for_gpu("cuda")
    assert not compiling_for_gpu("cpu") and not compiling_for_gpu("tpu") and not compiling_for_gpu()   # here: CPU
