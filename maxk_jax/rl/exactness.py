"""Exact expected updates of the estimators on an enumerated categorical bandit, through the train step's path.

    draws = make_draws(seed=0, count=4, shift=0.5)
    out = expected_update(get_estimator("maxk_offpolicy_exact", baseline="loo1", clamp_delta=None),
                          scenario_policies(draws[0], "stale"), k=2, n=4, correction="behaviour", stale=True)
    cos, ratio = compare(out, target_gradient(draws[0].theta, "max@k", k=2))
    # D draws at once: expected_update(fn, np.stack([scenario_policies(d, "stale") for d in draws]), ...)

The bandit: arms with rewards ``REWARDS`` (0, 0.5, 1), π_θ = softmax(θ), the learner's π_old =
softmax(θ_old) and a sampler μ = softmax(θ_μ).  A row is n samples of one prompt; every one of the
A^(n·rows) sample tuples is enumerated, so the expectation E_μ[Σ_i c_i ∇_θ log π_θ(y_i)] is exact.
The coefficients come from ``staleness.corrected_coefficients`` (what the train step calls, with the
three log-ratios it forms: log π_θ/π_old, log π_old/μ, log π_θ/μ) and each sample's weight on
∇ log π_θ(y_i) from the gradient of ``losses.policy_loss`` with respect to its log-prob (the clipped
surrogate multiplies c_i by the PPO ratio π_θ/π_old, the IS-weighted form does not).  The trust
region is opened (``open_trust_region``) so that what is measured is the estimator's expectation,
not PPO's deliberate clipping.

Scenarios (`SCENARIOS`): which of the three policies coincide.
  on_policy   μ = π_old = π_θ (synchronous loop, PPO iteration 0);
  ppo         μ = π_old ≠ π_θ, no behaviour log-probs (synchronous loop, PPO iterations > 0);
  stale       π_old = π_θ ≠ μ (asynchronous rollouts, PPO iteration 0: π_old is the trainer's forward);
  stale_ppo   all three differ (asynchronous rollouts, PPO iterations > 0).

Targets (`target_gradient`): the exact gradient of the objective an estimator claims
(``estimators.update_claim``): "max@k", "mean" (max@1), "max@(k-p)", "tang_eq4"; each is an
expectation over i.i.d. j-tuples of the policy, enumerated and differentiated with ``jax.grad``.
"""
from __future__ import annotations

import dataclasses
import functools
import itertools
from typing import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from maxk_jax.rl import losses, staleness

REWARDS = (0.0, 0.5, 1.0)
SCENARIOS = ("on_policy", "ppo", "stale", "stale_ppo")


@dataclasses.dataclass(frozen=True)
class Draw:
    """Logits [A] of π_θ, of the learner's π_old and of the stale sampler μ."""

    theta: np.ndarray
    theta_old: np.ndarray
    theta_mu: np.ndarray


def make_draws(seed: int, count: int, shift: float, num_arms: int = len(REWARDS)) -> list[Draw]:
    """`count` random draws: θ ~ N(0, 1)^A, θ_old = θ + shift/2 · u, θ_μ = θ_old + shift · v with u, v
    random unit vectors (so |θ − θ_old| = shift/2 and |θ_old − θ_μ| = shift)."""
    if not shift >= 0:
        raise ValueError(f"shift={shift!r} must be a number >= 0")
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        theta = rng.normal(size=num_arms)
        u, v = (x / np.linalg.norm(x) for x in rng.normal(size=(2, num_arms)))
        old = theta + 0.5 * shift * u
        out.append(Draw(theta, old, old + shift * v))
    return out


def scenario_policies(draw: Draw, scenario: str) -> np.ndarray:
    """The logits (θ, θ_old, θ_μ) [3, A] of `scenario` (`SCENARIOS`)."""
    t, o, m = draw.theta, draw.theta_old, draw.theta_mu
    table = {"on_policy": (t, t, t), "ppo": (t, o, o), "stale": (t, t, m), "stale_ppo": (t, o, m)}
    if scenario not in table:
        raise ValueError(f"scenario={scenario!r} is not one of {SCENARIOS}")
    return np.stack(table[scenario])


