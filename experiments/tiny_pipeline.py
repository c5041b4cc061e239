r"""The embedded main job: tiny Qwen2 -> warm-up -> RL with the off-policy max@k estimator -> report.

    .venv/bin/python -m experiments.tiny_pipeline                          # ~6 min on 2 CPU cores
    .venv/bin/python -m experiments.tiny_pipeline --estimator=grpo --name=tiny_grpo
    .venv/bin/python -m experiments.tiny_pipeline --model_path=/models/qwen2.5-coder-0.5b-instruct \
        --dataset=mbpp --config.data.train_split=train --config.data.eval_split=test

Phases (each with a progress bar; wall and CPU seconds of each are reported):
  1. data      the synthetic family's train / test split (`maxk_jax.data.synthetic`), written as
               Problem JSONL caches; or a real dataset (--dataset / --dataset_path).
  2. base      a byte-level BPE tokenizer + ~0.9M-parameter Qwen2 (`maxk_jax.models.tiny`), then
               the supervised warm-up (`maxk_jax.rl.warmup`) on noisy generated solutions; the result
               is a HF-format checkpoint cached under ``<runs_dir>/_cache/base-<hash>`` (the hash
               covers every setting that changes it) and reused by later runs. --model_path skips it.
  3. rl        the training helper's RL loop (`maxk_jax.rl.loop.run`) with the chosen estimator
               (default ``maxk_offpolicy``, the paper's method), writing ``<run>/rl``.
  4. eval      base and trained model on the test problems, n = 64 samples each with the SAME
               sample keys (paired), judged by the embedded sandbox.
  5. report    ``<run>/report.md`` (phase timings, pass@k and max@k for k = 1, 2, 4, ..., 64,
               base vs trained, paired Wilcoxon p-values) and ``<run>/curves.png``; per-model
               details in ``<run>/base`` and ``<run>/trained`` (`maxk_jax.eval.report`).

Judging goes through `CachingExecutor`: identical (program, tests) submissions are judged once
per process. The synthetic programs are deterministic, so this changes no reward; it matters
because a warmed-up tiny model repeats itself a lot.
"""
from __future__ import annotations

import hashlib
import json
import os
import resource
import shutil
import time
from collections.abc import Callable, Sequence
from typing import Any, Optional

import jax
import numpy as np
from absl import app, flags, logging
from ml_collections import ConfigDict, config_flags

from maxk_jax import config_overrides
from maxk_jax.data.problem import Problem
from maxk_jax.execution.caching import CachingExecutor  # noqa: F401  (tp.CachingExecutor, used by compare_methods)

BASE_FORMAT_VERSION = 1  # bump when the warm-up recipe changes in a way the hash cannot see
_CONFIG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "configs", "tiny.py")

FLAGS = flags.FLAGS


def define_flags() -> None:
    """Define the command-line flags (called by ``__main__`` only, so other entry points can import
    this module and define their own)."""
    with config_overrides.explained_errors("config", _CONFIG):  # unknown --config.x: clear error
        config_flags.DEFINE_config_file("config", _CONFIG, "Pipeline config (ml_collections); override fields "
                                        "with --config.<field>=<value>, e.g. --config.rl.max_steps=40.",
                                        lock_config=False)
    flags.DEFINE_string("name", None, "Run name: the report goes to <runs_dir>/<name> (default: config.name).")
    flags.DEFINE_string("runs_dir", None, "Directory of run directories and of the base-model cache "
                        "(default: config.runs_dir).")
    flags.DEFINE_string("estimator", None, "RL estimator, any name of maxk_jax.estimators.list_estimators() "
                        "(default: config.rl.algo.estimator = maxk_offpolicy).")
    flags.DEFINE_integer("k", None, "Training k of the estimator, 1 <= k <= rollout n (default: config.rl.algo.k).")
    flags.DEFINE_string("model_path", None, "A Hugging Face Qwen2 directory to start from instead of the tiny "
                        "model: skips the tokenizer/model build and the warm-up.")
    flags.DEFINE_string("dataset", None, "Dataset: 'synthetic' (default) or a maxk_jax.data.load_dataset name "
                        "(code_contests, mbpp, ...; needs --model_path).")
    flags.DEFINE_string("dataset_path", None, "Hub name or local path of --dataset in its upstream schema.")
    flags.DEFINE_bool("overwrite", False, "Delete an existing run directory of the same name first.")
    flags.DEFINE_bool("progress", True, "Show tqdm progress bars for warm-up, RL and evaluation.")


