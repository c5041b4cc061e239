"""The method comparison (the max@k paper's Tables 2-3 at laptop scale): every method trained with
the RL loop from the SAME warmed-up base checkpoint with identical settings, once per seed, and
evaluated with the SAME sample keys as the base model; aggregated over seeds with paired Wilcoxon
tests against the paper's method (`REFERENCE`).

Outputs of `run_comparison` in ``<runs_dir>/<name>/``: ``results.md`` (the table), ``results.json``
(every number, per seed and per k), ``max_at_k.png`` and ``frontier.png`` (`compare_plots`),
``compare_config.json`` (the settings; a repeated call with the same settings resumes: finished
(method, seed) runs are skipped, an interrupted RL run continues from its last checkpoint — every
``rl.checkpoint.interval`` steps — or restarts when it has none), ``<method>/seed<s>/{rl,eval}``
and ``base/``.
"""
from __future__ import annotations

import dataclasses
import glob
import json
import os
import shutil
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Optional

from maxk_jax.eval.bootstrap import max_reported_k
from maxk_jax.execution import Executor
from maxk_jax.pipelines.base_model import prepare_base, prepare_data
from maxk_jax.pipelines.compare_plots import plot_eval_curves, plot_frontier, plot_max_at_k
from maxk_jax.pipelines.compare_results import (TRAIN_STATS, aggregate, eval_curves,  # noqa: F401  (re-exported)
                                                final_eval_extends_curves, in_loop_problems, results_markdown,
                                                training_stats)
from maxk_jax.pipelines.config import PipelineConfig, rl_config, uses_judge_cache
from maxk_jax.pipelines.config_dict import to_config_dict
from maxk_jax.pipelines.evaluation import eval_problems, eval_sampler, evaluate_model, load_trained, open_judge
from maxk_jax.pipelines.methods import REFERENCE, MethodTable, apply_method, validate_methods
from maxk_jax.pipelines.phases import PhaseTimer, write_json
from maxk_jax.cli.fields import replace_fields

if TYPE_CHECKING:
    from maxk_jax.eval.result import EvalResult

# ----------------------------------------------------------------------------------------------
# Driver
# ----------------------------------------------------------------------------------------------
def comparison_settings(cfg: PipelineConfig, methods: Sequence[str], seeds: Sequence[int],
                        large_k: int) -> dict[str, Any]:
    """The settings a comparison directory is resumed under (``compare_config.json``): the shared
    config without the run name, runs directory, the per-method RL fields and ``rl.checkpoint``
    (when to save does not change a run: a resumed run equals an uninterrupted one), plus methods,
    seeds and large_k."""
    shared = {k: v for k, v in to_config_dict(cfg).to_dict().items() if k not in ("name", "runs_dir")}
    shared["rl"].pop("checkpoint", None)
    for key in ("estimator", "estimator_options"):   # set per method
        shared["rl"]["algo"].pop(key, None)
    shared["rl"]["algo"]["loss"].pop("kind", None)
    if shared["warmup"]["config"].get("logprob_chunk") is None:   # newer than the first comparisons (see base_key)
        shared["warmup"]["config"].pop("logprob_chunk", None)
    return {"config": shared, "methods": list(methods), "seeds": list(seeds), "large_k": large_k}


# Fields added after comparisons were first written, with the value every earlier run had.
LATER_FIELDS = (("rl.rollout.reward", "fraction"), ("rl.algo.loss.ratio_level", "token"),
                ("rl.algo.loss.kl_target", "reference"), ("rl.rollout.max_staleness", 0),
                ("rl.algo.stale_correction", "none"), ("rl.algo.tis_cap", 2.0), ("rl.eval.at_end", True),
                ("rl.rollout.devices", 0), ("rl.model.decode_attention", "xla"),
                ("rl.model.remat_policy", "nothing"))


