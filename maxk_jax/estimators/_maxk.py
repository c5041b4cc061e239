"""pass@k / max@k metrics and the max@k reward transforms (on-policy, first-order off-policy, LOO-1).

Notation (max@k paper, Bagirov et al.): n samples of one prompt, rewards r, k <= n.  Brute force
is the specification of every function here:

    pass_at_k       mean over k-subsets I of any(correct_I)                  (Chen et al. 2021)
    max_at_k        mean over k-subsets I of max r_I                        (paper App. C.1)
    r~_i            C(n,k)^-1 sum_{I ni i, |I|=k} max r_I                   (paper eq. 7-9)
    r~'_i           C(n,k)^-1 sum_{I ni i} (1 + sum_{l in I} delta_l) max r_I, delta = rho - 1 (§3.3)
    loo1_i          C(n,k)^-1 sum_{I ni i} (max r_I - max r_{I\\i})          (BoN LOO-1, App. A)

All functions take `[..., n]` arrays (any order, ties allowed), return input order, are pure
jax.numpy, jit- and vmap-compatible (k is a static Python int), and accept `mask` (True = valid
sample; masked samples behave exactly as if absent and get 0).  Rows with fewer than k valid
samples get all-zero transforms (metrics: NaN, "undefined") -- see `rows_below_k`.

Cost: one sort + a few associative scans per row, O(n log n).

LOO-1 (derived here; the paper's App. A recursion for the second term is not used).  Sort
ascending, gap_t = r_(t+1) - r_(t).  Only subsets in which i is the top contribute, with
r_i - max r_{I\\i} = sum of the gaps between the subset's runner-up and i, hence

    loo1_i = sum_{t < i} gap_t * C(t, k-1) / C(n, k)  = sum_{t < i} gap_t a_{t+1},

a prefix sum of non-negative terms: exactly 0 for every non-maximal tie, no cancellation.
"""
from __future__ import annotations

from functools import partial
from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np

from maxk_jax.estimators._core import (Array, SortedRows, Weights, check_finite, finish, gaps,
                                      log_weights, prefix_sum, prepare_log_ratio, prepare_mask,
                                      prepare_rewards, as_rows, rows_view, row_min, row_sum, sort_rows,
                                      suffix_sum, validate_k, is_concrete)


# --------------------------------------------------------------------------------------------
# row kernels on sorted rows (shared with the registry / exact / Tang modules)
# --------------------------------------------------------------------------------------------

def onpolicy_sorted(s: SortedRows, w: Weights, k) -> Array:
    """r~ (eq. 9) in sorted order `[B, n]` (not yet tie-canonicalised / unsorted)."""
    lo = row_min(s)
    rr = jnp.where(s.valid, s.r - lo, 0)
    a, b = jnp.exp(w.log_a), jnp.exp(w.log_b)
    kn = jnp.asarray(k, s.r.dtype) / jnp.maximum(s.n_valid, 1).astype(s.r.dtype)[:, None]
    return a * rr + suffix_sum(b * rr) + lo * kn


def offpolicy_first_order_sorted(s: SortedRows, w: Weights, k) -> Array:
    """First-order off-policy r~' (§3.3 / App. E w'_ij) in sorted order `[B, n]`."""
    dt = s.r.dtype
    lo = row_min(s)
    rr = jnp.where(s.valid, s.r - lo, 0)
    d = jnp.where(s.valid, jnp.expm1(s.lr), 0)                 # delta = rho - 1
    p = prefix_sum(d)                                          # P_j = sum_{l<j} delta_l
    a, b, c = jnp.exp(w.log_a), jnp.exp(w.log_b), jnp.exp(w.log_c)
    val = (a * rr + suffix_sum(b * rr)                         # on-policy part
           + (a * d + b * p) * rr                              # j = i: C(i-1,k-1)d_i + C(i-2,k-2)P_i
           + d * suffix_sum((b - c) * rr)                      # j > i: C(j-2,k-2)(d_i+d_j)
           + suffix_sum((b * d + c * p) * rr))                 #        + C(j-3,k-3)(P_j - d_i)
    # shift correction: lo * C(n,k)^-1 sum_{I ni i} (1 + sum_I delta)
    kf = jnp.asarray(k, dt)
    nv = jnp.maximum(s.n_valid, 1).astype(dt)[:, None]
    dsum = row_sum(d, keepdims=True)
    pair = jnp.where(nv > 1, kf * (kf - 1) / (nv * jnp.maximum(nv - 1, 1)), 0)
    return val + lo * (kf / nv * (1 + d) + pair * (dsum - d))


