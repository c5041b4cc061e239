"""The run config: the paper's hyperparameters for Qwen2.5-Coder-7B-Instruct on CodeContests, and
one entry per method, selected by name on the command line:

    python -m experiments.train --config=experiments/configs/base.py:grpo ...
    python -m experiments.train --config=experiments/configs/base.py            # maxk_offpolicy

Paper (max@k, §4.4): 8 completions per problem, temperature 1.0, top-p 1.0, 256 new tokens,
Adam with learning rate 5e-6, beta (KL) 0.01, clip epsilon 0.2, 3 PPO iterations per rollout,
one epoch over the 2,490 CodeContests train problems.  Not stated in the paper, chosen here:
  * algo.k = 4 (the training k of max@k / pass@k estimators; n = 8 samples per prompt);
  * rollout.prompts = 16 problems per RL step (128 sequences), optim.max_grad_norm = 1.0,
    constant learning rate, no weight decay, KL estimator k3 (GRPO's), per-sequence mean
    aggregation (GRPO eq. 4);
  * float32 parameters and Adam moments, bfloat16 matmuls, per-layer rematerialisation, mesh
    fsdp over every device (ZeRO-3) -- the layout experiments/plan_train.py plans for the 7B.
Override any field on the command line, e.g. ``--config.algo.k=2 --config.rollout.prompts=32``.
"""
from __future__ import annotations

import json

import ml_collections

DEFAULT_METHOD = "maxk_offpolicy"

# Every method: (estimator, loss form, estimator options), with the paper section it follows.
# Loss forms: "clipped" = GRPO's clipped objective eq. 4 (what the paper ran for every method);
# "is_weighted" = the §3.3 derivation's gradient sum_i c_i grad log pi(y_i), no extra ratio.
METHODS: dict[str, tuple[str, str, dict]] = {
    # --- the max@k paper's Table 2 ---
    # GRPO (§3.1, eq. 4-5): z-scored rewards -- the pure reward-maximisation baseline.
    "grpo": ("grpo", "clipped", {}),
    # BoN-max mean (Chow et al.; App. A): reward only on the best samples, mean baseline.
    "bon_max_mean": ("bon_max_mean", "clipped", {}),
    # BoN-max second (App. A): reward only on the best samples, second-best baseline.
    "bon_max_second": ("bon_max_second", "clipped", {}),
    # BoN LOO-1 (Walder & Karkhanis; App. A, §4.5): unbiased on-policy max@k, LOO-1 baseline.
    "bon_loo1": ("bon_loo1", "clipped", {}),
    # BoN mean (§4.3, App. A): on-policy max@k transform r~ (eq. 9), z-scored (eq. 5).
    "bon_mean": ("bon_mean", "clipped", {}),
    # Off-policy BoN, the paper's method as it ran it (§3.3 + §3.1/§4.3, Listing 3): first-order
    # IS-corrected r~' with delta clamped (clamp_delta), z-scored, in GRPO's clipped eq. 4.
    "maxk_offpolicy": ("maxk_offpolicy", "clipped", {}),
    # --- beyond Table 2 ---
    # The same estimator with the §3.3 derivation's gradient (IS-weighted, no extra PPO ratio).
    "maxk_offpolicy_is": ("maxk_offpolicy", "is_weighted", {}),
    # Exact importance-weighted eq. 10 (polynomial DP), rho clamped to [1-c, 1+c], z-scored.
    "maxk_offpolicy_exact": ("maxk_offpolicy_exact", "clipped", {}),
    # On-policy max@k (eq. 9), z-scored (== bon_mean); ignores PPO staleness.
    "maxk": ("maxk", "clipped", {}),
    # RLOO (Ahmadian et al.): leave-one-out mean baseline.
    "rloo": ("rloo", "clipped", {}),
    # Tang et al. eq. 2 (leave-one-out, f = max) and eq. 3 (mean-subtracted).
    "tang_loo": ("tang_loo", "clipped", {}),
    "tang_loo_biased": ("tang_loo_biased", "clipped", {}),
    # Tang et al. App. B leave-p-out (p = 1; --config.algo.estimator_options_json='{"p": 2}').
    "tang_leave_p_out": ("tang_leave_p_out", "clipped", {}),
    # Tang et al. App. B softmax objective (beta = 1).
    "tang_softmax": ("tang_softmax", "clipped", {}),
    # Tang et al. §3.1 majority voting; the answer is the program's judged behaviour on the test
    # inputs (maxk_jax/execution/behaviour.py); undetermined behaviour is masked.
    "majority_vote": ("majority_vote", "clipped", {}),
}


def get_config(method: str | None = None) -> ml_collections.ConfigDict:
    """The full config of `method` (a METHODS name; default: the paper's maxk_offpolicy)."""
    method = method or DEFAULT_METHOD
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r} in --config=.../base.py:<method>; valid methods: "
                         f"{', '.join(sorted(METHODS))}")
    estimator, loss_kind, options = METHODS[method]
    c = make(estimator, loss_kind=loss_kind, estimator_options_json=json.dumps(options, sort_keys=True))
    c.name = method
    return c


