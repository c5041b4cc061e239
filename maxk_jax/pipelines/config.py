"""The typed pipeline config (`PipelineConfig`): frozen, keyword-only sections validated on
construction, the command-line shortcuts, the checks that need the machine, and the configs derived
from it (the RL run's `RunConfig`).

    cfg = default_config()                      # == PipelineConfig(): the tiny pipeline's defaults
    cfg = replace_fields(cfg, {"rl.max_steps": 48, "eval.sampler.n": 128, "warmup.config.seed": 1})
    cfg = apply_overrides(cfg, estimator="grpo", name="tiny_grpo")

Sections compose the library's settings objects instead of re-declaring their fields: ``synthetic``
is a ``data.synthetic.SyntheticConfig``, ``warmup.config`` a ``rl.warmup.WarmupConfig``, ``rl`` a
full ``rl.run_config.RunConfig`` (the pipeline fills in model, data, judge and output directory:
`rl_config`), ``distributed`` a ``rl.run_config.DistributedSettings``, ``eval.sampler`` a
``sampling.SamplerSettings``.  The command line holds the same tree as an ml_collections ConfigDict
(``maxk_jax.pipelines.config_dict``; experiments/configs/tiny.py documents every field).
"""
from __future__ import annotations

import dataclasses
import os
from typing import Any, Optional

from maxk_jax.data.synthetic import SyntheticConfig
from maxk_jax.cli.fields import Options, check_int, check_type, option_pairs
from maxk_jax.rl.method import UNBIASED_OFFPOLICY, loss_form, with_method
from maxk_jax.rl.run_config import DistributedSettings, RunConfig, check_sampler
from maxk_jax.cli.fields import replace_fields
from maxk_jax.rl.warmup import WarmupConfig
from maxk_jax.sampling import SamplerSettings


def rl_defaults() -> RunConfig:
    """The pipeline's RL run before the pipeline fills in model, data, judge and output directory:
    the project's default method (``rl.method.UNBIASED_OFFPOLICY``: unbiased off-policy max@k, eq. 10
    + LOO-1 + loo_rms, IS-weighted loss; k = 4, 3 PPO iterations, beta 0.01) at tiny scale -- 16
    steps x 8 problems x n = 8, 64 new tokens, lr 3e-4, float32 math, data-parallel, no periodic
    evaluation, the xla decode attention and remat policy "nothing" (pinned: what the stored comparisons ran)."""
    run = replace_fields(RunConfig(), {
        "name": "rl", "max_steps": 16,
        "data.dataset": "", "data.problems": "", "data.prompt_format": "statement",
        "model.compute_dtype": "float32", "model.remat": False,
        # pinned: the stored comparisons (docs/async_testbed/cells/*/compare_config.json) ran these, and a
        # comparison resumes only under its settings (on CPU "auto" resolves to the same)
        "model.decode_attention": "xla", "model.remat_policy": "nothing",
        "rollout.prompts": 8, "rollout.sampler.n": 8, "rollout.sampler.max_new_tokens": 64,
        "algo.k": 4,
        "optim.learning_rate": 3e-4,
        "mesh.data": -1, "mesh.fsdp": 1, "mesh.tensor": 1,
        "checkpoint.interval": 1000, "checkpoint.keep": 1,
        "eval.dataset": "", "eval.split": "test", "eval.limit": 0, "eval.interval": 0,
        "eval.sampler.n": 8, "eval.sampler.max_new_tokens": 64,
        "log.tensorboard": False})
    return with_method(run, UNBIASED_OFFPOLICY)


@dataclasses.dataclass(frozen=True, kw_only=True)
class PipelineData:
    """``dataset``: "synthetic" (generated, section ``synthetic``) or a ``load_dataset`` name (needs
    ``model.path``) with ``path`` (hub name / local path, "" = loader default), the splits, and
    ``options`` (the loader's keyword options as (name, value) pairs)."""

    dataset: str = "synthetic"
    path: str = ""
    train_split: str = "train"
    eval_split: str = "test"
    options: Options = ()

    def __post_init__(self) -> None:
        for name in ("dataset", "path", "train_split", "eval_split"):
            check_type(getattr(self, name), f"data.{name}", str)
        object.__setattr__(self, "options", option_pairs(self.options, "data.options", "(('seed', 0),)"))


