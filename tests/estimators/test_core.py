"""maxk_jax/estimators/_core.py: validation, per-row sorting, log-space binomial weights, helpers."""
from __future__ import annotations

from math import comb

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.special import gammaln

from maxk_jax.estimators import _core as C


def test_validate_k():
    assert C.validate_k(np.int32(3), 5) == 3 and C.validate_k(5, 5) == 5
    for bad, match in ((0, "k must be >= 1, got k=0"), (6, "k=6 exceeds the number of samples n=5"),
                       (2.0, "k must be a Python integer"), (True, "must be a Python integer"),
                       (jnp.int32(2), "must be a Python integer")):
        with pytest.raises(ValueError, match=match):
            C.validate_k(bad, 5)
    with pytest.raises(ValueError, match="p must be >= 2, got p=1"):
        C.validate_k(1, 5, name="p", minimum=2)


def test_check_finite_reports_index_ignores_masked_and_tracers():
    x = np.array([[0.0, 1.0], [np.nan, 2.0]])
    with pytest.raises(ValueError, match=r"rewards contains a non-finite value nan at index \(1, 0\)"):
        C.check_finite(x)
    C.check_finite(x, mask=np.array([[True, True], [False, True]]))     # masked NaN is fine
    jax.jit(lambda a: (C.check_finite(a), a)[1])(jnp.asarray(x))           # traced: no check, no error


def test_check_finite_with_log_ratio_reports_an_overflow():
    out = np.array([[0.5, np.inf, 0.1], [np.nan, 0.0, 0.2]])
    lr = np.array([[0.0, 90.0, 0.0], [300.0, 0.0, 0.0]])
    mask = np.array([[True, True, True], [False, True, True]])
    with pytest.raises(ValueError, match=r"^c contains a non-finite value inf at index \(0, 1\) \(1 non-finite "
                                         r"valid entries\): importance weights overflow \(largest valid "
                                         r"log_ratio 90\); set clamp_delta, or mask such samples out$"):
        C.check_finite(out, name="c", mask=mask, log_ratio=lr)    # the masked 300 is not named
    C.check_finite(out[:, 2], name="c", log_ratio=lr[:, 2])           # all finite: no error
    jax.jit(lambda a, b: (C.check_finite(a, log_ratio=b), a)[1])(jnp.asarray(out), jnp.asarray(lr))


def test_prepare_mask_and_rows_below_k():
    np.testing.assert_array_equal(C.prepare_mask(np.array([1, 0, 1]), (3,)), [True, False, True])
    np.testing.assert_array_equal(C.prepare_mask(None, (2, 3)), np.ones((2, 3), bool))
    got = C.rows_below_k(np.array([[[1, 1, 0], [1, 1, 1]], [[0, 0, 0], [1, 0, 1]]], bool), 2)
    np.testing.assert_array_equal(got, [[False, False], [True, False]])
    assert got.shape == (2, 2) and int(jnp.sum(got)) == 1


def test_sort_rows_groups_ties_and_puts_masked_last():
    r = jnp.array([[0.5, 0.1, 0.5, 9.0, 0.1, 0.5]])
    lr = jnp.array([[0.0, 1.0, 0.0, 0.0, 2.0, 3.0]])
    mask = jnp.array([[True, True, True, False, True, True]])
    s = C.sort_rows(r, mask, lr)
    np.testing.assert_allclose(s.r, [[0.1, 0.1, 0.5, 0.5, 0.5, 0.0]], rtol=1e-7)
    np.testing.assert_array_equal(s.perm, [[1, 4, 0, 2, 5, 3]])
    np.testing.assert_array_equal(s.valid, [[1, 1, 1, 1, 1, 0]])
    np.testing.assert_array_equal(s.last, [[0, 1, 3, 3, 4, 5]])          # (0.5, 0.0) twice -> group end 3
    x = jnp.arange(6.0)[None]
    np.testing.assert_array_equal(C.unsort(s, x), [[2, 0, 3, 5, 1, 4]])
    np.testing.assert_array_equal(C.finish(s, x, 6), 0.0)               # 5 valid < k = 6
    np.testing.assert_array_equal(C.finish(s, x, 2), [[3, 0, 3, 0, 1, 4]])


