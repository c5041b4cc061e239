"""Logit processing for sampling: temperature, then top-k, then top-p (the transformers order).

:func:`sampling_logprobs` maps raw logits [..., V] to the log-probabilities of the distribution the
sampler actually draws from: tokens outside the truncation set get ``-inf`` and the kept ones are
renormalised (``log_softmax`` over the kept set), all in float32. The sampler draws from these
log-probabilities and returns the entry of the drawn token, so the same function applied to the
logits of a full forward pass recomputes the behaviour log-probs exactly (tests do that).

Conventions (all decided here, relied on by :mod:`maxk_jax.sampling`):

* ``temperature == 0`` is greedy decoding: the distribution is a point mass on ``argmax(logits)``
  (first index on ties, as ``torch.argmax``), so its log-prob is 0 and every other token gets
  ``-inf``. top-k / top-p are irrelevant then.
* ``top_k == 0`` disables top-k. Otherwise every token whose tempered logit is >= the k-th largest
  is kept (ties at the threshold are all kept, like transformers' ``TopKLogitsWarper``).
* ``top_p == 1.0`` disables top-p. Otherwise, on the probabilities after temperature and top-k,
  the kept set is the smallest prefix of the tokens sorted by decreasing probability whose
  cumulative probability is >= ``top_p`` (always >= 1 token); tokens tied with the last kept one
  are kept too (so the result does not depend on the sort order of equal logits).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp


def validate_filters(temperature: float, top_k: int, top_p: float) -> None:
    """Raise ValueError for temperature < 0 (or NaN/inf), top_k < 0 (or not an int), top_p not in
    (0, 1]."""
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)):
        raise ValueError(f"temperature must be a float >= 0, got {temperature!r}")
    if not (0.0 <= float(temperature) < float("inf")):
        raise ValueError(f"temperature must be a finite float >= 0 (0 = greedy), got {temperature!r}")
    if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 0:
        raise ValueError(f"top_k must be an int >= 0 (0 = disabled), got {top_k!r}")
    if isinstance(top_p, bool) or not isinstance(top_p, (int, float)) or not 0.0 < float(top_p) <= 1.0:
        raise ValueError(f"top_p must lie in (0, 1] (1 = disabled), got {top_p!r}")


def greedy_logprobs(logits: jax.Array) -> jax.Array:
    """Point mass on argmax: float32 [..., V] with 0 at the argmax and -inf elsewhere."""
    best = jnp.argmax(logits, axis=-1)
    hit = jnp.arange(logits.shape[-1]) == best[..., None]
    return jnp.where(hit, 0.0, -jnp.inf).astype(jnp.float32)


def top_k_mask(logits: jax.Array, top_k: int) -> jax.Array:
    """Bool [..., V]: logits >= the k-th largest logit of their row (k = top_k >= 1)."""
    k = min(top_k, logits.shape[-1])
    kth = jax.lax.top_k(logits, k)[0][..., -1:]
    return logits >= kth


def top_p_mask(logits: jax.Array, top_p: float) -> jax.Array:
    """Bool [..., V]: the smallest set of highest-probability tokens with cumulative probability
    >= top_p under ``softmax(logits)`` (-inf logits never kept unless nothing else is), plus ties
    of its last member."""
    logits = logits.astype(jnp.float32)
    sorted_logits = -jnp.sort(-logits, axis=-1)  # descending
    probs = jax.nn.softmax(sorted_logits, axis=-1)
    mass_before = jnp.cumsum(probs, axis=-1) - probs
    keep_sorted = mass_before < top_p
    keep_sorted = keep_sorted.at[..., 0].set(True)
    # Logit of the last kept token in sorted order = the cut-off value.
    n_keep = jnp.sum(keep_sorted, axis=-1, keepdims=True)
    cutoff = jnp.take_along_axis(sorted_logits, n_keep - 1, axis=-1)
    return logits >= cutoff


def filtered_logits(logits: jax.Array, temperature: float, top_k: int = 0, top_p: float = 1.0) -> jax.Array:
    """float32 [..., V]: raw logits [..., V] divided by ``temperature`` (> 0), with ``-inf`` outside the
    top-k / top-p kept set (the module docstring's rules). The sampling distribution is their
    softmax (:func:`sampling_logprobs`)."""
    validate_filters(temperature, top_k, top_p)
    if temperature == 0:
        raise ValueError("filtered_logits needs temperature > 0 (temperature 0 is greedy: greedy_logprobs)")
    scaled = logits.astype(jnp.float32) / jnp.float32(temperature)
    if top_k > 0:
        scaled = jnp.where(top_k_mask(scaled, top_k), scaled, -jnp.inf)
    if top_p < 1.0:
        scaled = jnp.where(top_p_mask(scaled, top_p), scaled, -jnp.inf)
    return scaled


def log_softmax_parts(scaled: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(row max [..., 1], log-sum-exp of the shifted row [..., 1]) of float32 ``scaled`` [..., V], so
    that ``(scaled - max) - lse`` is ``jax.nn.log_softmax(scaled)`` operation for operation. Split
    out so the sampler can take the log-prob of one drawn entry without the [..., V] array."""
    top = jax.lax.stop_gradient(jnp.max(scaled, axis=-1, keepdims=True))
    return top, jnp.log(jnp.sum(jnp.exp(scaled - top), axis=-1, keepdims=True))


def sampling_logprobs(logits: jax.Array, temperature: float, top_k: int = 0,
                      top_p: float = 1.0) -> jax.Array:
    """Log-probs [..., V] float32 of the sampling distribution for raw logits [..., V].

    temperature, top_k and top_p are Python scalars (static: they select the code path); see the
    module docstring for the exact rules. Entries outside the kept set are ``-inf``.
    """
    validate_filters(temperature, top_k, top_p)
    if temperature == 0:
        return greedy_logprobs(logits.astype(jnp.float32))
    scaled = filtered_logits(logits, temperature, top_k, top_p)
    top, lse = log_softmax_parts(scaled)
    return (scaled - top) - lse