@dataclasses.dataclass(frozen=True, kw_only=True)
class TokenizerSettings:
    """Byte-level BPE of ``vocab_size`` tokens trained on the first ``corpus_problems`` train
    problems (`maxk_jax.models.tiny.train_tokenizer`; corpus order from ``corpus_seed``)."""

    vocab_size: int = 768
    corpus_problems: int = 500
    corpus_seed: int = 0

    def __post_init__(self) -> None:
        check_int(self.vocab_size, "tokenizer.vocab_size")
        check_int(self.corpus_problems, "tokenizer.corpus_problems")
        check_int(self.corpus_seed, "tokenizer.corpus_seed", 0)


TINY_DIMS = ("hidden_size", "num_layers", "num_heads", "num_kv_heads", "intermediate_size",
             "max_position_embeddings")


@dataclasses.dataclass(frozen=True, kw_only=True)
class TinyModelSettings:
    """The tiny Qwen2's dimensions (`maxk_jax.models.tiny.tiny_qwen2_config`) and ``init_seed``, or
    ``path`` = an existing HF Qwen2 directory (skips tokenizer, model build and warm-up)."""

    path: str = ""
    hidden_size: int = 128
    num_layers: int = 4
    num_heads: int = 4
    num_kv_heads: int = 2
    intermediate_size: int = 384
    max_position_embeddings: int = 256
    init_seed: int = 0

    def __post_init__(self) -> None:
        check_type(self.path, "model.path", str)
        for name in TINY_DIMS:
            check_int(getattr(self, name), f"model.{name}")
        check_int(self.init_seed, "model.init_seed", 0)

    def dims(self) -> dict[str, int]:
        """The dimension keyword arguments of `maxk_jax.models.tiny.build_tiny_checkpoint`."""
        return {name: getattr(self, name) for name in TINY_DIMS}


@dataclasses.dataclass(frozen=True, kw_only=True)
class WarmupPhase:
    """The supervised warm-up: ``config`` (`maxk_jax.rl.warmup.WarmupConfig`; its fields sit
    directly in ``warmup`` on the command line) on ``per_problem`` noisy solutions per train
    problem at near-miss rate ``noise``."""

    config: WarmupConfig = dataclasses.field(
        default_factory=lambda: WarmupConfig(steps=800, seed=0, batch_size=16, learning_rate=8e-3,
                                             lr_warmup_steps=30, final_lr_fraction=0.1, weight_decay=0.0,
                                             max_grad_norm=1.0, length_bucket=32, sort_window=16))
    per_problem: int = 4
    noise: float = 0.3

    def __post_init__(self) -> None:
        check_type(self.config, "warmup.config", WarmupConfig)
        check_int(self.per_problem, "warmup.per_problem")
        if isinstance(self.noise, bool) or not isinstance(self.noise, (int, float)) or not 0.0 <= self.noise <= 1.0:
            raise ValueError(f"warmup.noise={self.noise!r} must be in [0, 1]")


@dataclasses.dataclass(frozen=True, kw_only=True)
class PipelineEval:
    """Base and trained model on the first ``num_problems`` test problems, sampled with ``sampler``
    (n per problem, max_new_tokens, temperature > 0, top_k, top_p), ``batch_size`` problems per
    sampler call, the same sample keys (``seed``) for both models."""

    sampler: SamplerSettings = dataclasses.field(
        default_factory=lambda: SamplerSettings(n=64, max_new_tokens=64, temperature=1.0, top_k=0, top_p=1.0))
    num_problems: int = 48
    batch_size: int = 512
    seed: int = 1234

    def __post_init__(self) -> None:
        check_sampler(self.sampler, "eval", min_new_tokens=1)
        if not self.sampler.temperature > 0:
            raise ValueError(f"eval.sampler.temperature={self.sampler.temperature!r} must be > 0 (sampled pass@k / max@k)")
        check_int(self.num_problems, "eval.num_problems")
        check_int(self.batch_size, "eval.batch_size")
        check_int(self.seed, "eval.seed", 0)