def open_trust_region(kind: str) -> losses.LossConfig:
    """A ``LossConfig`` of form `kind` whose trust region never clips on the bandit (ε_low just below
    1, ε_high 1e9); aggregation "sequence" (the default)."""
    return losses.LossConfig(kind=kind, eps_low=1.0 - 1e-7, eps_high=1e9)


def enumerate_tuples(num_arms: int, n: int, rows: int = 1) -> np.ndarray:
    """Every tuple of arms: int32 [num_arms^(n·rows), rows, n]."""
    flat = np.array(list(itertools.product(range(num_arms), repeat=n * rows)), np.int32)
    return flat.reshape(-1, rows, n)


def expected_update(estimator, policies, *, k: int, n: int, correction: str = "none",
                    loss: losses.LossConfig | None = None, rows: int = 1, tis_cap: float = 2.0,
                    stale: bool = False) -> np.ndarray:
    """E_μ[Σ_samples w_i ∇_θ log π_θ(y_i)] summed over `rows` independent rows of n samples.

    estimator: a registry function; policies: logits (θ, θ_old, θ_μ), each [A] -> returns [A], or
    stacked [D, 3, A] (D draws at once) -> [D, A]; correction: the train step's
    ``algo.stale_correction``; stale: the batch carries the sampler's log-probs μ (asynchronous
    rollouts; otherwise the synchronous path, where the samples come from π_old and θ_μ must equal
    θ_old); loss: the loss form (default `open_trust_region("is_weighted")`); w_i = −B ∂loss/∂log
    π_θ(y_i), B the number of sequences of the enumerated batch."""
    return expected_updates([(estimator, loss)], policies, k=k, n=n, correction=correction, rows=rows,
                            tis_cap=tis_cap, stale=stale)[0]


def expected_updates(settings: Sequence[tuple[Callable, losses.LossConfig | None]], policies, *, k: int, n: int,
                     correction: str = "none", rows: int = 1, tis_cap: float = 2.0,
                     stale: bool = False) -> np.ndarray:
    """`expected_update` of several (estimator, loss) settings in ONE compiled program (one XLA
    compile for all of them): policies [3, A] -> [S, A], [D, 3, A] -> [S, D, A]; a loss of None is
    `open_trust_region("is_weighted")`."""
    pol = np.asarray(policies, np.float64)
    single = pol.ndim == 2
    pol = pol[None] if single else pol
    if pol.ndim != 3 or pol.shape[1] != 3:
        raise ValueError(f"policies must be (θ, θ_old, θ_μ) [3, A] or [D, 3, A], got shape {pol.shape}")
    if not stale and not np.array_equal(pol[:, 1], pol[:, 2]):
        raise ValueError("stale=False (no behaviour log-probs): the samples come from π_old, so θ_μ must equal θ_old")
    if not settings:
        raise ValueError("settings is empty: give at least one (estimator, loss) pair")
    settings = [(fn, open_trust_region("is_weighted") if loss is None else loss) for fn, loss in settings]
    tuples = enumerate_tuples(pol.shape[-1], n, rows)                         # [T, R, n]

    def one(estimator, loss, logits, ys):          # [3, A], [T, R, n] -> [A]
        theta = logits[0]
        rewards = jnp.asarray(REWARDS, jnp.float32)[ys]
        lp, lp_old, lp_mu = (jax.nn.log_softmax(x)[ys] for x in logits)

        def coefficients(r, y, a, b, c):           # one tuple: [R, n] each
            return staleness.corrected_coefficients(
                estimator, r, k=k, correction=correction, tis_cap=tis_cap, log_ratio_old=a - b,
                log_w=(b - c) if stale else None, to_behaviour=(a - c) if stale else None,
                mask=jnp.ones(r.shape, bool), answer_ids=y)

        coef = jax.vmap(coefficients)(rewards, ys, lp, lp_old, lp_mu).reshape(-1)
        flat_old = lp_old.reshape(-1, 1)
        mask = jnp.ones(flat_old.shape, bool)
        total = lambda logp: losses.policy_loss(logp, flat_old, coef, mask, loss)[0]  # noqa: E731
        weight = -jax.grad(total)(lp.reshape(-1, 1))[:, 0] * coef.shape[0]    # [T·R·n]
        score = jax.nn.one_hot(ys.reshape(-1), theta.shape[0]) - jax.nn.softmax(theta)   # ∇θ log π(y)
        prob = jnp.exp(jnp.sum(lp_mu, axis=(1, 2)))                            # μ(tuple) [T]
        per_tuple = jnp.sum((weight[:, None] * score).reshape(prob.shape[0], -1, theta.shape[0]), axis=1)
        return jnp.sum(prob[:, None] * per_tuple, axis=0)

    # runs once: XLA's backend optimisation would cost more (~1/3 of the compile) than it saves
    @functools.partial(jax.jit, compiler_options={"xla_backend_optimization_level": 0})
    def program(logits, ys):                       # [D, 3, A], [T, R, n] -> [S, D, A]
        return jnp.stack([jax.vmap(functools.partial(one, fn, loss), in_axes=(0, None))(logits, ys)
                          for fn, loss in settings])

    out = np.asarray(program(jnp.asarray(pol, jnp.float32), jnp.asarray(tuples)), np.float64)
    return out[:, 0] if single else out


