"""jnp translations of the max@k paper's Listing 2 (on-policy) and Listing 3 (off-policy).

These are the O(n^2)-memory *baselines* the library's O(n log n) transforms are benchmarked
against (``experiments/bench_estimators.py``). Both listings expect every row of ``rewards``
already sorted in ascending order (and, for Listing 3, ``deltas`` permuted the same way);
``sort_rows`` does that and ``unsort_rows`` restores the input order.

Binomial coefficients are exact: each factor C(a, b) / C(m, k) is formed from Python integers
(``math.comb``; C(a, b) = 0 for a < 0, b < 0 or b > a, i.e. the count of b-subsets of a set of
a elements, which is what the listings' ``binom(...).nan_to_num(0)`` intends) and only the final
ratio is rounded to a float. These tables depend only on the static (m, k), so they are
compile-time constants; everything that depends on the data is computed with jnp, keeping the
listings' O(B n^2) weight tensors.

``bon_scaler_offpolicy_as_printed`` is a literal translation of Listing 3 as printed, kept so a
test can demonstrate that it disagrees with the paper's own formulas (§3.3 / App. E);
``bon_scaler_offpolicy`` is the corrected version (corrections listed in its docstring).
"""
from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np


def binom_ratio_table(m: int, k: int, shift: int, choose: int) -> np.ndarray:
    """Exact C(j - shift, choose) / C(m, k) for j = 1..m, as float64 [m].

    Counts are combinatorial: C(a, b) = 0 whenever a < 0, b < 0 or b > a.
    """
    _check_mk(m, k)
    den = math.comb(m, k)

    def count(a: int, b: int) -> int:
        return math.comb(a, b) if 0 <= b <= a else 0

    return np.array([count(j - shift, choose) / den for j in range(1, m + 1)], dtype=np.float64)


def sort_rows(rewards: jax.Array, *others: jax.Array) -> tuple[jax.Array, ...]:
    """Sorts each row of ``rewards`` [B, n] ascending and permutes ``others`` (each [B, n]) alike.

    Returns ``(sorted_rewards, *sorted_others, order)`` with ``x_sorted = x[b, order[b]]``;
    ``unsort_rows`` undoes it.
    """
    order = jnp.argsort(rewards, axis=-1, stable=True)
    take = lambda x: jnp.take_along_axis(x, order, axis=-1)
    return (take(rewards), *(take(o) for o in others), order)


def unsort_rows(x_sorted: jax.Array, order: jax.Array) -> jax.Array:
    """Inverse of ``sort_rows``: [B, n] values in sorted order -> the original order (a scatter)."""
    return jax.vmap(lambda x, o: jnp.zeros_like(x).at[o].set(x))(x_sorted, order)


def bon_scaler(rewards: jax.Array, k: int) -> tuple[jax.Array, jax.Array]:
    """Listing 2 (on-policy BoN), sorted rewards [B, n] -> (r_tilde [B, n], weights [n, n]).

    ``weights[j, i] = w_ij / C(n, k)`` (row = index of the subset maximum, column = the sample that
    receives the credit), with w_ii = C(i-1, k-1) and w_ij = C(j-2, k-2) for j > i (1-based, eq. 8-9).
    ``r_tilde = rewards @ weights``. The listing as printed matches the paper's formulas; the only
    translation choice is the exact binomial tables (see module docstring).
    """
    _check_rewards(rewards, k)
    m = rewards.shape[-1]
    off = jnp.asarray(binom_ratio_table(m, k, 2, k - 2), rewards.dtype)  # C(j-2, k-2)/C(m, k)
    diag = jnp.asarray(binom_ratio_table(m, k, 1, k - 1), rewards.dtype)  # C(j-1, k-1)/C(m, k)
    scale = jnp.tril(jnp.broadcast_to(off[:, None], (m, m)), k=-1) + jnp.diag(diag)
    return rewards @ scale, scale


