"""The run config of the RL loop, read once: validation before anything is loaded or compiled,
and the typed settings derived from it (train-step settings, rollout settings, k values, steps).

``cfg`` is the ml_collections tree of experiments/configs/base.py (converted here, at one place,
into `training.StepConfig` and `rollout.RolloutSettings`).
"""
from __future__ import annotations

import json
from typing import Any

import jax
from ml_collections import ConfigDict

from maxk_jax import sharding as sharding_lib
from maxk_jax.rl import rollout as rollout_lib
from maxk_jax.rl import training
from maxk_jax.sampling import validate_filters
from maxk_jax.models.tokenizer_protocol import Tokenizer


def step_config(cfg: ConfigDict) -> training.StepConfig:
    """The static train-step settings of a run config (validates estimator, k, n, loss)."""
    try:
        options = json.loads(cfg.algo.estimator_options_json or "{}")
    except json.JSONDecodeError as err:
        raise ValueError(f"algo.estimator_options_json={cfg.algo.estimator_options_json!r} is not "
                         f"valid JSON: {err}") from err
    if not isinstance(options, dict):
        raise ValueError(f"algo.estimator_options_json must be a JSON object, got {options!r}")
    a, r = cfg.algo, cfg.rollout
    return training.StepConfig(
        estimator=a.estimator, k=a.k, n=r.n, estimator_options=tuple(sorted(options.items())),
        eps_low=a.eps_low, eps_high=a.eps_high, kl_beta=a.kl_beta, kl_estimator=a.kl_estimator,
        aggregation=a.aggregation, entropy_coef=a.entropy_coef,
        norm_length=r.max_new_tokens if a.aggregation == "seq_sum_norm" else None,
        temperature=r.temperature, top_p=r.top_p, top_k=r.top_k,
        micro_batches=cfg.optim.micro_batches, loss_kind=a.loss_kind)


def _positive(value: Any, name: str, minimum: int = 1) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name}={value!r} must be an int >= {minimum}")


def validate_config(cfg: ConfigDict, num_devices: int | None = None) -> training.StepConfig:
    """Every check that needs no model: ValueError naming the bad field, before any compilation."""
    if not cfg.output_dir:
        raise ValueError("output_dir is empty: set --config.output_dir=DIR")
    if not cfg.model.path:
        raise ValueError("model.path is empty: set --config.model.path=HF_QWEN2_DIR")
    if cfg.model.dtype not in ("float32", "bfloat16"):
        raise ValueError(f"model.dtype={cfg.model.dtype!r} must be 'float32' or 'bfloat16'")
    if cfg.model.compute_dtype not in ("", "float32", "bfloat16"):
        raise ValueError(f"model.compute_dtype={cfg.model.compute_dtype!r} must be '', 'float32' or "
                         "'bfloat16'")
    if cfg.data.chat not in ("auto", "true", "false"):
        raise ValueError(f"data.chat={cfg.data.chat!r} must be 'auto', 'true' or 'false'")
    if cfg.data.prompt_format not in rollout_lib.PROMPT_FORMATS:
        raise ValueError(f"data.prompt_format={cfg.data.prompt_format!r} is not one of "
                         f"{rollout_lib.PROMPT_FORMATS}")
    cfg_step = step_config(cfg)
    _positive(cfg.rollout.prompts, "rollout.prompts")
    _positive(cfg.rollout.max_new_tokens, "rollout.max_new_tokens")
    _positive(cfg.rollout.sandbox_retries, "rollout.sandbox_retries", 0)
    _positive(cfg.algo.ppo_iterations, "algo.ppo_iterations")
    _positive(cfg.data.epochs, "data.epochs")
    _positive(cfg.max_steps, "max_steps", 0)
    _positive(cfg.checkpoint.interval, "checkpoint.interval")
    _positive(cfg.checkpoint.keep, "checkpoint.keep")
    _positive(cfg.eval.interval, "eval.interval", 0)
    if isinstance(cfg.seed, bool) or not isinstance(cfg.seed, int) or cfg.seed < 0:
        raise ValueError(f"seed={cfg.seed!r} must be an int >= 0")
    if cfg.eval.interval:
        if not (cfg.eval.dataset or cfg.eval.problems):
            raise ValueError("eval.interval > 0 needs eval.dataset or eval.problems")
        _positive(cfg.eval.n, "eval.n")
        _positive(cfg.eval.batch_size, "eval.batch_size")
        _positive(cfg.eval.max_new_tokens, "eval.max_new_tokens", 0)
        try:  # checked here, not at the first evaluation after checkpoints were written
            validate_filters(cfg.eval.temperature, cfg.eval.top_k, cfg.eval.top_p)
        except ValueError as err:
            raise ValueError(f"eval.{err}") from err
        for k in eval_ks(cfg):
            if not 1 <= k <= cfg.eval.n:
                raise ValueError(f"eval.ks has k={k} outside [1, eval.n={cfg.eval.n}]")
    num_devices = len(jax.devices()) if num_devices is None else num_devices
    data, fsdp, tensor = sharding_lib.MeshConfig(cfg.mesh.data, cfg.mesh.fsdp,
                                                 cfg.mesh.tensor).resolve(num_devices)
    cfg_step.check_batch(cfg.rollout.prompts * cfg.rollout.n, data * fsdp)
    training.make_optimizer(cfg.optim.learning_rate, total_steps=max(cfg.optim.warmup_steps, 1),
                            schedule=cfg.optim.schedule, warmup_steps=cfg.optim.warmup_steps,
                            weight_decay=cfg.optim.weight_decay,
                            max_grad_norm=cfg.optim.max_grad_norm or None)
    return cfg_step


