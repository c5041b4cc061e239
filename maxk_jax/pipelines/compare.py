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

import numpy as np

from maxk_jax.eval.bootstrap import max_reported_k
from maxk_jax.execution import Executor
from maxk_jax.pipelines.base_model import prepare_base, prepare_data
from maxk_jax.pipelines.compare_plots import plot_eval_curves, plot_frontier, plot_max_at_k
from maxk_jax.pipelines.config import PipelineConfig, rl_config, uses_judge_cache
from maxk_jax.pipelines.config_dict import to_config_dict
from maxk_jax.pipelines.evaluation import eval_problems, eval_sampler, evaluate_model, load_trained, open_judge
from maxk_jax.pipelines.methods import REFERENCE, MethodTable, apply_method, validate_methods
from maxk_jax.pipelines.phases import PhaseTimer, write_json
from maxk_jax.rl.metrics_log import read_metrics
from maxk_jax.cli.fields import replace_fields

if TYPE_CHECKING:
    from maxk_jax.eval.result import EvalResult

# Per-run training statistics read from the RL run's metrics.jsonl (see ``training_stats``).
TRAIN_STATS = ("kl_ref_final", "grad_norm_mean", "update_norm_mean", "clip_fraction_mean", "delta_gt_1_fraction_mean")


def training_stats(rl_dir: str) -> dict[str, float]:
    """Update-size statistics of one RL run from ``<rl_dir>/metrics.jsonl``: KL to the reference
    (initial) policy at the last step (``ppo/kl_ref``), mean grad norm before clipping, mean norm of
    the parameter update (``ppo/update_norm``), mean PPO clip fraction and mean fraction of samples
    with |rho - 1| > 1 (sequence level), over steps (NaN for a statistic the run did not log)."""
    path = os.path.join(rl_dir, "metrics.jsonl")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"no metrics.jsonl in {rl_dir!r}")
    with open(path, encoding="utf-8") as f:
        records = [json.loads(line) for line in f if line.strip()]
    if not records:
        raise ValueError(f"{path!r} is empty")

    def series(key: str) -> np.ndarray:
        return np.array([r[key] for r in records if r.get(key) is not None], dtype=np.float64)

    def mean(key: str) -> float:
        v = series(key)
        return float(v.mean()) if v.size else float("nan")

    kl = series("ppo/kl_ref")
    return {"kl_ref_final": float(kl[-1]) if kl.size else float("nan"),
            "grad_norm_mean": mean("ppo/grad_norm"), "update_norm_mean": mean("ppo/update_norm"),
            "clip_fraction_mean": mean("ppo/clip_fraction"),
            "delta_gt_1_fraction_mean": mean("ppo/is_delta_gt_1_fraction")}


