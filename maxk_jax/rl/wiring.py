"""The wiring of one policy update: log-ratios, masks, the estimator's coefficients and the loss.

    wired = update_loss(logp, old_logp=mb.old_logp, completion_mask=mb.completion_mask, valid=mb.valid,
                        rewards=mb.rewards, answer_ids=mb.answer_ids, behaviour_logp=mb.behaviour_logp,
                        estimator=get_estimator("maxk_offpolicy_exact", baseline="loo1"), k=2, n=8,
                        correction="behaviour", loss=LossConfig(kind="is_weighted"))
    wired.loss, wired.metrics, wired.coef    # differentiate wired.loss with respect to the params under logp

One pure function (`update_loss`) between the policy's token log-probs and the loss value: what the
train step (``training.py``) differentiates for every micro-batch, and what the enumerated bandit
(``exactness.py``) differentiates for every sample tuple -- so the exactness table measures the train
step's own wiring, not a copy of it.  B sequences of T completion tokens, rows of n samples of one
prompt (B = P·n, prompt-major):

  counted       completion_mask ∧ valid                                        [B, T]
  π_old         old_logp, or the step's own log-probs (``own_old``: PPO iteration 0 with the trainer's
                forward as π_old, so the log-ratios are exactly 0)             [B, T]
  log_ratio     Σ_t counted·(log π_θ − log π_old)   (PPO log-ratio, δ of "none"/"tis")          [B]
  log_w         Σ_t counted·(log π_old − log μ)     (the behaviour weight; None without μ)      [B]
  to_behaviour  Σ_t counted·(log π_θ − log μ)       (δ of "behaviour"; None without μ)          [B]
  coef          ``staleness.corrected_coefficients`` of the rows, stop-gradient float32        [B]
  loss          ``losses.policy_loss(logp, π_old, coef, counted, loss)`` (trust region around π_old)

log π_θ enters the log-ratios through ``stop_gradient`` (the coefficients are constants of the
gradient); only the loss's own log π_θ carries the gradient.
"""
from __future__ import annotations

from typing import Callable

import flax
import jax
import jax.numpy as jnp

from maxk_jax.rl import losses, staleness


@flax.struct.dataclass
class Wiring:
    """What `update_loss` computed (B sequences, T completion tokens)."""

    loss: jax.Array                       # [] the loss to minimise (un-normalised over micro-batches)
    metrics: dict                         # ``losses.policy_loss``'s scalar metrics
    logp: jax.Array                       # [B, T] log π_θ without gradient
    old_logp: jax.Array                   # [B, T] π_old the loss and log_ratio used
    counted: jax.Array                    # [B, T] bool: completion tokens of valid samples
    log_ratio: jax.Array                  # [B] log π_θ/π_old per sequence
    log_w: jax.Array | None               # [B] log π_old/μ per sequence (None without behaviour_logp)
    to_behaviour: jax.Array | None        # [B] log π_θ/μ per sequence (None without behaviour_logp)
    coef: jax.Array                       # [B] the estimator's coefficients (stop-gradient, float32)


def update_loss(logp: jax.Array, *, old_logp: jax.Array, completion_mask: jax.Array, valid: jax.Array,
                rewards: jax.Array, answer_ids: jax.Array, estimator: Callable[..., jax.Array], k: int, n: int,
                loss: losses.LossConfig, behaviour_logp: jax.Array | None = None,
                own_old: bool | jax.Array = False, correction: str = "none", tis_cap: float = 2.0,
                ref_logp: jax.Array | None = None, entropy: jax.Array | None = None) -> Wiring:
    """The loss of one batch of whole prompt rows and everything wired into it (module docstring).

    logp [B, T] log π_θ of the sampled tokens (differentiated); old_logp, completion_mask, behaviour_logp,
    ref_logp, entropy [B, T]; valid, rewards, answer_ids [B]; estimator: a registry function; k, n: its k and
    the samples per prompt (B a multiple of n); correction / tis_cap: ``staleness.corrected_coefficients``;
    own_old (bool scalar): π_old = stop_gradient(logp) instead of old_logp."""
    if logp.ndim != 2 or logp.shape[0] % n:
        raise ValueError(f"logp must be [B, T] with B a multiple of n={n}, got shape {logp.shape}")
    counted = completion_mask & valid[:, None]
    fixed = jax.lax.stop_gradient(logp)
    old_logp = jnp.where(own_old, fixed, old_logp)
    log_ratio = losses.sequence_log_ratio(fixed, old_logp, counted)                        # log π_θ/π_old
    log_w = to_behaviour = None
    if behaviour_logp is not None:
        log_w = losses.sequence_log_ratio(old_logp, behaviour_logp, counted)               # log π_old/μ
        to_behaviour = losses.sequence_log_ratio(fixed, behaviour_logp, counted)           # log π_θ/μ
    rows = lambda x: None if x is None else x.reshape(-1, n)  # noqa: E731  [B] -> [P, n]
    coef = staleness.corrected_coefficients(
        estimator, rows(rewards), k=k, correction=correction, tis_cap=tis_cap, log_ratio_old=rows(log_ratio),
        log_w=rows(log_w), to_behaviour=rows(to_behaviour), mask=rows(valid), answer_ids=rows(answer_ids))
    coef = jax.lax.stop_gradient(coef.reshape(-1).astype(jnp.float32))
    value, metrics = losses.policy_loss(logp, old_logp, coef, counted, loss, ref_logp=ref_logp, entropy=entropy)
    return Wiring(loss=value, metrics=metrics, logp=fixed, old_logp=old_logp, counted=counted,
                  log_ratio=log_ratio, log_w=log_w, to_behaviour=to_behaviour, coef=coef)
