"""Exact expected updates of the estimators on an enumerated categorical bandit, through the train step's path.

    draws = make_draws(seed=0, count=4, shift=0.5)
    out = expected_update(get_estimator("maxk_offpolicy_exact", baseline="loo1", clamp_delta=None),
                          scenario_policies(draws[0], "stale"), k=2, n=4, correction="behaviour", stale=True)
    cos, ratio = compare(out, target_gradient(draws[0].theta, "max@k", k=2))
    # D draws at once: expected_update(fn, np.stack([scenario_policies(d, "stale") for d in draws]), ...)

The bandit: arms with rewards ``REWARDS`` (0, 0.5, 1), π_θ = softmax(θ), the learner's π_old =
softmax(θ_old) and a sampler μ = softmax(θ_μ).  A row is n samples of one prompt; every one of the
A^(n·rows) sample tuples is enumerated, so the expectation E_μ[update] is exact.  A sample is one token,
or with ``multi_token=True`` a padded sequence of up to A − 1 tokens whose token log-probs factorise
log π(a) (``token_logprobs``; junk in the padding), so the sequence log-ratios and the token masks run.
The update of a tuple is −∇_θ of ``wiring.update_loss`` -- the train step's own wiring (log-ratios to
π_old and μ, masks, ``staleness.corrected_coefficients``, ``losses.policy_loss``) -- times the loss's
normaliser: the clipped surrogate multiplies c_i by the PPO ratio π_θ/π_old, the IS-weighted form does
not.  The trust region is opened (``open_trust_region``) so that what is measured is the estimator's
expectation, not PPO's deliberate clipping.

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

from maxk_jax.rl import losses, wiring

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


def open_trust_region(kind: str, norm_length: int | None = None) -> losses.LossConfig:
    """A ``LossConfig`` of form `kind` whose trust region never clips on the bandit (ε_low just below
    1, ε_high 1e9); aggregation "sequence" (the default), or "seq_sum_norm" over `norm_length` tokens
    when given (what multi-token sequences need for an unbiased update: every token weighs the same)."""
    if norm_length is None:
        return losses.LossConfig(kind=kind, eps_low=1.0 - 1e-7, eps_high=1e9)
    return losses.LossConfig(kind=kind, eps_low=1.0 - 1e-7, eps_high=1e9, aggregation="seq_sum_norm",
                             norm_length=norm_length)


def enumerate_tuples(num_arms: int, n: int, rows: int = 1) -> np.ndarray:
    """Every tuple of arms: int32 [num_arms^(n·rows), rows, n]."""
    flat = np.array(list(itertools.product(range(num_arms), repeat=n * rows)), np.int32)
    return flat.reshape(-1, rows, n)


def sequence_tokens(num_arms: int, multi_token: bool) -> int:
    """Completion positions T of an arm: 1, or num_arms − 1 for `multi_token` (`token_logprobs`)."""
    return max(num_arms - 1, 1) if multi_token else 1


def completion_mask(arms: jax.Array, num_arms: int, multi_token: bool) -> jax.Array:
    """bool [..., T]: the tokens of each arm [...] (multi-token: arm a has min(a + 1, A − 1) tokens)."""
    t = sequence_tokens(num_arms, multi_token)
    return jnp.arange(t) < jnp.minimum(arms + 1, t)[..., None]


def token_logprobs(logits: jax.Array, arms: jax.Array, multi_token: bool) -> jax.Array:
    """Token log-probs [..., T] of arms [...] under softmax(logits [A]).

    One token: log π(a).  Multi-token: an arm is a sequence of "continue" decisions ended by "stop at a"
    (no stop token for the last arm): token t is log Π_{j>t}/Π_{j≥t} ("continue", t < a) or
    log π_a/Π_{j≥a} ("stop"), Π_{j≥t} = Σ_{j≥t} π_j, so the counted tokens sum to log π(a) exactly.
    Positions after an arm's last token hold a θ-dependent filler (padding the mask must hide)."""
    lp = jax.nn.log_softmax(logits)
    if not multi_token:
        return lp[arms][..., None]
    t = sequence_tokens(lp.shape[-1], True)
    tail = jnp.stack([jax.nn.logsumexp(lp[i:]) for i in range(lp.shape[-1])])       # log Π_{j≥i}
    pos = jnp.arange(t)
    a = arms[..., None]
    stop = lp[jnp.minimum(pos, lp.shape[-1] - 1)] - tail[pos]
    cont = tail[pos + 1] - tail[pos]
    filler = 1.0 + 0.5 * lp[0] + 0.25 * pos
    return jnp.where(pos < a, cont, jnp.where(pos == a, stop, filler))


