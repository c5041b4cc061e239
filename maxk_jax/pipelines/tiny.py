"""The laptop pipeline (the main job): tiny Qwen2 -> warm-up -> RL -> paired evaluation -> report.

Phases (each timed, wall and CPU seconds reported):
  1. data      the synthetic family's train / test split (`base_model.prepare_data`), or a real
               dataset (``data.dataset``, needs ``model.path``).
  2. base      tokenizer + tiny Qwen2 + supervised warm-up (`base_model.prepare_base`), cached under
               ``<runs_dir>/_cache/base-<hash>``; skipped when ``model.path`` names a HF checkpoint.
  3. rl        the RL loop (`maxk_jax.rl.loop.run`) with the chosen method, writing ``<run>/rl``.
  4. eval      base and trained model on the test problems, ``eval.sampler.n`` samples each with the SAME
               sample keys (paired), judged by the run's judge (`evaluation.open_judge`).
  5. report    ``<run>/report.md`` (phase timings, pass@k and max@k, base vs the trained model --
               labelled with its method's registry name, `maxk_jax.rl.method.method_label` -- paired
               Wilcoxon p-values), ``<run>/curves.png``, ``<run>/timings.json``; per-model details
               in ``<run>/base`` and ``<run>/trained`` (`maxk_jax.eval.report`).
"""
from __future__ import annotations

import dataclasses
import json
import os
import shutil
from typing import Any, Optional

import jax

from maxk_jax.execution import Executor
from maxk_jax.pipelines.base_model import prepare_base, prepare_data
from maxk_jax.pipelines.config import PipelineConfig, rl_config, uses_judge_cache, validate_config
from maxk_jax.pipelines.config_dict import to_config_dict
from maxk_jax.pipelines.evaluation import eval_problems, eval_sampler, evaluate_model, load_trained, open_judge
from maxk_jax.pipelines.phases import PhaseTimer, lead_first, write_json
from maxk_jax.rl.method import method_label
from maxk_jax.rl.metrics_log import read_metrics