# ----------------------------------------------------------------------------------------------
# Aggregation
# ----------------------------------------------------------------------------------------------
def aggregate(base: EvalResult, runs: dict[str, dict[int, EvalResult]], large_k: int,
              train_stats: dict[str, dict[int, dict[str, float]]] | None = None,
              reference: str = REFERENCE) -> dict[str, Any]:
    """Table numbers from EvalResults: ``runs[method][seed]``, `base` (one result); all on the same
    P problems in the same order with the same K k values. Per method and metric (pass@k, max@k):
    dataset mean per seed, mean and std (ddof=0) over seeds for every k; Wilcoxon tests of
    `reference` (a method, or "base": the paper's Table 1 question) vs every other row on seed-averaged per-problem values [P] at k = 1 and
    `large_k`; 95 % bootstrap intervals (problems and seeds resampled) at k = 1 and `large_k`.
    Only k <= n/2 is reported (`maxk_jax.eval.bootstrap.reported_ks`). train_stats[method][seed]:
    `training_stats` records, aggregated the same way. Returns ``{"ks", "large_k", "num_problems",
    "methods": {name: {metric: {"mean", "std", "per_seed", "ci": {k: [low, high]}}, "train"?}},
    "reference": reference, "wilcoxon_vs_<reference>": {name: {metric: {k: test}}}}``."""
    from maxk_jax.eval.bootstrap import bootstrap_ci
    from maxk_jax.eval.compare import wilcoxon_test

    ks = list(base.reported_ks)
    if large_k not in ks:
        raise ValueError(f"large_k={large_k} is not one of the reported k values {ks} (k <= n/2, n={base.n})")
    columns = [j for j, k in enumerate(base.ks) if k in ks]
    ids = base.ids

    def per_problem(result: EvalResult) -> dict[str, np.ndarray]:
        if result.ids != ids:
            raise ValueError("evaluation results cover different problems or orders")
        return result.per_problem()

    rows: dict[str, Any] = {"base": {"seeds": {}, "per_problem": per_problem(base)}}
    for method, by_seed in runs.items():
        pp = {s: per_problem(r) for s, r in by_seed.items()}
        if any(r.ks != base.ks for r in by_seed.values()):
            raise ValueError(f"{method}: evaluated at other k values than the base")
        rows[method] = {"seeds": pp,
                        "per_problem": {m: np.mean([p[m] for p in pp.values()], axis=0) for m in ("pass_at_k", "max_at_k")}}
    if reference not in rows:
        raise ValueError(f"reference={reference!r} is neither 'base' nor one of the methods {sorted(runs)}")
    out: dict[str, Any] = {"ks": ks, "large_k": large_k, "num_problems": len(ids), "reference": reference,
                           "methods": {}}
    for name, row in rows.items():
        entry: dict[str, Any] = {}
        for metric in ("pass_at_k", "max_at_k"):
            blocks = ([p[metric][:, columns] for p in row["seeds"].values()] if row["seeds"]
                      else [row["per_problem"][metric][:, columns]])
            stacked = np.stack(blocks)                                 # [S, P, K]
            per_seed = dict(zip(row["seeds"] or ["base"], np.nanmean(stacked, axis=1)))
            values = np.array(list(per_seed.values()))  # [S, K]
            entry[metric] = {"mean": dict(zip(ks, values.mean(0).tolist())),
                             "std": dict(zip(ks, values.std(0).tolist())) if row["seeds"] else None,
                             "per_seed": {str(s): dict(zip(ks, v.tolist())) for s, v in per_seed.items()},
                             "ci": {k: list(bootstrap_ci(stacked[:, :, j]) or (np.nan, np.nan))
                                    for j, k in enumerate(ks) if k in (1, large_k)}}
        if train_stats and name in train_stats:
            by_seed = train_stats[name]
            entry["train"] = {key: {"mean": float(np.mean([st[key] for st in by_seed.values()])),
                                    "std": float(np.std([st[key] for st in by_seed.values()])),
                                    "per_seed": {str(sd): st[key] for sd, st in by_seed.items()}}
                              for key in TRAIN_STATS}
        out["methods"][name] = entry
    ref = rows[reference]["per_problem"]
    out["wilcoxon_vs_" + reference] = {
        name: {metric: {k: wilcoxon_test(row["per_problem"][metric][:, j], ref[metric][:, j])
                        for j, k in enumerate(base.ks) if k in (1, large_k)} for metric in ("pass_at_k", "max_at_k")}
        for name, row in rows.items() if name != reference}
    return out


def final_eval_extends_curves(cfg: PipelineConfig) -> bool:
    """Whether the in-loop evaluation samples exactly as the final one (same sampler settings and
    key, its ``rl.eval.limit`` problems a prefix of the ``eval.num_problems``): then its problems'
    samples are the first rows of the final evaluation's (per-sample keys), so the base evaluation
    is each curve's step-0 point and a run's final evaluation its last point, and the run need not
    evaluate after its last step (``rl.eval.at_end=False``). Synthetic data (what compare runs)."""
    final = min(cfg.eval.num_problems, cfg.synthetic.num_test)
    return (bool(cfg.rl.eval.interval) and cfg.rl.eval_sampler() == cfg.eval.sampler
            and cfg.rl.eval.seed == cfg.eval.seed and in_loop_problems(cfg) <= final)


