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
from maxk_jax.sampling.sampler import Sampler

if TYPE_CHECKING:
    from maxk_jax.eval.checkpoint import LoadedModel
    from maxk_jax.eval.result import EvalResult
    from maxk_jax.models.qwen2 import Qwen2Config


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


def eval_sampler(cfg: PipelineConfig, model_config: Qwen2Config, params: Any, tokenizer: Tokenizer,
                 mesh: Optional[jax.sharding.Mesh] = None) -> Sampler:
    """The `maxk_jax.sampling.Sampler` of the evaluation: ``cfg.eval.sampler`` settings, the default
    stop and pad ids, the prompt format as in RL (bare statements for the tiny model, full prompts
    for a HF checkpoint), `params` on `mesh` (multi-host: the problems are split across hosts)."""
    fmt = "statement" if (cfg.data.dataset == "synthetic" and not cfg.model.path) else "full"
    return Sampler.create(model_config, params, tokenizer, cfg.eval.sampler, mesh=mesh, prompt_format=fmt)


def evaluate_model(cfg: PipelineConfig, sampler: Sampler, problems: Sequence[Problem], executor: Executor,
                   out_dir: str, name: str, *, progress: bool = True, ks: Sequence[int] | None = None) -> EvalResult:
    """``eval.sampler.n`` samples per problem from `sampler` (`eval_sampler`, or it with other
    ``params``) with key ``eval.seed`` (the same sample keys for every model), judged; writes the
    `maxk_jax.eval.report` files to `out_dir` (process 0) and returns the `EvalResult` (per-problem
    pass@k / max@k [P, K]). ks: the k values of the tables (default 1, 2, 4, ..., n/2)."""
    from maxk_jax.eval.report import write_report
    from maxk_jax.eval.run import EvalOptions, evaluate
    from maxk_jax.runtime.multihost import batch_block

    options = EvalOptions(ks=None if ks is None else tuple(ks), batch_size=cfg.eval.batch_size, progress=progress,
                          host=batch_block(sampler.mesh))
    result = evaluate(sampler, problems, executor=executor, key=jax.random.key(cfg.eval.seed), options=options,
                      run_config={"run_name": name, "seed": cfg.eval.seed, "dataset": cfg.data.dataset})
    if jax.process_index() == 0:
        write_report(result, out_dir, name=name)
    return result


def load_trained(rl_dir: str, model_path: str, mesh: Optional[jax.sharding.Mesh] = None) -> LoadedModel:
    """The final checkpoint of the RL run in `rl_dir` (`maxk_jax.eval.checkpoint.LoadedModel`;
    config and tokenizer from the base `model_path`; params on `mesh` if given)."""
    from maxk_jax.eval.checkpoint import load_model

    return load_model(os.path.join(rl_dir, "checkpoints"), model_dir=model_path, mesh=mesh)
