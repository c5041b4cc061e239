"""maxk_jax/sampling/lm_head_draw.py: jax's threefry Gumbel noise bit for bit, the fused LM head + draw
(Pallas interpret mode on CPU) against the XLA logits and draw, `generate` with decode_draw="pallas",
when it applies, that the decode loop then runs the kernel (its traced program), and (with the CUDA
plugin) the kernel compiled for a deviceless H100, alone and in the whole decode loop."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from maxk_jax import sampling
from maxk_jax.models import qwen2
from maxk_jax.sampling import lm_head_draw as lhd
from maxk_jax.sampling._draw import draw_three_pass
from tests.sampling.decode_kernels import decode_loop_kernels


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_noise_is_jax_random_gumbel_bit_for_bit(seed):
    key = jax.random.fold_in(jax.random.key(seed), 7 + seed)
    k0, k1 = jax.random.key_data(key)
    bits = lhd.threefry_bits(k0, k1, jnp.arange(3000, dtype=jnp.uint32))
    assert (np.asarray(bits) == np.asarray(jax.random.bits(key, (3000,), jnp.uint32))).all()
    noise = lhd.gumbel_from_bits(bits)
    assert (np.asarray(noise) == np.asarray(jax.random.gumbel(key, (3000,), jnp.float32))).all()


def _xla_draw(h, w, tied, keys, temperature):
    """The sampler's XLA path: float32 logits, / temperature, vmapped jax.random.gumbel, the draw."""
    eq = "be,ve->bv" if tied else "be,ev->bv"
    scaled = jnp.einsum(eq, h, w.astype(h.dtype), preferred_element_type=jnp.float32) / np.float32(temperature)
    noise = jax.vmap(lambda k: jax.random.gumbel(k, scaled.shape[1:], jnp.float32))(keys)
    return draw_three_pass(noise, scaled)


@pytest.mark.parametrize("tied,rows,vocab,dtype", [(True, 5, 1000, jnp.bfloat16), (False, 19, 700, jnp.bfloat16),
                                                   (True, 3, 300, jnp.float32)])
def test_fused_draw_equals_the_xla_logits_and_draw(tied, rows, vocab, dtype):
    # rows not a multiple of the row tile, a vocabulary not a multiple of the column tile (masked),
    # both weight layouts; a float32 weight with bf16 h is cast tile by tile
    rng = np.random.default_rng(rows)
    h = jnp.asarray(rng.normal(size=(rows, 64)), dtype)
    w = jnp.asarray(rng.normal(size=(vocab, 64) if tied else (64, vocab)) * 0.3, jnp.float32)
    keys = jax.vmap(jax.random.fold_in, in_axes=(0, None))(jax.random.split(jax.random.key(rows), rows), 4)
    tokens, logp = lhd.draw_from_hidden(h, w, tied, jax.random.key_data(keys), 0.7, interpret=True, block_v=128,
                                        block_rows=16)
    ref_tokens, ref_logp = _xla_draw(h, w, tied, keys, 0.7)
    assert tokens.dtype == jnp.int32 and logp.shape == (rows,)
    np.testing.assert_array_equal(np.asarray(tokens), np.asarray(ref_tokens))
    np.testing.assert_allclose(np.asarray(logp), np.asarray(ref_logp), rtol=0, atol=2e-5)


def test_bad_arguments_are_named_before_the_kernel():
    h, w, kd = jnp.zeros((4, 32), jnp.bfloat16), jnp.zeros((100, 32), jnp.bfloat16), jnp.zeros((4, 2), jnp.uint32)
    with pytest.raises(ValueError, match="temperature > 0, got 0.0"):
        lhd.draw_from_hidden(h, w, True, kd, 0.0, interpret=True)
    with pytest.raises(ValueError, match=r"weight \(100, 32\) \(tied=False\)"):
        lhd.draw_from_hidden(h, w, False, kd, 1.0, interpret=True)
    with pytest.raises(ValueError, match="block_rows=24"):
        lhd.draw_from_hidden(h, w, True, kd, 1.0, interpret=True, block_rows=24)
    with pytest.raises(ValueError, match="key_data"):
        lhd.draw_from_hidden(h, w, True, kd[:3], 1.0, interpret=True)
    with pytest.raises(ValueError, match="decode_draw='fused'"):
        qwen2.Qwen2Config(vocab_size=8, hidden_size=16, intermediate_size=8, num_layers=1, num_heads=2,
                          num_kv_heads=1, decode_draw="fused")


def test_applies_to_plain_temperature_sampling_with_threefry_keys_only():
    keys = jax.random.split(jax.random.key(0), 4)
    assert lhd.applies(1.0, 0, 1.0, keys)
    assert not lhd.applies(0.0, 0, 1.0, keys)               # greedy
    assert not lhd.applies(1.0, 5, 1.0, keys) and not lhd.applies(1.0, 0, 0.9, keys)   # top-k / top-p
    assert not lhd.applies(1.0, 0, 1.0, jax.random.split(jax.random.key(0, impl="rbg"), 4))
    assert not lhd.applies(1.0, 0, 1.0, jax.random.key_data(keys))   # raw key data: not typed
    with jax.threefry_partitionable(False):                           # other bits for the same key
        assert not lhd.applies(1.0, 0, 1.0, keys)
    mesh = jax.sharding.Mesh(np.array(jax.devices()[:1]), ("data",))
    assert lhd.applies(1.0, 0, 1.0, keys, mesh)                         # a mesh of one device
    assert not lhd.applies(1.0, 0, 1.0, keys, hidden_size=24)           # not tiled by 16