@dataclasses.dataclass(frozen=True, kw_only=True)
class PipelineConfig:
    """The tiny pipeline (defaults: sizes for <= 10 min on a 2-core CPU). ``name``: run directory
    ``<runs_dir>/<name>``; ``seed``: RL seed (sampling + data order); ``executor``: the judge
    (embedded[:slots] | http://host:port[,...]); ``executor_cache``: judge each distinct (program,
    tests) once per process (synthetic data only, `uses_judge_cache`)."""

    name: str = "tiny"
    runs_dir: str = "runs"
    seed: int = 0
    executor: str = "embedded:4"
    executor_cache: bool = True
    data: PipelineData = dataclasses.field(default_factory=PipelineData)
    synthetic: SyntheticConfig = dataclasses.field(
        default_factory=lambda: SyntheticConfig(seed=0, num_train=2000, num_test=64))
    tokenizer: TokenizerSettings = dataclasses.field(default_factory=TokenizerSettings)
    model: TinyModelSettings = dataclasses.field(default_factory=TinyModelSettings)
    warmup: WarmupPhase = dataclasses.field(default_factory=WarmupPhase)
    rl: RunConfig = dataclasses.field(default_factory=rl_defaults)
    distributed: DistributedSettings = dataclasses.field(default_factory=DistributedSettings)
    eval: PipelineEval = dataclasses.field(default_factory=PipelineEval)

    def __post_init__(self) -> None:
        from maxk_jax.data.loaders import LOADERS, canonical_name

        if not isinstance(self.name, str) or not self.name or "/" in self.name or self.name.startswith((".", "_")):
            raise ValueError(f"name={self.name!r} must be a plain directory name (no '/', not starting with . or _)")
        check_type(self.runs_dir, "runs_dir", str)
        check_int(self.seed, "seed", 0)
        if not isinstance(self.executor, str) or not self.executor:
            raise ValueError(f"executor={self.executor!r} must be a non-empty string")
        check_type(self.executor_cache, "executor_cache", bool)
        for f in dataclasses.fields(self):
            kind = SECTION_TYPES.get(f.name)
            if kind is not None and not isinstance(getattr(self, f.name), kind):
                raise ValueError(f"{f.name}={getattr(self, f.name)!r} must be a {kind.__name__}")
        data = self.data
        if data.dataset == "synthetic" and data.path:
            raise ValueError(f"dataset_path={data.path!r} is set but dataset='synthetic' (generated, reads no "
                             "files): pass --dataset=<load_dataset name> too")
        if data.dataset != "synthetic":
            try:
                canonical_name(data.dataset)
            except (KeyError, ValueError) as e:
                raise ValueError(f"dataset={data.dataset!r} is neither 'synthetic' nor a load_dataset name "
                                 f"({', '.join(sorted(LOADERS))})") from e
            if not self.model.path:
                raise ValueError(f"dataset={data.dataset!r} needs --model_path: the tiny model is warmed up "
                                 "on the synthetic family only")


SECTION_TYPES: dict[str, type] = {
    "data": PipelineData, "synthetic": SyntheticConfig, "tokenizer": TokenizerSettings,
    "model": TinyModelSettings, "warmup": WarmupPhase, "rl": RunConfig,
    "distributed": DistributedSettings, "eval": PipelineEval}


def default_config() -> PipelineConfig:
    """Defaults of the tiny pipeline (sizes chosen for <= 10 min on a 2-core CPU)."""
    return PipelineConfig()


