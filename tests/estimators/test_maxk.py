"""Contract tests of maxk_jax.estimators against brute-force k-subset enumeration.

Brute force (tests/estimators/estimator_reference.py, float64, itertools.combinations) is the spec.  Rows are
drawn with ties (rewards from small value sets) and random masks on a width-10 batch, so one
compilation covers every n_valid <= 10 and every k (masked samples must act as absent).
Float32 results are compared with atol=2e-6, rtol=1e-5 (rewards are O(1)).
"""
from __future__ import annotations


import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from maxk_jax import estimators as E

import estimator_reference as ref  # noqa: E402  (tests/estimators/conftest.py puts it on sys.path)

WIDTH, BATCH = 10, 24
VALUE_SETS = ([0.0, 1.0], [0.0, 0.25, 0.5, 1.0], [-1.0, 0.0, 1.0], [0.1, 0.2, 0.3, 0.7, 0.9, 1.3])
TOL = dict(atol=2e-6, rtol=1e-5)
SETTINGS = settings(max_examples=6, deadline=None, derandomize=False)


def _rows(seed: int, values, *, scale: float = 0.4):
    rng = np.random.default_rng(seed)
    r, mask = ref.random_rows(rng, BATCH, WIDTH, values)
    mask[0] = True                                        # always one full row
    r[0] = rng.choice(values, size=WIDTH)
    lr = np.where(mask, rng.normal(size=r.shape) * scale, np.nan)
    return r, mask, lr


def _check_rows(out, r, mask, k, reference, *, below_k_value=0.0, lr=None):
    out = np.asarray(out, np.float64)
    for i in range(r.shape[0]):
        m = mask[i]
        if m.sum() < k:
            np.testing.assert_array_equal(out[i], below_k_value, err_msg=f"row {i} below k={k}")
            continue
        args = (r[i, m],) if lr is None else (r[i, m], lr[i, m])
        np.testing.assert_allclose(out[i, m], reference(*args), err_msg=f"row {i}, k={k}", **TOL)
        np.testing.assert_array_equal(out[i, ~m], 0.0)


@SETTINGS
@given(seed=st.integers(0, 2**31 - 1), values=st.sampled_from(VALUE_SETS))
def test_onpolicy_transform_max_at_k_and_loo1_match_brute_force(seed, values):
    r, mask, _ = _rows(seed, values)
    for k in range(1, WIDTH + 1):
        _check_rows(E.maxk_reward_transform(r, k, mask=mask), r, mask, k, lambda x: ref.transform(x, k))
        got = np.asarray(E.max_at_k(r, k, mask=mask))
        for i in range(BATCH):
            if mask[i].sum() < k:
                assert np.isnan(got[i])
            else:
                np.testing.assert_allclose(got[i], ref.max_at_k(r[i, mask[i]], k), **TOL)
        if k >= 2:
            _check_rows(E.loo1_advantage(r, k, mask=mask), r, mask, k, lambda x: ref.loo1(x, k))


@SETTINGS
@given(seed=st.integers(0, 2**31 - 1), values=st.sampled_from(VALUE_SETS))
def test_offpolicy_transforms_match_brute_force(seed, values):
    r, mask, lr = _rows(seed, values)
    for k in range(1, WIDTH + 1):
        _check_rows(E.maxk_reward_transform_offpolicy(r, lr, k, mask=mask), r, mask, k,
                    lambda x, l: ref.transform(x, k, l, "first"), lr=lr)
        _check_rows(E.maxk_reward_transform_offpolicy_exact(r, lr, k, mask=mask), r, mask, k,
                        lambda x, l: ref.transform(x, k, l, "exact"), lr=lr)
        if k >= 2:
            _check_rows(E.loo1_advantage_offpolicy(r, lr, k, mask=mask), r, mask, k,
                        lambda x, l: ref.loo1(x, k, l, "first"), lr=lr)


@SETTINGS
@given(seed=st.integers(0, 2**31 - 1), p_correct=st.floats(0.0, 1.0))
def test_pass_at_k_matches_brute_force(seed, p_correct):
    rng = np.random.default_rng(seed)
    _, mask = ref.random_rows(rng, BATCH, WIDTH, [0.0])
    c = rng.random((BATCH, WIDTH)) < p_correct
    for k in range(1, WIDTH + 1):
        got = np.asarray(E.pass_at_k(c, k, mask=mask))
        for i in range(BATCH):
            if mask[i].sum() < k:
                assert np.isnan(got[i])
            else:
                np.testing.assert_allclose(got[i], ref.pass_at_k(c[i, mask[i]], k), **TOL)
    # pass@k is max@k of 0/1 rewards
    np.testing.assert_allclose(E.pass_at_k(c, 3, mask=mask), E.max_at_k(c.astype(float), 3, mask=mask),
                               atol=1e-6)