def _upgraded(config: dict[str, Any]) -> dict[str, Any]:
    """A ``compare_config.json`` config written before the loader options were typed pairs
    (``data.options_json``, a JSON object) in today's form (``data.options``, sorted pairs), and
    with `LATER_FIELDS` it lacks set to the value its runs had, without ``rl.checkpoint``."""
    config = json.loads(json.dumps(config))
    if isinstance(config.get("rl"), dict):
        config["rl"].pop("checkpoint", None)   # not a setting since resumable runs (comparison_settings)
    data = config.get("data", {})
    if "options_json" in data:
        options = sorted(json.loads(data.pop("options_json") or "{}").items())
        data["options"] = [list(p) for p in options]
    for path, value in LATER_FIELDS:
        *heads, last = path.split(".")
        node = config
        for head in heads:
            node = node.get(head) if isinstance(node, dict) else None
        if isinstance(node, dict):
            node.setdefault(last, value)
    return config


def checkpoint_steps(rl_dir: str) -> list[int]:
    """RL steps of the finished checkpoints under ``<rl_dir>/checkpoints`` (orbax renames a step's
    folder to its number when the save completes), ascending; [] when there are none."""
    folder = os.path.join(rl_dir, "checkpoints")
    if not os.path.isdir(folder):
        return []
    return sorted(int(name) for name in os.listdir(folder)
                  if name.isdigit() and os.path.isdir(os.path.join(folder, name)))


def check_comparison(cfg: PipelineConfig, methods: Sequence[str], seeds: Sequence[int], *,
                     method_table: Optional[MethodTable] = None, large_k: Optional[int] = None,
                     reference: str = REFERENCE, overwrite: bool = False, finished_only: bool = False,
                     resume: bool = False) -> tuple[list[str], int]:
    """The checks `run_comparison` makes before any work (`cfg.name` = the comparison's name): the
    task, the methods (`validate_methods`), large_k, and the comparison directory: with `resume` it
    must hold a comparison (``compare_config.json``); one it holds must have the same settings unless
    `overwrite`. Returns (methods, large_k); ValueError naming the problem."""
    top = max_reported_k(cfg.eval.sampler.n)
    large_k = top if large_k is None else large_k
    if cfg.data.dataset != "synthetic" or cfg.model.path:
        raise ValueError("compare_methods runs on the synthetic task from the tiny warmed-up model; "
                         "unset data.dataset / model.path")
    methods = validate_methods(methods, cfg, method_table, reference, trained=not finished_only)
    if cfg.rl.eval.interval and large_k not in cfg.rl.eval_ks():
        raise ValueError(f"the curves need max@{large_k} from the periodic evaluation: rl.eval.ks "
                         f"{list(cfg.rl.eval_ks())} lacks it (rl.eval.sampler.n >= {2 * large_k})")
    if isinstance(large_k, bool) or not isinstance(large_k, int) or not 1 <= large_k <= top:
        raise ValueError(f"large_k={large_k!r} must be an int in [1, eval.sampler.n/2={top}] (k <= n/2)")
    out_dir = os.path.abspath(os.path.join(cfg.runs_dir, cfg.name))
    settings_path = os.path.join(out_dir, "compare_config.json")
    if resume and overwrite:
        raise ValueError("--overwrite deletes the comparison that --resume would continue: give one")
    if finished_only and not os.path.isfile(os.path.join(out_dir, "base", "summary.json")):
        raise ValueError(f"{out_dir!r} has no base-model evaluation yet: nothing to aggregate")
    if resume and not os.path.isfile(settings_path):
        raise ValueError(f"--resume: {out_dir!r} holds no comparison (no compare_config.json); drop --resume to "
                         "start one")
    if os.path.isfile(settings_path) and not overwrite:
        with open(settings_path, encoding="utf-8") as f:
            old = json.load(f)
        settings = comparison_settings(cfg, methods, seeds, large_k)
        if _upgraded(old["config"]) != json.loads(json.dumps(settings["config"])):
            raise ValueError(f"{out_dir!r} holds a comparison with different settings; pass --overwrite or "
                             "another --name")
    return methods, large_k


