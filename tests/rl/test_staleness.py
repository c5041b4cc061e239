"""Corrections for stale rollouts (maxk_jax.rl.staleness) against brute-force definitions on small n."""
from __future__ import annotations

import numpy as np
import pytest

from maxk_jax.estimators import get_estimator
from maxk_jax.rl import staleness
from tests.estimators import estimator_reference as ref

N, K, P = 5, 3, 4


def _inputs(seed: int):
    rng = np.random.default_rng(seed)
    rewards = rng.choice([0.0, 0.25, 0.5, 1.0], size=(P, N))
    log_old = rng.normal(0.0, 0.3, size=(P, N))        # log π_θ/π_old
    log_w = rng.normal(0.0, 0.8, size=(P, N))          # log π_old/μ
    return rewards, log_old, log_w, log_old + log_w    # log π_θ/μ = log π_θ/π_old + log π_old/μ


def _call(estimator: str, correction: str, rewards, log_old, log_w, to_behaviour, cap=2.0, **options):
    fn = get_estimator(estimator, baseline="none", **options)
    return np.asarray(staleness.corrected_coefficients(
        fn, rewards, k=K, correction=correction, tis_cap=cap, log_ratio_old=log_old, log_w=log_w,
        to_behaviour=to_behaviour, mask=np.ones((P, N), bool), answer_ids=np.zeros((P, N), np.int32)))


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("estimator,mode", [("maxk_offpolicy", "first"), ("maxk_offpolicy_exact", "exact")])
def test_each_correction_matches_its_brute_force_definition(seed, estimator, mode):
    rewards, log_old, log_w, to_behaviour = _inputs(seed)
    brute_old = np.stack([ref.transform(r, K, lr, mode) for r, lr in zip(rewards, log_old)])
    brute_behaviour = np.stack([ref.transform(r, K, lr, mode) for r, lr in zip(rewards, to_behaviour)])
    opts = {"clamp_delta": None}
    # none: the estimator sees log π_θ/π_old, as if the data were on-policy
    np.testing.assert_allclose(_call(estimator, "none", rewards, log_old, log_w, to_behaviour, **opts),
                               brute_old, rtol=1e-5, atol=1e-6)
    # tis: the same coefficients times min(π_old/μ, cap), sample by sample
    for cap in (0.5, 2.0):
        np.testing.assert_allclose(
            _call(estimator, "tis", rewards, log_old, log_w, to_behaviour, cap=cap, **opts),
            brute_old * np.minimum(np.exp(log_w), cap), rtol=1e-5, atol=1e-6)
    # behaviour: the off-policy estimator's own importance weights over log π_θ/μ (§3.3 / eq. 10)
    np.testing.assert_allclose(_call(estimator, "behaviour", rewards, log_old, log_w, to_behaviour, **opts),
                               brute_behaviour, rtol=1e-5, atol=1e-6)


def test_on_policy_data_ignores_the_correction():
    rewards, log_old, _, _ = _inputs(3)
    for correction in staleness.CORRECTIONS:
        got = _call("maxk_offpolicy_exact", correction, rewards, log_old, None, None)
        np.testing.assert_allclose(got, np.stack([ref.transform(r, K, lr, "exact")
                                                  for r, lr in zip(rewards, log_old)]), rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="correction='clip'"):
        _call("maxk_offpolicy", "clip", rewards, log_old, None, None)


def test_row_ess_fraction_is_the_kish_effective_sample_size():
    rng = np.random.default_rng(0)
    log_w = rng.normal(0.0, 1.5, size=(6, N))
    mask = rng.random((6, N)) > 0.3
    mask[0] = True
    mask[1] = False
    got = np.asarray(staleness.row_ess_fraction(log_w + 500.0, mask))   # shift-invariant, no overflow
    for row in range(6):
        w = np.exp(log_w[row][mask[row]])
        want = np.nan if w.size == 0 else w.sum() ** 2 / (w ** 2).sum() / w.size
        np.testing.assert_allclose(got[row], want, rtol=1e-5)
    assert np.asarray(staleness.row_ess_fraction(np.zeros((1, N)), np.ones((1, N), bool)))[0] == pytest.approx(1.0)


def test_clamped_counts_the_weights_the_correction_capped():
    log_w = np.log(np.array([0.4, 1.0, 1.9, 2.1, 5.0]))
    to_behaviour = np.log(np.array([0.4, 0.6, 1.0, 1.4, 1.6]))
    valid = np.array([True, True, True, True, False])
    tis = np.asarray(staleness.clamped("tis", log_w, to_behaviour, valid, tis_cap=2.0, clamp_delta=None))
    assert tis.tolist() == [False, False, False, True, False]   # 5.0 is masked
    beh = np.asarray(staleness.clamped("behaviour", log_w, to_behaviour, valid, tis_cap=2.0, clamp_delta=0.5))
    assert beh.tolist() == [True, False, False, False, False]   # 0.4 < 1 - 0.5; 1.6 masked
    assert not np.asarray(staleness.clamped("behaviour", log_w, to_behaviour, valid, tis_cap=2.0,
                                            clamp_delta=None)).any()
    assert not np.asarray(staleness.clamped("none", log_w, to_behaviour, valid, tis_cap=2.0, clamp_delta=0.5)).any()