def in_loop_problems(cfg: PipelineConfig) -> int:
    """How many test problems the in-loop evaluation covers: the first ``rl.eval.limit`` (0 = all)
    of the synthetic test split."""
    return min(cfg.rl.eval.limit or cfg.synthetic.num_test, cfg.synthetic.num_test)


def eval_curves(cfg: PipelineConfig, base: EvalResult, rl_dirs: dict[str, dict[int, str]],
                large_k: int, finals: Optional[dict[str, dict[int, EvalResult]]] = None) -> dict[str, Any]:
    """max@1 and max@`large_k` against the RL step, from the periodic evaluations in each run's
    ``<rl_dir>/metrics.jsonl`` (``rl_dirs[method][seed]``): per method the steps, the per-seed
    values and their mean / std (ddof=0) per k. When `final_eval_extends_curves`, the base
    model's values on the same problems are the step-0 point, and a run that did not evaluate
    after its last step (``rl.eval.at_end=False``) gets that point (step ``rl.max_steps``) from its
    final evaluation ``finals[method][seed]`` on the same first problems. Returns
    ``{"ks", "num_problems", "base": {k: value} | None, "methods": {name: {"steps", "mean", "std",
    "per_seed"}}}``."""
    ks = [1, large_k]
    limit = in_loop_problems(cfg)
    extends = final_eval_extends_curves(cfg) and limit <= len(base.problems)

    def prefix_means(result: EvalResult) -> dict[int, float]:
        per = result.per_problem()["max_at_k"]
        return {k: float(np.nanmean(per[:limit, result.ks.index(k)])) for k in ks}

    out: dict[str, Any] = {"ks": ks, "num_problems": limit, "base": None, "methods": {}}
    for method, by_seed in rl_dirs.items():
        per_seed: dict[str, dict[int, list[float]]] = {}
        steps: list[int] | None = None
        for seed, rl_dir in by_seed.items():
            evals = [r for r in read_metrics(os.path.join(rl_dir, "metrics.jsonl"))
                     if r.get(f"eval/max_at_k/{large_k}") is not None]
            these = [int(r["step"]) for r in evals]
            values = {k: [float(r[f"eval/max_at_k/{k}"]) for r in evals] for k in ks}
            final = (finals or {}).get(method, {}).get(seed)
            if extends and final is not None and cfg.rl.max_steps not in these:
                these.append(cfg.rl.max_steps)
                for k, v in prefix_means(final).items():
                    values[k].append(v)
            if not these:
                raise ValueError(f"{rl_dir!r} has no periodic evaluation with max@{large_k} (rl.eval.ks)")
            if steps is not None and these != steps:
                raise ValueError(f"{method}: seeds were evaluated at different steps ({steps} vs {these})")
            steps = these
            per_seed[str(seed)] = values
        stacked = {k: np.array([v[k] for v in per_seed.values()]) for k in ks}   # [S, E]
        out["methods"][method] = {"steps": steps, "per_seed": per_seed,
                                  "mean": {k: stacked[k].mean(0).tolist() for k in ks},
                                  "std": {k: stacked[k].std(0).tolist() for k in ks}}
    if extends:
        out["base"] = prefix_means(base)
    return out


def _cell(entry: dict[str, Any], metric: str, k: int) -> str:
    mean = entry[metric]["mean"][k]
    std = entry[metric]["std"]
    ci = (entry[metric].get("ci") or {}).get(k)
    cell = f"{mean:.3f}" if std is None else f"{mean:.3f} ± {std[k]:.3f}"
    return cell if ci is None else f"{cell} [{ci[0]:.3f}, {ci[1]:.3f}]"


def _pval(test: dict[str, Any]) -> str:
    p = test["p_value"]
    if p is None:
        return "n/a"
    sign = "" if test["mean_diff"] is None else ("+" if test["mean_diff"] > 0 else "-" if test["mean_diff"] < 0 else "=")
    return (f"{p:.2g}" if p < 0.001 else f"{p:.3f}") + f" ({sign})"


