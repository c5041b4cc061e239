"""maxk_jax/estimators/_exact.py: exact importance-weighted max@k (eq. 10) and its LOO-1 baseline.

Brute force (estimator_reference.py) for extreme log-ratios and the n > 32 capacity path, and
unbiasedness by exact enumeration of every sample tuple of a tiny bandit:
E_{y ~ pi_old^n}[sum_i c_i grad log pi_theta(y_i)] must equal grad_theta max@k(pi_theta).
"""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from maxk_jax import estimators as E
from maxk_jax.estimators._exact import SMALL_N, capacity

import estimator_reference as ref  # noqa: E402  (tests/estimators/conftest.py puts it on sys.path)

WIDTH, BATCH = 10, 24       # same shapes as tests/test_estimators.py: compilations are shared


def test_capacity_buckets():
    assert capacity(3, 10) == 10 and capacity(1, SMALL_N) == SMALL_N
    assert [capacity(k, 100) for k in (1, 2, 3, 4, 5, 64, 65, 100)] == [1, 2, 4, 4, 8, 64, 100, 100]


def test_extreme_log_ratios_match_brute_force():
    """rho = exp(+-30): products of k ratios span e^{+-300}; the log-space DP stays accurate."""
    rng = np.random.default_rng(0)
    r, mask = ref.random_rows(rng, BATCH, WIDTH, [0.0, 0.3, 0.3, 1.0])
    lr = np.where(mask, rng.uniform(-30, 30, size=r.shape), np.nan)
    for k in (1, 2, 3, 4):
        got = np.asarray(E.maxk_reward_transform_offpolicy_exact(r, lr, k, mask=mask), np.float64)
        loo = np.asarray(E.loo1_advantage_offpolicy_exact(r, lr, k, mask=mask), np.float64) if k > 1 else None
        for i in range(BATCH):
            m = mask[i]
            if m.sum() < k:
                assert np.all(got[i] == 0)
                continue
            want = ref.transform(r[i, m], k, lr[i, m], "exact")
            if np.abs(want).max() > 1e36:                       # beyond float32 range: skip row
                continue
            np.testing.assert_allclose(got[i, m], want, rtol=2e-4, atol=1e-6 * np.abs(want).max())
            if loo is not None:
                w2 = ref.loo1(r[i, m], k, lr[i, m], "exact")
                np.testing.assert_allclose(loo[i, m], w2, rtol=2e-4, atol=1e-6 * max(np.abs(w2).max(), 1e-30))


@pytest.mark.parametrize("k", [3, pytest.param(6, marks=pytest.mark.slow)])
def test_large_n_capacity_path_matches_brute_force(k):
    """n = 34 > SMALL_N uses a power-of-two DP width (4 for k = 3, 8 for k = 6)."""
    n = 34
    rng = np.random.default_rng(k)
    r, mask = ref.random_rows(rng, 3, n, [0.0, 0.2, 0.5, 0.5, 1.0], min_valid=k)
    lr = np.where(mask, rng.normal(size=r.shape) * 0.5, np.nan)
    got = np.asarray(E.maxk_reward_transform_offpolicy_exact(r, lr, k, mask=mask))
    loo = np.asarray(E.loo1_advantage_offpolicy_exact(r, lr, k, mask=mask))
    for i in range(3):
        m = mask[i]
        np.testing.assert_allclose(got[i, m], ref.transform(r[i, m], k, lr[i, m], "exact"), rtol=2e-5, atol=1e-7)
        np.testing.assert_allclose(loo[i, m], ref.loo1(r[i, m], k, lr[i, m], "exact"), rtol=2e-5, atol=1e-7)


# ---------------------------------------------------------------- unbiasedness on a bandit ----

ARM_REWARDS = np.array([0.0, 0.5, 0.5, 1.0])            # a tie between arms 1 and 2


def _softmax(z):
    e = np.exp(z - z.max())
    return e / e.sum()


def _grad_max_at_k(theta, k):
    """grad_theta E_{a_1..a_k ~ softmax(theta)} max R(a) by enumeration (float64)."""
    p = _softmax(theta)
    g = np.zeros_like(theta)
    for tup in itertools.product(range(len(p)), repeat=k):
        w = np.prod(p[list(tup)]) * ARM_REWARDS[list(tup)].max()
        g += w * sum(np.eye(len(p))[a] - p for a in tup)
    return g


