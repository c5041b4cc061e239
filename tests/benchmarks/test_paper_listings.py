"""The paper's Listings 2 and 3 (maxk_jax/benchmarks/paper_listings.py) against brute-force subset sums."""
import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from maxk_jax.benchmarks import paper_listings as pl


def brute_force(rewards: np.ndarray, deltas: np.ndarray | None, k: int) -> np.ndarray:
    """C(n,k)^-1 sum_{I containing i} (1 + sum_{l in I} d_l) max r_I for one row, float64 [n]."""
    n = len(rewards)
    d = np.zeros(n) if deltas is None else np.asarray(deltas, np.float64)
    out = np.zeros(n)
    for subset in itertools.combinations(range(n), k):
        value = (1.0 + d[list(subset)].sum()) * max(rewards[j] for j in subset)
        for i in subset:
            out[i] += value
    return out / math.comb(n, k)


def _rows(rng: np.random.Generator, batch: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    rewards = np.round(rng.uniform(size=(batch, n)) * 4) / 4  # a 5-level grid: plenty of ties
    deltas = rng.normal(scale=0.3, size=(batch, n))
    return rewards.astype(np.float32), deltas.astype(np.float32)


CASES = [(n, k) for n in (1, 2, 4, 7) for k in range(1, n + 1)]
_on = jax.jit(pl.bon_scaler, static_argnums=1)
_off = jax.jit(pl.bon_scaler_offpolicy, static_argnums=(2, 3))
_printed = jax.jit(pl.bon_scaler_offpolicy_as_printed, static_argnums=(2, 3))


@pytest.mark.parametrize("n,k", CASES)
def test_listings_match_brute_force_on_sorted_rows(n, k):
    rng = np.random.default_rng(1000 * n + k)
    rewards, deltas = _rows(rng, 3, n)
    order = np.argsort(rewards, axis=-1, kind="stable")
    rewards = np.take_along_axis(rewards, order, -1)
    deltas = np.take_along_axis(deltas, order, -1)
    on, _ = _on(jnp.asarray(rewards), k)
    off, weights = _off(jnp.asarray(rewards), jnp.asarray(deltas), k)
    assert weights.shape == (3, n, n)
    for b in range(3):
        np.testing.assert_allclose(on[b], brute_force(rewards[b], None, k), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(off[b], brute_force(rewards[b], deltas[b], k),
                                   rtol=1e-5, atol=1e-5)


def test_zero_deltas_reduce_offpolicy_to_onpolicy():
    rewards, _ = _rows(np.random.default_rng(0), 4, 9)
    rewards = jnp.sort(jnp.asarray(rewards), axis=-1)
    on, on_w = _on(rewards, 3)
    off, off_w = _off(rewards, jnp.zeros_like(rewards), 3)
    np.testing.assert_allclose(off, on, rtol=1e-6)
    np.testing.assert_allclose(off_w, np.broadcast_to(on_w, off_w.shape), rtol=1e-6)


def test_sort_rows_gives_permutation_equivariant_results():
    rewards, deltas = _rows(np.random.default_rng(1), 2, 6)
    r_s, d_s, order = pl.sort_rows(jnp.asarray(rewards), jnp.asarray(deltas))
    assert np.all(np.diff(np.asarray(r_s), axis=-1) >= 0)
    np.testing.assert_array_equal(pl.unsort_rows(r_s, order), rewards)
    np.testing.assert_array_equal(pl.unsort_rows(d_s, order), deltas)
    off, _ = _off(r_s, d_s, 4)
    off = np.asarray(pl.unsort_rows(off, order))
    for b in range(2):  # brute force on the *unsorted* row, results back in the input order
        np.testing.assert_allclose(off[b], brute_force(rewards[b], deltas[b], 4), rtol=1e-5)


@pytest.mark.parametrize("n,k", [(5, 2), (6, 3), (7, 4)])
def test_listing3_as_printed_disagrees_exactly_by_the_documented_bugs(n, k):
    rng = np.random.default_rng(7)
    rewards, deltas = _rows(rng, 2, n)
    rewards = np.sort(rewards, axis=-1)
    deltas = np.clip(deltas, -0.2, 0.2)  # inside the clamp, so only bugs 1 and 2 can matter
    printed, _ = _printed(jnp.asarray(rewards), jnp.asarray(deltas), k, 0.2)
    assert printed.shape == (2, 2, n)  # bug 2: broadcast batched matmul mixes prompts
    fixed, _ = _off(jnp.asarray(rewards), jnp.asarray(deltas), k)
    for p in range(2):
        truth = brute_force(rewards[p], deltas[p], k)
        np.testing.assert_allclose(fixed[p], truth, rtol=1e-5, atol=1e-6)
        assert np.max(np.abs(np.asarray(printed[p, p]) - truth)) > 1e-3
        # bug 1: every off-diagonal entry of column i carries an extra C(i-1, k-1)/C(n, k).
        extra = pl.binom_ratio_table(n, k, 1, k - 1) * (rewards[p].sum() - rewards[p])
        np.testing.assert_allclose(np.asarray(printed[p, p]) - truth, extra, rtol=1e-4, atol=1e-5)


def test_clamp_is_opt_in_and_equals_clipping_the_deltas():
    rewards, deltas = _rows(np.random.default_rng(3), 2, 6)
    rewards = jnp.sort(jnp.asarray(rewards), axis=-1)
    deltas = jnp.asarray(deltas) * 5
    clamped, _ = _off(rewards, deltas, 3, 0.5)
    clipped, _ = _off(rewards, jnp.clip(deltas, -0.5, 0.5), 3)
    unclamped, _ = _off(rewards, deltas, 3)
    np.testing.assert_allclose(clamped, clipped, rtol=1e-6)
    assert np.max(np.abs(np.asarray(clamped) - np.asarray(unclamped))) > 1e-3


@pytest.mark.parametrize("n,k", [(1024, 4), (300, 150), (65536, 8)])
def test_binomial_tables_are_exact_at_large_n(n, k):
    # Hockey stick: sum_{j=k}^{n} C(j-1, k-1) = C(n, k), so the diagonal table sums to one.
    diag = pl.binom_ratio_table(n, k, 1, k - 1)
    assert np.all(np.isfinite(diag)) and np.all(diag >= 0)
    assert diag[: k - 1].sum() == 0
    assert math.isclose(math.fsum(diag), 1.0, rel_tol=1e-12)
    assert diag[-1] == k / n  # C(n-1, k-1) / C(n, k)


def test_bad_inputs_raise_value_errors():
    rewards = jnp.zeros((2, 4))
    with pytest.raises(ValueError, match="k = 5"):
        pl.bon_scaler(rewards, 5)
    with pytest.raises(ValueError, match="k = 0"):
        pl.bon_scaler_offpolicy(rewards, rewards, 0)
    with pytest.raises(ValueError, match="k must be an int"):
        pl.bon_scaler(rewards, 2.0)
    with pytest.raises(ValueError, match=r"\[B, n\]"):
        pl.bon_scaler(jnp.zeros(4), 2)
    with pytest.raises(ValueError, match="deltas shape"):
        pl.bon_scaler_offpolicy(rewards, jnp.zeros((2, 3)), 2)
    with pytest.raises(ValueError, match="clamp_delta"):
        pl.bon_scaler_offpolicy(rewards, rewards, 2, clamp_delta=0.0)