def loo1_sorted(s: SortedRows, w: Weights) -> Array:
    """On-policy LOO-1 advantage in sorted order: prefix sum of gap_q * a_q."""
    return prefix_sum(gaps(s) * jnp.exp(w.log_a), exclusive=False)


def loo1_first_order_sorted(s: SortedRows, w: Weights) -> Array:
    """First-order off-policy LOO-1: C(n,k)^-1 sum_{I ni i} (1 + sum_I delta)(max r_I - max r_{I\\i}).

    = (1 + delta_i) sum_{q<=i} gap_q a_q + sum_{q<=i} gap_q b_q P_q  (P_q = sum_{l<q} delta_l).
    """
    g = gaps(s)
    d = jnp.where(s.valid, jnp.expm1(s.lr), 0)
    p = prefix_sum(d)
    first = prefix_sum(g * jnp.exp(w.log_a), exclusive=False)
    second = prefix_sum(g * jnp.exp(w.log_b) * p, exclusive=False)
    return (1 + d) * first + second


# --------------------------------------------------------------------------------------------
# jitted row programs (k is passed as an array so one compilation serves every k)
# --------------------------------------------------------------------------------------------

@partial(jax.jit, static_argnames=("kind",))
def _transform_rows(r: Array, mask: Array, lr: Array, k: Array, kind: str) -> Array:
    n = r.shape[-1]
    s = sort_rows(r, mask, lr if kind in ("offpolicy", "loo1_offpolicy") else None)
    w = log_weights(s.n_valid, k, n, r.dtype)
    if kind == "onpolicy":
        x = onpolicy_sorted(s, w, k)
    elif kind == "offpolicy":
        x = offpolicy_first_order_sorted(s, w, k)
    elif kind == "loo1":
        x = loo1_sorted(s, w)
    elif kind == "loo1_offpolicy":
        x = loo1_first_order_sorted(s, w)
    else:  # pragma: no cover - internal
        raise ValueError(f"unknown transform kind {kind!r}")
    return finish(s, x, k)


@jax.jit
def _max_at_k_rows(r: Array, mask: Array, k: Array) -> Array:
    n = r.shape[-1]
    s = sort_rows(r, mask)
    w = log_weights(s.n_valid, k, n, r.dtype)
    lo = row_min(s)
    val = row_sum(jnp.exp(w.log_a) * jnp.where(s.valid, s.r - lo, 0)) + lo[:, 0]
    return jnp.where(s.n_valid >= k, val, jnp.nan)


@jax.jit
def _pass_at_k_rows(c: Array, mask: Array, k: Array) -> Array:
    n = c.shape[-1]
    nv = jnp.sum(mask, axis=-1)[:, None]
    nw = nv - jnp.sum(c & mask, axis=-1)[:, None]               # number of wrong samples
    m = jnp.arange(1, n + 1, dtype=jnp.float32)[None, :]
    kf = k.astype(jnp.float32)
    use = (m > nw) & (m <= nv) & (m > kf)
    # C(nw, k) / C(nv, k) = prod_{m = nw+1}^{nv} (1 - k/m)
    logq = row_sum(jnp.where(use, jnp.log1p(-kf / jnp.where(use, m, 1.0)), 0.0))
    val = jnp.where(nw[:, 0] < k, 1.0, -jnp.expm1(logq))
    return jnp.where(nv[:, 0] >= k, val, jnp.nan)


# --------------------------------------------------------------------------------------------
# public API
# --------------------------------------------------------------------------------------------

def _setup(rewards, k, mask, *, min_k: int = 1):
    r = prepare_rewards(rewards)
    k = validate_k(k, r.shape[-1], minimum=min_k)
    m = prepare_mask(mask, r.shape)
    check_finite(r, name="rewards", mask=m)
    return r, k, m


def _run(kind: str, r: Array, m: Array, k: int, lr: Optional[Array] = None) -> Array:
    rows, lead = rows_view(r)
    mrows = m.reshape(rows.shape)
    lrows = jnp.zeros_like(rows) if lr is None else lr.astype(rows.dtype).reshape(rows.shape)
    out = _transform_rows(rows, mrows, lrows, jnp.asarray(k, jnp.int32), kind)
    return out.reshape(lead + (r.shape[-1],))


