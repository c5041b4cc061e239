"""The pipeline config (``experiments/configs/tiny.py``): command-line shortcuts, the checks that
need no model or data, and the configs derived from it (synthetic family, warm-up, RL run).

The config itself is an ml_collections tree with sections ``data``, ``synthetic``, ``tokenizer``,
``model``, ``warmup``, ``rl`` (a full RL-loop config), ``distributed`` and ``eval``; the config
file documents every field.  Everything here takes that tree and returns new objects (``cfg`` is
never changed in place).
"""
from __future__ import annotations

import os
from typing import TYPE_CHECKING, Optional

from ml_collections import ConfigDict

if TYPE_CHECKING:
    from maxk_jax.data.synthetic import SyntheticConfig
    from maxk_jax.rl.warmup import WarmupConfig


def apply_overrides(cfg: ConfigDict, *, name: Optional[str] = None, runs_dir: Optional[str] = None,
                    estimator: Optional[str] = None, k: Optional[int] = None, model_path: Optional[str] = None,
                    dataset: Optional[str] = None, dataset_path: Optional[str] = None) -> ConfigDict:
    """Copy of `cfg` with the command-line shortcuts applied (None = keep the config value):
    ``name``, ``runs_dir``, ``rl.algo.estimator``, ``rl.algo.k``, ``model.path``, ``data.dataset``,
    ``data.path``."""
    cfg = ConfigDict(cfg.to_dict())
    if name is not None:
        cfg.name = name
    if runs_dir is not None:
        cfg.runs_dir = runs_dir
    if estimator is not None:
        cfg.rl.algo.estimator = estimator
    if k is not None:
        cfg.rl.algo.k = k
    if model_path is not None:
        cfg.model.path = model_path
    if dataset is not None:
        cfg.data.dataset = dataset
    if dataset_path is not None:
        cfg.data.path = dataset_path
    return cfg


def uses_judge_cache(cfg: ConfigDict) -> bool:
    """Whether judging goes through `CachingExecutor`: ``executor_cache`` on the synthetic data only
    (real datasets' time limits make a verdict depend on timing, so each submission is judged)."""
    return bool(cfg.executor_cache) and cfg.data.dataset == "synthetic"


def synthetic_config(cfg: ConfigDict) -> SyntheticConfig:
    """`SyntheticConfig` of ``cfg.synthetic`` (ValueError naming a bad knob)."""
    from maxk_jax.data.synthetic import SyntheticConfig

    return SyntheticConfig(**cfg.synthetic.to_dict())


def warmup_config(cfg: ConfigDict) -> WarmupConfig:
    """`maxk_jax.rl.warmup.WarmupConfig` of ``cfg.warmup`` (the data fields ``per_problem`` and
    ``noise`` excluded)."""
    from maxk_jax.rl.warmup import WarmupConfig

    w = {k: v for k, v in cfg.warmup.to_dict().items() if k not in ("per_problem", "noise")}
    return WarmupConfig(**w)


def validate_config(cfg: ConfigDict) -> None:
    """Every check that needs no model or data: ValueError naming the field, before any work.
    Call after `jax.distributed` is initialised (the RL checks count devices)."""
    from maxk_jax.data.loaders import LOADERS, canonical_name
    from maxk_jax.estimators import list_estimators
    from maxk_jax.rl import loop as rl_loop
    from maxk_jax.sampling import validate_filters

    if not cfg.name or "/" in cfg.name or cfg.name.startswith((".", "_")):
        raise ValueError(f"name={cfg.name!r} must be a plain directory name (no '/', not starting with . or _)")
    if cfg.rl.algo.estimator not in list_estimators():
        raise ValueError(f"estimator={cfg.rl.algo.estimator!r} is unknown; valid: {', '.join(list_estimators())}")
    if cfg.data.dataset == "synthetic" and cfg.data.path:
        raise ValueError(f"dataset_path={cfg.data.path!r} is set but dataset='synthetic' (generated, reads no "
                         "files): pass --dataset=<load_dataset name> too")
    if cfg.data.dataset != "synthetic":
        try:
            canonical_name(cfg.data.dataset)
        except (KeyError, ValueError) as e:
            raise ValueError(f"dataset={cfg.data.dataset!r} is neither 'synthetic' nor a load_dataset name "
                             f"({', '.join(sorted(LOADERS))})") from e
        if not cfg.model.path:
            raise ValueError(f"dataset={cfg.data.dataset!r} needs --model_path: the tiny model is warmed up "
                             "on the synthetic family only")
    if cfg.model.path and not os.path.isfile(os.path.join(cfg.model.path, "config.json")):
        raise ValueError(f"model_path={cfg.model.path!r} is not a Hugging Face directory (no config.json)")
    synthetic_config(cfg)
    if not cfg.model.path:
        warmup_config(cfg)
        if not (isinstance(cfg.warmup.per_problem, int) and cfg.warmup.per_problem >= 1):
            raise ValueError(f"warmup.per_problem={cfg.warmup.per_problem!r} must be an int >= 1")
        if not 0.0 <= cfg.warmup.noise <= 1.0:
            raise ValueError(f"warmup.noise={cfg.warmup.noise!r} must be in [0, 1]")
    for field in ("n", "num_problems", "max_new_tokens", "batch_size"):
        v = cfg.eval[field]
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"eval.{field}={v!r} must be an int >= 1")
    if not cfg.eval.temperature > 0:
        raise ValueError(f"eval.temperature={cfg.eval.temperature!r} must be > 0 (sampled pass@k / max@k)")
    try:  # here, not at the first evaluation after the run directory was created
        validate_filters(cfg.eval.temperature, cfg.eval.top_k, cfg.eval.top_p)
    except ValueError as e:
        raise ValueError(f"eval.{e}") from e
    probe = ConfigDict(cfg.rl.to_dict())
    probe.output_dir = probe.output_dir or "<run>/rl"
    probe.model.path = probe.model.path or cfg.model.path or "<base>"
    probe.data.problems = probe.data.problems or "<train>"
    rl_loop.validate_config(probe)


def rl_config(cfg: ConfigDict, model_path: str, out_dir: str, train_path: Optional[str]) -> ConfigDict:
    """The RL loop config: ``cfg.rl`` with the seed, model, judge, multi-host settings, data
    (``train_path``: the synthetic train JSONL, or the dataset's train split) and output directory
    filled in."""
    rl = ConfigDict(cfg.rl.to_dict())
    rl.seed = cfg.seed
    rl.output_dir = out_dir
    rl.model.path = model_path
    rl.rollout.executor = cfg.executor
    rl.distributed = ConfigDict(cfg.distributed.to_dict())
    if cfg.data.dataset == "synthetic":
        rl.data.update(problems=train_path, dataset="")
        rl.data.prompt_format = "full" if cfg.model.path else "statement"
    else:
        rl.data.update(dataset=cfg.data.dataset, path=cfg.data.path, split=cfg.data.train_split,
                       options_json=cfg.data.options_json, problems="", prompt_format="full")
    return rl
