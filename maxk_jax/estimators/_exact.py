"""Exact importance-weighted max@k transform (max@k paper eq. 10) in O(n k) per prompt.

    E_i = C(n,k)^-1 sum_{I ni i, |I|=k} (prod_{l in I} rho_l) max r_I,   rho = exp(log_ratio).

The paper calls eq. (10) "exponentially hard"; it is polynomial.  Sort ascending (ties broken
by log_ratio, then index -- any total order gives the same sums).  For sample i let S = I \\ {i}
(a (k-1)-subset of the other n-1 samples), split into t = k-1-m samples below i and m above.
The maximum is r_i if m = 0, else the top of the part above, so

    E_i = (k/n) rho_i sum_{m=0}^{k-1} h_m(i) * Lbar_{k-1-m}(i) * Vbar_m(i)

with (all three are *means*, so they stay O(1) and never form a binomial coefficient)
  h_m(i)      = C(i-1, k-1-m) C(n-i, m) / C(n-1, k-1): hypergeometric probability that m of the
                k-1 others lie above i.  Forward recursion (swap sample i+1 for sample i):
                h_m(i+1) = h_m(i) (1 - m/(n-i)) + h_{m+1}(i) (m+1)/(n-i),  h(1) = e_{k-1}.
  Lbar_t(i)   = e_t(rho_1..rho_{i-1}) / C(i-1, t): elementary-symmetric *mean* of the prefix,
                Lbar_t(i+1) = (1 - t/i) Lbar_t(i) + (t/i) rho_i Lbar_{t-1}(i).
  Vbar_m(i)   = mean over m-subsets S of {i+1..n} of prod rho_S max r_S (Vbar_0 := r_i),
                Vbar_m(i-1) = (1 - m/s) Vbar_m(i) + (m/s) rho_i X,  s = n-i+1,
                X = r_i (m = 1) or Vbar_{m-1}(i) (m >= 2).
Every recursion is a convex combination (no cancellation); they run in log space (logaddexp),
both passes inside one lax.scan, on log rho minus its row mean (the mean contributes the exact
factor e^{k mean}), so log_ratio can be far from 0 as long as the result is representable.
Rewards are shifted to r - min(r) >= 0 for the log-space sums and the shift is added back as
min(r) * C(n,k)^-1 sum_{I ni i} prod rho_I (same DP with Vbar replaced by ESP means of the suffix).
Error: each recursion step adds O(eps) relative error, so O(n eps) worst case.

Exact LOO-1 baseline (unbiased: the subtracted term rho_i * g(y_{-i}) has zero mean off-policy):
    C(n,k)^-1 sum_{I ni i} prod rho_I (max r_I - max r_{I\\i})
        = rho_i sum_{t < i} gap_t * C(n,k)^-1 e_{k-1}(rho_1..rho_t)
        = rho_i sum_{t < i} gap_t a_{t+1} Lbar_{k-1}(t+1),    gap_t = r_(t+1) - r_(t) >= 0,
a log-cumsum-exp of non-negative terms.
"""
from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
from jax import lax
from jax.scipy.special import logsumexp

from maxk_jax.estimators._core import (Array, SortedRows, check_finite, finish, gaps, log_weights,
                                      prepare_log_ratio, prepare_mask, prepare_rewards, row_min,
                                      row_sum, rows_view, sort_rows, validate_k)

_NEG = -jnp.inf


def _lae(a: Array, b: Array) -> Array:
    return jnp.logaddexp(a, b)


def _forward_step(b: int, cap: int, nvf: Array, dt):
    """Scan step adding sample i to the prefix: carries log Lbar [B, cap] and log h [B, cap]."""
    m = jnp.arange(cap, dtype=dt)[None, :]
    neg_col = jnp.full((b, 1), _NEG, dt)

    def step(carry, x):
        ell, logh = carry
        lam_p, i, valid_p = x
        # Lbar update with prefix size i (after adding element i)
        c1 = jnp.where(m < i, jnp.log1p(-m / i), _NEG)
        c2 = jnp.where(m >= 1, jnp.log(jnp.maximum(m, 1) / i), _NEG)
        ell_new = _lae(c1 + ell, c2 + lam_p[:, None] + jnp.concatenate([neg_col, ell[:, :-1]], axis=1))
        # h update: the n_v - i samples above i lose sample i+1 to the part below
        rem = (nvf - i)[:, None]
        ok = rem >= 1
        safe = jnp.where(ok, rem, 1.0)
        d1 = jnp.where(m < rem, jnp.log1p(-m / safe), _NEG)
        d2 = jnp.where(m + 1 <= rem, jnp.log((m + 1) / safe), _NEG)
        logh_new = _lae(d1 + logh, d2 + jnp.concatenate([logh[:, 1:], neg_col], axis=1))
        ell = jnp.where(valid_p[:, None], ell_new, ell)
        logh = jnp.where(valid_p[:, None] & ok, logh_new, logh)
        return (ell, logh), carry

    return step


