"""Brute-force float64 references for the estimator tests (explicit k-subset enumeration).

Not a test module (pytest does not collect it); test files load it by path with importlib.
Every function takes ONE row of valid samples (1-D, float64) and enumerates
itertools.combinations(range(n), k) -- the definitions of both papers, nothing derived.
"""
from __future__ import annotations

import itertools
from functools import lru_cache
from math import comb

import numpy as np


@lru_cache(maxsize=None)
def subsets(n: int, k: int) -> np.ndarray:
    """All k-subsets of range(n) as an int array [C(n,k), k]."""
    return np.array(list(itertools.combinations(range(n), k)), dtype=np.int64).reshape(-1, k)


def _loo_max(r: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """max r_{I minus its j-th element} for every subset row and position j: [S, k]."""
    k = idx.shape[1]
    return np.stack([r[np.delete(idx, j, axis=1)].max(axis=1) for j in range(k)], axis=1)


def _accumulate(n: int, idx: np.ndarray, vals: np.ndarray) -> np.ndarray:
    out = np.zeros(n)
    np.add.at(out, idx.reshape(-1), vals.reshape(-1))
    return out / len(idx)


def max_at_k(r, k):
    """mean over k-subsets of max r_I."""
    r = np.asarray(r, np.float64)
    return float(r[subsets(len(r), k)].max(axis=1).mean())


def pass_at_k(c, k):
    """mean over k-subsets of any(correct_I)."""
    c = np.asarray(c, bool)
    return float(c[subsets(len(c), k)].any(axis=1).mean())


def transform(r, k, log_ratio=None, mode="on"):
    """C(n,k)^-1 sum_{I ni i} w_I max r_I; w_I = 1 ("on"), 1 + sum delta ("first"), prod rho ("exact")."""
    r = np.asarray(r, np.float64)
    idx = subsets(len(r), k)
    m = r[idx].max(axis=1)
    if mode == "on":
        w = np.ones(len(idx))
    else:
        lr = np.asarray(log_ratio, np.float64)
        w = 1 + np.expm1(lr)[idx].sum(axis=1) if mode == "first" else np.exp(lr[idx].sum(axis=1))
    return _accumulate(len(r), idx, np.repeat((w * m)[:, None], k, axis=1))


def loo1(r, k, log_ratio=None, mode="on"):
    """C(n,k)^-1 sum_{I ni i} w_I (max r_I - max r_{I minus i}) with the weights of `transform`."""
    r = np.asarray(r, np.float64)
    idx = subsets(len(r), k)
    adv = r[idx].max(axis=1)[:, None] - _loo_max(r, idx)
    if mode == "on":
        w = np.ones(len(idx))
    else:
        lr = np.asarray(log_ratio, np.float64)
        w = 1 + np.expm1(lr)[idx].sum(axis=1) if mode == "first" else np.exp(lr[idx].sum(axis=1))
    return _accumulate(len(r), idx, w[:, None] * adv)


def subset_loo(r, k, f, biased=False):
    """Tang et al. eq. 2 (eq. 3 if biased) for aggregation f(list of sample indices), subset-averaged."""
    n = len(r)
    idx = subsets(n, k)
    vals = np.zeros(idx.shape)
    for s, row in enumerate(idx):
        full = f(list(row))
        a = np.array([full - f([x for x in row if x != i]) for i in row])
        vals[s] = a - a.mean() if biased else a
    return _accumulate(n, idx, vals)


def tang_biased(r, k):
    """Tang eq. 3 with f = max (A_i - mean_{l in I} A_l), averaged over k-subsets."""
    r = np.asarray(r, np.float64)
    idx = subsets(len(r), k)
    adv = r[idx].max(axis=1)[:, None] - _loo_max(r, idx)
    return _accumulate(len(r), idx, adv - adv.mean(axis=1, keepdims=True))


def leave_p_out(r, k, p):
    """Tang App. B: (1/C(k-1,p-1)) sum_{s ni i, |s|=p} (A_s - mean A), A_s = max r_I - max r_{I minus s}."""
    r = np.asarray(r, np.float64)
    n = len(r)
    idx = subsets(n, k)
    vals = np.zeros(idx.shape)
    for si, row in enumerate(idx):
        top = r[row].max()
        ss = list(itertools.combinations(range(k), p))
        a = {s: top - r[[row[j] for j in range(k) if j not in s]].max() for s in ss}
        abar = np.mean(list(a.values()))
        for j in range(k):
            vals[si, j] = sum(a[s] - abar for s in ss if j in s) / comb(k - 1, p - 1)
    return _accumulate(n, idx, vals)


def softmax_value(r, beta):
    """sum_i softmax(beta r)_i r_i for one subset."""
    r = np.asarray(r, np.float64)
    w = np.exp(beta * (r - r.max()))
    return float(np.sum(w / w.sum() * r))


def majority_value(r, a):
    """E over uniform tie-breaks of the reward of the most frequent answer."""
    ids, counts = np.unique(a, return_counts=True)
    top = ids[counts == counts.max()]
    return float(np.mean([r[a == t][0] for t in top]))


def zscore(x, ddof=0, eps=1e-6):
    """(x - mean)/(std + eps)."""
    x = np.asarray(x, np.float64)
    c = x - x.mean()
    return c / (np.sqrt(np.sum(c * c) / max(len(x) - ddof, 1)) + eps)


def rloo(r):
    """r_i - mean_{j != i} r_j (0 for a single sample)."""
    r = np.asarray(r, np.float64)
    n = len(r)
    return np.zeros(n) if n < 2 else (r - r.mean()) * n / (n - 1)


def bon_max(r, second):
    """App. A BoN-max advantages (mean or second-best baseline); ties at the max all get it."""
    r = np.asarray(r, np.float64)
    top = r == r.max()
    if not second:
        return np.where(top, r - r.mean(), 0.0)
    rest = r[~top]
    return np.zeros_like(r) if rest.size == 0 else np.where(top, r - rest.max(), 0.0)


def random_rows(rng, b, n, values, *, min_valid=1, with_mask=True):
    """Rewards [b, n] drawn from `values` (ties!), NaN at masked slots, and the mask."""
    r = rng.choice(np.asarray(values, np.float64), size=(b, n))
    mask = np.ones((b, n), bool)
    if with_mask:
        for i in range(b):
            nv = rng.integers(min_valid, n + 1)
            mask[i, rng.permutation(n)[nv:]] = False
    r = np.where(mask, r, np.nan)
    return r, mask
