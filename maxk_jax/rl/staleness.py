"""Corrections for rollouts sampled by an older policy (asynchronous rollouts, ``rollout.max_staleness``).

Three log-probs of every sampled completion y where they differ (decoupled PPO, as AReaL):

  μ       the behaviour policy: the sampler at the weights of step t − s that produced batch t
          (``Batch.behaviour_logp``, the sampler's own log-probs);
  π_old   the proximal policy: the learner's weights at the start of step t (the trainer's forward
          pass at PPO iteration 0, ``algo.behaviour_logprobs="trainer"``);
  π_θ     the policy being optimised.

The PPO clip is always relative to π_old (the trust region is around the learner, not around the
stale sampler).  What the estimator and its coefficients see is the correction (``algo.stale_correction``):

  "none"       treat stale data as on-policy: the estimator's δ is the log-ratio log π_θ/π_old;
  "tis"        per-sample truncated importance sampling (the peers' method: verl, TRL, prime-rl): as
               "none", then every coefficient is multiplied by min(π_old(y)/μ(y), ``algo.tis_cap``)
               (sequence-level ratio; verl's default cap 2.0);
  "behaviour"  the paper's off-policy estimators get δ = log π_θ/μ, so their importance weights
               correct the staleness: with ``maxk_offpolicy`` that is the first-order r̃′ of §3.3
               (clamped by its ``clamp_delta``), with ``maxk_offpolicy_exact`` the exact product of
               k ratios of eq. 10 (same clamp).  Only estimators that read log-ratios take it.

Per step the train step logs the behaviour ratio w = π_old(y)/μ(y) (``stale_log_ratio_abs_mean``,
``stale_ratio_{min,max}``), the share of valid samples whose weight was clamped
(``stale_clamped_fraction``: w > cap for "tis", ρ = π_θ/μ outside [1 − c, 1 + c] for "behaviour"
with clamp_delta c, 0 otherwise) and the effective sample size of w per prompt
(``stale_ess_fraction_{mean,min}`` = ESS / valid samples, 1 = all weights equal).
"""
from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp

CORRECTIONS = ("none", "tis", "behaviour")


def tis_weights(log_w: jax.Array, cap: float) -> jax.Array:
    """Truncated importance weights min(exp(log_w), cap): [...] -> [...] float32."""
    return jnp.minimum(jnp.exp(log_w), jnp.float32(cap))


def row_ess_fraction(log_w: jax.Array, mask: jax.Array) -> jax.Array:
    """Effective sample size of the weights exp(log_w) of each row over its valid samples, divided
    by their number: (Σ w)² / (m Σ w²) in [1/m, 1].  log_w, mask [P, n] -> [P] (NaN for a row with
    no valid sample).  Computed shift-invariantly (weights scaled by the row's largest)."""
    shift = jnp.max(jnp.where(mask, log_w, -jnp.inf), axis=-1, keepdims=True)
    w = jnp.where(mask, jnp.exp(log_w - jnp.where(jnp.isfinite(shift), shift, 0.0)), 0.0)
    m = jnp.sum(mask, axis=-1).astype(jnp.float32)
    ess = jnp.sum(w, axis=-1) ** 2 / jnp.maximum(jnp.sum(w * w, axis=-1), jnp.finfo(jnp.float32).tiny)
    return jnp.where(m > 0, ess / jnp.maximum(m, 1.0), jnp.nan)


def clamped(correction: str, log_w: jax.Array, log_ratio_behaviour: jax.Array, valid: jax.Array, *,
            tis_cap: float, clamp_delta: float | None) -> jax.Array:
    """[B] bool: valid samples whose correction weight was clamped -- w = exp(log_w) > tis_cap for
    "tis", ρ = exp(log_ratio_behaviour) outside [1 − c, 1 + c] for "behaviour" with c = clamp_delta
    (the estimators' clamp), none otherwise."""
    if correction == "tis":
        return valid & (log_w > jnp.log(jnp.float32(tis_cap)))
    if correction == "behaviour" and clamp_delta is not None:
        rho = jnp.exp(log_ratio_behaviour)
        return valid & ((rho > 1.0 + clamp_delta) | (rho < 1.0 - clamp_delta))
    return jnp.zeros_like(valid)


