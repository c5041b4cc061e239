"""The problems of an RL run: the problem set of a data section, the epoch order and the problems of
each RL step.

    problems = load_problem_set(cfg.data, tokenizer)     # a Problem JSONL cache, synthetic, or a loader
    batch = step_problems(problems, step, cfg.rollout.prompts, cfg.seed, cfg.data.shuffle)
    eval_problems = problems_of_eval(cfg, tokenizer)     # [] when eval.interval is 0

The stream: epoch e is a permutation of the problem list drawn from ``np.random.default_rng([seed,
e])`` (the list itself without shuffling); epochs are concatenated, so RL step s always reads stream
positions [s*P, (s+1)*P).
"""
from __future__ import annotations

import inspect
import logging
from collections.abc import Sequence

import numpy as np

from maxk_jax.data import load_dataset, load_problems, make_token_counter
from maxk_jax.data.problem import Problem
from maxk_jax.models.tokenizer_protocol import Tokenizer
from maxk_jax.rl.run_config import ProblemSource, RunConfig


def load_problem_set(spec: ProblemSource, tokenizer: Tokenizer) -> list[Problem]:
    """Problems of a data spec (fields dataset, path, split, problems, options, limit,
    synthetic_*): a Problem JSONL cache, the synthetic family, or any ``load_dataset`` name."""
    if spec.problems:
        problems = load_problems(spec.problems)
    elif spec.dataset == "synthetic":
        from maxk_jax.data import synthetic

        train, test = synthetic.make_split(synthetic.SyntheticConfig(
            seed=spec.synthetic_seed, num_train=spec.synthetic_num_train,
            num_test=spec.synthetic_num_test))
        if spec.split not in ("train", "test"):
            raise ValueError(f"synthetic split must be 'train' or 'test', got {spec.split!r}")
        problems = train if spec.split == "train" else test
    elif spec.dataset:
        options = dict(spec.options)
        from maxk_jax.data.loaders import LOADERS, canonical_name

        fn = LOADERS[canonical_name(spec.dataset)][0]
        if "token_count" in inspect.signature(fn).parameters and "token_count" not in options:
            options["token_count"] = make_token_counter(tokenizer)
        problems, report = load_dataset(spec.dataset, spec.path or None, spec.split or None, **options)
        logging.info("loaded %s: %s", spec.dataset, report.summary())
    else:
        raise ValueError("no problems configured: set dataset (a load_dataset name or 'synthetic') "
                         "or problems (a Problem JSONL cache)")
    if spec.limit:
        problems = problems[:spec.limit]
    if not problems:
        raise ValueError(f"the problem set {spec.dataset or spec.problems!r} is empty")
    return list(problems)


def epoch_order(num_problems: int, seed: int, epoch: int, shuffle: bool) -> np.ndarray:
    """Problem indices of epoch ``epoch``: a permutation from default_rng([seed, epoch])."""
    if not shuffle:
        return np.arange(num_problems)
    return np.random.default_rng([seed, epoch]).permutation(num_problems)


def step_problems(problems: Sequence[Problem], step: int, per_step: int, seed: int,
                  shuffle: bool) -> list[Problem]:
    """The problems of RL step ``step``: stream positions [step*per_step, (step+1)*per_step)."""
    out = []
    for pos in range(step * per_step, (step + 1) * per_step):
        epoch, i = divmod(pos, len(problems))
        out.append(problems[int(epoch_order(len(problems), seed, epoch, shuffle)[i])])
    return out


def problems_of_eval(cfg: RunConfig, tokenizer: Tokenizer) -> list[Problem]:
    """The ``eval.*`` problems of the periodic evaluation ([] when ``eval.interval`` is 0)."""
    return load_problem_set(cfg.eval, tokenizer) if cfg.eval.interval else []