@pytest.mark.parametrize("n", [1, pytest.param(2, marks=pytest.mark.slow), pytest.param(3, marks=pytest.mark.slow)])
def test_small_unmasked_shapes(n):
    rng = np.random.default_rng(n)
    r = rng.choice([0.0, 0.5, 1.0], size=(BATCH, n))
    lr = rng.normal(size=(BATCH, n)) * 0.3
    for k in range(1, n + 1):
        on = np.asarray(E.maxk_reward_transform(r, k))
        exact = np.asarray(E.maxk_reward_transform_offpolicy_exact(r, lr, k))
        mx = np.asarray(E.max_at_k(r, k))
        for i in range(4):
            np.testing.assert_allclose(on[i], ref.transform(r[i], k), **TOL)
            np.testing.assert_allclose(exact[i], ref.transform(r[i], k, lr[i], "exact"), **TOL)
            np.testing.assert_allclose(mx[i], ref.max_at_k(r[i], k), **TOL)


@SETTINGS
@given(seed=st.integers(0, 2**31 - 1), k=st.integers(1, WIDTH))
def test_permutation_equivariance_is_exact(seed, k):
    r, mask, lr = _rows(seed, [0.0, 0.5, 1.0])
    perm = np.random.default_rng(seed + 1).permutation(WIDTH)
    fns = [lambda r, m, l: E.maxk_reward_transform(r, k, mask=m),
           lambda r, m, l: E.maxk_reward_transform_offpolicy(r, l, k, mask=m),
           lambda r, m, l: E.maxk_reward_transform_offpolicy_exact(r, l, k, mask=m)]
    if k >= 2:
        fns.append(lambda r, m, l: E.loo1_advantage(r, k, mask=m))
    for fn in fns:
        np.testing.assert_array_equal(np.asarray(fn(r, mask, lr))[:, perm],
                                      np.asarray(fn(r[:, perm], mask[:, perm], lr[:, perm])))


def test_tied_inputs_give_bit_identical_outputs():
    r = np.zeros((BATCH, WIDTH))
    lr = np.zeros((BATCH, WIDTH))
    mask = np.zeros((BATCH, WIDTH), bool)
    r[:, :8] = [0.3, 0.7, 0.3, 0.7, 0.1, 0.7, 0.3, 0.7]
    lr[:, :8] = [0.1, -0.2, 0.1, 0.5, 0.0, -0.2, 0.1, 0.5]
    mask[:, :8] = True
    for k in (1, 2, 3, 5, 8):
        t = np.asarray(E.maxk_reward_transform(r, k, mask=mask))[0]
        assert t[0] == t[2] == t[6] and t[1] == t[3] == t[5] == t[7]
        for fn, mode in ((E.maxk_reward_transform_offpolicy, "first"),
                         (E.maxk_reward_transform_offpolicy_exact, "exact")):
            t = np.asarray(fn(r, lr, k, mask=mask))[0]
            assert t[0] == t[2] == t[6] and t[1] == t[5] and t[3] == t[7]
            np.testing.assert_allclose(t[:8], ref.transform(r[0, :8], k, lr[0, :8], mode), **TOL)


@SETTINGS
@given(seed=st.integers(0, 2**31 - 1), values=st.sampled_from(VALUE_SETS))
def test_sum_of_transform_is_k_times_max_at_k(seed, values):
    r, mask, _ = _rows(seed, values)
    for k in range(1, WIDTH + 1):
        keep = mask.sum(-1) >= k
        total = np.asarray(E.maxk_reward_transform(r, k, mask=mask)).sum(-1)
        np.testing.assert_allclose(total[keep], k * np.asarray(E.max_at_k(r, k, mask=mask))[keep],
                                   atol=1e-5, rtol=1e-5)


def test_zero_log_ratio_reduces_offpolicy_forms_to_onpolicy():
    r, mask, _ = _rows(7, [0.0, 0.25, 0.5, 1.0])
    zero = np.zeros_like(r)
    for k in (1, 2, 4, 7, 10):
        on = np.asarray(E.maxk_reward_transform(r, k, mask=mask))
        np.testing.assert_allclose(E.maxk_reward_transform_offpolicy(r, zero, k, mask=mask), on, atol=1e-7)
        np.testing.assert_allclose(E.maxk_reward_transform_offpolicy_exact(r, zero, k, mask=mask), on,
                                   atol=1e-6, rtol=1e-5)
        if k >= 2:
            np.testing.assert_allclose(E.loo1_advantage_offpolicy(r, zero, k, mask=mask),
                                       E.loo1_advantage(r, k, mask=mask), atol=1e-7)