def _expected_update(fn, theta, theta_old, n):
    """E_{y ~ pi_old^n} sum_i c_i (onehot(y_i) - pi_theta), all tuples evaluated in (24, 10) batches."""
    p, p_old = _softmax(theta), _softmax(theta_old)
    tuples = np.array(list(itertools.product(range(len(p)), repeat=n)))
    rows = -(-len(tuples) // BATCH) * BATCH
    r = np.zeros((rows, WIDTH))
    lr = np.zeros((rows, WIDTH))
    mask = np.zeros((rows, WIDTH), bool)
    r[:len(tuples), :n] = ARM_REWARDS[tuples]
    lr[:len(tuples), :n] = (np.log(p) - np.log(p_old))[tuples]
    mask[:len(tuples), :n] = True
    coef = np.concatenate([np.asarray(fn(r[i:i + BATCH], lr[i:i + BATCH], mask[i:i + BATCH]), np.float64)
                           for i in range(0, rows, BATCH)])[:len(tuples), :n]
    prob = np.prod(p_old[tuples], axis=1)
    eye = np.eye(len(p))
    return sum(prob[t] * sum(coef[t, i] * (eye[tuples[t, i]] - p) for i in range(n))
               for t in range(len(tuples)))


@pytest.mark.parametrize("k", [2, 3])
def test_exact_offpolicy_estimators_are_unbiased(k):
    n = 3
    theta_old = np.array([0.3, -0.2, 0.1, -0.6])
    theta = theta_old + np.array([0.5, -0.4, 0.2, 0.6])        # far from pi_old: rho far from 1
    want = _grad_max_at_k(theta, k)
    for fn in (lambda r, l, m: E.maxk_reward_transform_offpolicy_exact(r, l, k, mask=m),
               lambda r, l, m: E.loo1_advantage_offpolicy_exact(r, l, k, mask=m),
               lambda r, l, m: E.get_estimator("maxk_offpolicy_exact", baseline="loo1", clamp_delta=None)(
                       r, k=k, log_ratio=l, mask=m)):
        np.testing.assert_allclose(_expected_update(fn, theta, theta_old, n), want, atol=2e-6)
    # on-policy estimators are unbiased when theta == theta_old
    want_on = _grad_max_at_k(theta_old, k)
    for fn in (lambda r, l, m: E.maxk_reward_transform(r, k, mask=m),
               lambda r, l, m: E.loo1_advantage(r, k, mask=m)):
        np.testing.assert_allclose(_expected_update(fn, theta_old, theta_old, n), want_on, atol=2e-6)
    # the first-order form is biased off-policy (it drops O(delta^2) terms)
    fo = _expected_update(lambda r, l, m: E.maxk_reward_transform_offpolicy(r, l, k, mask=m),
                          theta, theta_old, n)
    assert np.abs(fo - want).max() > 1e-3


@pytest.mark.slow
@pytest.mark.parametrize("k", [1, 8, 100])
def test_exact_at_n_65536_constant_log_ratio(k):
    """Constant log_ratio c: every subset weight is e^{kc}, so exact = e^{kc} * on-policy.

    c = 0 and kc = +-30 (rho far from 1, result still inside float32).  Measured: 7.6e-6 max
    relative error at k = 100, c = 0 (the DP accumulates O(n eps) worst case).
    """
    n = 65536
    rng = np.random.default_rng(k)
    r = (np.round(rng.random((1, n)) * 50) / 50).astype(np.float32)
    on = np.asarray(E.maxk_reward_transform(r, k), np.float64)
    for c in (0.0, 30.0 / k, -30.0 / k):
        got = np.asarray(E.maxk_reward_transform_offpolicy_exact(r, np.full_like(r, c), k), np.float64)
        np.testing.assert_allclose(got, np.exp(k * c) * on, rtol=5e-5, atol=1e-6 * np.exp(k * c) * on.max())
    big = np.asarray(E.maxk_reward_transform_offpolicy_exact(r, np.full_like(r, 100.0 / k), k))
    assert not np.isnan(big).any()                      # e^{100} overflows float32: inf, never NaN