def saved_runs(out_dir: str, how: str = "continue with the same command and --resume") -> str:
    """What an interrupted comparison in `out_dir` has saved, for Ctrl-C's line: its evaluated
    (method, seed) runs and the RL runs with checkpoints, then `how` to continue."""
    if not os.path.isfile(os.path.join(out_dir, "compare_config.json")):
        return "nothing of this comparison was saved (a finished base model stays cached under <runs_dir>/_cache)"
    done, partial = [], []
    for method in sorted(os.listdir(out_dir)):
        for seed_dir in sorted(glob.glob(os.path.join(out_dir, method, "seed*"))):
            run = f"{method}/{os.path.basename(seed_dir)}"
            steps = checkpoint_steps(os.path.join(seed_dir, "rl"))
            if os.path.isfile(os.path.join(seed_dir, "eval", "summary.json")):
                done.append(run)
            elif steps:
                partial.append(f"{run} (step {steps[-1]})")
    return (f"{out_dir}: {len(done)} finished run(s){' (' + ', '.join(done) + ')' if done else ''}, RL checkpoints "
            f"of {', '.join(partial) if partial else 'no unfinished run'}; {how}")


def start_out_dir(out_dir: str, settings: dict[str, Any], overwrite: bool) -> None:
    """Create the comparison directory ``out_dir`` (emptied first with ``overwrite``) and write its
    ``compare_config.json`` (`comparison_settings`)."""
    if os.path.isdir(out_dir) and overwrite:
        shutil.rmtree(out_dir)
    os.makedirs(out_dir, exist_ok=True)
    write_json(os.path.join(out_dir, "compare_config.json"), settings)


def train_run(cfg: PipelineConfig, method: str, seed: int, run_dir: str, *, model_path: str, train_path: str,
              judge: Executor, timer: PhaseTimer, method_table: Optional[MethodTable] = None,
              progress: bool = True) -> None:
    """Train one (method, seed) run of the comparison into ``<run_dir>/rl`` with the RL loop, from the
    base checkpoint ``model_path`` on the training problems ``train_path`` (timed as a phase of
    ``timer``): nothing when its last checkpoint exists, resumed from the newest one otherwise, or
    started clean (``run_dir`` removed) when it has none."""
    from maxk_jax.rl import loop as rl_loop

    rl_dir = os.path.join(run_dir, "rl")
    saved = checkpoint_steps(rl_dir)
    if cfg.rl.max_steps in saved:
        return
    if not saved:
        shutil.rmtree(run_dir, ignore_errors=True)  # an interrupted run restarts cleanly
    run_cfg = dataclasses.replace(apply_method(cfg, method, method_table), seed=seed)
    rcfg = dataclasses.replace(rl_config(run_cfg, model_path, rl_dir, train_path), name=f"{method}/seed{seed}")
    if final_eval_extends_curves(run_cfg):   # the comparison's final evaluation scores it
        rcfg = replace_fields(rcfg, {"eval.at_end": False})
    label = f"rl {method} seed {seed}" + (f" (resumed at step {max(saved)})" if saved else "")
    timer.run(label, lambda: rl_loop.run(rcfg, executor=judge, progress=progress, resume=bool(saved)))