def pass_at_k(correct, k: int, *, mask=None) -> Array:
    """Unbiased pass@k (Chen et al.): 1 - C(n-c, k)/C(n, k) per row.

    correct: [..., n] bool (or 0/1); k: static int, 1 <= k <= n; mask: optional [..., n] bool.
    Returns [...] float32 (NaN for rows with fewer than k valid samples).  Evaluated as
    -expm1(sum log1p(-k/m)) so it is accurate near 0 and 1 for any n.  Non-bool inputs are
    checked to be 0/1 when concrete; under jit they count as correct when non-zero.
    """
    c = as_rows(correct, name="correct")
    k = validate_k(k, c.shape[-1])
    m = prepare_mask(mask, c.shape)
    if c.dtype != jnp.bool_:
        if is_concrete(c):
            vals = np.unique(np.asarray(c)[np.asarray(m)])
            bad = [v for v in vals if v not in (0, 1)]
            if bad:
                raise ValueError(f"correct must be boolean or 0/1, got value {bad[0]!r}; use "
                                 "max_at_k for continuous rewards")
        c = c != 0
    rows, lead = rows_view(c)
    out = _pass_at_k_rows(rows, m.reshape(rows.shape), jnp.asarray(k, jnp.int32))
    return out.reshape(lead)


def max_at_k(rewards, k: int, *, mask=None) -> Array:
    """Unbiased max@k: mean over all k-subsets of max(rewards) (paper App. C.1).

    rewards: [..., n] real; k: static int, 1 <= k <= n; mask: optional [..., n] bool.
    Returns [...] (NaN for rows with fewer than k valid samples).
    """
    r, k, m = _setup(rewards, k, mask)
    rows, lead = rows_view(r)
    out = _max_at_k_rows(rows, m.reshape(rows.shape), jnp.asarray(k, jnp.int32))
    return out.reshape(lead)


def maxk_reward_transform(rewards, k: int, *, mask=None) -> Array:
    """On-policy max@k reward transform r~_i = C(n,k)^-1 sum_{I ni i, |I|=k} max r_I (eq. 7-9).

    rewards: [..., n]; returns [..., n] in input order.  sum_i r~_i = k * max@k.  The policy
    gradient sum_i r~_i grad log pi(y_i) is unbiased for grad max@k (eq. 9).
    """
    r, k, m = _setup(rewards, k, mask)
    return _run("onpolicy", r, m, k)


def maxk_reward_transform_offpolicy(rewards, log_ratio, k: int, *, mask=None) -> Array:
    """First-order off-policy transform C(n,k)^-1 sum_{I ni i} (1 + sum_{l in I} delta_l) max r_I.

    delta = exp(log_ratio) - 1 with log_ratio = log pi_theta(y) - log pi_old(y) per sequence
    (§3.3, the paper's w'_ij of App. E).  rewards, log_ratio: [..., n]; returns [..., n].
    log_ratio = 0 gives exactly `maxk_reward_transform`.
    """
    r, k, m = _setup(rewards, k, mask)
    lr = prepare_log_ratio(log_ratio, r.shape, required=True, estimator="maxk_reward_transform_offpolicy")
    check_finite(lr, name="log_ratio", mask=m)
    return _run("offpolicy", r, m, k, lr)


def loo1_advantage(rewards, k: int, *, mask=None) -> Array:
    """BoN LOO-1 advantage C(n,k)^-1 sum_{I ni i} (max r_I - max r_{I\\i}) (paper App. A).

    rewards: [..., n]; k: static int, 2 <= k <= n (k = 1 would need the max of an empty set).
    Returns [..., n] >= 0, non-zero only where a sample beats someone; unbiased (the subtracted
    term does not depend on y_i).  Equals Tang et al. eq. 2 averaged over all k-subsets.
    """
    r, k, m = _setup(rewards, k, mask, min_k=2)
    return _run("loo1", r, m, k)


def loo1_advantage_offpolicy(rewards, log_ratio, k: int, *, mask=None) -> Array:
    """First-order off-policy LOO-1: C(n,k)^-1 sum_{I ni i} (1 + sum_I delta)(max r_I - max r_{I\\i}).

    The first-order expansion of the exact importance-weighted LOO-1 term; equals
    `maxk_reward_transform_offpolicy` minus a baseline that is y_i-independent to first order.
    rewards, log_ratio: [..., n]; k >= 2; returns [..., n].
    """
    r, k, m = _setup(rewards, k, mask, min_k=2)
    lr = prepare_log_ratio(log_ratio, r.shape, required=True, estimator="loo1_advantage_offpolicy")
    check_finite(lr, name="log_ratio", mask=m)
    return _run("loo1_offpolicy", r, m, k, lr)