def report_markdown(cfg: PipelineConfig, comparison: dict[str, Any], timings: dict[str, dict[str, float]],
                    base: dict[str, Any], rl_record: dict[str, Any], load: dict[str, Any]) -> str:
    """report.md: setup, per-phase timings, base model facts, then the comparison tables
    (`comparison`: `maxk_jax.eval.compare.compare_runs` of base and trained; `load`: load
    averages ``{"start", "end"}``)."""
    from maxk_jax.eval.compare import comparison_markdown

    a = cfg.rl.algo
    lines = [f"# Tiny pipeline run `{cfg.name}`", "",
             f"- model: {base.get('description')}",
             f"- RL: method `{method_label(cfg.rl)}` (estimator `{a.estimator}`, "
             f"{''.join(f'{k}={v}, ' for k, v in a.estimator_options)}{a.loss.kind} loss, k = {a.k}), {cfg.rl.max_steps} steps x {cfg.rl.rollout.prompts} "
             f"problems x n = {cfg.rl.rollout.sampler.n}, lr {cfg.rl.optim.learning_rate}, {a.ppo_iterations} PPO "
             f"iterations, KL beta {a.loss.kl_beta}; last step reward mean "
             f"{rl_record.get('reward/mean', float('nan')):.3f}",
             f"- evaluation: {comparison['num_problems']} test problems, n = {cfg.eval.sampler.n} samples each, "
             f"temperature {cfg.eval.sampler.temperature}, identical sample keys for both models (seed {cfg.eval.seed})",
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


def _describe_tiny_base(cfg: PipelineConfig, record: dict[str, Any], model_path: str, cached: bool) -> str:
    return (f"tiny Qwen2, {record['param_count']:,} parameters, vocab {record['vocab_size']}, warm-up "
            f"{cfg.warmup.config.steps} steps (NLL {record['loss_first']:.2f} -> {record['loss_last50']:.3f}); "
            f"{'reused cached' if cached else 'built'} `{model_path}`")


def _rl_phase(rcfg: Any, timer: PhaseTimer, judge: Executor, progress: bool, resume: bool,
              lead: bool) -> dict[str, Any]:
    """The RL phase: a fresh run, or with `resume` the run continued from its newest checkpoint
    (restarted when it has none), or skipped when its last step's checkpoint exists (the last
    metrics record is returned)."""
    from maxk_jax.pipelines.compare import checkpoint_steps
    from maxk_jax.rl import loop as rl_loop

    saved = checkpoint_steps(rcfg.output_dir) if resume else []
    metrics = os.path.join(rcfg.output_dir, "metrics.jsonl")
    if rcfg.max_steps in saved and os.path.isfile(metrics):
        records = read_metrics(metrics)
        if records:
            return records[-1]
    if resume and not saved and lead:
        shutil.rmtree(rcfg.output_dir, ignore_errors=True)   # an interrupted run without a checkpoint restarts
    label = f"rl (resumed at step {saved[-1]})" if saved else "rl"
    return timer.run(label, lambda: rl_loop.run(rcfg, executor=judge, progress=progress, resume=bool(saved)))


def _evaluated(directory: str, resume: bool, timer: PhaseTimer, label: str, evaluate: Any) -> Any:
    """A model's evaluation: read back from `directory` when resuming a run that finished it, else run and timed."""
    from maxk_jax.eval.report import read_report

    if resume and os.path.isfile(os.path.join(directory, "summary.json")):
        return read_report(directory)[0]
    return timer.run(label, evaluate)


def run_dir_of(cfg: PipelineConfig) -> str:
    """The run directory ``<runs_dir>/<name>`` (absolute)."""
    return os.path.abspath(os.path.join(cfg.runs_dir, cfg.name))


def check_run_dir(cfg: PipelineConfig, *, overwrite: bool = False, resume: bool = False) -> None:
    """The run directory fits the request (ValueError otherwise): new, or `overwrite` (deleted
    first), or `resume` (it exists and holds a run of the same settings: `pipeline_config.json`
    equal to `cfg`'s but for ``runs_dir``)."""
    run_dir = run_dir_of(cfg)
    if overwrite and resume:
        raise ValueError("--overwrite deletes the run that --resume would continue: give one")
    if resume:
        path = os.path.join(run_dir, "pipeline_config.json")
        if not os.path.isfile(path):
            raise ValueError(f"--resume: {run_dir!r} holds no tiny pipeline run (no pipeline_config.json); drop "
                             "--resume to start one")
        with open(path, encoding="utf-8") as f:
            old = json.load(f)
        new = json.loads(json.dumps(to_config_dict(cfg).to_dict()))
        changed = sorted(k for k in set(old) | set(new) if k != "runs_dir" and old.get(k) != new.get(k))
        if changed:
            raise ValueError(f"--resume: the run in {run_dir!r} was made with other settings (sections "
                             f"{', '.join(changed)} differ); resume with its settings, or --overwrite")
    elif os.path.exists(run_dir) and not overwrite:
        raise ValueError(f"run directory {run_dir!r} exists; pass --resume to continue it, --overwrite to start "
                         "over, or another --name")


def resume_note(cfg: PipelineConfig) -> str:
    """What an interrupted run has saved, for Ctrl-C's line: the RL checkpoints and evaluations in
    the run directory, and how to continue."""
    from maxk_jax.pipelines.compare import checkpoint_steps

    run_dir = run_dir_of(cfg)
    if not os.path.isfile(os.path.join(run_dir, "pipeline_config.json")):
        return "nothing of this run was saved (a finished base model stays cached under <runs_dir>/_cache)"
    steps = checkpoint_steps(os.path.join(run_dir, "rl"))
    done = [m for m in ("base", "trained") if os.path.isfile(os.path.join(run_dir, m, "summary.json"))]
    saved = (f"RL checkpoint of step {steps[-1]} of {cfg.rl.max_steps}" if steps else "no RL checkpoint yet")
    saved += "".join(f", the {m} model's evaluation" for m in done)
    return f"{run_dir}: {saved}; continue with the same command and --resume"


def start_run_dir(cfg: PipelineConfig, run_dir: str, *, overwrite: bool, resume: bool) -> None:
    """Process 0: check (`check_run_dir`), empty with ``overwrite`` and create ``run_dir``, write its
    pipeline_config.json; with several processes every one returns once the directory is in place."""
    if jax.process_index() == 0:
        check_run_dir(cfg, overwrite=overwrite, resume=resume)
        if overwrite and os.path.exists(run_dir):
            shutil.rmtree(run_dir)
        os.makedirs(run_dir, exist_ok=resume)
        write_json(os.path.join(run_dir, "pipeline_config.json"), to_config_dict(cfg).to_dict())
    if jax.process_count() > 1:   # the other hosts start once the run directory is in place
        from jax.experimental import multihost_utils

        multihost_utils.sync_global_devices("tiny_pipeline run_dir")


def run_pipeline(cfg: PipelineConfig, *, overwrite: bool = False, resume: bool = False, progress: bool = True,
                 executor: Optional[Executor] = None) -> dict[str, Any]:
    """Run every phase (module docstring) of the pipeline config `cfg` and return ``{"run_dir",
    "report", "curves", "timings", "comparison"}`` (report / curves None on processes other than
    0). ValueError for bad settings before anything is built; an existing run directory is
    refused unless `overwrite` (deleted) or `resume` (`check_run_dir`: same settings; the RL run
    continues from its newest checkpoint, or is skipped when it finished, and finished evaluations
    are read back). executor: the judge (default ``make_executor(cfg.executor)``, closed at the end;
    a given one is left open)."""
    from maxk_jax.runtime import sharding
    from maxk_jax.eval.compare import compare_runs, write_comparison
    from maxk_jax.models import convert
    from maxk_jax.models.tokenizer import load_tokenizer

    cfg.distributed.initialize()   # before anything asks jax for its devices
    validate_config(cfg)
    lead = jax.process_index() == 0       # multi-host: process 0 owns the run directory
    multi = jax.process_count() > 1
    run_dir = run_dir_of(cfg)
    start_run_dir(cfg, run_dir, overwrite=overwrite, resume=resume)
    cache_root = os.path.abspath(os.path.join(cfg.runs_dir, "_cache"))
    load = {"start": [round(x, 2) for x in os.getloadavg()]}
    timer = PhaseTimer()
    judge, own_judge = open_judge(cfg, executor)
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
            base = dict(base, description=_describe_tiny_base(cfg, base, model_path, cached))
        rl_dir = os.path.join(run_dir, "rl")
        # the RL run is named after its method: its progress bar, config.json and wandb run
        rcfg = dataclasses.replace(rl_config(cfg, model_path, rl_dir, train_path), name=method_label(cfg.rl))
        rl_record = _rl_phase(rcfg, timer, judge, progress, resume, lead)
        tokenizer = load_tokenizer(model_path)
        # One process: a single device, as always. Multi-host: params on the RL mesh, problems
        # split across hosts (evaluate_model).
        mesh = (sharding.make_mesh(rcfg.mesh.data, rcfg.mesh.fsdp, rcfg.mesh.tensor) if multi else None)
        model_config, base_params = convert.load_hf(model_path, mesh=mesh)
        problems = eval_problems(cfg, test, tokenizer)
        sampler = eval_sampler(cfg, model_config, base_params, tokenizer, mesh)
        base_result = _evaluated(os.path.join(run_dir, "base"), resume, timer, "eval base", lambda: evaluate_model(
            cfg, sampler, problems, judge, os.path.join(run_dir, "base"), "base", progress=progress))
        trained = load_trained(rl_dir, model_path, mesh)
        label = method_label(cfg.rl)   # the method's registry name: the trained model's row and curve
        trained_result = _evaluated(os.path.join(run_dir, "trained"), resume, timer, "eval trained",
                                    lambda: evaluate_model(cfg, sampler.replace(params=trained.params), problems,
                                                           judge, os.path.join(run_dir, "trained"), label,
                                                           progress=progress))
        comparison = compare_runs([base_result, trained_result], ["base", label])
        if lead:
            paths = write_comparison(comparison, run_dir, title=f"{cfg.name}: base vs {label}")
    finally:
        if own_judge:
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
