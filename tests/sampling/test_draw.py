"""maxk_jax.sampling._draw: the one-pass draw (the GPU / TPU lowering) against the three passes (the CPU
lowering, whose values are those of sampling_logprobs), run on CPU; and the deviceless H100 compile of
the sampler's draw reading the logits once (skipped without the CUDA plugin)."""
import re

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from absl.testing import parameterized

from maxk_jax import sampling
from maxk_jax.planning import gpu_plan, hlo
from maxk_jax.sampling import filtered_logits


def _inputs(seed: int, rows: int, vocab: int, temperature: float, top_k: int, top_p: float):
    rng = np.random.default_rng(seed)
    logits = jnp.asarray(rng.normal(size=(rows, vocab)) * 4, jnp.float32)
    scaled = filtered_logits(logits, temperature, top_k, top_p)
    keys = jax.random.split(jax.random.key(seed), rows)
    gumbels = jax.vmap(lambda k: jax.random.gumbel(k, (vocab,), jnp.float32))(keys)
    return gumbels, scaled


class OnePassTest(parameterized.TestCase):

    @chex.variants(with_jit=True, without_jit=True)
    @parameterized.parameters((1.0, 0, 1.0, 300), (0.7, 20, 1.0, 300), (1.3, 0, 0.9, 1000), (1.1, 1, 1.0, 64))
    def test_one_pass_equals_the_three_passes(self, temperature, top_k, top_p, vocab):
        gumbels, scaled = _inputs(7, 24, vocab, temperature, top_k, top_p)
        tokens, logp = self.variant(sampling.draw_one_pass)(gumbels, scaled)
        chex.assert_shape((tokens, logp), (24,))
        chex.assert_type((tokens, logp), (jnp.int32, jnp.float32))
        chex.assert_tree_all_finite(logp)
        want_tokens, want_logp = sampling.draw_three_pass(gumbels, scaled)
        np.testing.assert_array_equal(np.asarray(tokens), np.asarray(want_tokens))
        np.testing.assert_allclose(np.asarray(logp), np.asarray(want_logp), rtol=1e-5, atol=2e-6)
        assert np.all(np.isfinite(np.asarray(scaled)[np.arange(24), np.asarray(tokens)]))   # never a filtered token
        if top_k == 1:
            np.testing.assert_allclose(np.asarray(logp), 0.0, atol=1e-6)       # point mass: log-prob 0

    def test_ties_go_to_the_first_index_and_empty_halves_combine(self):
        scaled = jnp.asarray([[1.0, 3.0, 3.0, 0.0], [-jnp.inf, 2.0, -jnp.inf, 2.0], [5.0, 5.0, 5.0, 5.0]])
        tokens, logp = sampling.draw_one_pass(jnp.zeros_like(scaled), scaled)
        assert tokens.tolist() == jnp.argmax(scaled, axis=-1).tolist() == [1, 1, 0]
        np.testing.assert_allclose(np.asarray(logp), np.asarray(jax.nn.log_softmax(scaled)[jnp.arange(3), tokens]),
                                   rtol=1e-6)

    def test_draw_tokens_lowers_to_the_three_passes_on_cpu(self):
        gumbels, scaled = _inputs(3, 16, 500, 1.0, 0, 1.0)
        got = jax.jit(sampling.draw_tokens)(gumbels, scaled)
        want = sampling.draw_three_pass(gumbels, scaled)
        for g, w in zip(got, want):
            np.testing.assert_array_equal(np.asarray(g), np.asarray(w))    # bit for bit: the CPU form


@pytest.mark.gpu_plugin
def test_the_h100_draw_reads_the_logits_once():
    mesh = gpu_plan.target_mesh("h100")
    rep = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
    rows, vocab = 128, 151936                   # the 1.5B shape (XLA splits a small row reduction differently)
    keys = jax.eval_shape(lambda: jax.random.split(jax.random.key(0), rows))
    settings = sampling.SamplerSettings(n=2, max_new_tokens=8, temperature=1.1)
    text = jax.jit(sampling.draw, static_argnums=3).lower(
        jax.ShapeDtypeStruct(keys.shape, keys.dtype, sharding=rep), jax.ShapeDtypeStruct((), jnp.int32, sharding=rep),
        jax.ShapeDtypeStruct((rows, vocab), jnp.float32, sharding=rep), settings).compile().as_text()
    entry = hlo.parse_hlo(text)[re.search(r"^ENTRY %?([\w.\-]+)", text, re.M).group(1)]
    logits = [name for name, shape, op, _ in entry if op == "parameter" and shape.startswith(f"f32[{rows},{vocab}]")]
    assert len(logits) == 1, entry
    readers = [name for name, _, op, line in entry if op != "parameter" and re.search(rf"%{re.escape(logits[0])}\b",
                                                                                       line.split("=", 1)[1])]
    assert len(readers) == 1, readers          # one kernel reads the [B, V] logits (three on CPU)