def corrected_coefficients(estimator: Callable[..., jax.Array], rewards: jax.Array, *, k: int, correction: str,
                           tis_cap: float, log_ratio_old: jax.Array, log_w: jax.Array | None,
                           to_behaviour: jax.Array | None, mask: jax.Array,
                           answer_ids: jax.Array) -> jax.Array:
    """The estimator's coefficients [P, n] under ``correction`` (see the module docstring).

    estimator: a registry function ``fn(rewards, *, k, log_ratio, mask, answer_ids)``; rewards, mask,
    answer_ids [P, n]; log_ratio_old [P, n] = log π_θ/π_old per sequence; log_w [P, n] = log π_old/μ
    and to_behaviour [P, n] = log π_θ/μ (both None for on-policy data, when only "none" applies)."""
    if correction not in CORRECTIONS:
        raise ValueError(f"correction={correction!r} is not one of {CORRECTIONS}")
    if log_w is None or to_behaviour is None:
        return estimator(rewards, k=k, log_ratio=log_ratio_old, mask=mask, answer_ids=answer_ids)
    log_ratio = to_behaviour if correction == "behaviour" else log_ratio_old
    coef = estimator(rewards, k=k, log_ratio=log_ratio, mask=mask, answer_ids=answer_ids)
    return coef * tis_weights(log_w, tis_cap) if correction == "tis" else coef


def stale_sums(log_w: jax.Array, to_behaviour: jax.Array, valid: jax.Array, n: int, *, correction: str,
               tis_cap: float, clamp_delta: float | None) -> dict[str, jax.Array]:
    """One micro-batch's sums of the behaviour-ratio statistics (`combine_stale` makes the metrics):
    log_w [Bm] = log π_old/μ, to_behaviour [Bm] = log π_θ/μ, valid [Bm], n samples per prompt."""
    hit = clamped(correction, log_w, to_behaviour, valid, tis_cap=tis_cap, clamp_delta=clamp_delta)
    ess = row_ess_fraction(log_w.reshape(-1, n), valid.reshape(-1, n))
    has = jnp.isfinite(ess)
    big = jnp.float32(jnp.inf)
    return dict(stale_log_w_abs_sum=jnp.sum(jnp.where(valid, jnp.abs(log_w), 0.0)),
                stale_log_w_min=jnp.min(jnp.where(valid, log_w, big)),
                stale_log_w_max=jnp.max(jnp.where(valid, log_w, -big)),
                stale_clamped_count=jnp.sum(hit).astype(jnp.float32),
                stale_ess_sum=jnp.sum(jnp.where(has, ess, 0.0)), stale_ess_rows=jnp.sum(has).astype(jnp.float32),
                stale_ess_min=jnp.min(jnp.where(has, ess, big)))


def combine_stale(mb: dict[str, jax.Array], valid: jax.Array) -> dict[str, jax.Array]:
    """The `stale_sums` of all micro-batches (each [M]) and the batch's valid-sample count -> the
    ``stale_*`` metrics of the module docstring."""
    nan = jnp.float32(jnp.nan)
    rows = jnp.sum(mb["stale_ess_rows"])
    return dict(stale_log_ratio_abs_mean=jnp.sum(mb["stale_log_w_abs_sum"]) / valid,
                stale_ratio_min=jnp.where(valid > 0, jnp.exp(jnp.min(mb["stale_log_w_min"])), nan),
                stale_ratio_max=jnp.where(valid > 0, jnp.exp(jnp.max(mb["stale_log_w_max"])), nan),
                stale_clamped_fraction=jnp.sum(mb["stale_clamped_count"]) / valid,
                stale_ess_fraction_mean=jnp.where(rows > 0, jnp.sum(mb["stale_ess_sum"]) / rows, nan),
                stale_ess_fraction_min=jnp.where(rows > 0, jnp.min(mb["stale_ess_min"]), nan))
