"""maxk_jax/estimators/_tang.py: Tang et al. estimators vs brute-force k-subset enumeration."""
from __future__ import annotations


import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from maxk_jax import estimators as E

import estimator_reference as ref  # noqa: E402  (tests/estimators/conftest.py puts it on sys.path)

WIDTH, BATCH = 10, 24
TOL = dict(atol=2e-6, rtol=1e-5)


def _check(out, r, mask, k, reference):
    out = np.asarray(out, np.float64)
    for i in range(r.shape[0]):
        m = mask[i]
        if m.sum() < k:
            np.testing.assert_array_equal(out[i], 0.0)
            continue
        np.testing.assert_allclose(out[i, m], reference(i, m), err_msg=f"row {i} k={k}", **TOL)
        np.testing.assert_array_equal(out[i, ~m], 0.0)


@settings(max_examples=2, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), values=st.sampled_from([[0.0, 1.0], [-1.0, 1.0], [0.0, 0.2, 0.5, 0.9]]))
def test_loo_biased_and_leave_p_out_match_brute_force(seed, values):
    rng = np.random.default_rng(seed)
    r, mask = ref.random_rows(rng, BATCH, WIDTH, values)
    for k in range(2, WIDTH + 1):
        biased = E.tang_loo_biased_advantage(r, k, mask=mask)
        _check(biased, r, mask, k, lambda i, m: ref.tang_biased(r[i, m], k))
        assert np.allclose(np.asarray(biased).sum(-1), 0.0, atol=1e-6)           # zero-mean (eq. 3)
        # p = 1 is eq. 3; the leave-p-out closed form subtracts O(1) terms, hence atol 1e-5
        np.testing.assert_allclose(E.tang_leave_p_out_advantage(r, k, 1, mask=mask), biased, atol=1e-5)
    rows = slice(0, 6)                                                           # leave-p-out brute force is slow
    for k in (3, 4):
        for p in range(1, k):
            out = E.tang_leave_p_out_advantage(r, k, p, mask=mask)
            _check(np.asarray(out)[rows], r[rows], mask[rows], k, lambda i, m: ref.leave_p_out(r[i, m], k, p))


def test_leave_k_minus_1_out_is_rloo_over_n():
    rng = np.random.default_rng(1)
    r, mask = ref.random_rows(rng, BATCH, WIDTH, [0.0, 0.3, 1.0], min_valid=4)
    out = np.asarray(E.tang_leave_p_out_advantage(r, 4, 3, mask=mask))
    for i in range(BATCH):
        m = mask[i]
        np.testing.assert_allclose(out[i, m], ref.rloo(r[i, m]) / m.sum(), **TOL)


def test_n_equals_k_is_tangs_single_subset_estimator():
    r = np.tile([0.2, 0.9, 0.5, 0.9, 0.1, 0.0, 0.7, 0.3, 0.6, 0.4], (BATCH, 1))
    k = WIDTH
    loo = r[0].max() - np.array([np.delete(r[0], i).max() for i in range(k)])  # eq. 2
    np.testing.assert_allclose(E.loo1_advantage(r, k)[0], loo, atol=1e-7)
    np.testing.assert_allclose(E.tang_loo_biased_advantage(r, k)[0], loo - loo.mean(), atol=1e-7)


@pytest.mark.parametrize("k", [3, pytest.param(4, marks=pytest.mark.slow)])
def test_softmax_objective_matches_brute_force(k):
    rng = np.random.default_rng(k)
    r, mask = ref.random_rows(rng, BATCH, WIDTH, [0.0, 0.25, 0.5, 1.0])
    for beta in (0.0, 1.5, 8.0):
        for biased in (False, True):
            out = E.tang_softmax_advantage(r, k, beta=beta, biased=biased, mask=mask)
            _check(out, r, mask, k, lambda i, m: ref.subset_loo(
                r[i, m], k, lambda ids: ref.softmax_value(r[i, m][ids], beta), biased))


