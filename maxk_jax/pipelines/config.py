"""The pipeline config (``default_config``; ``experiments/configs/tiny.py`` serves it to the
command line): command-line shortcuts, the checks that need no model or data, and the configs
derived from it (synthetic family, warm-up, the RL run's typed `RunConfig`).

The config itself is an ml_collections tree with sections ``data``, ``synthetic``, ``tokenizer``,
``model``, ``warmup``, ``rl`` (a full RL-loop config in its command-line form,
``maxk_jax.rl.config_dict``), ``distributed`` and ``eval``; experiments/configs/tiny.py documents
every field.  Everything here takes that tree and returns new objects (``cfg`` is never changed in
place); the RL run is built through the typed path (`rl_run_config`: ``from_config_dict`` once).
"""
from __future__ import annotations

import os
from typing import TYPE_CHECKING, Optional

from ml_collections import ConfigDict

from maxk_jax.rl.config_dict import from_config_dict, to_config_dict
from maxk_jax.rl.run_config import DistributedSettings, RunConfig, replace_fields

if TYPE_CHECKING:
    from maxk_jax.data.synthetic import SyntheticConfig
    from maxk_jax.rl.warmup import WarmupConfig


def rl_defaults() -> RunConfig:
    """The pipeline's RL run before the pipeline fills in model, data, judge and output directory:
    the paper's method (maxk_offpolicy, k = 4, 3 PPO iterations, beta 0.01) at tiny scale -- 16
    steps x 8 problems x n = 8, 64 new tokens, lr 3e-4, float32 math, data-parallel, no periodic
    evaluation."""
    return replace_fields(RunConfig(), {
        "name": "rl", "max_steps": 16,
        "data.dataset": "", "data.problems": "", "data.prompt_format": "statement",
        "model.compute_dtype": "float32", "model.remat": False,
        "rollout.prompts": 8, "rollout.sampler.n": 8, "rollout.sampler.max_new_tokens": 64,
        "algo.estimator": "maxk_offpolicy", "algo.k": 4,
        "optim.learning_rate": 3e-4,
        "mesh.data": -1, "mesh.fsdp": 1, "mesh.tensor": 1,
        "checkpoint.interval": 1000, "checkpoint.keep": 1,
        "eval.dataset": "", "eval.split": "test", "eval.limit": 0, "eval.interval": 0,
        "eval.sampler.n": 8, "eval.sampler.max_new_tokens": 64,
        "log.tensorboard": False})


def default_config() -> ConfigDict:
    """Defaults of the tiny pipeline (sizes chosen for <= 10 min on a 2-core CPU; fields
    documented in experiments/configs/tiny.py)."""
    c = ConfigDict()
    c.name = "tiny"                 # run directory <runs_dir>/<name>
    c.runs_dir = "runs"
    c.seed = 0                      # RL seed (sampling + data order); eval keys use eval.seed
    c.executor = "embedded:4"       # judge: embedded[:slots] | http://host:port[,...]
    c.executor_cache = True         # judge each distinct (program, tests) once per process (synthetic only)
    c.data = ConfigDict(dict(
        dataset="synthetic",        # synthetic, or a load_dataset name (needs model.path)
        path="",                    # dataset path / hub name ("" = loader default)
        train_split="train",
        eval_split="test",
        options=(),                 # extra loader options (real datasets): (name, value) pairs
    ))
    c.synthetic = ConfigDict(dict(
        seed=0, num_train=2000, num_test=64, min_ops=1, max_ops=3, max_const=9, num_tests=8,
        input_range=30, max_list_len=6, list_fraction=0.4))
    c.tokenizer = ConfigDict(dict(vocab_size=768, corpus_problems=500, corpus_seed=0))
    c.model = ConfigDict(dict(
        path="",                    # HF Qwen2 directory: skip the tiny build and the warm-up
        hidden_size=128, num_layers=4, num_heads=4, num_kv_heads=2, intermediate_size=384,
        max_position_embeddings=256, init_seed=0))
    c.warmup = ConfigDict(dict(
        steps=800, batch_size=16, learning_rate=8e-3, lr_warmup_steps=30, final_lr_fraction=0.1,
        weight_decay=0.0, max_grad_norm=1.0, length_bucket=32, sort_window=16,
        per_problem=4, noise=0.3, seed=0))
    c.rl = to_config_dict(rl_defaults())
    c.distributed = ConfigDict(dict(enabled=False, coordinator_address="", num_processes=1, process_id=0))
    c.eval = ConfigDict(dict(
        n=64, num_problems=48, max_new_tokens=64, temperature=1.0, top_p=1.0, top_k=0,
        batch_size=512, seed=1234))
    return c


def toy_config() -> ConfigDict:
    """Seconds-scale smoke test of the same pipeline (tests): 16 train / 4 test problems, a 1-layer
    32-wide model, 4 warm-up steps, 2 RL steps of 2 problems x 4 samples, n = 4 evaluation samples.
    Numbers from it mean nothing; it only exercises every phase."""
    c = default_config()
    c.name = "toy"
    c.synthetic.update(num_train=16, num_test=4)
    c.tokenizer.update(vocab_size=300, corpus_problems=16)
    c.model.update(hidden_size=32, num_layers=1, num_heads=2, num_kv_heads=1, intermediate_size=64)
    c.warmup.update(steps=4, batch_size=8, lr_warmup_steps=0, per_problem=1, length_bucket=64)
    c.rl.update(max_steps=2)
    c.rl.rollout.update(prompts=2, n=4, max_new_tokens=16)
    c.rl.algo.update(k=2, ppo_iterations=2)
    c.eval.update(n=4, num_problems=2, max_new_tokens=16, batch_size=8)
    return c


def distributed_settings(cfg: ConfigDict) -> DistributedSettings:
    """The typed ``distributed`` section of the pipeline config (``rl_loop.initialize_distributed``)."""
    return DistributedSettings(**cfg.distributed.to_dict())


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
    run = rl_run_config(cfg)
    rl_loop.validate_config(replace_fields(run, {
        "output_dir": run.output_dir or "<run>/rl", "model.path": run.model.path or cfg.model.path or "<base>",
        "data.problems": run.data.problems or "<train>"}))


def rl_run_config(cfg: ConfigDict) -> RunConfig:
    """The typed RL run config of ``cfg.rl`` (``from_config_dict``; ValueError naming the field
    as ``rl.<section>.<field>``)."""
    try:
        return from_config_dict(cfg.rl)
    except ValueError as err:
        raise ValueError(f"rl.{err}") from err


def rl_config(cfg: ConfigDict, model_path: str, out_dir: str, train_path: Optional[str]) -> RunConfig:
    """The RL loop's `RunConfig`: ``cfg.rl`` with the seed, model, judge, multi-host settings, data
    (``train_path``: the synthetic train JSONL, or the dataset's train split) and output directory
    filled in."""
    run = rl_run_config(cfg)
    changes = {"seed": cfg.seed, "output_dir": out_dir, "model.path": model_path,
               "rollout.executor": cfg.executor, "distributed": distributed_settings(cfg)}
    if cfg.data.dataset == "synthetic":
        changes.update({"data.problems": train_path, "data.dataset": "",
                        "data.prompt_format": "full" if cfg.model.path else "statement"})
    else:
        changes.update({"data.dataset": cfg.data.dataset, "data.path": cfg.data.path,
                        "data.split": cfg.data.train_split, "data.options": cfg.data.options,
                        "data.problems": "", "data.prompt_format": "full"})
    return replace_fields(run, changes)