# ----------------------------------------------------------------------------------------------
# Small utilities
# ----------------------------------------------------------------------------------------------
class PhaseTimer:
    """Wall and process CPU seconds per named phase (CPU time includes all threads)."""

    def __init__(self) -> None:
        self.phases: dict[str, dict[str, float]] = {}

    @staticmethod
    def _cpu() -> float:
        r = resource.getrusage(resource.RUSAGE_SELF)
        return r.ru_utime + r.ru_stime

    def run(self, name: str, fn: Callable[[], Any]) -> Any:
        """Call fn() and record its wall / CPU seconds under `name`."""
        logging.info("phase %s ...", name)
        print(f"== {name}", flush=True)
        w, c = time.perf_counter(), self._cpu()
        out = fn()
        self.phases[name] = {"wall_s": time.perf_counter() - w, "cpu_s": self._cpu() - c}
        print(f"== {name}: {self.phases[name]['wall_s']:.1f} s wall, {self.phases[name]['cpu_s']:.1f} s CPU",
              flush=True)
        return out


def uses_judge_cache(cfg: ConfigDict) -> bool:
    """Whether judging goes through `CachingExecutor`: ``executor_cache`` on the synthetic data only
    (real datasets' time limits make a verdict depend on timing, so each submission is judged)."""
    return bool(cfg.executor_cache) and cfg.data.dataset == "synthetic"


def _json_default(obj: Any) -> Any:
    if isinstance(obj, (np.integer, np.floating)):
        return obj.item()
    raise TypeError(f"{type(obj).__name__} is not JSON serialisable")


def write_json(path: str, obj: Any) -> None:
    """Write `obj` as indented JSON (atomic rename)."""
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=2, default=_json_default)
        f.write("\n")
    os.replace(tmp, path)


# ----------------------------------------------------------------------------------------------
# Config
# ----------------------------------------------------------------------------------------------
def apply_flags(cfg: ConfigDict, *, name: Optional[str] = None, runs_dir: Optional[str] = None,
                estimator: Optional[str] = None, k: Optional[int] = None, model_path: Optional[str] = None,
                dataset: Optional[str] = None, dataset_path: Optional[str] = None) -> ConfigDict:
    """Copy of `cfg` with the command-line shortcuts applied (None = keep the config value)."""
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


def synthetic_config(cfg: ConfigDict) -> Any:
    """`SyntheticConfig` of ``cfg.synthetic`` (ValueError naming a bad knob)."""
    from maxk_jax.data.synthetic import SyntheticConfig

    return SyntheticConfig(**cfg.synthetic.to_dict())


def warmup_config(cfg: ConfigDict) -> Any:
    """`maxk_jax.rl.warmup.WarmupConfig` of ``cfg.warmup`` (data fields excluded)."""
    from maxk_jax.rl.warmup import WarmupConfig

    w = {k: v for k, v in cfg.warmup.to_dict().items() if k not in ("per_problem", "noise")}
    return WarmupConfig(**w)


def validate(cfg: ConfigDict) -> None:
    """Every check that needs no model or data: ValueError naming the field, before any work."""
    from maxk_jax.rl import loop as rl_loop
    from maxk_jax.data.loaders import LOADERS, canonical_name
    from maxk_jax.estimators import list_estimators
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


# ----------------------------------------------------------------------------------------------
# Data and base model
# ----------------------------------------------------------------------------------------------
def _hash(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:12]


def prepare_data(cfg: ConfigDict, cache_root: str) -> tuple[str, list[Problem], list[Problem]]:
    """Synthetic split as Problem JSONL caches under ``cache_root/data-<hash>``: returns
    (train JSONL path, train problems, test problems)."""
    from maxk_jax.data import load_problems, save_problems
    from maxk_jax.data.synthetic import make_split

    out = os.path.join(cache_root, f"data-{_hash(cfg.synthetic.to_dict())}")
    train_path, test_path = os.path.join(out, "train.jsonl"), os.path.join(out, "test.jsonl")
    if os.path.isfile(train_path) and os.path.isfile(test_path):
        return train_path, load_problems(train_path), load_problems(test_path)
    train, test = make_split(synthetic_config(cfg))
    os.makedirs(out, exist_ok=True)
    save_problems(train, train_path)
    save_problems(test, test_path)
    return train_path, train, test