@pytest.mark.parametrize("k", [3, pytest.param(4, marks=pytest.mark.slow)])
def test_majority_vote_matches_brute_force(k):
    rng = np.random.default_rng(k)
    _, mask = ref.random_rows(rng, BATCH, WIDTH, [0.0])
    ans = rng.integers(0, 4, size=(BATCH, WIDTH))
    table = np.array([0.0, 1.0, 0.0, 0.5])                       # reward is a function of the answer
    r = np.where(mask, table[ans], np.nan)
    for biased in (False, True):
        out = E.majority_vote_advantage(r, ans, k, biased=biased, mask=mask)
        _check(out, r, mask, k, lambda i, m: ref.subset_loo(
            r[i, m], k, lambda ids: ref.majority_value(r[i, m][ids], ans[i, m][ids]), biased))


def test_all_equal_rewards_give_exact_zeros():
    r = np.full((BATCH, WIDTH), 0.1)
    ans = np.zeros((BATCH, WIDTH), np.int32)
    for out in (E.tang_loo_biased_advantage(r, 3), E.tang_leave_p_out_advantage(r, 3, 2),
                E.tang_softmax_advantage(r, 3, beta=1.5), E.majority_vote_advantage(r, ans, 3)):
        np.testing.assert_array_equal(out, 0.0)


@pytest.mark.parametrize("lead", [(0,), (0, 3), (2, 0)])
def test_empty_batch_gives_empty_result(lead):
    """A batch with no rows returns an empty [..., n] array, like every other estimator (no
    ZeroDivisionError from reshaping an empty subset table)."""
    r = np.zeros((*lead, 4), np.float32)
    ans = np.zeros((*lead, 4), np.int32)
    for out in (E.tang_softmax_advantage(r, 2, beta=1.0), E.tang_softmax_advantage(r, 2, beta=1.0, biased=True),
                E.majority_vote_advantage(r, ans, 2), E.majority_vote_advantage(r, ans, 3, biased=True),
                E.tang_loo_biased_advantage(r, 2), E.tang_leave_p_out_advantage(r, 3, 1)):
        assert out.shape == r.shape


def test_majority_vote_masks_negative_answer_ids():
    """answer id < 0 = behaviour undetermined: the sample is masked exactly as with mask=False."""
    rng = np.random.default_rng(3)
    ans = rng.integers(0, 3, size=(BATCH, WIDTH))
    r = (ans == 0).astype(np.float64)
    undetermined = rng.random((BATCH, WIDTH)) < 0.3
    ids = np.where(undetermined, -1, ans)
    for biased in (False, True):
        got = np.asarray(E.majority_vote_advantage(r, ids, 3, biased=biased))
        want = np.asarray(E.majority_vote_advantage(r, ans, 3, biased=biased, mask=~undetermined))
        np.testing.assert_allclose(got, want, atol=1e-6)
        assert np.all(got[undetermined] == 0.0)


@pytest.mark.parametrize("call, match", [
    (lambda: E.tang_leave_p_out_advantage(np.ones(5), 3, 3), "p=3 exceeds"),
    (lambda: E.tang_leave_p_out_advantage(np.ones(5), 3, 0), "p must be >= 1"),
    (lambda: E.tang_loo_biased_advantage(np.ones(5), 1), "k must be >= 2"),
    (lambda: E.tang_softmax_advantage(np.ones(5), 2, beta=-1.0), "beta must be a finite number >= 0"),
    (lambda: E.tang_softmax_advantage(np.ones(30), 15, beta=1.0), "C\\(n=30, k=15\\) = 155117520 subsets"),
    (lambda: E.majority_vote_advantage(np.ones(4), np.zeros(4), 2), "answer_ids must be integers"),
    (lambda: E.majority_vote_advantage(np.ones(4), np.zeros(3, int), 2), "answer_ids has shape"),
    (lambda: E.majority_vote_advantage(np.array([0.0, 1.0, 1.0]), np.array([1, 1, 2]), 2),
     "rewards must be a function of the answer: row 0 has answer id 1"),
])
def test_error_paths(call, match):
    with pytest.raises(ValueError, match=match):
        call()