def results_markdown(agg: dict[str, Any], setup: Sequence[str]) -> str:
    """results.md of an `aggregate` output: the Table 2/3 analogue (after the `setup` bullet
    lines), the update-size table when training statistics are present, the p-value legend, then
    max@k and pass@k for every power-of-two k."""
    ks, big = agg["ks"], agg["large_k"]
    methods = agg["methods"]
    best = {(m, k): max(methods[n][m]["mean"][k] for n in methods) for m in ("max_at_k", "pass_at_k") for k in (1, big)}
    reference = agg.get("reference", REFERENCE)
    tests = agg["wilcoxon_vs_" + reference]
    head = ["Method", "seeds", "max@1", f"max@{big}", "pass@1", f"pass@{big}", "p max@1", f"p max@{big}"]
    lines = ["# Method comparison (max@k paper, Tables 2-3, at laptop scale)", "", *setup, "",
             "| " + " | ".join(head) + " |", "|:--" + "|--:" * (len(head) - 1) + "|"]
    for name, entry in methods.items():
        cells = ["—" if name == "base" else str(len(entry["max_at_k"]["per_seed"]))]
        for metric, k in (("max_at_k", 1), ("max_at_k", big), ("pass_at_k", 1), ("pass_at_k", big)):
            c = _cell(entry, metric, k)
            cells.append(f"**{c}**" if np.isclose(entry[metric]["mean"][k], best[(metric, k)]) else c)
        if name == reference:
            cells += ["—", "—"]
        else:
            cells += [_pval(tests[name]["max_at_k"][1]), _pval(tests[name]["max_at_k"][big])]
        label = f"{name} (paper's method)" if name == REFERENCE else name
        label = f"{label} (reference of the tests)" if name == reference != REFERENCE else label
        lines.append("| " + " | ".join([label] + cells) + " |")
    if any("train" in e for e in methods.values()):
        lines += ["", "## Update size (the same learning rate for every method)", "",
                  "| Method | KL to reference (last step) | grad norm (mean) | update norm (mean) | PPO clip fraction | "
                  "share of samples with abs(delta) > 1 |", "|:--|--:|--:|--:|--:|--:|"]
        for name, entry in methods.items():
            if "train" in entry:
                t = entry["train"]
                lines.append(f"| {name} | " + " | ".join(f"{t[key]['mean']:.4f} ± {t[key]['std']:.4f}"
                                                         for key in TRAIN_STATS) + " |")
    shown = [k for k in ks if k & (k - 1) == 0 or k == ks[-1]]       # powers of two (+ n/2)
    lines += ["", f"Values: dataset mean over {agg['num_problems']} test problems; mean ± std over RL seeds (the base "
              "model is evaluated once); [low, high]: 95 % bootstrap interval over problems and seeds. Only k <= n/2 "
              "is reported. Bold: best mean in the column. p: two-sided Wilcoxon signed-rank test of "
              f"{reference} vs the row, paired over problems (per-problem unbiased max@k averaged over seeds); the sign "
              f"says whether {reference} is higher (+) or lower (-) on average.", "",
              "## max@k for every k (mean over seeds)", "",
              "| Method | " + " | ".join(f"max@{k}" for k in shown) + " |", "|:--" + "|--:" * len(shown) + "|"]
    for name, entry in methods.items():
        lines.append(f"| {name} | " + " | ".join(f"{entry['max_at_k']['mean'][k]:.3f}" for k in shown) + " |")
    lines += ["", "## pass@k (mean over seeds)", "",
              "| Method | " + " | ".join(f"pass@{k}" for k in shown) + " |", "|:--" + "|--:" * len(shown) + "|"]
    for name, entry in methods.items():
        lines.append(f"| {name} | " + " | ".join(f"{entry['pass_at_k']['mean'][k]:.3f}" for k in shown) + " |")
    return "\n".join(lines) + "\n"


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
    from maxk_jax.rl import loop as rl_loop

    cfg = dataclasses.replace(cfg, name=name)
    n = cfg.eval.sampler.n
    top = max_reported_k(n)
    methods, large_k = check_comparison(cfg, methods, seeds, method_table=method_table, large_k=large_k,
                                        reference=reference, overwrite=overwrite, finished_only=finished_only)
    out_dir = os.path.abspath(os.path.join(cfg.runs_dir, name))
    settings = comparison_settings(cfg, methods, seeds, large_k)
    settings_path = os.path.join(out_dir, "compare_config.json")
    if os.path.isdir(out_dir) and overwrite:
        shutil.rmtree(out_dir)
    os.makedirs(out_dir, exist_ok=True)
    write_json(settings_path, settings)
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
                evaluated_already = os.path.isfile(os.path.join(eval_dir, "summary.json"))
                if finished_only and not evaluated_already:
                    unfinished.append(f"{method} seed {seed}")
                    continue
                if not evaluated_already:
                    saved = checkpoint_steps(rl_dir)
                    if cfg.rl.max_steps not in saved:
                        if not saved:
                            shutil.rmtree(run_dir, ignore_errors=True)  # an interrupted run restarts cleanly
                        run_cfg = dataclasses.replace(apply_method(cfg, method, method_table), seed=seed)
                        rcfg = dataclasses.replace(rl_config(run_cfg, model_path, rl_dir, train_path),
                                                   name=f"{method}/seed{seed}")
                        if final_eval_extends_curves(run_cfg):   # the final evaluation below scores it
                            rcfg = replace_fields(rcfg, {"eval.at_end": False})
                        label = f"rl {method} seed {seed}" + (f" (resumed at step {max(saved)})" if saved else "")
                        timer.run(label, lambda: rl_loop.run(rcfg, executor=judge, progress=progress,
                                                             resume=bool(saved)))
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
    rl = cfg.rl
    setup = [f"- base: {base_record['param_count']:,}-parameter tiny Qwen2 after {cfg.warmup.config.steps} warm-up "
             f"steps "
             f"(`{model_path}`)",
             f"- every method: {rl.max_steps} RL steps x {rl.rollout.prompts} problems x n = {rl.rollout.sampler.n}, k = "
             f"{rl.algo.k}, lr {rl.optim.learning_rate}, {rl.algo.ppo_iterations} PPO iterations, KL beta "
             f"{rl.algo.loss.kl_beta}, seeds {list(seeds)}"
             + (f" (finished runs only; not finished: {', '.join(unfinished)})" if unfinished else ""),
             f"- evaluation: {len(problems)} synthetic test problems, n = {n} samples per problem (same sample "
             f"keys for every model), temperature {cfg.eval.sampler.temperature}",
             (f"- judge: {judge.stats['judged']} distinct programs judged for {judge.stats['submissions']} "
              "submissions in this invocation" if uses_judge_cache(cfg) else
              "- judge: every submission judged (executor_cache off)")]
    results = os.path.join(out_dir, "results.md")
    with open(results, "w", encoding="utf-8") as f:
        f.write(results_markdown(agg, setup))
    write_json(os.path.join(out_dir, "results.json"), {**agg, "curves": curves, "timings": timer.phases,
                                                       "unfinished": unfinished})
    if curves:
        plot_eval_curves(curves, os.path.join(out_dir, "curves.png"),
                         f"during RL: max@k on the first {curves['num_problems']} test problems (mean ± std over seeds)")
    plot = os.path.join(out_dir, "max_at_k.png")
    counts = sorted({len(r) for r in runs.values()})
    seeds_text = str(counts[0]) if len(counts) == 1 else f"{counts[0]}–{counts[-1]}"
    plot_max_at_k(agg, plot, f"max@k after {rl.max_steps} RL steps (mean over {seeds_text} seeds)")
    plot_frontier(agg, os.path.join(out_dir, "frontier.png"))
    return {"out_dir": out_dir, "results": results, "plot": plot, "aggregate": agg, "timings": timer.phases}