@pytest.mark.parametrize("k", [2, 4])
def test_exact_minus_first_order_is_second_order_in_delta(k):
    rng = np.random.default_rng(3)
    r = rng.random((BATCH, WIDTH))
    z = rng.normal(size=(BATCH, WIDTH))
    errs, lin = [], []
    for eps in (0.1, 0.05, 0.025):
        exact = np.asarray(E.maxk_reward_transform_offpolicy_exact(r, eps * z, k), np.float64)
        first = np.asarray(E.maxk_reward_transform_offpolicy(r, eps * z, k), np.float64)
        on = np.asarray(E.maxk_reward_transform(r, k), np.float64)
        errs.append(np.abs(exact - first).max())
        lin.append(np.abs(exact - on).max())
    # halving delta: the first-order error drops ~4x, the on-policy mismatch only ~2x
    for a, b in zip(errs, errs[1:]):
        assert 3.4 < a / b < 4.6, errs
    for a, b in zip(lin, lin[1:]):
        assert 1.7 < a / b < 2.3, lin


def test_k_equal_one_closed_forms():
    r, mask, lr = _rows(11, [0.0, 0.3, 1.0])
    nv = mask.sum(-1, keepdims=True)
    r0, lr0 = np.where(mask, r, 0), np.where(mask, lr, 0)
    np.testing.assert_allclose(E.maxk_reward_transform(r, 1, mask=mask), r0 / nv, **TOL)
    np.testing.assert_allclose(E.maxk_reward_transform_offpolicy(r, lr, 1, mask=mask),
                               np.where(mask, np.exp(lr0) * r0 / nv, 0), **TOL)
    np.testing.assert_allclose(E.maxk_reward_transform_offpolicy_exact(r, lr, 1, mask=mask),
                               np.where(mask, np.exp(lr0) * r0 / nv, 0), **TOL)
    np.testing.assert_allclose(E.max_at_k(r, 1, mask=mask), r0.sum(-1) / nv[:, 0], **TOL)


@pytest.mark.parametrize("k", [1, 2, 8, 4096, 65536])
def test_large_n_float32_matches_float64(k):
    """n = 65536 in float32 vs an independent float64 gammaln reference; tolerance 5e-6 * k/n."""
    from scipy.special import gammaln
    n = 65536
    rng = np.random.default_rng(k)
    r = np.round(rng.random(n) * 50) / 50                   # many ties
    s = np.sort(r)
    j = np.arange(1, n + 1)

    def logc(a, b):
        ok = (b >= 0) & (a >= b)
        return np.where(ok, gammaln(np.maximum(a, 0) + 1.0) - gammaln(np.maximum(b, 0) + 1.0)
                        - gammaln(np.maximum(a - b, 0) + 1.0), -np.inf)

    a = np.exp(logc(j - 1, k - 1) - logc(n, k))
    b = np.exp(logc(j - 2, k - 2) - logc(n, k)) if k >= 2 else np.zeros(n)
    t_sorted = a * s + np.concatenate([np.cumsum((b * s)[::-1])[::-1][1:], [0.0]])
    t_sorted = t_sorted[np.searchsorted(s, s, side="right") - 1]      # ties: value at group end
    want = t_sorted[np.searchsorted(s, r, side="right") - 1]
    got = np.asarray(E.maxk_reward_transform(r.astype(np.float32), k), np.float64)
    np.testing.assert_allclose(got, want, atol=5e-6 * k / n, rtol=0)
    np.testing.assert_allclose(float(E.max_at_k(r.astype(np.float32), k)), float(np.sum(a * s)),
                               atol=2e-6, rtol=0)


