"""maxk_jax.eval.bootstrap: the k <= n/2 reporting rule and percentile bootstrap intervals over
problems (and seeds)."""
import numpy as np
import pytest

from maxk_jax.eval.bootstrap import bootstrap_ci, max_reported_k, reported_ks


def test_only_k_up_to_half_of_n_is_reported():
    assert [max_reported_k(n) for n in (1, 2, 3, 256, 257)] == [1, 1, 1, 128, 128]
    assert reported_ks((1, 2, 4, 8, 16), 16) == (1, 2, 4, 8)
    assert reported_ks((1, 2, 4), 4) == (1, 2)
    for bad in (0, -1, 2.0, True):
        with pytest.raises(ValueError, match="n must be an int >= 1"):
            max_reported_k(bad)


def test_interval_covers_the_mean_and_shrinks_with_more_problems():
    rng = np.random.default_rng(0)
    small, large = rng.random(30), rng.random(3000)
    lo, hi = bootstrap_ci(small)
    assert lo < small.mean() < hi
    # about 2 x 1.96 standard errors wide
    se = small.std(ddof=1) / np.sqrt(small.size)
    assert (hi - lo) == pytest.approx(2 * 1.96 * se, rel=0.2)
    lo2, hi2 = bootstrap_ci(large)
    assert hi2 - lo2 < (hi - lo) / 5
    assert bootstrap_ci(small) == bootstrap_ci(small)            # deterministic in its seed
    assert bootstrap_ci(small, seed=1) != bootstrap_ci(small)


def test_seeds_are_resampled_too():
    rng = np.random.default_rng(1)
    problems = rng.random(200)
    same = np.stack([problems] * 4)                             # no seed-to-seed variation
    spread = np.stack([problems + d for d in (-0.2, -0.1, 0.1, 0.2)])
    w_same = np.subtract(*bootstrap_ci(same)[::-1])
    w_spread = np.subtract(*bootstrap_ci(spread)[::-1])
    assert w_spread > 2 * w_same
    lo, hi = bootstrap_ci(spread)
    assert lo < spread.mean() < hi


def test_missing_values_are_left_out_not_zeroed():
    v = np.array([0.9, 0.8, np.nan, 1.0, np.nan])
    lo, hi = bootstrap_ci(v)
    assert 0.8 <= lo <= hi <= 1.0
    assert bootstrap_ci(np.full(4, np.nan)) is None
    with pytest.raises(ValueError, match="shape"):
        bootstrap_ci(np.zeros((2, 0)))
    with pytest.raises(ValueError, match="level"):
        bootstrap_ci(v, level=1.5)
    with pytest.raises(ValueError, match="replicates"):
        bootstrap_ci(v, replicates=3)