def base_key(cfg: ConfigDict) -> str:
    """Hash of every setting that determines the warmed-up base checkpoint."""
    return _hash({"synthetic": cfg.synthetic.to_dict(), "tokenizer": cfg.tokenizer.to_dict(),
                  "model": {k: v for k, v in cfg.model.to_dict().items() if k != "path"},
                  "warmup": cfg.warmup.to_dict(), "version": BASE_FORMAT_VERSION})


def _plot_losses(losses: np.ndarray, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot(np.arange(1, len(losses) + 1), losses, lw=0.8, alpha=0.5, label="per step")
    w = max(1, len(losses) // 30)
    if len(losses) >= w:
        ax.plot(np.arange(w, len(losses) + 1), np.convolve(losses, np.ones(w) / w, "valid"), label=f"mean of {w}")
    ax.set(xlabel="warm-up step", ylabel="completion NLL (nats/token)", yscale="log", title="supervised warm-up")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def build_base(cfg: ConfigDict, train: Sequence[Problem], out_dir: str, *, progress: bool = True) -> dict[str, Any]:
    """Tokenizer + tiny Qwen2 + warm-up, written as a HF checkpoint to `out_dir` (see
    `prepare_base`). Returns the warm-up record (also written to ``out_dir/warmup.json``)."""
    from maxk_jax.rl import warmup
    from maxk_jax.data.synthetic import tokenizer_corpus
    from maxk_jax.models import convert, qwen2, tiny
    from maxk_jax.models.tokenizer import load_tokenizer

    t0 = time.perf_counter()
    tc, mc, wc = cfg.tokenizer, cfg.model, cfg.warmup
    corpus = tokenizer_corpus(train[:tc.corpus_problems], np.random.default_rng(tc.corpus_seed))
    dims = {k: mc[k] for k in ("hidden_size", "num_layers", "num_heads", "num_kv_heads", "intermediate_size",
                               "max_position_embeddings")}
    tiny.build_tiny_checkpoint(out_dir, corpus, mc.init_seed, vocab_size=tc.vocab_size, **dims)
    model_config, params = convert.load_hf(out_dir)
    tokenizer = load_tokenizer(out_dir)
    examples = warmup.synthetic_examples(train, tokenizer, np.random.default_rng(wc.seed),
                                         per_problem=wc.per_problem, noise=wc.noise)
    build_s = time.perf_counter() - t0
    result = warmup.run_warmup(model_config, params, examples, warmup_config(cfg), progress=progress)
    convert.save_hf(model_config, result.params, out_dir)
    lengths = np.array([len(e.completion) for e in examples])
    record = {
        "key": base_key(cfg), "param_count": qwen2.param_count(model_config), "vocab_size": model_config.vocab_size,
        "examples": len(examples), "completion_tokens_mean": float(lengths.mean()),
        "completion_tokens_max": int(lengths.max()), "build_s": build_s,
        "warmup_s": result.total_s, "warmup_first_step_s": result.first_step_s,
        "loss_first": float(result.losses[0]), "loss_last50": float(result.losses[-50:].mean()),
        "losses": [float(x) for x in result.losses], "mean_batch_tokens": float(result.batch_tokens.mean()),
        "config": {k: cfg[k].to_dict() for k in ("synthetic", "tokenizer", "model", "warmup")}}
    write_json(os.path.join(out_dir, "warmup.json"), record)
    _plot_losses(result.losses, os.path.join(out_dir, "warmup_loss.png"))
    return record


def prepare_base(cfg: ConfigDict, train: Sequence[Problem], cache_root: str, *,
                 progress: bool = True) -> tuple[str, dict[str, Any], bool]:
    """The warmed-up base checkpoint ``cache_root/base-<base_key>``: built (into a temporary
    directory, renamed when complete) unless it exists. Returns (path, warm-up record, cached)."""
    path = os.path.join(cache_root, f"base-{base_key(cfg)}")
    record_path = os.path.join(path, "warmup.json")
    if os.path.isfile(record_path):
        with open(record_path, encoding="utf-8") as f:
            return path, json.load(f), True
    tmp = f"{path}.tmp{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    record = build_base(cfg, train, tmp, progress=progress)
    if os.path.isdir(path):  # a concurrent run finished first: keep theirs
        shutil.rmtree(tmp)
        with open(record_path, encoding="utf-8") as f:
            return path, json.load(f), True
    os.replace(tmp, path)
    return path, record, False


# ----------------------------------------------------------------------------------------------
# RL and evaluation
# ----------------------------------------------------------------------------------------------
def rl_config(cfg: ConfigDict, model_path: str, out_dir: str, train_path: Optional[str]) -> ConfigDict:
    """The RL loop config: ``cfg.rl`` with the model, data and output directory filled in."""
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


def eval_problems(cfg: ConfigDict, test: Optional[Sequence[Problem]], tokenizer: Any) -> list[Problem]:
    """The first ``eval.num_problems`` evaluation problems (synthetic test split or the dataset's
    ``data.eval_split``)."""
    if cfg.data.dataset == "synthetic":
        problems = list(test)
    else:
        from maxk_jax.rl import loop as rl_loop

        spec = ConfigDict(cfg.rl.eval.to_dict())
        spec.update(dataset=cfg.data.dataset, path=cfg.data.path, split=cfg.data.eval_split,
                    options_json=cfg.data.options_json, problems="", limit=0)
        problems = rl_loop.load_problem_set(spec, tokenizer)
    if len(problems) < cfg.eval.num_problems:
        logging.warning("only %d evaluation problems (eval.num_problems=%d)", len(problems), cfg.eval.num_problems)
    return problems[:cfg.eval.num_problems]


def eval_settings(cfg: ConfigDict, model_config: Any, tokenizer: Any) -> Any:
    """`maxk_jax.rl.rollout.RolloutSettings` of the evaluation (prompt format as in RL)."""
    from maxk_jax.eval.run import default_eos_ids
    from maxk_jax.rl.rollout import RolloutSettings

    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else (model_config.pad_token_id or 0)
    fmt = "statement" if (cfg.data.dataset == "synthetic" and not cfg.model.path) else "full"
    return RolloutSettings(n=cfg.eval.n, max_new_tokens=cfg.eval.max_new_tokens, temperature=cfg.eval.temperature,
                           top_p=cfg.eval.top_p, top_k=cfg.eval.top_k,
                           eos_ids=tuple(default_eos_ids(model_config, tokenizer)), pad_id=int(pad),
                           prompt_format=fmt)


def evaluate_model(cfg: ConfigDict, model_config: Any, params: Any, tokenizer: Any, problems: Sequence[Problem],
                   executor: Any, out_dir: str, name: str, *, progress: bool = True,
                   mesh: Optional[jax.sharding.Mesh] = None, ks: Sequence[int] | None = None) -> Any:
    """n samples per problem (key ``eval.seed``: the same sample keys for every model), judged;
    writes the `maxk_jax.eval.report` files to `out_dir` (process 0) and returns the `EvalResult`.
    ``mesh`` (multi-host: params on it): the problems are split across hosts. ks: the k values of
    the tables (default 1, 2, 4, ..., n)."""
    from maxk_jax.multihost import batch_block

    from maxk_jax.eval.report import write_report
    from maxk_jax.eval.run import default_ks, run_evaluation
    from maxk_jax.rl.rollout import PromptCompletionSource

    settings = eval_settings(cfg, model_config, tokenizer)
    source = PromptCompletionSource(model_config, params, tokenizer, settings, mesh)
    run_cfg = {"run_name": name, "n": cfg.eval.n, "seed": cfg.eval.seed, "temperature": cfg.eval.temperature,
               "top_p": cfg.eval.top_p, "top_k": cfg.eval.top_k, "max_new_tokens": cfg.eval.max_new_tokens,
               "prompt_format": settings.prompt_format, "dataset": cfg.data.dataset}
    result = run_evaluation(problems, source, executor=executor, n=cfg.eval.n, key=jax.random.key(cfg.eval.seed),
                            ks=default_ks(cfg.eval.n) if ks is None else tuple(ks),
                            batch_size=cfg.eval.batch_size, progress=progress,
                            config=run_cfg, host=batch_block(mesh))
    if jax.process_index() == 0:
        write_report(result, out_dir, name=name)
    return result


def load_trained(rl_dir: str, model_path: str, mesh: Optional[jax.sharding.Mesh] = None) -> Any:
    """The final RL checkpoint (`maxk_jax.eval.checkpoint.LoadedModel`; params on `mesh` if given)."""
    from maxk_jax.eval.checkpoint import load_model

    return load_model(os.path.join(rl_dir, "checkpoints"), model_dir=model_path, mesh=mesh)


def lead_first(fn: Callable[[], Any], name: str) -> Any:
    """Multi-host: process 0 runs ``fn`` (e.g. builds a cache on shared storage), the others wait
    and then run it too (reusing that cache, or building their own without shared storage)."""
    if jax.process_count() == 1:
        return fn()
    from jax.experimental import multihost_utils

    out = fn() if jax.process_index() == 0 else None
    multihost_utils.sync_global_devices(name)
    return out if jax.process_index() == 0 else fn()


# ----------------------------------------------------------------------------------------------
# Report
# ----------------------------------------------------------------------------------------------
def report_markdown(cfg: ConfigDict, comparison: dict[str, Any], timings: dict[str, dict[str, float]],
                    base: dict[str, Any], rl_record: dict[str, Any], load: dict[str, Any]) -> str:
    """report.md: setup, per-phase timings, base model facts, then the comparison tables."""
    from maxk_jax.eval.compare import comparison_markdown

    a = cfg.rl.algo
    lines = [f"# Tiny pipeline run `{cfg.name}`", "",
             f"- model: {base.get('description')}",
             f"- RL: estimator `{a.estimator}` (k = {a.k}), {cfg.rl.max_steps} steps x {cfg.rl.rollout.prompts} "
             f"problems x n = {cfg.rl.rollout.n}, lr {cfg.rl.optim.learning_rate}, {a.ppo_iterations} PPO "
             f"iterations, KL beta {a.kl_beta}; last step reward mean {rl_record.get('reward/mean', float('nan')):.3f}",
             f"- evaluation: {comparison['num_problems']} test problems, n = {cfg.eval.n} samples each, temperature "
             f"{cfg.eval.temperature}, identical sample keys for both models (seed {cfg.eval.seed})",
             f"- machine: {os.cpu_count()} CPUs, load average {load['start']} at start, {load['end']} at end",
             f"- judge: {cfg.executor}, " + ("each distinct (program, tests) judged once" if
                                                 uses_judge_cache(cfg) else "every submission judged"),
             "", "| phase | wall s | CPU s |", "|:--|--:|--:|"]
    for name, t in timings.items():
        lines.append(f"| {name} | {t['wall_s']:.1f} | {t['cpu_s']:.1f} |")
    total_w = sum(t["wall_s"] for t in timings.values())
    lines += [f"| total | {total_w:.1f} | {sum(t['cpu_s'] for t in timings.values()):.1f} |", "",
              "CPU s = this process's CPU time (sandboxed test programs run in other processes).", ""]
    body = comparison_markdown(comparison).replace("# Comparison:", "## Base vs trained:", 1)
    return "\n".join(lines) + "\n" + body


# ----------------------------------------------------------------------------------------------
# The pipeline
# ----------------------------------------------------------------------------------------------
def run_pipeline(cfg: ConfigDict, *, overwrite: bool = False, progress: bool = True,
                 executor: Any = None) -> dict[str, Any]:
    """Run every phase (module docstring) and return ``{"run_dir", "report", "curves", "timings",
    "comparison"}``. ValueError for bad settings before anything is built; an existing run
    directory is refused unless `overwrite`."""
    from maxk_jax import sharding
    from maxk_jax.rl import loop as rl_loop
    from maxk_jax.eval.compare import compare_runs, write_comparison
    from maxk_jax.execution import make_executor
    from maxk_jax.models import convert
    from maxk_jax.models.tokenizer import load_tokenizer

    rl_loop.initialize_distributed(cfg)   # before anything asks jax for its devices
    validate(cfg)
    lead = jax.process_index() == 0       # multi-host: process 0 owns the run directory
    multi = jax.process_count() > 1
    run_dir = os.path.abspath(os.path.join(cfg.runs_dir, cfg.name))
    if lead:
        if os.path.exists(run_dir):
            if not overwrite:
                raise ValueError(f"run directory {run_dir!r} exists; pass --overwrite or another --name")
            shutil.rmtree(run_dir)
        os.makedirs(run_dir)
        write_json(os.path.join(run_dir, "pipeline_config.json"), cfg.to_dict())
    if multi:   # the other hosts start once the run directory is in place
        from jax.experimental import multihost_utils

        multihost_utils.sync_global_devices("tiny_pipeline run_dir")
    cache_root = os.path.abspath(os.path.join(cfg.runs_dir, "_cache"))
    load = {"start": [round(x, 2) for x in os.getloadavg()]}
    timer = PhaseTimer()
    own_executor = executor is None
    inner = make_executor(cfg.executor) if own_executor else executor
    judge = CachingExecutor(inner) if uses_judge_cache(cfg) else inner
    try:
        train_path, test, base = None, None, {}
        if cfg.data.dataset == "synthetic":
            train_path, train, test = timer.run("data", lambda: lead_first(
                lambda: prepare_data(cfg, cache_root), "tiny_pipeline data"))
        if cfg.model.path:
            model_path = os.path.abspath(cfg.model.path)
            base = {"description": f"HF checkpoint {model_path}"}
        else:
            model_path, base, cached = timer.run("base (tokenizer + model + warm-up)", lambda: lead_first(
                lambda: prepare_base(cfg, train, cache_root, progress=progress), "tiny_pipeline base"))
            base = dict(base, description=(
                f"tiny Qwen2, {base['param_count']:,} parameters, vocab {base['vocab_size']}, warm-up "
                f"{cfg.warmup.steps} steps (NLL {base['loss_first']:.2f} -> {base['loss_last50']:.3f}); "
                f"{'reused cached' if cached else 'built'} `{model_path}`"))
        rl_dir = os.path.join(run_dir, "rl")
        rcfg = rl_config(cfg, model_path, rl_dir, train_path)
        rl_record = timer.run("rl", lambda: rl_loop.run(rcfg, executor=judge, progress=progress))
        tokenizer = load_tokenizer(model_path)
        # One process: a single device, as always. Multi-host: params on the RL mesh, problems
        # split across hosts (evaluate_model).
        mesh = (sharding.make_mesh(rcfg.mesh.data, rcfg.mesh.fsdp, rcfg.mesh.tensor) if multi else None)
        model_config, base_params = convert.load_hf(model_path, mesh=mesh)
        problems = eval_problems(cfg, test, tokenizer)
        base_result = timer.run("eval base", lambda: evaluate_model(
            cfg, model_config, base_params, tokenizer, problems, judge, os.path.join(run_dir, "base"), "base",
            progress=progress, mesh=mesh))
        trained = load_trained(rl_dir, model_path, mesh)
        trained_result = timer.run("eval trained", lambda: evaluate_model(
            cfg, model_config, trained.params, tokenizer, problems, judge, os.path.join(run_dir, "trained"),
            f"trained ({cfg.rl.algo.estimator})", progress=progress, mesh=mesh))
        comparison = compare_runs([base_result, trained_result], ["base", f"trained ({cfg.rl.algo.estimator})"])
        if lead:
            paths = write_comparison(comparison, run_dir, title=f"{cfg.name}: base vs {cfg.rl.algo.estimator}")
    finally:
        if own_executor:
            judge.close()
    if not lead:
        return {"run_dir": run_dir, "report": None, "curves": None, "timings": timer.phases,
                "comparison": comparison}
    load["end"] = [round(x, 2) for x in os.getloadavg()]
    report = os.path.join(run_dir, "report.md")
    with open(report, "w", encoding="utf-8") as f:
        f.write(report_markdown(cfg, comparison, timer.phases, base, rl_record, load))
    curves = os.path.join(run_dir, "curves.png")
    shutil.copyfile(paths["curves"], curves)
    stats = getattr(judge, "stats", None)
    write_json(os.path.join(run_dir, "timings.json"), {"phases": timer.phases, "load": load, "judge": stats})
    return {"run_dir": run_dir, "report": report, "curves": curves, "timings": timer.phases,
            "comparison": comparison}


def main(argv: Sequence[str]) -> None:
    """absl entry point: apply the shortcut flags to --config and run the pipeline."""
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    cfg = apply_flags(FLAGS.config, name=FLAGS.name, runs_dir=FLAGS.runs_dir, estimator=FLAGS.estimator,
                      k=FLAGS.k, model_path=FLAGS.model_path, dataset=FLAGS.dataset,
                      dataset_path=FLAGS.dataset_path)
    start = time.perf_counter()
    out = run_pipeline(cfg, overwrite=FLAGS.overwrite, progress=FLAGS.progress)
    print(f"\nDone in {time.perf_counter() - start:.0f} s.\nReport: {out['report']}\nCurves: {out['curves']}")


if __name__ == "__main__":
    define_flags()
    app.run(main, flags_parser=config_overrides.parse_flags)
