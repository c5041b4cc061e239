"""maxk_jax/rl/exactness.py: every documented unbiasedness claim holds exactly on the enumerated bandit,
through the train step's path (staleness.corrected_coefficients + losses.policy_loss), and every
setting `stale_correction="behaviour"` accepts has an expected update parallel to grad max@k."""
from __future__ import annotations

import numpy as np
import pytest

from maxk_jax import estimators as E
from maxk_jax.rl import exactness as X
from maxk_jax.rl.run_config import AlgoSettings
from maxk_jax.rl.training import StepConfig
from maxk_jax.sampling import SamplerSettings

K, N = 2, 4
COS = 0.999
DRAWS = X.make_draws(seed=0, count=2, shift=0.5)


def _stacked(scenario, draws=DRAWS):
    return np.stack([X.scenario_policies(d, scenario) for d in draws])


def _worst(fn, scenario, correction, objective="max@k", kind="is_weighted", rows=1, draws=DRAWS, p=1):
    out = X.expected_update(fn, _stacked(scenario, draws), k=K, n=N, correction=correction, rows=rows,
                            stale=scenario.startswith("stale"), loss=X.open_trust_region(kind))
    res = [X.compare(u, rows * X.target_gradient(d.theta, objective, k=K, p=p)) for u, d in zip(out, draws)]
    return min(c for c, _ in res), [r for _, r in res]


OFF = [(name, dict(baseline=b, scale=s, clamp_delta=None))
       for name in ("maxk_offpolicy_exact", "maxk_offpolicy")
       for b, s in (("loo1", "none"), ("none", "none"), ("loo1", "loo_rms"), ("zscore", "none"),
                    ("mean", "none"), ("loo1", "batch_rms"))]


@pytest.mark.slow   # ~2 min on the loaded 2-core machine (one compile per setting); the fast test below covers eq. 10
@pytest.mark.parametrize("name, options", OFF, ids=[f"{n}-{o['baseline']}-{o['scale']}" for n, o in OFF])
def test_behaviour_accepts_exactly_the_settings_whose_update_is_unbiased(name, options):
    claim = E.update_claim(name, **options)
    refusal = E.behaviour_refusal(name, **options)
    assert (refusal is None) == (claim.off_policy != "no")
    rows = 2 if claim.needs_rows or options["scale"] != "none" else 1
    draws = DRAWS if claim.off_policy != "first_order" else X.make_draws(seed=0, count=2, shift=0.05)
    cos, ratios = _worst(E.get_estimator(name, **options), "stale", "behaviour", rows=rows, draws=draws)
    if refusal is None:     # accepted: parallel to grad max@k, at the claimed scale
        assert cos >= COS, (name, options, cos)
        if claim.unit_scale:
            np.testing.assert_allclose(ratios, 1.0, rtol=2e-3 if claim.off_policy == "exact" else 2e-2)
        _step(name, options)
    else:                   # refused: a biased baseline is measurably off grad max@k
        if options["baseline"] in ("zscore", "mean"):
            assert cos < COS, (name, options, cos)
        assert "use baseline='loo1' with scale='loo_rms'" in refusal
        with pytest.raises(ValueError, match="needs an unbiased estimator setting: .* has a biased expected update"):
            _step(name, options)


def _step(name, options):
    return StepConfig(estimator=name, k=K, sampler=SamplerSettings(n=N, max_new_tokens=4),
                      estimator_options=options, stale_correction="behaviour")


REGISTRY = [(name, {}) for name in E.list_estimators()] + [
    ("maxk", dict(baseline="loo1")), ("maxk", dict(baseline="none")), ("tang_softmax", dict(biased=True))]


@pytest.mark.slow
@pytest.mark.parametrize("name, options", REGISTRY, ids=[f"{n}-{'-'.join(map(str, o.values()))}" for n, o in REGISTRY])
def test_on_policy_claims_of_every_registry_estimator(name, options):
    """On-policy (μ = π_old = π_θ): the claimed objective's exact gradient, at the claimed scale."""
    claim = E.update_claim(name, **options)
    if not claim.on_policy or claim.objective == "own":
        pytest.skip(f"{name} {options}: no on-policy claim against a known objective (see the exactness table)")
    cos, ratios = _worst(E.get_estimator(name, **options), "on_policy", "none", claim.objective)
    assert cos >= COS, (name, options, cos)
    if claim.unit_scale:
        np.testing.assert_allclose(ratios, 1.0, rtol=1e-3)


def test_eq10_behaviour_is_exact_in_the_is_weighted_loss_and_refused_where_biased():
    """The default suite's check (fast): stale data at PPO iteration > 0 (θ ≠ θ_old ≠ θ_μ). eq. 10
    with loo1, which behaviour accepts, is exactly grad max@k (scale 1) in the IS-weighted loss; the
    clipped loss multiplies the weights by π_θ/π_old again (why run_config refuses it at PPO
    iterations > 1) and the paper's z-score is biased (refused)."""
    fn = E.get_estimator("maxk_offpolicy_exact", baseline="loo1", clamp_delta=None)
    assert E.behaviour_refusal("maxk_offpolicy_exact", baseline="loo1", clamp_delta=None) is None
    cos_is, ratios = _worst(fn, "stale_ppo", "behaviour", kind="is_weighted")
    cos_clip, _ = _worst(fn, "stale_ppo", "behaviour", kind="clipped")
    assert cos_is >= COS and cos_clip < COS
    np.testing.assert_allclose(ratios, 1.0, rtol=2e-3)
    zscore = E.get_estimator("maxk_offpolicy_exact", clamp_delta=None)
    assert _worst(zscore, "stale_ppo", "behaviour")[0] < COS
    with pytest.raises(ValueError, match="baseline='zscore' has a biased expected update"):
        _step("maxk_offpolicy_exact", {})
    with pytest.raises(ValueError, match="needs algo.loss.kind='is_weighted'"):
        AlgoSettings(estimator="maxk_offpolicy_exact", estimator_options=dict(baseline="loo1"),
                     stale_correction="behaviour", ppo_iterations=2)


def test_inputs_are_checked():
    with pytest.raises(ValueError, match="θ_μ must equal θ_old"):
        X.expected_update(E.get_estimator("rloo"), X.scenario_policies(DRAWS[0], "stale"), k=K, n=N)
    with pytest.raises(ValueError, match="scenario='async'"):
        X.scenario_policies(DRAWS[0], "async")
    with pytest.raises(ValueError, match="objective='own'"):
        X.target_gradient(DRAWS[0].theta, "own", k=K)
