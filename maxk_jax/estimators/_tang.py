"""Tang et al. (2025) k-sample objectives, generalised to n >= k samples by averaging over subsets.

Tang et al. sample exactly k generations y_I and use the leave-one-out advantage (their eq. 2)
A_i = f(y_I) - f(y_{I\\i}); the biased variant (eq. 3) subtracts the subset mean of the A's.
With n >= k samples we average the per-subset estimator over all C(n,k) k-subsets (a U-statistic:
still unbiased for the same gradient, lower variance).  The coefficient of grad log pi(y_i) is

    c_i = C(n,k)^-1 sum_{I ni i, |I|=k} A_i^I .

  f = max (pass@k for binary rewards, max@k for continuous): see `loo1_advantage` (eq. 2) and
      `tang_loo_biased_advantage` (eq. 3) -- closed forms in O(n log n).
  leave-p-out (App. B, eq. 5): `tang_leave_p_out_advantage` -- closed form.
  softmax objective (App. B) and majority voting (§3.1): no closed form over subsets; computed
      by explicit enumeration of the C(n,k) subsets (exact; raises ValueError above
      `max_subsets`, default 20000 -- e.g. n = k = 8 is one subset, n = 16, k = 8 is 12870).

Derivations (sorted ascending, gap_t = r_(t+1) - r_(t) >= 0, a_j, b_j as in _core):
  eq. 3:  A_i - mean_{l in I} A_l = A_i - g(I)/k with g(I) = max - runner-up of I, and
          C(n,k)^-1 sum_{I ni i} g(I) = loo1_i + sum_{t >= i} (n - t) b_{t+1} gap_t, so
          c_i = (k-1)/k * loo1_i - 1/k * sum_{t >= i} (n - t) b_{t+1} gap_t.
  eq. 5:  the leave-p-out estimator is the LOO estimator of f_p(I) = mean over (k-p)-subsets J
          of I of max r_J; averaging over I gives, with q = k - p, r~^(q) the eq. 9 transform at
          q and M_q = max@q:   c_i = r~^(q)_i - q/(n - q) * (M_q - r~^(q)_i).
"""
from __future__ import annotations

import itertools
from functools import lru_cache, partial
from math import comb

import jax
import jax.numpy as jnp
import numpy as np

from maxk_jax.estimators._core import (Array, as_rows, check_finite, finish, gaps, is_concrete,
                                      log_weights, prepare_mask, prepare_rewards, row_sum, rows_view,
                                      sort_rows, suffix_sum, validate_k)
from maxk_jax.estimators._maxk import loo1_sorted, onpolicy_sorted


# --------------------------------------------------------------------------------------------
# closed forms for f = max
# --------------------------------------------------------------------------------------------

@jax.jit
def _biased_rows(r: Array, mask: Array, k: Array) -> Array:
    n = r.shape[-1]
    s = sort_rows(r, mask)
    w = log_weights(s.n_valid, k, n, r.dtype)
    kf = k.astype(r.dtype)
    q = jnp.arange(n, dtype=r.dtype)[None, :]                  # 0-based position of gap_t, t = q
    above = (s.n_valid.astype(r.dtype)[:, None] - q)           # n - t
    tail = suffix_sum(above * jnp.exp(w.log_b) * gaps(s))
    x = (kf - 1) / kf * loo1_sorted(s, w) - tail / kf
    return finish(s, x, k)


@jax.jit
def _leave_p_out_rows(r: Array, mask: Array, k: Array, q: Array) -> Array:
    n = r.shape[-1]
    s = sort_rows(r, mask)
    lo = s.r[..., :1]
    s = s._replace(r=jnp.where(s.valid, s.r - lo, 0))          # shift: c is shift invariant
    w = log_weights(s.n_valid, q, n, r.dtype)
    rt = onpolicy_sorted(s, w, q)
    mq = row_sum(jnp.exp(w.log_a) * s.r, keepdims=True)
    qf = q.astype(r.dtype)
    nv = s.n_valid.astype(r.dtype)[:, None]
    x = rt - qf / jnp.maximum(nv - qf, 1) * (mq - rt)
    return finish(s, x, k)