def test_order_keys_follow_float_order_and_put_masked_last():
    vals = np.array([-np.inf, -3e38, -1.0, -1e-30, -0.0, 0.0, 1e-30, 0.5, 3e38, np.inf, np.nan],
                    np.float32)
    keys = np.asarray(C.order_keys(jnp.asarray(vals)[None], jnp.ones((1, vals.size), bool)))[0]
    assert keys.dtype == np.uint32
    assert np.all(np.diff(keys[[0, 1, 2, 3, 4, 6, 7, 8, 9, 10]].astype(np.int64)) > 0)  # strict order
    assert keys[4] == keys[5]                                              # -0 ties with +0
    neg_nan = np.array([0xFFC00001], np.uint32).view(np.float32)          # NaN with the sign bit set
    both = np.asarray(C.order_keys(jnp.asarray([[np.nan, neg_nan[0], 1.0]], jnp.float32),
                                   jnp.array([[True, True, False]])))[0]
    assert both[0] == both[1] == keys[10] < both[2] == 0xFFFFFFFF           # NaNs above inf, masked last


@pytest.mark.parametrize("n", [1, 2, 7, 8, 9, 256, 1000])
def test_stable_argsort_keys_matches_numpy_stable_argsort(n):
    rng = np.random.default_rng(n)
    keys = np.concatenate([rng.integers(0, 2**32, (3, n), dtype=np.uint64),        # full range
                           rng.integers(0, 4, (3, n)) * (2**32 - 1) // 3,          # 0 / max, ties
                           rng.integers(0, 3, (3, n)) << rng.integers(0, 31, (3, 1))]).astype(np.uint32)
    got = np.asarray(C.stable_argsort_keys(jnp.asarray(keys)))
    np.testing.assert_array_equal(got, np.argsort(keys, axis=-1, kind="stable"))


def test_sort_rows_fast_path_matches_lexsort_reference():
    rng = np.random.default_rng(0)
    r = rng.choice(np.array([-np.inf, -1.5, -0.0, 0.0, 0.25, 0.25, 3.0, np.inf], np.float32), (64, 37))
    r[:32] = rng.standard_normal((32, 37)).astype(np.float32)
    mask = rng.random((64, 37)) < 0.8
    s = jax.jit(C.sort_rows)(jnp.asarray(r), jnp.asarray(mask))
    r0 = np.where(mask, r, 0)
    ref = np.stack([np.lexsort((r0[b], ~mask[b])) for b in range(64)])   # stable: invalid last, r, index
    np.testing.assert_array_equal(s.perm, ref)
    nv = mask.sum(-1, keepdims=True)
    np.testing.assert_array_equal(s.r, np.where(np.arange(37) < nv, np.take_along_axis(r0, ref, -1), 0))
    general = jax.jit(C.sort_rows)(jnp.asarray(r)[None], jnp.asarray(mask)[None])   # 3-D input: lax.sort path
    for a, b in zip(s, general):
        np.testing.assert_array_equal(a, b[0])


def _log_weights_ref(n_valid, k, n):
    j = np.arange(1, n + 1)

    def logc(a, b):
        ok = (b >= 0) & (a >= b)
        return np.where(ok, gammaln(np.maximum(a, 0) + 1.0) - gammaln(np.maximum(b, 0) + 1.0)
                        - gammaln(np.maximum(a - b, 0) + 1.0), -np.inf)
    base = logc(n_valid, k)
    out = [logc(j - u, k - u) - base for u in (1, 2, 3)]
    return [np.where(j <= n_valid, o, -np.inf) for o in out]


def test_log_weights_exact_for_small_n():
    n = 9
    weights = jax.jit(lambda nv, k: C.log_weights(nv, k, n, jnp.float32))     # k may be traced
    for nv in range(1, n + 1):
        for k in range(1, nv + 1):
            w = weights(jnp.array([nv]), jnp.int32(k))
            for u, lw in zip((1, 2, 3), w):
                want = [comb(j - u, k - u) / comb(nv, k) if (k >= u and j <= nv and j >= u) else 0.0
                        for j in range(1, n + 1)]
                np.testing.assert_allclose(np.exp(np.asarray(lw[0], np.float64)), want, rtol=3e-6, atol=0)