def _problem_spec(split: str) -> dict:
    return dict(
        dataset="",           # load_dataset name (code_contests, mbpp, ...) or "synthetic"
        path="",              # hub name or local path in the upstream schema ("" = loader default)
        split=split,          # loader split ("" = loader default)
        problems="",          # Problem JSONL cache (experiments.prepare_data); overrides dataset
        options_json="{}",    # extra loader options as a JSON object
        limit=0,              # keep only the first `limit` problems (0 = all)
        synthetic_seed=0,     # synthetic family: seed, train / test split sizes
        synthetic_num_train=2000,
        synthetic_num_test=200,
    )


def make(estimator: str, **algo: object) -> ml_collections.ConfigDict:
    """Base config with ``algo.estimator = estimator`` and ``algo`` fields overridden."""
    c = ml_collections.ConfigDict()
    c.name = estimator
    c.seed = 0                  # PRNG seed of sampling and of the data order (explicit)
    c.output_dir = ""           # required: metrics.jsonl, tensorboard/, checkpoints/, eval/
    c.max_steps = 0             # RL steps; 0 = data.epochs passes over the data

    c.model = ml_collections.ConfigDict(dict(
        path="",                # required: HF Qwen2 directory (e.g. Qwen2.5-Coder-7B-Instruct)
        tokenizer_path="",      # "" = model.path
        dtype="float32",        # parameter (and optimizer state) dtype: float32 | bfloat16
        compute_dtype="bfloat16",  # matmul dtype ("" = dtype); float32 master weights, bf16 math
        remat=True,             # rematerialise decoder layers in the backward pass
    ))
    data = _problem_spec("train")
    data.update(dataset="code_contests", epochs=1, shuffle=True,
                prompt_format="full",    # full (system prompt + instructions) | statement (bare)
                chat="auto",             # full prompts: chat template "true" / plain "false" / "auto"
                system_prompt="default")  # full prompts: "default" | "" (none) | any text
    c.data = ml_collections.ConfigDict(data)
    c.rollout = ml_collections.ConfigDict(dict(
        prompts=16,             # problems per RL step (not stated in the paper)
        n=8,                    # samples per problem (paper: 8)
        max_new_tokens=256,     # paper: 256
        temperature=1.0,        # paper: 1.0
        top_p=1.0,              # paper: 1.0
        top_k=0,
        eos_ids="",             # comma-separated stop ids ("" = tokenizer eos + model eos)
        executor="embedded",    # embedded | embedded:N | http://host:port[,...] | sandboxfusion+http://...
        sandbox_retries=1,      # re-judge sandbox_error samples this often before masking them
        min_prompt_bucket=16,   # prompts are left-padded to powers of two >= this
    ))
    c.algo = ml_collections.ConfigDict(dict(
        estimator=estimator,    # any name of maxk_jax.estimators.list_estimators()
        k=4,                    # training k (not stated in the paper; 1 <= k <= n)
        estimator_options_json="{}",  # e.g. {"baseline": "loo1"} or {"clamp_delta": 0.5} for the maxk family
        ppo_iterations=3,       # paper: 3
        eps_low=0.2,            # paper: 0.2
        eps_high=0.2,
        kl_beta=0.01,           # paper: 0.01 (KL to the initial policy)
        kl_estimator="k3",
        aggregation="sequence",  # token | sequence | seq_sum_norm
        entropy_coef=0.0,
        loss_kind="auto",       # auto (registry default: clipped eq. 4, as the paper ran every method) | clipped | is_weighted (§3.3 gradient, no extra ratio)
    ))
    c.algo.update(algo)
    c.optim = ml_collections.ConfigDict(dict(
        learning_rate=5e-6,     # paper: Adam 5e-6
        schedule="constant",    # constant | cosine | linear
        warmup_steps=0,         # optimizer updates of linear warmup
        b1=0.9, b2=0.999, eps=1e-8,
        weight_decay=0.0,
        max_grad_norm=1.0,      # global-norm clipping (0 = off)
        micro_batches=1,        # gradient accumulation (must divide rollout.prompts)
    ))
    c.mesh = ml_collections.ConfigDict(dict(data=1, fsdp=-1, tensor=1))  # -1 = remaining devices
    c.distributed = ml_collections.ConfigDict(dict(
        enabled=False,          # call jax.distributed.initialize (multi-host)
        coordinator_address="",  # "" = auto-detect (Cloud TPU / SLURM / k8s)
        num_processes=1, process_id=0))
    c.checkpoint = ml_collections.ConfigDict(dict(interval=50, keep=3))
    ev = _problem_spec("test")
    ev.update(interval=0,       # evaluate every N RL steps (0 = never)
              n=8, ks="",       # samples per problem; k values ("" = 1, 2, 4, ..., n)
              max_new_tokens=0,  # 0 = rollout.max_new_tokens
              temperature=1.0, top_p=1.0, top_k=0, batch_size=64, seed=0)
    c.eval = ml_collections.ConfigDict(ev)
    c.log = ml_collections.ConfigDict(dict(tensorboard=True, wandb_project=""))
    return c