def eval_ks(cfg: ConfigDict) -> list[int]:
    """k values of the periodic evaluation: ``eval.ks`` (comma-separated) or 1, 2, 4, ..., eval.n."""
    text = str(cfg.eval.ks).strip()
    if not text:
        return [1 << i for i in range(cfg.eval.n.bit_length()) if (1 << i) <= cfg.eval.n]
    try:
        return [int(x) for x in text.split(",")]
    except ValueError as err:
        raise ValueError(f"eval.ks={cfg.eval.ks!r} must be comma-separated ints") from err


def train_ks(cfg: ConfigDict) -> list[int]:
    """k values of the train-set pass@k / max@k metrics: {1, algo.k, n}."""
    return sorted({1, cfg.algo.k, cfg.rollout.n})


def num_rl_steps(cfg: ConfigDict, num_problems: int) -> int:
    """max_steps if set, else floor(epochs * problems / prompts per step) (>= 1)."""
    steps = cfg.max_steps or (cfg.data.epochs * num_problems) // cfg.rollout.prompts
    if steps < 1:
        raise ValueError(f"{num_problems} problems x {cfg.data.epochs} epochs give no full step of "
                         f"rollout.prompts={cfg.rollout.prompts}")
    return steps


def render_kwargs(cfg: ConfigDict) -> dict[str, Any]:
    """Prompt rendering options of ``data.chat`` / ``data.system_prompt``."""
    from maxk_jax.data.prompts import DEFAULT_SYSTEM_PROMPT

    chat = {"auto": None, "true": True, "false": False}[cfg.data.chat]
    system = {"default": DEFAULT_SYSTEM_PROMPT, "": None}.get(cfg.data.system_prompt, cfg.data.system_prompt)
    return {"chat": chat, "system_prompt": system}


def eos_ids(cfg: ConfigDict, model_config: Any, tokenizer: Tokenizer) -> tuple[int, ...]:
    """Stop ids: ``rollout.eos_ids`` (comma-separated) or the tokenizer's and model's eos."""
    if cfg.rollout.eos_ids:
        return tuple(int(x) for x in str(cfg.rollout.eos_ids).split(","))
    from maxk_jax.eval.run import default_eos_ids

    return tuple(default_eos_ids(model_config, tokenizer))


def rollout_settings(cfg: ConfigDict, model_config: Any, tokenizer: Tokenizer) -> rollout_lib.RolloutSettings:
    """The `rollout.RolloutSettings` of a run (sampling, stop ids, padding, prompt format)."""
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else (model_config.pad_token_id or 0)
    return rollout_lib.RolloutSettings(
        n=cfg.rollout.n, max_new_tokens=cfg.rollout.max_new_tokens,
        temperature=cfg.rollout.temperature, top_p=cfg.rollout.top_p, top_k=cfg.rollout.top_k,
        eos_ids=eos_ids(cfg, model_config, tokenizer), pad_id=int(pad_id),
        sandbox_retries=cfg.rollout.sandbox_retries, min_prompt_bucket=cfg.rollout.min_prompt_bucket,
        prompt_format=cfg.data.prompt_format, render_kwargs=tuple(render_kwargs(cfg).items()))


def initialize_distributed(cfg: ConfigDict) -> bool:
    """``jax.distributed.initialize`` when ``distributed.enabled`` (explicit coordinator /
    process count / id when ``coordinator_address`` is set, else auto-detected)."""
    d = cfg.distributed
    kwargs = ({"coordinator_address": d.coordinator_address, "num_processes": d.num_processes,
               "process_id": d.process_id} if d.coordinator_address else {})
    return sharding_lib.maybe_initialize_distributed(bool(d.enabled), **kwargs)
