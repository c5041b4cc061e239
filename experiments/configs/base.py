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
construction); the methods (estimator + options + loss form) are the package's registry,
`maxk_jax.rl.method.METHODS` and its `VARIANTS` (``--method=<name>`` of every entry point that trains
takes the same names); this file picks one by name.  Override any field on the command line, e.g.
``--config.algo.k=2 --config.rollout.prompts=32 --config.eval.ks='(1,2,4)'
--config.algo.estimator_options="(('clamp_delta',0.5),)"`` (maxk_jax/rl/config_dict.py).
"""
from __future__ import annotations

import ml_collections

from maxk_jax.rl.config_dict import to_config_dict
from maxk_jax.rl.run_config import RunConfig
from maxk_jax.rl.method import DEFAULT_METHOD, METHODS, VARIANTS, apply_method, check_method

__all__ = ["DEFAULT_METHOD", "METHODS", "VARIANTS", "get_config", "get_run_config"]


def get_run_config(method: str | None = None) -> RunConfig:
    """The typed run config of `method` (a name of the method registry `maxk_jax.rl.method`; default:
    DEFAULT_METHOD), named after it. ValueError listing the valid names for an unknown one."""
    return apply_method(RunConfig(), check_method(method or DEFAULT_METHOD))


def get_config(method: str | None = None) -> ml_collections.ConfigDict:
    """The full config of `method` as the command line's ConfigDict (`get_run_config`)."""
    return to_config_dict(get_run_config(method))