def bon_scaler_offpolicy(
    rewards: jax.Array,
    deltas: jax.Array,
    k: int,
    clamp_delta: float | None = None,
) -> tuple[jax.Array, jax.Array]:
    """Corrected Listing 3 (first-order off-policy BoN), sorted [B, n] -> (c [B, n], weights [B, n, n]).

    ``deltas`` = rho - 1 = exp(log_ratio) - 1, permuted like the sorted rewards. Implements the
    paper's own formulas (§3.3, App. E; 1-based, sorted ascending, row j = subset maximum):

        w'_ii = C(i-1, k-1) (1 + d_i) + C(i-2, k-2) sum_{l<i} d_l
        w'_ij = C(j-2, k-2) (1 + d_i + d_j) + C(j-3, k-3) sum_{l<j, l != i} d_l     (j > i)

    and ``c_i = sum_j r_j w'_ij / C(n, k)``, which equals the brute-force
    C(n,k)^-1 sum_{I containing i, |I|=k} (1 + sum_{l in I} d_l) max r_I.

    Corrections relative to Listing 3 as printed:
    1. ``scale_base = scale_1 + diag_scale_1`` adds the length-m vector C(i-1, k-1)/C(m, k) to
       *every row* (broadcast over the last axis), so every ``weights[j, i]`` with j != i -
       including j < i, which must be 0 - gets an extra C(i-1, k-1)/C(m, k), i.e. c_i gains
       C(i-1, k-1)/C(m, k) * sum_{j != i} r_j. The diagonal term belongs on the
       diagonal only: ``scale_1 + diag(diag_scale_1)`` (as Listing 2 does with ``torch.diag``).
    2. ``rewards @ weights`` with rewards [B, m] and weights [B, m, m] is a *broadcast* batched
       matmul: it returns [B, B, m] whose entry [b, p, i] pairs prompt p's rewards with prompt
       b's weights. Only the diagonal b == p is meant: a per-prompt contraction
       ``einsum('pj,pji->pi')``.
    3. The listing clamps deltas to [-clamp_delta, clamp_delta] before use; no clamp appears in
       the formulas (it changes the estimator whenever it is active), so clamping is opt-in here
       (``clamp_delta=None``, the default, means no clamp).
    (A harmless slip - ``diag_scale_1.to(device)`` written where ``diag_scale_2`` was meant - has
    no counterpart in JAX.) The appendix prose also says the other deltas appear C(i-3, k-3)
    times in w'_ij; its displayed formula (C(j-3, k-3)) is the correct one and is used here.
    """
    _check_rewards(rewards, k)
    _check_deltas(rewards, deltas)
    if clamp_delta is not None:
        if not clamp_delta > 0:
            raise ValueError(f"clamp_delta must be > 0 or None, got {clamp_delta!r}")
        deltas = jnp.clip(deltas, -clamp_delta, clamp_delta)
    m = rewards.shape[-1]
    dt = rewards.dtype
    cum = jnp.cumsum(deltas, axis=-1) - deltas  # sum_{l<j} d_l, [B, m]
    s1 = jnp.asarray(binom_ratio_table(m, k, 2, k - 2), dt)  # C(j-2, k-2)
    s2 = jnp.asarray(binom_ratio_table(m, k, 3, k - 3), dt)  # C(j-3, k-3)
    d1 = jnp.asarray(binom_ratio_table(m, k, 1, k - 1), dt)  # C(i-1, k-1)
    d2 = s1  # C(i-2, k-2) on the diagonal is the same table as s1
    lower = jnp.tril(jnp.ones((m, m), dt), k=-1)  # [j, i], j > i
    scale_1 = lower * s1[:, None]
    scale_2 = lower * s2[:, None]
    scale_base = scale_1 + jnp.diag(d1)  # correction 1
    off_diag = (scale_1 * (deltas[:, :, None] + deltas[:, None, :])
                + scale_2 * (cum[:, :, None] - deltas[:, None, :]))
    diag_term = d1 * deltas + d2 * cum  # [B, m]
    weights = scale_base + off_diag + jax.vmap(jnp.diag)(diag_term)
    return jnp.einsum("pj,pji->pi", rewards, weights), weights  # correction 2


def bon_scaler_offpolicy_as_printed(
    rewards: jax.Array, deltas: jax.Array, k: int, clamp_delta: float
) -> tuple[jax.Array, jax.Array]:
    """Literal translation of Listing 3 as printed (for tests only): [B, m] -> ([B, B, m], [B, m, m]).

    Keeps the broadcast ``scale_1 + diag_scale_1`` and the broadcasting ``rewards @ weights``;
    see ``bon_scaler_offpolicy`` for why both disagree with the paper's formulas.
    """
    _check_rewards(rewards, k)
    _check_deltas(rewards, deltas)
    m = rewards.shape[-1]
    dt = rewards.dtype
    deltas = jnp.clip(deltas, -clamp_delta, clamp_delta)
    cum = jnp.cumsum(deltas, axis=1) - deltas
    lower = jnp.tril(jnp.ones((m, m), dt), k=-1)
    scale_1 = lower * jnp.asarray(binom_ratio_table(m, k, 2, k - 2), dt)[:, None]
    diag_scale_1 = jnp.asarray(binom_ratio_table(m, k, 1, k - 1), dt)
    scale_base = scale_1 + diag_scale_1  # as printed: broadcast over rows
    off_diag_term1 = scale_1 * (deltas[:, :, None] + deltas[:, None, :])
    scale_2 = lower * jnp.asarray(binom_ratio_table(m, k, 3, k - 3), dt)[:, None]
    off_diag_term2 = scale_2 * (cum[:, :, None] - deltas[:, None, :])
    diag_scale_2 = jnp.asarray(binom_ratio_table(m, k, 2, k - 2), dt)
    diag_term = jax.vmap(jnp.diag)(diag_scale_1 * deltas + diag_scale_2 * cum)
    weights = off_diag_term1 + off_diag_term2 + diag_term + scale_base
    return jnp.matmul(rewards, weights), weights  # as printed: [B, m] @ [B, m, m] -> [B, B, m]


def _check_mk(m: int, k: int) -> None:
    if not isinstance(k, (int, np.integer)) or isinstance(k, bool):
        raise ValueError(f"k must be an int, got {k!r}")
    if not 1 <= k <= m:
        raise ValueError(f"k must satisfy 1 <= k <= n = {m}, got k = {k}")


def _check_rewards(rewards: jax.Array, k: int) -> None:
    if rewards.ndim != 2:
        raise ValueError(f"rewards must be [B, n], got shape {tuple(rewards.shape)}")
    _check_mk(rewards.shape[-1], k)


def _check_deltas(rewards: jax.Array, deltas: jax.Array) -> None:
    if deltas.shape != rewards.shape:
        raise ValueError(
            f"deltas shape {tuple(deltas.shape)} must equal rewards shape {tuple(rewards.shape)}")