def _prep(rewards, k, mask, *, min_k: int):
    r = prepare_rewards(rewards)
    k = validate_k(k, r.shape[-1], minimum=min_k)
    m = prepare_mask(mask, r.shape)
    check_finite(r, name="rewards", mask=m)
    rows, lead = rows_view(r)
    return r, rows, m.reshape(rows.shape), lead, k


def tang_loo_biased_advantage(rewards, k: int, *, mask=None) -> Array:
    """Tang et al. eq. 3 (mean-subtracted LOO, f = max), averaged over all k-subsets.

    rewards: [..., n] (binary or continuous); k: static int, 2 <= k <= n.  Returns [..., n]
    with zero row sums.  Biased: it is the unbiased gradient of eq. 4, E[(k-1)/k r_(k) +
    1/k r_(k-1)] (Tang Lemma 2).  n = k reproduces Tang's single-subset estimator exactly.
    """
    r, rows, m, lead, k = _prep(rewards, k, mask, min_k=2)
    out = _biased_rows(rows, m, jnp.asarray(k, jnp.int32))
    return out.reshape(r.shape)


def tang_leave_p_out_advantage(rewards, k: int, p: int, *, mask=None) -> Array:
    """Tang et al. App. B leave-p-out estimator (eq. 5 objective, f = max), subset-averaged.

    rewards: [..., n]; k: static int 2 <= k <= n; p: static int 1 <= p <= k-1 (p = 1 equals
    `tang_loo_biased_advantage`; p = k-1 is RLOO / n, the mean-reward gradient).  Returns
    [..., n] with zero row sums; unbiased for grad E[mean over (k-p)-subsets of max] = grad max@(k-p).
    """
    r, rows, m, lead, k = _prep(rewards, k, mask, min_k=2)
    p = validate_k(p, k - 1, name="p")
    out = _leave_p_out_rows(rows, m, jnp.asarray(k, jnp.int32), jnp.asarray(k - p, jnp.int32))
    return out.reshape(r.shape)


# --------------------------------------------------------------------------------------------
# subset enumeration (softmax objective, majority voting)
# --------------------------------------------------------------------------------------------