def test_generate_with_the_fused_draw_gives_the_xla_samples():
    config = qwen2.Qwen2Config(vocab_size=300, hidden_size=32, intermediate_size=64, num_layers=2, num_heads=4,
                               num_kv_heads=2, max_position_embeddings=128, pad_token_id=0, dtype="float32")
    params = qwen2.init_params(config, jax.random.key(3))
    prompts = [[5, 9, 2, 7], [3, 3, 8]]
    kwargs = dict(n=3, max_new_tokens=6, key=jax.random.key(11), temperature=0.8)
    ref = sampling.generate(config, params, prompts, **kwargs)
    got = sampling.generate(config.replace(decode_draw="pallas"), params, prompts, **kwargs)
    np.testing.assert_array_equal(np.asarray(got.tokens), np.asarray(ref.tokens))
    np.testing.assert_allclose(np.asarray(got.logprobs), np.asarray(ref.logprobs), rtol=0, atol=2e-5)
    untied = config.replace(tie_word_embeddings=False, decode_draw="pallas")
    params_untied = qwen2.init_params(untied, jax.random.key(4))
    ref = sampling.generate(untied.replace(decode_draw="xla"), params_untied, prompts, **kwargs)
    got = sampling.generate(untied, params_untied, prompts, **kwargs)
    np.testing.assert_array_equal(np.asarray(got.tokens), np.asarray(ref.tokens))


LOOP_CONFIG = qwen2.Qwen2Config(vocab_size=300, hidden_size=64, intermediate_size=64, num_layers=2, num_heads=4,
                                num_kv_heads=2, max_position_embeddings=128, pad_token_id=0, dtype="float32")
PLAIN = sampling.SamplerSettings(n=2, max_new_tokens=8)


def test_the_decode_loop_runs_the_fused_kernel_exactly_where_it_applies():
    """Not only the same samples (above): with decode_draw="pallas" and plain temperature sampling the
    decode loop's program holds ONE Pallas call, the fused LM head + draw (interpreted on CPU; compiled
    when tracing for a GPU); where `applies` says no -- top-k, top-p, rbg keys -- or with decode_draw="xla",
    none (the loop computes the logits and draws from them)."""
    fused = LOOP_CONFIG.replace(decode_draw="pallas")
    keys = jax.random.split(jax.random.key(0), 4)
    assert lhd.applies(PLAIN.temperature, PLAIN.top_k, PLAIN.top_p, keys, None, fused.hidden_size)
    assert decode_loop_kernels(fused, PLAIN) == [("lm_head_draw", True)]
    assert ("lm_head_draw", False) in decode_loop_kernels(fused, PLAIN, platform="gpu")   # the GPU's: compiled
    assert decode_loop_kernels(LOOP_CONFIG, PLAIN) == []
    others = [(sampling.SamplerSettings(n=2, max_new_tokens=8, top_k=5), None),
              (sampling.SamplerSettings(n=2, max_new_tokens=8, top_p=0.9), None), (PLAIN, "rbg")]
    for settings, impl in others:
        assert not lhd.applies(settings.temperature, settings.top_k, settings.top_p,
                               jax.random.split(jax.random.key(0, impl=impl), 4), None, fused.hidden_size)
        assert decode_loop_kernels(fused, settings, key_impl=impl) == [], (settings, impl)


@pytest.mark.slow
@pytest.mark.gpu_plugin
def test_h100_decode_loop_runs_the_fused_draw_as_one_more_triton_kernel():
    """The whole decode loop compiled for a deviceless H100: decode_draw="pallas" adds one Triton kernel per
    step to the decode attention's two per layer (decode_draw="xla": those only)."""
    from maxk_jax.planning import gpu_plan
    config = qwen2.Qwen2Config(vocab_size=512, hidden_size=64, intermediate_size=128, num_layers=2, num_heads=4,
                               num_kv_heads=2, dtype="bfloat16", decode_attention="pallas")
    settings = sampling.SamplerSettings(n=2, max_new_tokens=32)
    counts = [gpu_plan.gpu_decode_report(c, settings, 2, 16)["kernel_ops"].get("custom-call", 0)
              for c in (config, config.replace(decode_draw="pallas"))]
    assert counts == [2 * config.num_layers, 2 * config.num_layers + 1], counts


@pytest.mark.slow
@pytest.mark.gpu_plugin
def test_h100_compile_of_the_fused_draw_at_the_preset_shapes():
    from maxk_jax.planning import gpu_plan
    from maxk_jax.runtime import sharding as sh
    mesh = gpu_plan.target_mesh("h100")
    rep = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
    for name in ("qwen2.5-coder-1.5b", "qwen2.5-coder-7b"):
        c = qwen2.preset(name)
        weight, axis = qwen2.lm_head_weight(c, qwen2.abstract_params(c))
        args = (jax.ShapeDtypeStruct((128, c.hidden_size), jnp.bfloat16, sharding=rep),
                jax.ShapeDtypeStruct(weight.shape, jnp.bfloat16, sharding=rep),
                jax.ShapeDtypeStruct((128, 2), jnp.uint32, sharding=rep))
        with sh.activation_sharding(mesh):     # compiling for the GPU: the kernel, not its interpretation
            text = jax.jit(lambda h, w, kd, tied=axis == 0: lhd.draw_from_hidden(h, w, tied, kd, 1.0)).lower(
                *args).compile().as_text()
        assert text.count('custom_call_target="__gpu$xla.gpu.triton"') == 1
        assert f"f32[128,{c.vocab_size}]" not in text      # no logits array