def test_jit_and_vmap_match_eager():
    r, mask, lr = _rows(5, [0.0, 0.5, 1.0])
    lr0 = np.where(mask, lr, 0.0)
    k = 3
    fns = {"on": lambda r, l, m: E.maxk_reward_transform(r, k, mask=m),
           "exact": lambda r, l, m: E.maxk_reward_transform_offpolicy_exact(r, l, k, mask=m)}
    for name, fn in fns.items():
        eager = np.asarray(fn(r, lr0, mask))
        transformed = jax.jit(fn) if name == "on" else jax.vmap(fn)      # one new compilation each
        chex.assert_trees_all_close(np.asarray(transformed(r, lr0, mask)), eager, atol=1e-6)
        r3, l3, m3 = (x.reshape(4, BATCH // 4, WIDTH) for x in (r, lr0, mask))
        chex.assert_trees_all_close(np.asarray(fn(r3, l3, m3)).reshape(eager.shape), eager, atol=1e-6)


def test_masked_samples_act_as_absent():
    """A masked row equals the same valid samples packed left (other slots masked) and brute force."""
    rng = np.random.default_rng(0)
    r = rng.random((BATCH, WIDTH))
    lr = rng.normal(size=(BATCH, WIDTH)) * 0.3
    mask = rng.random((BATCH, WIDTH)) < 0.6
    mask[:, :2] = True
    packed_r, packed_lr, packed_m = np.zeros_like(r), np.zeros_like(lr), np.zeros_like(mask)
    for i in range(BATCH):
        nv = mask[i].sum()
        packed_r[i, :nv], packed_lr[i, :nv], packed_m[i, :nv] = r[i, mask[i]], lr[i, mask[i]], True
    rn = np.where(mask, r, np.nan)                              # NaN / inf in masked slots are fine
    ln = np.where(mask, lr, np.inf)
    for k in (1, 2, 5):
        for fn in (lambda x, l, m: E.maxk_reward_transform(x, k, mask=m),
                   lambda x, l, m: E.maxk_reward_transform_offpolicy(x, l, k, mask=m),
                   lambda x, l, m: E.maxk_reward_transform_offpolicy_exact(x, l, k, mask=m)):
            got = np.asarray(fn(rn, ln, mask))
            want = np.asarray(fn(packed_r, packed_lr, packed_m))
            for i in range(BATCH):
                np.testing.assert_allclose(got[i, mask[i]], want[i, :mask[i].sum()], atol=1e-7)
            assert np.all(got[~mask] == 0)
    few = np.zeros((BATCH, WIDTH), bool)
    few[:, :3] = True
    assert np.all(np.isnan(np.asarray(E.max_at_k(r, 4, mask=few))))
    np.testing.assert_array_equal(E.maxk_reward_transform(r, 4, mask=few), 0.0)
    np.testing.assert_array_equal(E.rows_below_k(few, 4), True)
    assert int(jnp.sum(E.rows_below_k(np.array([[1, 1, 0], [1, 1, 1]]), 3))) == 1


@pytest.mark.parametrize("call, match", [
    (lambda: E.maxk_reward_transform(np.ones(4), 5), "k=5 exceeds"),
    (lambda: E.maxk_reward_transform(np.ones(4), 0), "k must be >= 1, got k=0"),
    (lambda: E.maxk_reward_transform(np.ones(4), 2.5), "k must be a Python integer"),
    (lambda: E.maxk_reward_transform(np.ones(4), True), "k must be a Python integer"),
    (lambda: E.max_at_k(np.array([0.1, np.nan]), 1), "non-finite value nan at index \\(1,\\)"),
    (lambda: E.max_at_k(np.array([0.1, np.inf]), 1), "non-finite"),
    (lambda: E.maxk_reward_transform_offpolicy(np.ones(3), np.array([0, np.inf, 0]), 2), "log_ratio contains"),
    (lambda: E.maxk_reward_transform_offpolicy(np.ones(3), np.zeros(4), 2), "log_ratio has shape \\(4,\\)"),
    (lambda: E.maxk_reward_transform_offpolicy_exact(np.ones(3), None, 2), "needs log_ratio"),
    (lambda: E.maxk_reward_transform(np.ones(3), 2, mask=np.ones(4, bool)), "mask has shape"),
    (lambda: E.maxk_reward_transform(np.ones(3), 2, mask=np.array([0, 2, 1])), "mask must be boolean"),
    (lambda: E.maxk_reward_transform(np.float32(1.0), 1), "at least one axis"),
    (lambda: E.maxk_reward_transform(np.ones((2, 0)), 1), "empty last axis"),
    (lambda: E.maxk_reward_transform(np.ones(3) * 1j, 1), "must be real"),
    (lambda: E.pass_at_k(np.array([0.0, 0.5, 1.0]), 1), "correct must be boolean or 0/1"),
    (lambda: E.loo1_advantage(np.ones(3), 1), "k must be >= 2"),
])
def test_error_paths(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_numpy_integer_k_and_nan_check_skipped_under_jit():
    np.testing.assert_allclose(E.max_at_k(np.array([0.0, 1.0]), np.int64(2)), 1.0)
    out = jax.jit(lambda x: E.max_at_k(x, 1))(jnp.array([0.5, jnp.nan]))   # no trace-time error
    assert np.isnan(float(out))                                             # NaN propagates, not zeroed