def _backward_step(b: int, cap: int, nvf: Array, dt):
    """Scan step adding sample i to the suffix: carries log Vbar (index 0 unused) and log Rbar."""
    m = jnp.arange(cap, dtype=dt)[None, :]
    neg_col = jnp.full((b, 1), _NEG, dt)

    def step(carry, x):
        logv, logr = carry
        lam_p, lrp_p, i, valid_p = x
        s = (nvf - i + 1)[:, None]
        safe = jnp.where(s >= 1, s, 1.0)
        e1 = jnp.where(m < s, jnp.log1p(-m / safe), _NEG)
        e2 = jnp.where((m >= 1) & (m <= s), jnp.log(jnp.maximum(m, 1) / safe), _NEG)
        x_sh = jnp.concatenate([neg_col, lrp_p[:, None], logv[:, 1:]], axis=1)[:, :cap]
        v_new = _lae(e1 + logv, e2 + lam_p[:, None] + x_sh).at[:, 0].set(_NEG)
        r_new = _lae(e1 + logr, e2 + lam_p[:, None] + jnp.concatenate([neg_col, logr[:, :-1]], axis=1))
        logv = jnp.where(valid_p[:, None], v_new, logv)
        logr = jnp.where(valid_p[:, None], r_new, logr)
        return (logv, logr), carry

    return step


def _init(b: int, cap: int, k: Array, dt):
    neg = jnp.full((b, cap), _NEG, dt)
    ell0 = neg.at[:, 0].set(0.0)                                   # Lbar_0 = 1
    logh0 = jnp.where(jnp.arange(cap)[None, :] == k - 1, 0.0, _NEG).astype(dt) + jnp.zeros((b, 1), dt)
    return (ell0, logh0), (neg, neg.at[:, 0].set(0.0))            # (Lbar, h), (Vbar, Rbar)


def _forward(lam: Array, valid: Array, nv: Array, k: Array, cap: int, dt) -> tuple[Array, Array]:
    """Prefix ESP means log Lbar_t(i) and hypergeometric log h_m(i); both [n, B, cap], cap >= k."""
    b, n = lam.shape
    step = _forward_step(b, cap, nv.astype(dt), dt)
    xs = (lam.T, jnp.arange(1, n + 1, dtype=dt), valid.T)
    _, out = lax.scan(step, _init(b, cap, k, dt)[0], xs)
    return out


def _forward_backward(lam: Array, log_rp: Array, valid: Array, nv: Array, k: Array, cap: int, dt):
    """Both passes in ONE lax.scan (position p forward, n-1-p backward); outputs [n, B, cap] each:
    log Lbar, log h (prefix side) and log Vbar, log Rbar (suffix side) at every position."""
    b, n = lam.shape
    nvf = nv.astype(dt)
    fwd, bwd = _forward_step(b, cap, nvf, dt), _backward_step(b, cap, nvf, dt)
    pos = jnp.arange(1, n + 1, dtype=dt)
    xs_f = (lam.T, pos, valid.T)
    xs_b = (lam.T[::-1], log_rp.T[::-1], pos[::-1], valid.T[::-1])

    def step(carry, x):
        cf, out_f = fwd(carry[0], x[0])
        cb, out_b = bwd(carry[1], x[1])
        return (cf, cb), (out_f, out_b)

    _, ((ell, logh), (logv, logr)) = lax.scan(step, _init(b, cap, k, dt), (xs_f, xs_b))
    return ell, logh, logv[::-1], logr[::-1]


SMALL_N = 32


def capacity(k: int, n: int) -> int:
    """Static DP width (>= k): n when n <= SMALL_N (one compilation for every k, O(n^2) is
    negligible there), else the next power of two >= k capped at n (one compile per bucket)."""
    if n <= SMALL_N:
        return n
    return min(n, 1 << (int(k) - 1).bit_length())