@functools.lru_cache(maxsize=None)
def _target_program(objective: str, k: int, p: int, num_arms: int) -> Callable:
    """jit(θ [A] -> ∇θ E over j i.i.d. draws of softmax(θ) of the objective's value of the j-tuple)."""
    r = np.asarray(REWARDS)
    j = {"max@k": k, "mean": 1, "max@(k-p)": k - p, "tang_eq4": k}[objective]
    tuples = np.array(list(itertools.product(range(num_arms), repeat=j)))
    vals = np.sort(r[tuples], axis=1)
    g = jnp.asarray((vals[:, -1] * (k - 1) / k + vals[:, -2] / k) if objective == "tang_eq4" else vals[:, -1],
                    jnp.float32)

    def value(theta):
        logp = jax.nn.log_softmax(theta)
        return jnp.sum(jnp.exp(jnp.sum(logp[tuples], axis=1)) * g)
    return jax.jit(jax.grad(value))


def target_gradient(theta: np.ndarray, objective: str, *, k: int, p: int = 1) -> np.ndarray:
    """∇θ of `objective` ("max@k", "mean", "max@(k-p)", "tang_eq4") of softmax(θ) [A], exact."""
    if objective not in ("max@k", "mean", "max@(k-p)", "tang_eq4"):
        raise ValueError(f"objective={objective!r} has no exact target here")
    theta = np.asarray(theta)
    if theta.shape != (len(REWARDS),):
        raise ValueError(f"theta must be [{len(REWARDS)}] (one logit per arm of REWARDS), got shape {theta.shape}")
    grad = _target_program(objective, k, p, len(REWARDS))(jnp.asarray(theta, jnp.float32))
    return np.asarray(grad, np.float64)


def compare(update: np.ndarray, target: np.ndarray) -> tuple[float, float]:
    """(cosine, norm ratio |update| / |target|) of two [A] vectors (NaN cosine for a zero vector)."""
    nu, nt = float(np.linalg.norm(update)), float(np.linalg.norm(target))
    cos = float(update @ target) / (nu * nt) if nu > 0 and nt > 0 else float("nan")
    return cos, nu / nt if nt > 0 else float("nan")
