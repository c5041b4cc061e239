"""k-sample estimators of both papers: pass@k / max@k metrics, max@k reward transforms, registry.

Public API (the estimator contract of docs/contracts.md).  All functions are pure jax.numpy, jit- and
vmap-compatible (k and other integer options are static Python ints), take `[..., n]` arrays
(the n completions of one prompt on the last axis, any order, ties allowed) and return results
in input order.  `mask` (True = valid) removes samples exactly as if they were absent; rows
with fewer than k valid samples get all-zero advantages (metrics: NaN) -- see `rows_below_k`.

Metrics:        pass_at_k, max_at_k
Transforms:     maxk_reward_transform (eq. 9), maxk_reward_transform_offpolicy (§3.3, first
                order), maxk_reward_transform_offpolicy_exact (eq. 10, O(n k))
Advantages:     loo1_advantage (+ _offpolicy, _offpolicy_exact), tang_loo_biased_advantage,
                tang_leave_p_out_advantage, tang_softmax_advantage, majority_vote_advantage
Registry:       get_estimator(name, **options) -> fn(rewards, *, k, log_ratio=None, mask=None,
                answer_ids=None); list_estimators(); estimator_options(name);
                estimator_info(name) (default loss form, needs log_ratio / answer_ids, min k);
                update_claim(name, **options) (what its expected update is documented to be),
                behaviour_refusal(name, **options) (None, or why it must not take a stale
                sampler's log-ratio); batch_scale (the maxk family's option ``scale``);
                clamp_log_ratio(log_ratio, clamp_delta) (Listing 3's delta clamp)
Helpers:        rows_below_k(mask, k), check_finite(x, name=..., mask=None, log_ratio=None)

Private modules: _core (validation, sorting, log-space binomial weights), _maxk (eq. 9 / §3.3
transforms, LOO-1), _exact (eq. 10 by an elementary-symmetric-polynomial DP), _tang (Tang et al.)
and _registry (get_estimator and metadata); see their docstrings for derivations.
"""
from maxk_jax.estimators._registry import (BASELINES, DEFAULT_CLAMP_DELTA, SCALES, UNBIASED_BASELINES,
                                         EstimatorFn, EstimatorInfo, UpdateClaim, batch_scale,
                                         behaviour_refusal, clamp_log_ratio, estimator_info,
                                         estimator_options, get_estimator, list_estimators,
                                         update_claim)
from maxk_jax.estimators._core import check_finite, rows_below_k
from maxk_jax.estimators._exact import (loo1_advantage_offpolicy_exact,
                                       maxk_reward_transform_offpolicy_exact)
from maxk_jax.estimators._maxk import (loo1_advantage, loo1_advantage_offpolicy, max_at_k,
                                      maxk_reward_transform, maxk_reward_transform_offpolicy,
                                      pass_at_k)
from maxk_jax.estimators._tang import (majority_vote_advantage, tang_leave_p_out_advantage,
                                      tang_loo_biased_advantage, tang_softmax_advantage)

__all__ = [
    "BASELINES", "DEFAULT_CLAMP_DELTA", "SCALES", "UNBIASED_BASELINES", "EstimatorFn", "EstimatorInfo",
    "UpdateClaim", "batch_scale", "behaviour_refusal", "update_claim", "check_finite",
    "clamp_log_ratio", "estimator_info", "estimator_options", "get_estimator",
    "list_estimators", "loo1_advantage", "loo1_advantage_offpolicy", "loo1_advantage_offpolicy_exact",
    "majority_vote_advantage", "max_at_k", "maxk_reward_transform", "maxk_reward_transform_offpolicy",
    "maxk_reward_transform_offpolicy_exact", "pass_at_k", "rows_below_k", "tang_leave_p_out_advantage",
    "tang_loo_biased_advantage", "tang_softmax_advantage",
]