def smoke_config() -> PipelineConfig:
    """Seconds-scale smoke test of the same pipeline (tests): 16 train / 4 test problems, a 1-layer
    32-wide model, 4 warm-up steps, 2 RL steps of 2 problems x 4 samples, n = 4 evaluation samples.
    Numbers from it mean nothing (the model emits no working program); it only exercises every phase."""
    return replace_fields(default_config(), {
        "name": "smoke",
        "synthetic": dataclasses.replace(default_config().synthetic, num_train=16, num_test=4),
        "tokenizer.vocab_size": 300, "tokenizer.corpus_problems": 16,
        "model.hidden_size": 32, "model.num_layers": 1, "model.num_heads": 2, "model.num_kv_heads": 1,
        "model.intermediate_size": 64,
        "warmup.config": dataclasses.replace(default_config().warmup.config, steps=4, batch_size=8,
                                             lr_warmup_steps=0, length_bucket=64),
        "warmup.per_problem": 1,
        "rl.max_steps": 2, "rl.rollout.prompts": 2, "rl.rollout.sampler.n": 4,
        "rl.rollout.sampler.max_new_tokens": 16, "rl.algo.k": 2, "rl.algo.ppo_iterations": 2,
        "eval.sampler.n": 4, "eval.sampler.max_new_tokens": 16, "eval.num_problems": 2, "eval.batch_size": 8})


def toy_config() -> PipelineConfig:
    """The first run (about a minute on a 2-core CPU): the smallest setting in which the warmed-up
    model writes some working programs, so RL has rewards to learn from -- easy problems (one
    operation, scalar input), a 2-layer 64-wide model warmed up for 300 steps (`TOY_WARMUP`), the
    smoke test's 2 RL steps with room for whole programs (48 new tokens), and a paired evaluation of
    8 test problems x n = 16. Its numbers are noisy (a handful of problems and samples); the main job
    (`default_config`) is the measurement."""
    s = smoke_config()
    return replace_fields(s, {
        "name": "toy",
        "synthetic": dataclasses.replace(s.synthetic, **TOY_PROBLEMS),
        "tokenizer.corpus_problems": TOY_PROBLEMS["num_train"],
        "model.hidden_size": 64, "model.num_layers": 2, "model.intermediate_size": 128,
        "warmup.config": dataclasses.replace(s.warmup.config, **TOY_WARMUP),
        "warmup.per_problem": 4,
        "rl.rollout.sampler.max_new_tokens": 48,
        "eval.sampler.n": 16, "eval.sampler.max_new_tokens": 48, "eval.num_problems": 8})


TOY_PROBLEMS = {"num_train": 80, "num_test": 8, "min_ops": 1, "max_ops": 1, "list_fraction": 0.0}
TOY_WARMUP = {"steps": 300, "batch_size": 16}
TESTBED_TEMPERATURE = 1.4


def testbed_config() -> PipelineConfig:
    """The Best-of-N testbed (docs/results/testbed_calibration.md, calibrated with
    experiments/calibrate_testbed.py): the main job's model and warm-up on scalar problems of
    exactly three operations (``synthetic.list_fraction=0``, ``min_ops=max_ops=3``), sampled at
    temperature 1.4 in the rollouts and every evaluation; n = 256 samples on 96 test problems (k <=
    128); 96 RL steps with a periodic evaluation every 48 steps on the first 32 test problems (the
    same sampler and key as the final evaluation, so the curves start at the base model and end at
    the final evaluation's first 32 problems: ``compare_methods`` skips the in-loop one after step 96);
    a checkpoint every 16 steps, so an interrupted comparison loses at most 16 steps of a run."""
    d = default_config()
    sampler = SamplerSettings(n=256, max_new_tokens=d.eval.sampler.max_new_tokens, temperature=TESTBED_TEMPERATURE)
    return replace_fields(d, {
        "name": "testbed",
        "synthetic": dataclasses.replace(d.synthetic, list_fraction=0.0, min_ops=3, max_ops=3, num_test=96),
        "eval.sampler": sampler, "eval.num_problems": 96,
        "rl.max_steps": 96, "rl.rollout.sampler.temperature": TESTBED_TEMPERATURE, "rl.checkpoint.interval": 16,
        "rl.eval.interval": 48, "rl.eval.dataset": "synthetic", "rl.eval.split": "test", "rl.eval.limit": 32, "rl.eval.sampler": sampler, "rl.eval.seed": d.eval.seed,
        "rl.eval.batch_size": d.eval.batch_size})


def check_estimator(name: str) -> None:
    """ValueError naming `name` and the valid names unless it is a registry estimator."""
    from maxk_jax.estimators import list_estimators

    if name not in list_estimators():
        raise ValueError(f"estimator={name!r} is unknown; valid: {', '.join(list_estimators())}")