def setup_lines(cfg: PipelineConfig, seeds: Sequence[int], *, base_record: dict[str, Any], model_path: str,
                num_problems: int, unfinished: Sequence[str], judge: Executor) -> list[str]:
    """The "setup" bullet lines of results.md: the base model, the shared RL settings (and the runs
    not finished), the evaluation, and the judge's counts of this invocation."""
    rl, n = cfg.rl, cfg.eval.sampler.n
    return [f"- base: {base_record['param_count']:,}-parameter tiny Qwen2 after {cfg.warmup.config.steps} warm-up "
            f"steps "
            f"(`{model_path}`)",
            f"- every method: {rl.max_steps} RL steps x {rl.rollout.prompts} problems x n = {rl.rollout.sampler.n}, k = "
            f"{rl.algo.k}, lr {rl.optim.learning_rate}, {rl.algo.ppo_iterations} PPO iterations, KL beta "
            f"{rl.algo.loss.kl_beta}, seeds {list(seeds)}"
            + (f" (finished runs only; not finished: {', '.join(unfinished)})" if unfinished else ""),
            f"- evaluation: {num_problems} synthetic test problems, n = {n} samples per problem (same sample "
            f"keys for every model), temperature {cfg.eval.sampler.temperature}",
            (f"- judge: {judge.stats['judged']} distinct programs judged for {judge.stats['submissions']} "
             "submissions in this invocation" if uses_judge_cache(cfg) else
             "- judge: every submission judged (executor_cache off)")]


def write_outputs(cfg: PipelineConfig, out_dir: str, agg: dict[str, Any], setup: Sequence[str],
                  curves: Optional[dict[str, Any]], timer: PhaseTimer, runs: dict[str, dict[int, EvalResult]],
                  unfinished: Sequence[str]) -> tuple[str, str]:
    """Write results.md, results.json, curves.png (with ``curves``), max_at_k.png and frontier.png under
    ``out_dir``; returns the paths of results.md and max_at_k.png."""
    results = os.path.join(out_dir, "results.md")
    with open(results, "w", encoding="utf-8") as f:
        f.write(results_markdown(agg, setup))
    write_json(os.path.join(out_dir, "results.json"), {**agg, "curves": curves, "timings": timer.phases,
                                                       "unfinished": list(unfinished)})
    if curves:
        plot_eval_curves(curves, os.path.join(out_dir, "curves.png"),
                         f"during RL: max@k on the first {curves['num_problems']} test problems (mean ± std over seeds)")
    plot = os.path.join(out_dir, "max_at_k.png")
    counts = sorted({len(r) for r in runs.values()})
    seeds_text = str(counts[0]) if len(counts) == 1 else f"{counts[0]}–{counts[-1]}"
    plot_max_at_k(agg, plot, f"max@k after {cfg.rl.max_steps} RL steps (mean over {seeds_text} seeds)")
    plot_frontier(agg, os.path.join(out_dir, "frontier.png"))
    return results, plot


