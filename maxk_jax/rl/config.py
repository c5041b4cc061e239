"""What the RL loop derives from its `RunConfig` (``maxk_jax.rl.run_config``): the checks that need
the devices, the train-step and rollout settings, k values, step counts, multi-host start-up.

    run = from_config_dict(FLAGS.config)      # the absl edge (maxk_jax.rl.config_dict)
    step = validate_config(run)               # before anything is loaded or compiled
"""
from __future__ import annotations

import dataclasses
from typing import Any

import jax

from maxk_jax import sharding as sharding_lib
from maxk_jax.models.tokenizer_protocol import Tokenizer
from maxk_jax.rl import training
from maxk_jax.rl.run_config import DistributedSettings, RunConfig
from maxk_jax.sampling import Sampler, SamplerSettings


def step_config(cfg: RunConfig) -> training.StepConfig:
    """The static train-step settings of a run (``RunConfig.step_config``)."""
    return cfg.step_config()


def validate_config(cfg: RunConfig, num_devices: int | None = None) -> training.StepConfig:
    """The checks a `RunConfig` cannot make on its own (every field was checked when it was
    built): the fields a run needs (output_dir, model.path), the mesh against ``num_devices``
    (default: ``len(jax.devices())``), the batch against the mesh and micro-batches, the
    optimizer; ValueError naming the bad field, before any compilation. Returns the StepConfig."""
    if not isinstance(cfg, RunConfig):
        raise TypeError(f"validate_config takes a RunConfig (maxk_jax.rl.config_dict.from_config_dict "
                        f"converts a ConfigDict), got {type(cfg).__name__}")
    if not cfg.output_dir:
        raise ValueError("output_dir is empty: set --config.output_dir=DIR")
    if not cfg.model.path:
        raise ValueError("model.path is empty: set --config.model.path=HF_QWEN2_DIR")
    cfg_step = cfg.step_config()
    num_devices = len(jax.devices()) if num_devices is None else num_devices
    data, fsdp, _ = cfg.mesh.resolve(num_devices)
    cfg_step.check_batch(cfg.rollout.prompts * cfg.rollout.sampler.n, data * fsdp)
    o = cfg.optim
    training.make_optimizer(o.learning_rate, total_steps=max(o.warmup_steps, 1), schedule=o.schedule,
                            warmup_steps=o.warmup_steps, weight_decay=o.weight_decay,
                            max_grad_norm=o.max_grad_norm or None)
    return cfg_step


def eval_ks(cfg: RunConfig) -> list[int]:
    """k values of the periodic evaluation: ``eval.ks`` or 1, 2, 4, ..., eval.sampler.n / 2
    (`maxk_jax.eval.run.default_ks`)."""
    from maxk_jax.eval.run import default_ks

    return list(cfg.eval.ks) if cfg.eval.ks else list(default_ks(cfg.eval.sampler.n))


def eval_sampler(cfg: RunConfig) -> SamplerSettings:
    """The evaluation's sampler settings (``eval.sampler.max_new_tokens`` 0 = ``rollout.sampler.max_new_tokens``)."""
    s = cfg.eval.sampler
    return dataclasses.replace(s, max_new_tokens=s.max_new_tokens or cfg.rollout.sampler.max_new_tokens)


def train_ks(cfg: RunConfig) -> list[int]:
    """k values of the train-set pass@k / max@k metrics: {1, algo.k, n}."""
    return sorted({1, cfg.algo.k, cfg.rollout.sampler.n})


def num_rl_steps(cfg: RunConfig, num_problems: int) -> int:
    """max_steps if set, else floor(epochs * problems / prompts per step) (>= 1)."""
    steps = cfg.max_steps or (cfg.data.epochs * num_problems) // cfg.rollout.prompts
    if steps < 1:
        raise ValueError(f"{num_problems} problems x {cfg.data.epochs} epochs give no full step of "
                         f"rollout.prompts={cfg.rollout.prompts}")
    return steps


def render_kwargs(cfg: RunConfig) -> dict[str, Any]:
    """Prompt rendering options of ``data.chat`` / ``data.system_prompt``."""
    from maxk_jax.data.prompts import DEFAULT_SYSTEM_PROMPT

    system = {"default": DEFAULT_SYSTEM_PROMPT, "": None}.get(cfg.data.system_prompt, cfg.data.system_prompt)
    return {"chat": cfg.data.chat, "system_prompt": system}


def rollout_sampler(cfg: RunConfig, model_config: Any, tokenizer: Tokenizer) -> Sampler:
    """The run's `sampling.Sampler` template (no weights yet; each RL step gives it the rollout copy
    with ``replace(params=..., mesh=...)``): ``rollout.sampler`` settings, stop ids ``rollout.eos_ids``
    (empty = the tokenizer's and the model's eos), the default pad id, the data section's prompt
    format and rendering, ``rollout.min_prompt_bucket``."""
    return Sampler.create(model_config, None, tokenizer, cfg.rollout.sampler, eos_ids=cfg.rollout.eos_ids,
                          prompt_format=cfg.data.prompt_format, render_kwargs=render_kwargs(cfg),
                          min_prompt_bucket=cfg.rollout.min_prompt_bucket)


def initialize_distributed(cfg: RunConfig | DistributedSettings) -> bool:
    """``jax.distributed.initialize`` when ``distributed.enabled`` (explicit coordinator /
    process count / id when ``coordinator_address`` is set, else auto-detected). Takes the run
    config or its ``distributed`` section."""
    d = cfg.distributed if isinstance(cfg, RunConfig) else cfg
    kwargs = ({"coordinator_address": d.coordinator_address, "num_processes": d.num_processes,
               "process_id": d.process_id} if d.coordinator_address else {})
    return sharding_lib.maybe_initialize_distributed(bool(d.enabled), **kwargs)
