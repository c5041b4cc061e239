"""One token per row by Gumbel-max, with the drawn token's log-prob, without storing [B, V] log-probs.

    tokens, logp = draw_tokens(gumbels, scaled)     # gumbels, scaled [B, V] float32 -> [B] int32, [B] float32

``scaled`` are the filtered, temperature-scaled logits (``-inf`` = excluded); ``gumbels`` the per-row
Gumbel noise of the step. The token is the first index of the largest ``gumbel + log p`` and its
log-prob is ``log softmax(scaled)`` at that index. Two lowerings, chosen when the program is lowered
(``lax.platform_dependent``, so a deviceless GPU compile gets the accelerator form):

- **CPU: three passes** (:func:`draw_three_pass`): the row max, the log-sum-exp, then the argmax of
  ``gumbel + ((scaled - max) - lse)``: operation for operation the log-probs of
  :func:`~maxk_jax.sampling._filters.sampling_logprobs`, so the tokens and log-probs equal a draw from its
  output (the outputs every test and stored CPU result rely on).
- **GPU / TPU: one pass** (:func:`draw_one_pass`): one variadic reduction carries the running max and
  rescaled sum of exponentials (online log-sum-exp) beside the running argmax of ``gumbel + scaled`` and
  the scaled logit there, so the [B, V] float32 logits are read once instead of three times (at 128 rows
  x 151,936 tokens: 78 MB read per step instead of 233 MB). It is the same draw in exact arithmetic
  (``log p`` differs from ``scaled`` by a per-row constant); in floating point the log-probs agree to
  rounding (~1e-6) and a token can differ only where two perturbed values are within rounding of each
  other (tested on CPU against the three passes).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from maxk_jax.sampling._filters import log_softmax_parts


def _first_argmax_two_pass(x: jax.Array) -> jax.Array:
    top = jnp.max(x, axis=-1, keepdims=True)
    iota = jax.lax.broadcasted_iota(jnp.int32, x.shape, x.ndim - 1)
    return jnp.min(jnp.where(x == top, iota, x.shape[-1]), axis=-1)


def first_argmax(x: jax.Array) -> jax.Array:
    """Index of the first maximum along the last axis: x [..., V] -> [...] int32 (``jnp.argmax``).
    On CPU as two plain reductions, which XLA:CPU vectorises (~3x faster than its variadic
    argmax); elsewhere (GPU, TPU) as ``jnp.argmax``'s one-pass reduction, which reads x once.
    Chosen when the program is lowered (``lax.platform_dependent``), so a deviceless GPU compile
    gets the GPU form."""
    return jax.lax.platform_dependent(
        x, cpu=_first_argmax_two_pass, default=lambda v: jnp.argmax(v, axis=-1).astype(jnp.int32))


def gumbel_max(key: jax.Array, logp: jax.Array) -> jax.Array:
    """One draw from softmax(logp): logp [V] (-inf = excluded), key a single key -> [] int32.

    Gumbel-max exactly as ``jax.random.categorical`` (same noise, first index on ties: the
    same token for the same key), without its slower variadic argmax."""
    return first_argmax(jax.random.gumbel(key, logp.shape, logp.dtype) + logp)


def draw_three_pass(gumbels: jax.Array, scaled: jax.Array) -> tuple[jax.Array, jax.Array]:
    """gumbels, scaled [B, V] float32 -> (tokens [B] int32, log-probs [B] float32): max, log-sum-exp
    and the Gumbel argmax as three reductions, the values of ``sampling_logprobs`` exactly."""
    top, lse = log_softmax_parts(scaled)
    tokens = first_argmax(gumbels + ((scaled - top) - lse)).astype(jnp.int32)
    picked = jnp.take_along_axis(scaled, tokens[:, None], axis=-1)
    return tokens, ((picked - top) - lse)[:, 0]


def combine_partials(a: tuple[jax.Array, ...], b: tuple[jax.Array, ...]) -> tuple[jax.Array, ...]:
    """The one-pass reduction's combiner over (max, sum of exp(x - max), best perturbed value, its
    index, its scaled logit), each [...]: an online log-sum-exp beside a first-index argmax (also
    what merges the fused LM head + draw's per-tile partials, :mod:`maxk_jax.sampling.lm_head_draw`)."""
    a_max, a_sum, a_val, a_idx, a_logit = a
    b_max, b_sum, b_val, b_idx, b_logit = b
    top = jnp.maximum(a_max, b_max)
    total = a_sum * jnp.exp(a_max - top) + b_sum * jnp.exp(b_max - top)
    total = jnp.where(top == -np.inf, jnp.zeros_like(total), total)    # both sides empty (-inf - -inf)
    take_b = (b_val > a_val) | ((b_val == a_val) & (b_idx < a_idx))
    return (top, total, jnp.where(take_b, b_val, a_val), jnp.where(take_b, b_idx, a_idx),
            jnp.where(take_b, b_logit, a_logit))


def draw_one_pass(gumbels: jax.Array, scaled: jax.Array) -> tuple[jax.Array, jax.Array]:
    """gumbels, scaled [B, V] float32 -> (tokens [B] int32, log-probs [B] float32) from ONE variadic
    reduction over V (see the module docstring: equal to :func:`draw_three_pass` up to rounding)."""
    iota = jax.lax.broadcasted_iota(jnp.int32, scaled.shape, scaled.ndim - 1)
    init = (np.float32(-np.inf), np.float32(0.0), np.float32(-np.inf), np.int32(np.iinfo(np.int32).max),
            np.float32(-np.inf))
    top, total, _, tokens, picked = jax.lax.reduce(
        (scaled, jnp.ones_like(scaled), gumbels + scaled, iota, scaled), init, combine_partials, (scaled.ndim - 1,))
    return tokens, (picked - top) - jnp.log(total)


def draw_tokens(gumbels: jax.Array, scaled: jax.Array) -> tuple[jax.Array, jax.Array]:
    """gumbels, scaled [B, V] float32 -> (tokens [B] int32, log-probs [B] float32): the three passes
    on CPU, one pass elsewhere (chosen at lowering; see the module docstring)."""
    return jax.lax.platform_dependent(gumbels, scaled, cpu=draw_three_pass, default=draw_one_pass)
