"""The run config: the paper's hyperparameters for Qwen2.5-Coder-7B-Instruct on CodeContests, and
one entry per method, selected by name on the command line:

    python -m experiments.train --config=experiments/configs/base.py:grpo ...
    python -m experiments.train --config=experiments/configs/base.py            # maxk_offpolicy_exact_loo1_rms

Paper (max@k, §4.4): 8 completions per problem, temperature 1.0, top-p 1.0, 256 new tokens,
Adam with learning rate 5e-6, beta (KL) 0.01, clip epsilon 0.2, 3 PPO iterations per rollout,
one epoch over the 2,490 CodeContests train problems.  Not stated in the paper, chosen here:
  * algo.k = 4 (the training k of max@k / pass@k estimators; n = 8 samples per prompt);
  * rollout.prompts = 16 problems per RL step (128 sequences), optim.max_grad_norm = 1.0,
    constant learning rate, no weight decay, KL estimator k3 (GRPO's), per-sequence mean
    aggregation (GRPO eq. 4);
  * float32 parameters and Adam moments, bfloat16 matmuls, per-layer rematerialisation, mesh
    fsdp over every device (ZeRO-3) -- the layout experiments/plan_train.py plans for the 7B.
The defaults live in the typed run config (maxk_jax.rl.run_config.RunConfig, validated on
construction); this file only names the methods.  Override any field on the command line, e.g.
``--config.algo.k=2 --config.rollout.prompts=32 --config.eval.ks='(1,2,4)'
--config.algo.estimator_options="(('clamp_delta',0.5),)"`` (maxk_jax/rl/config_dict.py).
"""
from __future__ import annotations

import ml_collections

from maxk_jax.rl.config_dict import to_config_dict
from maxk_jax.rl.run_config import RunConfig
from maxk_jax.rl.method import UNBIASED_OFFPOLICY, Method, with_method

# The default departs from the paper's maxk_offpolicy (z-scored r~', clipped loss): off-policy (PPO
# iterations > 0, stale rollouts) the z-score makes its expected update point away from grad max@k,
# and on the testbed the unbiased form trained better (docs/results/offpolicy_unbiased.md).
DEFAULT_METHOD = "maxk_offpolicy_exact_loo1_rms"

# Every method: Method(estimator, options, loss form), with the paper section it follows. The loss
# form is given only where a method deviates from the estimator registry's
# (`maxk_jax.estimators.estimator_info(name).loss_form`: "clipped" = GRPO's clipped objective
# eq. 4, what the paper ran for every method); "is_weighted" = the §3.3 derivation's gradient
# sum_i c_i grad log pi(y_i), no extra ratio.
METHODS: dict[str, Method] = {
    # --- the max@k paper's Table 2 ---
    # GRPO (§3.1, eq. 4-5): z-scored rewards -- the pure reward-maximisation baseline.
    "grpo": Method("grpo"),
    # BoN-max mean (Chow et al.; App. A): reward only on the best samples, mean baseline.
    "bon_max_mean": Method("bon_max_mean"),
    # BoN-max second (App. A): reward only on the best samples, second-best baseline.
    "bon_max_second": Method("bon_max_second"),
    # BoN LOO-1 (Walder & Karkhanis; App. A, §4.5): unbiased on-policy max@k, LOO-1 baseline.
    "bon_loo1": Method("bon_loo1"),
    # BoN mean (§4.3, App. A): on-policy max@k transform r~ (eq. 9), z-scored (eq. 5).
    "bon_mean": Method("bon_mean"),
    # Off-policy BoN, the paper's method as it ran it (§3.3 + §3.1/§4.3, Listing 3): first-order
    # IS-corrected r~' with delta clamped (clamp_delta), z-scored, in GRPO's clipped eq. 4.
    "maxk_offpolicy": Method("maxk_offpolicy"),
    # ... the same under a name that says what it is (the paper's z-scored form; not the default)
    "maxk_offpolicy_zscore": Method("maxk_offpolicy"),
    # --- beyond Table 2 ---
    # The same estimator with the §3.3 derivation's gradient (IS-weighted, no extra PPO ratio).
    "maxk_offpolicy_is": Method("maxk_offpolicy", loss_kind="is_weighted"),
    # Exact importance-weighted eq. 10 (polynomial DP), rho clamped to [1-c, 1+c], z-scored.
    "maxk_offpolicy_exact": Method("maxk_offpolicy_exact"),
    # Unbiased and scale-free off-policy max@k (the form `algo.stale_correction=behaviour` accepts):
    # the LOO-1 baseline (unbiased with the estimator's own importance weights), the coefficients of
    # each prompt divided by the RMS of the OTHER prompts' coefficients of the micro-batch (a scale
    # that does not depend on the prompt's own samples: updates as large as the z-scored ones,
    # expected update parallel to grad max@k), in the §3.3 IS-weighted loss (the clipped loss would
    # multiply the importance weights by pi_theta/pi_old again at PPO iterations > 0).
    # Eq. 10 (exact weights) and the first-order r~' of §3.3.
    # Eq. 10 + loo1 + loo_rms is the project's default method (DEFAULT_METHOD, the main job's too).
    "maxk_offpolicy_exact_loo1_rms": UNBIASED_OFFPOLICY,
    "maxk_offpolicy_loo1_rms": Method("maxk_offpolicy", {"baseline": "loo1", "scale": "loo_rms"},
                                      loss_kind="is_weighted"),
    # On-policy max@k (eq. 9), z-scored (== bon_mean); ignores PPO staleness.
    "maxk": Method("maxk"),
    # RLOO (Ahmadian et al.): leave-one-out mean baseline.
    "rloo": Method("rloo"),
    # Tang et al. eq. 2 (leave-one-out, f = max) and eq. 3 (mean-subtracted).
    "tang_loo": Method("tang_loo"),
    "tang_loo_biased": Method("tang_loo_biased"),
    # Tang et al. App. B leave-p-out (p = 1; --config.algo.estimator_options="(('p',2),)").
    "tang_leave_p_out": Method("tang_leave_p_out"),
    # Tang et al. App. B softmax objective (beta = 1).
    "tang_softmax": Method("tang_softmax"),
    # Tang et al. §3.1 majority voting; the answer is the program's judged behaviour on the test
    # inputs (maxk_jax/execution/behaviour.py); undetermined behaviour is masked.
    "majority_vote": Method("majority_vote"),
}


def get_run_config(method: str | None = None) -> RunConfig:
    """The typed run config of `method` (a METHODS name; default: DEFAULT_METHOD)."""
    method = method or DEFAULT_METHOD
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r} in --config=.../base.py:<method>; valid methods: "
                         f"{', '.join(sorted(METHODS))}")
    return with_method(RunConfig(), METHODS[method], name=method)


def get_config(method: str | None = None) -> ml_collections.ConfigDict:
    """The full config of `method` as the command line's ConfigDict (`get_run_config`)."""
    return to_config_dict(get_run_config(method))