def shortcut_overrides(*, name: Optional[str] = None, runs_dir: Optional[str] = None,
                       estimator: Optional[str] = None, k: Optional[int] = None, model_path: Optional[str] = None,
                       dataset: Optional[str] = None, dataset_path: Optional[str] = None) -> dict[str, Any]:
    """The command-line shortcuts as dotted config paths (None = not given): ``name``,
    ``runs_dir``, ``rl.algo.estimator`` (with its registry defaults: ``rl.algo.estimator_options``
    emptied, ``rl.algo.loss.kind`` its loss form), ``rl.algo.k``, ``model.path``, ``data.dataset``,
    ``data.path`` (the same paths in the typed config and its ConfigDict). ValueError for an
    unknown estimator."""
    if estimator is not None:
        check_estimator(estimator)
    paths = {"name": name, "runs_dir": runs_dir, "rl.algo.k": k,
             "model.path": model_path, "data.dataset": dataset, "data.path": dataset_path}
    if estimator is not None:   # that estimator with its own defaults: the default method's options do not carry over
        paths.update({"rl.algo.estimator": estimator, "rl.algo.estimator_options": (),
                      "rl.algo.loss.kind": loss_form(estimator)})
    return {path: value for path, value in paths.items() if value is not None}


def apply_overrides(cfg: PipelineConfig, **shortcuts: Any) -> PipelineConfig:
    """Copy of `cfg` with the command-line shortcuts (`shortcut_overrides` keywords) applied and
    validated together (None = keep the config value)."""
    return replace_fields(cfg, shortcut_overrides(**shortcuts))


def uses_judge_cache(cfg: PipelineConfig) -> bool:
    """Whether judging goes through `CachingExecutor`: ``executor_cache`` on the synthetic data only
    (real datasets' time limits make a verdict depend on timing, so each submission is judged), never
    for a reward function (``reward:module:function``: it scores completions, not programs)."""
    return cfg.executor_cache and cfg.data.dataset == "synthetic" and not cfg.executor.startswith("reward:")


def validate_config(cfg: PipelineConfig) -> None:
    """The checks construction cannot make: the model directory exists, and the RL run fits the
    devices (call after `jax.distributed` is initialised). ValueError naming the field."""
    if cfg.model.path and not os.path.isfile(os.path.join(cfg.model.path, "config.json")):
        raise ValueError(f"model_path={cfg.model.path!r} is not a Hugging Face directory (no config.json)")
    cfg.rl.validate()   # the paths of the RL run are filled in later (`rl_config`)


def rl_config(cfg: PipelineConfig, model_path: str, out_dir: str, train_path: Optional[str]) -> RunConfig:
    """The RL loop's `RunConfig`: ``cfg.rl`` with the seed, model, judge, multi-host settings, data
    (``train_path``: the synthetic train JSONL, or the dataset's train split) and output directory
    filled in; on the synthetic data a periodic evaluation (``rl.eval.interval`` > 0) of
    ``rl.eval.dataset="synthetic"`` evaluates this pipeline's test split (the JSONL beside
    ``train_path``; ``rl.eval.limit`` of its first problems)."""
    changes: dict[str, Any] = {"seed": cfg.seed, "output_dir": out_dir, "model.path": model_path,
                               "rollout.executor": cfg.executor, "distributed": cfg.distributed}
    if cfg.data.dataset == "synthetic":
        changes.update({"data.problems": train_path, "data.dataset": "",
                        "data.prompt_format": "full" if cfg.model.path else "statement"})
        if cfg.rl.eval.interval and cfg.rl.eval.dataset == "synthetic" and not cfg.rl.eval.problems and train_path:
            changes["eval.problems"] = os.path.join(os.path.dirname(train_path), "test.jsonl")   # this split's
    else:
        changes.update({"data.dataset": cfg.data.dataset, "data.path": cfg.data.path,
                        "data.split": cfg.data.train_split, "data.options": cfg.data.options,
                        "data.problems": "", "data.prompt_format": "full"})
    return replace_fields(cfg.rl, changes)