def run_comparison(cfg: PipelineConfig, methods: Sequence[str], seeds: Sequence[int], *, name: str,
                   method_table: Optional[MethodTable] = None, large_k: Optional[int] = None, reference: str = REFERENCE,
                   overwrite: bool = False, progress: bool = True, executor: Optional[Executor] = None,
                   finished_only: bool = False) -> dict[str, Any]:
    """Train and evaluate every (method, seed) of the pipeline config `cfg` (synthetic data, tiny
    base model); write results.md / results.json / max_at_k.png / frontier.png under
    ``<cfg.runs_dir>/<name>`` (module docstring). method_table: the named methods
    (default: the registry's, `maxk_jax.rl.method.METHODS`); large_k: the table's large-k column (default and at most
    ``eval.sampler.n // 2``: k <= n/2 only); reference: the row of the Wilcoxon tests (a method, or
    "base"); with ``rl.eval.interval`` > 0 every run is also evaluated during training and
    curves.png / the results' "curves" show max@1 and max@large_k against the RL step; executor: the judge (default ``make_executor(cfg.executor)``, closed at the end);
    finished_only: train and evaluate nothing, aggregate the (method, seed) runs already evaluated
    (the others are listed in the setup lines and as results.json's "unfinished"). ValueError
    for bad settings or a directory holding a comparison with other settings (unless
    `overwrite`). Returns ``{"out_dir", "results", "plot", "aggregate", "timings"}``."""
    from maxk_jax.eval.report import read_report
    from maxk_jax.models import convert
    from maxk_jax.models.tokenizer import load_tokenizer

    cfg = dataclasses.replace(cfg, name=name)
    top = max_reported_k(cfg.eval.sampler.n)
    methods, large_k = check_comparison(cfg, methods, seeds, method_table=method_table, large_k=large_k,
                                        reference=reference, overwrite=overwrite, finished_only=finished_only)
    out_dir = os.path.abspath(os.path.join(cfg.runs_dir, name))
    start_out_dir(out_dir, comparison_settings(cfg, methods, seeds, large_k), overwrite)
    cache_root = os.path.abspath(os.path.join(cfg.runs_dir, "_cache"))
    timer = PhaseTimer()
    judge, own_judge = open_judge(cfg, executor)
    try:
        train_path, train, test = timer.run("data", lambda: prepare_data(cfg, cache_root))
        model_path, base_record, _ = timer.run("base model", lambda: prepare_base(cfg, train, cache_root,
                                                                                  progress=progress))
        tokenizer = load_tokenizer(model_path)
        model_config, base_params = convert.load_hf(model_path)
        problems = eval_problems(cfg, test, tokenizer)
        sampler = eval_sampler(cfg, model_config, None, tokenizer)

        def evaluated(directory: str, params_fn: Callable[[], Any], label: str) -> EvalResult:
            if os.path.isfile(os.path.join(directory, "summary.json")):
                return read_report(directory)[0]
            return timer.run(f"eval {label}", lambda: evaluate_model(
                cfg, sampler.replace(params=params_fn()), problems, judge, directory, label, progress=progress,
                ks=tuple(range(1, top + 1))))

        base = evaluated(os.path.join(out_dir, "base"), lambda: base_params, "base")
        runs: dict[str, dict[int, EvalResult]] = {m: {} for m in methods}
        stats: dict[str, dict[int, dict[str, float]]] = {m: {} for m in methods}
        unfinished: list[str] = []
        for seed in seeds:
            for method in methods:
                run_dir = os.path.join(out_dir, method, f"seed{seed}")
                eval_dir, rl_dir = os.path.join(run_dir, "eval"), os.path.join(run_dir, "rl")
                if not os.path.isfile(os.path.join(eval_dir, "summary.json")):
                    if finished_only:
                        unfinished.append(f"{method} seed {seed}")
                        continue
                    train_run(cfg, method, seed, run_dir, model_path=model_path, train_path=train_path,
                              judge=judge, timer=timer, method_table=method_table, progress=progress)
                runs[method][seed] = evaluated(eval_dir, lambda: load_trained(rl_dir, model_path).params,
                                               f"{method} seed {seed}")
                stats[method][seed] = training_stats(rl_dir)
        runs, stats = {m: r for m, r in runs.items() if r}, {m: st for m, st in stats.items() if st}
        if not runs or reference not in {"base", *runs}:
            raise ValueError(f"no finished run of {'any method' if not runs else repr(reference)} to aggregate in "
                             f"{out_dir!r} (unfinished: {', '.join(unfinished)})")
        agg = aggregate(base, runs, large_k, stats, reference)
        curves = eval_curves(cfg, base, {m: {s: os.path.join(out_dir, m, f"seed{s}", "rl") for s in by_seed}
                                         for m, by_seed in runs.items()}, large_k, runs) if cfg.rl.eval.interval else None
    finally:
        if own_judge:
            judge.close()
    setup = setup_lines(cfg, seeds, base_record=base_record, model_path=model_path, num_problems=len(problems),
                        unfinished=unfinished, judge=judge)
    results, plot = write_outputs(cfg, out_dir, agg, setup, curves, timer, runs, unfinished)
    return {"out_dir": out_dir, "results": results, "plot": plot, "aggregate": agg, "timings": timer.phases}