def exact_sorted(s: SortedRows, k: Array, cap: int, *, loo1: bool) -> Array:
    """Exact eq. (10) transform (loo1=False) or its exact LOO-1 advantage, sorted order [B, n].

    k may be traced; `cap` (static, >= k) is the width of the DP vectors.
    """
    dt = s.r.dtype
    n = s.r.shape[-1]
    lam_full = jnp.where(s.valid, s.lr, 0).astype(dt)
    # factor out the row mean of log rho: rho = e^{bar} rho', every k-subset weight gains e^{k bar};
    # the DP then only sees the spread of log rho (its log-space error grows with |log Lbar|)
    nvf = jnp.maximum(s.n_valid, 1).astype(dt)[:, None]
    bar = row_sum(lam_full, keepdims=True) / nvf
    lam = jnp.where(s.valid, lam_full - bar, 0)
    kf = jnp.asarray(k, dt)
    scale = lam_full + (kf - 1) * bar                            # log of rho_i * e^{(k-1) bar}
    if loo1:
        ell = jnp.moveaxis(_forward(lam, s.valid, s.n_valid, k, cap, dt)[0], 0, 1)   # [B, n, cap]
        w = log_weights(s.n_valid, k, n, dt)
        g = gaps(s)
        ell_top = jnp.take_along_axis(ell, jnp.broadcast_to(k - 1, ell.shape[:-1] + (1,)), axis=-1)[..., 0]
        term = jnp.where(g > 0, jnp.log(jnp.where(g > 0, g, 1)), _NEG) + w.log_a + ell_top
        return jnp.exp(scale + lax.cumlogsumexp(term, axis=1))
    lo = row_min(s)
    rp = jnp.where(s.valid, s.r - lo, 0)
    log_rp = jnp.where(rp > 0, jnp.log(jnp.where(rp > 0, rp, 1)), _NEG)
    ell, logh, logv, logr = (jnp.moveaxis(x, 0, 1) for x in       # [B, n, cap] each
                             _forward_backward(lam, log_rp, s.valid, s.n_valid, k, cap, dt))
    y = jnp.concatenate([log_rp[..., None], logv[..., 1:]], axis=-1)
    # Lbar_{k-1-m} for m = 0..cap-1 (-inf where k-1-m < 0)
    mm = jnp.arange(cap)
    rev = jnp.clip(k - 1 - mm, 0, cap - 1)
    ell_rev = jnp.where(mm <= k - 1, jnp.take(ell, rev, axis=-1), _NEG)
    base = logh + ell_rev                                        # h_m * Lbar_{k-1-m}
    pre = jnp.log(kf) - jnp.log(nvf) + scale
    e_shift = jnp.exp(pre + logsumexp(base + y, axis=-1))
    w_ones = jnp.exp(pre + logsumexp(base + logr, axis=-1))
    # lo == 0 (e.g. rewards in [0, 1] with a 0): skip the term so an overflowed weight gives inf, not NaN
    return e_shift + jnp.where(lo == 0, 0, lo * w_ones)


@partial(jax.jit, static_argnames=("cap", "loo1"))
def _exact_rows(r: Array, mask: Array, lr: Array, k: Array, cap: int, loo1: bool) -> Array:
    s = sort_rows(r, mask, lr)
    return finish(s, exact_sorted(s, k, cap, loo1=loo1), k)


def _exact_public(rewards, log_ratio, k, mask, *, loo1: bool, name: str) -> Array:
    r = prepare_rewards(rewards)
    k = validate_k(k, r.shape[-1], minimum=2 if loo1 else 1)
    m = prepare_mask(mask, r.shape)
    check_finite(r, name="rewards", mask=m)
    lr = prepare_log_ratio(log_ratio, r.shape, required=True, estimator=name)
    check_finite(lr, name="log_ratio", mask=m)
    rows, lead = rows_view(r)
    out = _exact_rows(rows, m.reshape(rows.shape), lr.astype(rows.dtype).reshape(rows.shape),
                      jnp.asarray(k, jnp.int32), capacity(k, r.shape[-1]), loo1)
    return out.reshape(lead + (r.shape[-1],))


def maxk_reward_transform_offpolicy_exact(rewards, log_ratio, k: int, *, mask=None) -> Array:
    """Exact off-policy transform C(n,k)^-1 sum_{I ni i} (prod_{l in I} rho_l) max r_I (eq. 10).

    rewards, log_ratio: [..., n] (log_ratio = log pi_theta(y) - log pi_old(y) per sequence,
    rho = exp(log_ratio)); k: static int 1 <= k <= n; mask: optional [..., n] bool.
    Returns [..., n] in input order.  O(n K) time and memory per row (two lax.scan passes) with
    K = `capacity(k, n)`: n for n <= 32, else the next power of two >= k (capped at n), so one
    compilation serves all k for small n and k in (K/2, K] for large n.
    """
    return _exact_public(rewards, log_ratio, k, mask, loo1=False,
                         name="maxk_reward_transform_offpolicy_exact")


def loo1_advantage_offpolicy_exact(rewards, log_ratio, k: int, *, mask=None) -> Array:
    """Exact importance-weighted LOO-1: C(n,k)^-1 sum_{I ni i} prod rho_I (max r_I - max r_{I\\i}).

    Unbiased off-policy (the subtracted term is rho_i times a function of y_{-i}).  rewards,
    log_ratio: [..., n]; k: static int 2 <= k <= n; returns [..., n] >= 0.
    """
    return _exact_public(rewards, log_ratio, k, mask, loo1=True, name="loo1_advantage_offpolicy_exact")