@lru_cache(maxsize=64)
def _subset_tables(n: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    idx = np.array(list(itertools.combinations(range(n), k)), dtype=np.int32)          # [S, k]
    loo = np.stack([np.delete(idx, j, axis=1) for j in range(k)], axis=1)              # [S, k, k-1]
    return idx, loo


def _check_subsets(n: int, k: int, max_subsets: int, name: str) -> None:
    count = comb(n, k)
    if count > max_subsets:
        raise ValueError(f"{name} enumerates all C(n={n}, k={k}) = {count} subsets, more than "
                         f"max_subsets={max_subsets}; use fewer samples n, k closer to n, or raise max_subsets")


def _softmax_value(x: Array, beta: Array) -> Array:
    w = jax.nn.softmax(beta * x, axis=-1)
    return jnp.sum(w * x, axis=-1)


def _majority_value(x: Array, a: Array) -> Array:
    counts = jnp.sum(a[..., :, None] == a[..., None, :], axis=-1)
    top = counts == jnp.max(counts, axis=-1, keepdims=True)
    return jnp.sum(jnp.where(top, x, 0), axis=-1) / jnp.sum(top, axis=-1)


@partial(jax.jit, static_argnames=("k", "kind"))
def _enumerate_rows(r: Array, mask: Array, ans: Array, k: int, kind: str, beta: Array,
                    biased: Array) -> Array:
    b, n = r.shape
    idx, loo = _subset_tables(n, k)
    # both objectives are shift-equivariant (f(r + c) = f(r) + c) and A_i is a difference, so
    # shifting by the row minimum changes nothing but makes all-equal rows exactly 0
    lo = jnp.min(jnp.where(mask, r, jnp.inf), axis=-1, keepdims=True)
    r = jnp.where(mask, r - jnp.where(jnp.isfinite(lo), lo, 0), 0)
    if kind == "softmax":
        f_all = _softmax_value(r[:, idx], beta)                              # [B, S]
        f_loo = _softmax_value(r[:, loo], beta)                              # [B, S, k]
    else:
        f_all = _majority_value(r[:, idx], ans[:, idx])
        f_loo = _majority_value(r[:, loo], ans[:, loo])
    adv = f_all[..., None] - f_loo                                           # [B, S, k]
    adv = adv - jnp.where(biased, jnp.mean(adv, axis=-1, keepdims=True), 0)
    ok = jnp.all(mask[:, idx], axis=-1)                                      # [B, S]
    adv = jnp.where(ok[..., None], adv, 0)
    tot = jnp.zeros((b, n), r.dtype).at[:, idx.reshape(-1)].add(adv.reshape(b, idx.size))  # b may be 0
    cnt = jnp.sum(ok, axis=-1, keepdims=True).astype(r.dtype)              # = C(n_valid, k)
    out = tot / jnp.maximum(cnt, 1)
    s = sort_rows(r, mask, ans)                                              # tie canonicalisation
    return finish(s, jnp.take_along_axis(out, s.perm, axis=-1), k)


def tang_softmax_advantage(rewards, k: int, *, beta: float, biased: bool = False, mask=None,
                           max_subsets: int = 20000) -> Array:
    """LOO advantage for Tang et al.'s softmax objective E[sum_{i in I} p_i r_i], p = softmax(beta r_I).

    App. B: beta = 0 is the mean objective, beta -> inf is max@k.  A_i = f(I) - f(I\\i)
    (eq. 2; biased=True subtracts the subset mean, eq. 3), averaged exactly over all
    k-subsets.  rewards: [..., n]; k: static int 2 <= k <= n; returns [..., n].
    """
    r, rows, m, lead, k = _prep(rewards, k, mask, min_k=2)
    _check_subsets(r.shape[-1], k, max_subsets, "tang_softmax")
    beta = float(beta)
    if not np.isfinite(beta) or beta < 0:
        raise ValueError(f"beta must be a finite number >= 0, got beta={beta}")
    out = _enumerate_rows(rows, m, jnp.zeros(rows.shape, jnp.int32), k, "softmax",
                          jnp.asarray(beta, rows.dtype), jnp.asarray(bool(biased)))
    return out.reshape(r.shape)


def majority_vote_advantage(rewards, answer_ids, k: int, *, biased: bool = False, mask=None,
                            max_subsets: int = 20000) -> Array:
    """LOO advantage for Tang et al.'s majority-voting objective E[r(maj(a_1..a_k))] (§3.1).

    answer_ids: [..., n] int, equal ids = same final answer (the trainer uses the judge's
    fingerprint of each program's behaviour on the test inputs, see `maxk_jax.rl.rollout.answer_ids`);
    a NEGATIVE id means the answer is undetermined: that sample is masked (as with mask=False),
    never guessed.  rewards: [..., n], must be a function of the answer (checked when concrete).  Ties in the vote are broken uniformly at random, so
    f(I) = mean reward over the answers with the top count.  A_i = f(I) - f(I\\i) (eq. 2;
    biased=True: eq. 3 / App. B.1), averaged exactly over all k-subsets; k: 2 <= k <= n.
    """
    r, rows, m, lead, k = _prep(rewards, k, mask, min_k=2)
    a = as_rows(answer_ids, name="answer_ids", shape=r.shape)
    if not jnp.issubdtype(a.dtype, jnp.integer):
        raise ValueError(f"answer_ids must be integers, got dtype {a.dtype}")
    _check_subsets(r.shape[-1], k, max_subsets, "majority_vote")
    arows = a.reshape(rows.shape).astype(jnp.int32)
    m = m & (arows >= 0)                                    # undetermined answers are masked
    if is_concrete(arows) and is_concrete(rows) and is_concrete(m):
        rn, an, mn = np.asarray(rows), np.asarray(arows), np.asarray(m)
        for row in range(rn.shape[0]):
            seen: dict[int, float] = {}
            for j in np.flatnonzero(mn[row]):
                prev = seen.setdefault(int(an[row, j]), float(rn[row, j]))
                if prev != float(rn[row, j]):
                    raise ValueError(f"rewards must be a function of the answer: row {row} has answer id "
                                     f"{int(an[row, j])} with rewards {prev} and {float(rn[row, j])}")
    out = _enumerate_rows(rows, m, arows, k, "majority", jnp.asarray(0.0, rows.dtype),
                          jnp.asarray(bool(biased)))
    return out.reshape(r.shape)