@pytest.mark.parametrize("k", [1, 2, 3, 50, 1000, 60000])
def test_log_weights_float32_vs_float64_at_n_65536(k):
    """Relative error < 1e-5 for weights above e^-20 * max, < 3e-5 above e^-69 * max (n_valid = n and < n).

    The second tier is limited by float32 itself: log w ~ -69 has an ulp of 7.6e-6.
    """
    n = 65536
    weights = jax.jit(lambda nv, k: C.log_weights(nv, k, n, jnp.float32))
    for nv in (n, n - 1234):
        got = [np.asarray(x[0], np.float64) for x in weights(jnp.array([nv]), jnp.int32(k))]
        for g, want in zip(got, _log_weights_ref(nv, k, n)):
            if not np.isfinite(want).any():
                assert not np.isfinite(g).any()
                continue
            top = want[np.isfinite(want)].max()
            np.testing.assert_array_equal(np.isfinite(g), np.isfinite(want))
            for depth, tol in ((20, 1e-5), (69, 3e-5)):
                sel = want > top - depth
                np.testing.assert_allclose(np.exp(g[sel] - want[sel]), 1.0, atol=tol, err_msg=f"depth {depth}")


def test_row_sum_is_accurate_inside_jit():
    x = np.round(np.random.default_rng(0).random((1, 65536)) * 20) / 20 / 65536
    got = jax.jit(lambda a: C.row_sum(a * 1.0))(jnp.asarray(x, jnp.float32))
    np.testing.assert_allclose(float(got[0]), x.astype(np.float32).astype(np.float64).sum(), rtol=1e-6)


def test_masked_center_and_zscore():
    x = jnp.array([[0.1, 0.1, 0.1, 7.0], [1.0, 2.0, 3.0, 4.0]])
    m = jnp.array([[True, True, True, False], [True, True, True, True]])
    np.testing.assert_array_equal(C.masked_center(x, m)[0], 0.0)          # exact zeros for ties
    np.testing.assert_array_equal(C.masked_zscore(x, m, eps=1e-6, ddof=0)[0], 0.0)
    noisy = jnp.array([[0.3, 0.3 * (1 + 2e-7), 0.3 * (1 - 1e-7), 0.3]])     # rounding-level spread
    np.testing.assert_array_equal(C.masked_zscore(noisy, jnp.ones((1, 4), bool), eps=1e-6, ddof=0), 0.0)
    z = np.asarray(C.masked_zscore(x, m, eps=0.0, ddof=1)[1])
    np.testing.assert_allclose(z, (np.arange(1, 5) - 2.5) / np.std(np.arange(1, 5), ddof=1), rtol=1e-6)


@pytest.mark.parametrize("call, match", [
    (lambda: C.as_rows(np.float32(1), name="rewards"), "at least one axis"),
    (lambda: C.as_rows(np.ones((3, 0)), name="rewards"), "empty last axis"),
    (lambda: C.as_rows(np.ones(3), name="mask", shape=(4,)), r"mask has shape \(3,\), expected \(4,\)"),
    (lambda: C.prepare_rewards(np.array(["a", "b"])), "must be real numbers"),
    (lambda: C.prepare_mask(np.array([0.5, 1.0]), (2,)), "mask must be boolean or 0/1"),
    (lambda: C.prepare_log_ratio(None, (2,), required=True, estimator="x"), "x needs log_ratio"),
    (lambda: C.order_keys(jnp.ones((1, 2), jnp.int32), jnp.ones((1, 2), bool)), "needs float32"),
    (lambda: C.stable_argsort_keys(jnp.ones((1, 3), jnp.int32)), r"uint32 keys \[B, n\], got int32"),
    (lambda: C.stable_argsort_keys(jnp.zeros((1, C.RADIX_MAX_N + 1), jnp.uint32)), "n <= 65536, got n=65537"),
])
def test_error_paths(call, match):
    with pytest.raises(ValueError, match=match):
        call()
