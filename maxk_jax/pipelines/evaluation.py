"""Judging and evaluation in the pipelines: the run's judge, the evaluation problems and sampling
settings, one model's paired evaluation (the same sample keys for every model), and the trained
model of an RL run directory."""
from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Optional

import jax
from absl import logging

from maxk_jax.data.problem import Problem
from maxk_jax.execution import CachingExecutor, Executor
from maxk_jax.pipelines.config import PipelineConfig, uses_judge_cache
from maxk_jax.models.tokenizer_protocol import Tokenizer

if TYPE_CHECKING:
    from maxk_jax.eval.checkpoint import LoadedModel
    from maxk_jax.eval.result import EvalResult
    from maxk_jax.models.qwen2 import Qwen2Config
    from maxk_jax.rl.rollout import RolloutSettings


def open_judge(cfg: PipelineConfig, executor: Optional[Executor] = None) -> tuple[Executor, bool]:
    """(judge, owned): `executor`, or a new ``make_executor(cfg.executor)`` when None (owned: the
    caller closes the judge when done), wrapped in `CachingExecutor` when `uses_judge_cache`."""
    from maxk_jax.execution import make_executor

    owned = executor is None
    inner = make_executor(cfg.executor) if owned else executor
    return (CachingExecutor(inner) if uses_judge_cache(cfg) else inner), owned


def eval_problems(cfg: PipelineConfig, test: Optional[Sequence[Problem]], tokenizer: Tokenizer) -> list[Problem]:
    """The first ``eval.num_problems`` evaluation problems: the synthetic test split `test`, or the
    dataset's ``data.eval_split`` (a warning when there are fewer)."""
    if cfg.data.dataset == "synthetic":
        problems = list(test)
    else:
        import dataclasses

        from maxk_jax.rl import loop as rl_loop

        spec = dataclasses.replace(cfg.rl.eval, dataset=cfg.data.dataset, path=cfg.data.path,
                                   split=cfg.data.eval_split, options=cfg.data.options,
                                   problems="", limit=0)
        problems = rl_loop.load_problem_set(spec, tokenizer)
    if len(problems) < cfg.eval.num_problems:
        logging.warning("only %d evaluation problems (eval.num_problems=%d)", len(problems), cfg.eval.num_problems)
    return problems[:cfg.eval.num_problems]


def eval_settings(cfg: PipelineConfig, model_config: Qwen2Config, tokenizer: Tokenizer) -> RolloutSettings:
    """`maxk_jax.rl.rollout.RolloutSettings` of the evaluation (``cfg.eval.sampler``; prompt
    format as in RL: bare statements for the tiny model, full prompts for a HF checkpoint)."""
    from maxk_jax.eval.run import default_eos_ids
    from maxk_jax.rl.rollout import RolloutSettings

    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else (model_config.pad_token_id or 0)
    fmt = "statement" if (cfg.data.dataset == "synthetic" and not cfg.model.path) else "full"
    return RolloutSettings(sampler=cfg.eval.sampler, eos_ids=tuple(default_eos_ids(model_config, tokenizer)), pad_id=int(pad),
                           prompt_format=fmt)


def evaluate_model(cfg: PipelineConfig, model_config: Qwen2Config, params: Any, tokenizer: Tokenizer,
                   problems: Sequence[Problem], executor: Executor, out_dir: str, name: str, *,
                   progress: bool = True, mesh: Optional[jax.sharding.Mesh] = None,
                   ks: Sequence[int] | None = None) -> EvalResult:
    """``eval.sampler.n`` samples per problem (key ``eval.seed``: the same sample keys for every model),
    judged; writes the `maxk_jax.eval.report` files to `out_dir` (process 0) and returns the
    `EvalResult` (per-problem pass@k / max@k [P, K]). ``mesh`` (multi-host: params on it): the
    problems are split across hosts. ks: the k values of the tables (default 1, 2, 4, ..., n/2)."""
    from maxk_jax.eval.report import write_report
    from maxk_jax.eval.run import default_ks, run_evaluation
    from maxk_jax.multihost import batch_block
    from maxk_jax.rl.rollout import PromptCompletionSource

    settings = eval_settings(cfg, model_config, tokenizer)
    source = PromptCompletionSource(model_config, params, tokenizer, settings, mesh)
    s = cfg.eval.sampler
    run_cfg = {"run_name": name, "n": s.n, "seed": cfg.eval.seed, "temperature": s.temperature,
               "top_p": s.top_p, "top_k": s.top_k, "max_new_tokens": s.max_new_tokens,
               "prompt_format": settings.prompt_format, "dataset": cfg.data.dataset}
    result = run_evaluation(problems, source, executor=executor, n=s.n, key=jax.random.key(cfg.eval.seed),
                            ks=default_ks(s.n) if ks is None else tuple(ks),
                            batch_size=cfg.eval.batch_size, progress=progress,
                            config=run_cfg, host=batch_block(mesh))
    if jax.process_index() == 0:
        write_report(result, out_dir, name=name)
    return result


def load_trained(rl_dir: str, model_path: str, mesh: Optional[jax.sharding.Mesh] = None) -> LoadedModel:
    """The final checkpoint of the RL run in `rl_dir` (`maxk_jax.eval.checkpoint.LoadedModel`;
    config and tokenizer from the base `model_path`; params on `mesh` if given)."""
    from maxk_jax.eval.checkpoint import load_model

    return load_model(os.path.join(rl_dir, "checkpoints"), model_dir=model_path, mesh=mesh)