def expected_update(estimator, policies, *, k: int, n: int, correction: str = "none",
                    loss: losses.LossConfig | None = None, rows: int = 1, tis_cap: float = 2.0,
                    stale: bool = False, multi_token: bool = False) -> np.ndarray:
    """E_μ[Σ_samples w_i ∇_θ log π_θ(y_i)] summed over `rows` independent rows of n samples.

    estimator: a registry function; policies: logits (θ, θ_old, θ_μ), each [A] -> returns [A], or
    stacked [D, 3, A] (D draws at once) -> [D, A]; correction: the train step's
    ``algo.stale_correction``; stale: the batch carries the sampler's log-probs μ (asynchronous
    rollouts; otherwise the synchronous path, where the samples come from π_old and θ_μ must equal
    θ_old); loss: the loss form (default `open_trust_region("is_weighted")`); multi_token: each sample is
    a padded sequence of tokens (`token_logprobs`) instead of one token.  The update of a tuple is
    −∇_θ of ``wiring.update_loss`` (the train step's loss) times its normaliser: B sequences
    ("sequence") or B·norm_length ("seq_sum_norm")."""
    return expected_updates([(estimator, loss)], policies, k=k, n=n, correction=correction, rows=rows,
                            tis_cap=tis_cap, stale=stale, multi_token=multi_token)[0]


def _normaliser(loss: losses.LossConfig, sequences: int) -> float:
    """What the loss's aggregation divides the summed per-token terms by (a constant of the batch)."""
    if loss.aggregation == "sequence":
        return float(sequences)
    if loss.aggregation == "seq_sum_norm":
        return float(sequences * loss.norm_length)
    raise ValueError(f"loss aggregation={loss.aggregation!r}: the enumeration needs 'sequence' or 'seq_sum_norm' "
                     "(a normaliser that does not depend on the sampled lengths)")


def expected_updates(settings: Sequence[tuple[Callable, losses.LossConfig | None]], policies, *, k: int, n: int,
                     correction: str = "none", rows: int = 1, tis_cap: float = 2.0,
                     stale: bool = False, multi_token: bool = False) -> np.ndarray:
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
    scales = [_normaliser(loss, rows * n) for _, loss in settings]
    num_arms = pol.shape[-1]
    tuples = enumerate_tuples(num_arms, n, rows)                              # [T, R, n]

    def one(estimator, loss, scale, logits, ys):    # [3, A], [T, R, n] -> [A]
        theta, theta_old, theta_mu = logits

        def update(y):                             # one tuple [R, n] -> −scale ∇θ loss [A]
            y = y.reshape(-1)
            lp = functools.partial(token_logprobs, arms=y, multi_token=multi_token)
            total = lambda th: wiring.update_loss(  # noqa: E731
                lp(th), old_logp=lp(theta_old), completion_mask=completion_mask(y, num_arms, multi_token),
                valid=jnp.ones(y.shape, bool), rewards=jnp.asarray(REWARDS, jnp.float32)[y], answer_ids=y,
                behaviour_logp=lp(theta_mu) if stale else None, estimator=estimator, k=k, n=n, loss=loss,
                correction=correction, tis_cap=tis_cap).loss
            return -scale * jax.grad(total)(theta)

        per_tuple = jax.vmap(update)(ys)                                       # [T, A]
        prob = jnp.exp(jnp.sum(jax.nn.log_softmax(theta_mu)[ys], axis=(1, 2)))  # μ(tuple) [T]
        return jnp.sum(prob[:, None] * per_tuple, axis=0)

    # runs once: XLA's backend optimisation would cost more (~1/3 of the compile) than it saves
    @functools.partial(jax.jit, compiler_options={"xla_backend_optimization_level": 0})
    def program(logits, ys):                       # [D, 3, A], [T, R, n] -> [S, D, A]
        return jnp.stack([jax.vmap(functools.partial(one, fn, loss, scale), in_axes=(0, None))(logits, ys)
                          for (fn, loss), scale in zip(settings, scales)])

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
