r"""The paper's comparison (Tables 2-3) at laptop scale: every method, same budget, several seeds.

    nohup .venv/bin/python -m experiments.compare_methods --seeds=0,1 > compare.log 2>&1 &
    .venv/bin/python -m experiments.compare_methods --methods=grpo,maxk_offpolicy --seeds=0 \
        --config.rl.max_steps=10 --name=quick

Every method of the max@k paper's Table 2 -- ``bon_max_second``, ``bon_max_mean``, ``bon_loo1``,
``bon_mean``, ``maxk_offpolicy`` (the paper's off-policy BoN) -- plus plain ``grpo`` (reward
maximisation, the trade-off's reference) and ``maxk_offpolicy_exact`` (eq. 10 without the
first-order approximation) is trained with the RL loop from the SAME warmed-up base checkpoint
(experiments/tiny_pipeline.py, cached) with identical settings (``--config`` = the tiny pipeline
config: steps, prompts, n, k, learning rate, PPO iterations, KL), once per seed (the seed sets the
RL sampling keys and data order). Each trained model and the base model are evaluated on the same
test problems with the same n samples per problem and the SAME sample keys.

Outputs in ``<runs_dir>/<name>/``:
  results.md     the Table 2/3 analogue: max@1 and max@K (K = --large_k, default eval n) and pass@1 /
                 pass@K per method as mean +- std over seeds, and two-sided Wilcoxon signed-rank
                 p-values of maxk_offpolicy against every other method (paired over problems; each
                 problem's value is its mean over seeds); then max@k for every k.
  results.json   all numbers (per seed, per k); max_at_k.png: max@k vs k per method (mean over
                 seeds, band = +-1 std over seeds), base model dashed.
  <method>/seed<s>/{rl,eval}   the RL run and its evaluation; base/ the base evaluation.
Finished (method, seed) runs are skipped when the command is repeated (resumable), as long as the
settings are unchanged (checked against ``compare_config.json``).
"""
from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
from absl import app, flags, logging
from ml_collections import ConfigDict, config_flags

from experiments import tiny_pipeline as tp
from experiments.configs import base as base_config
from maxk_jax import config_overrides

TABLE2_METHODS = ("grpo", "bon_max_second", "bon_max_mean", "bon_loo1", "bon_mean", "maxk_offpolicy",
                  "maxk_offpolicy_is", "maxk_offpolicy_exact")
REFERENCE = "maxk_offpolicy"
# Methods are the entries of experiments/configs/base.py's METHODS table (estimator, loss form,
# options), the comparison-only variants below, or any other registry estimator name (its defaults,
# loss form "auto").  Variants: name -> (METHODS entry, extra estimator options, rl config overrides).
# They put points on the max@k-vs-KL frontier: the same estimators with smaller steps.
VARIANTS: dict[str, tuple[str, dict[str, Any], dict[str, Any]]] = {
    # the former default of maxk_offpolicy: unbiased LOO-1 baseline, §3.3 IS-weighted loss
    "maxk_offpolicy_loo1_is": ("maxk_offpolicy_is", {"baseline": "loo1"}, {}),
    # GRPO with half the learning rate (a smaller step at the same number of RL steps)
    "grpo_lowlr": ("grpo", {}, {"optim.learning_rate": 1.5e-4}),
}
# Per-run training statistics read from the RL run's metrics.jsonl (see ``training_stats``).
TRAIN_STATS = ("kl_ref_final", "grad_norm_mean", "clip_fraction_mean", "delta_gt_1_fraction_mean")


def method_spec(method: str) -> tuple[str, str, dict[str, Any], dict[str, Any]]:
    """(estimator, loss_kind, estimator options, rl config overrides) of a comparison method name."""
    if method in VARIANTS:
        parent, extra, overrides = VARIANTS[method]
        estimator, loss_kind, options = base_config.METHODS[parent]
        return estimator, loss_kind, {**options, **extra}, dict(overrides)
    estimator, loss_kind, options = base_config.METHODS.get(method, (method, "auto", {}))
    return estimator, loss_kind, dict(options), {}


def apply_method(cfg: ConfigDict, method: str) -> None:
    """Set the RL estimator, loss form, estimator options and the method's rl overrides (dotted
    paths under ``cfg.rl``) of `cfg` (the tiny config) in place."""
    estimator, loss_kind, options, overrides = method_spec(method)
    cfg.rl.algo.estimator = estimator
    cfg.rl.algo.loss_kind = loss_kind
    cfg.rl.algo.estimator_options_json = json.dumps(options, sort_keys=True)
    for path, value in overrides.items():
        *parents, leaf = path.split(".")
        node = cfg.rl
        for part in parents:
            node = node[part]
        if leaf not in node:
            raise ValueError(f"method {method!r} overrides rl.{path}, which the config does not have")
        node[leaf] = value

FLAGS = flags.FLAGS


def define_flags() -> None:
    """Define the command-line flags (called by ``__main__`` only)."""
    with config_overrides.explained_errors("config", tp._CONFIG):  # unknown --config.x: clear error
        config_flags.DEFINE_config_file("config", tp._CONFIG, "Shared settings of every run (the tiny pipeline config); "
                                        "override with --config.<field>=<value>.", lock_config=False)
    flags.DEFINE_list("methods", list(TABLE2_METHODS), "Estimators to compare (must include maxk_offpolicy, the "
                      "reference of the Wilcoxon tests).")
    flags.DEFINE_list("seeds", ["0", "1"], "RL seeds (sampling keys and data order); each method runs once per seed.")
    flags.DEFINE_string("name", "compare_methods", "Output directory name under the runs directory.")
    flags.DEFINE_string("runs_dir", None, "Runs directory (default: config.runs_dir); the base-model cache is shared "
                        "with experiments.tiny_pipeline.")
    flags.DEFINE_integer("large_k", None, "The 'large k' column of the table (default: config.eval.n).")
    flags.DEFINE_bool("overwrite", False, "Delete earlier results of this comparison instead of resuming them.")
    flags.DEFINE_bool("progress", True, "Show tqdm progress bars for warm-up, RL and evaluation.")


def parse_seeds(values: Sequence[str]) -> list[int]:
    """Seeds from the flag list: distinct ints >= 0 (ValueError naming the bad entry)."""
    seeds = []
    for v in values:
        try:
            s = int(v)
        except (TypeError, ValueError):
            raise ValueError(f"--seeds entry {v!r} is not an int") from None
        if s < 0:
            raise ValueError(f"--seeds entry {s} must be >= 0")
        seeds.append(s)
    if not seeds or len(set(seeds)) != len(seeds):
        raise ValueError(f"--seeds must be a non-empty list of distinct ints, got {list(values)}")
    return seeds


def validate_methods(methods: Sequence[str], cfg: ConfigDict) -> list[str]:
    """Known, distinct estimator names including the reference; each validated with the RL config."""
    methods = list(methods)
    if len(set(methods)) != len(methods) or len(methods) < 2:
        raise ValueError(f"--methods must list at least two distinct estimators, got {methods}")
    if REFERENCE not in methods:
        raise ValueError(f"--methods must include {REFERENCE!r} (the reference of the Wilcoxon tests), got {methods}")
    for m in methods:
        c = ConfigDict(cfg.to_dict())
        apply_method(c, m)
        tp.validate(c)
    return methods


def training_stats(rl_dir: str) -> dict[str, float]:
    """Update-size statistics of one RL run from ``<rl_dir>/metrics.jsonl``: KL to the reference
    (initial) policy at the last step (``ppo/kl_ref``), mean grad norm before clipping, mean PPO clip
    fraction and mean fraction of samples with |rho - 1| > 1 (sequence level), over steps."""
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
            "grad_norm_mean": mean("ppo/grad_norm"), "clip_fraction_mean": mean("ppo/clip_fraction"),
            "delta_gt_1_fraction_mean": mean("ppo/is_delta_gt_1_fraction")}


# ----------------------------------------------------------------------------------------------
# Aggregation
# ----------------------------------------------------------------------------------------------
def aggregate(base: Any, runs: dict[str, dict[int, Any]], large_k: int,
              train_stats: dict[str, dict[int, dict[str, float]]] | None = None) -> dict[str, Any]:
    """Table numbers from EvalResults: ``runs[method][seed]``, `base` (one result). Per method and
    metric: dataset mean per seed, mean and std (ddof=0) over seeds for every k; Wilcoxon tests of
    REFERENCE vs every other row on seed-averaged per-problem values."""
    from maxk_jax.eval.compare import wilcoxon_test

    ks = list(base.ks)
    if large_k not in ks:
        raise ValueError(f"large_k={large_k} is not one of the evaluated k values {ks}")
    ids = base.ids

    def per_problem(result: Any) -> dict[str, np.ndarray]:
        if result.ids != ids:
            raise ValueError("evaluation results cover different problems or orders")
        return result.per_problem()

    rows: dict[str, Any] = {"base": {"seeds": {}, "per_problem": per_problem(base)}}
    for method, by_seed in runs.items():
        pp = {s: per_problem(r) for s, r in by_seed.items()}
        rows[method] = {"seeds": pp,
                        "per_problem": {m: np.mean([p[m] for p in pp.values()], axis=0) for m in ("pass_at_k", "max_at_k")}}
    out: dict[str, Any] = {"ks": ks, "large_k": large_k, "num_problems": len(ids), "methods": {}}
    for name, row in rows.items():
        entry: dict[str, Any] = {}
        for metric in ("pass_at_k", "max_at_k"):
            per_seed = ({s: np.nanmean(p[metric], axis=0) for s, p in row["seeds"].items()} if row["seeds"]
                        else {"base": np.nanmean(row["per_problem"][metric], axis=0)})
            values = np.array(list(per_seed.values()))  # [S, K]
            entry[metric] = {"mean": dict(zip(ks, values.mean(0).tolist())),
                             "std": dict(zip(ks, values.std(0).tolist())) if row["seeds"] else None,
                             "per_seed": {str(s): dict(zip(ks, v.tolist())) for s, v in per_seed.items()}}
        if train_stats and name in train_stats:
            by_seed = train_stats[name]
            entry["train"] = {key: {"mean": float(np.mean([st[key] for st in by_seed.values()])),
                                    "std": float(np.std([st[key] for st in by_seed.values()])),
                                    "per_seed": {str(sd): st[key] for sd, st in by_seed.items()}}
                              for key in TRAIN_STATS}
        out["methods"][name] = entry
    ref = rows[REFERENCE]["per_problem"]
    out["wilcoxon_vs_" + REFERENCE] = {
        name: {metric: {k: wilcoxon_test(row["per_problem"][metric][:, j], ref[metric][:, j])
                        for j, k in enumerate(ks) if k in (1, large_k)} for metric in ("pass_at_k", "max_at_k")}
        for name, row in rows.items() if name != REFERENCE}
    return out


def _cell(entry: dict[str, Any], metric: str, k: int) -> str:
    mean = entry[metric]["mean"][k]
    std = entry[metric]["std"]
    return f"{mean:.3f}" if std is None else f"{mean:.3f} ± {std[k]:.3f}"


def _pval(test: dict[str, Any]) -> str:
    p = test["p_value"]
    if p is None:
        return "n/a"
    sign = "" if test["mean_diff"] is None else ("+" if test["mean_diff"] > 0 else "-" if test["mean_diff"] < 0 else "=")
    return (f"{p:.2g}" if p < 0.001 else f"{p:.3f}") + f" ({sign})"


def results_markdown(agg: dict[str, Any], setup: list[str]) -> str:
    """results.md: the Table 2/3 analogue, the p-value legend, then max@k for every k."""
    ks, big = agg["ks"], agg["large_k"]
    methods = agg["methods"]
    best = {(m, k): max(methods[n][m]["mean"][k] for n in methods) for m in ("max_at_k", "pass_at_k") for k in (1, big)}
    tests = agg["wilcoxon_vs_" + REFERENCE]
    head = ["Method", "max@1", f"max@{big}", "pass@1", f"pass@{big}", "p max@1", f"p max@{big}"]
    lines = ["# Method comparison (max@k paper, Tables 2-3, at laptop scale)", "", *setup, "",
             "| " + " | ".join(head) + " |", "|:--" + "|--:" * (len(head) - 1) + "|"]
    for name, entry in methods.items():
        cells = []
        for metric, k in (("max_at_k", 1), ("max_at_k", big), ("pass_at_k", 1), ("pass_at_k", big)):
            c = _cell(entry, metric, k)
            cells.append(f"**{c}**" if np.isclose(entry[metric]["mean"][k], best[(metric, k)]) else c)
        if name == REFERENCE:
            cells += ["—", "—"]
        else:
            cells += [_pval(tests[name]["max_at_k"][1]), _pval(tests[name]["max_at_k"][big])]
        label = f"{name} (paper's method)" if name == REFERENCE else name
        lines.append("| " + " | ".join([label] + cells) + " |")
    if any("train" in e for e in methods.values()):
        lines += ["", "## Update size (the same learning rate for every method)", "",
                  "| Method | KL to reference (last step) | grad norm (mean) | PPO clip fraction | "
                  "share of samples with abs(delta) > 1 |", "|:--|--:|--:|--:|--:|"]
        for name, entry in methods.items():
            if "train" in entry:
                t = entry["train"]
                lines.append(f"| {name} | " + " | ".join(f"{t[key]['mean']:.4f} ± {t[key]['std']:.4f}"
                                                         for key in TRAIN_STATS) + " |")
    shown = [k for k in ks if k & (k - 1) == 0 or k == ks[-1]]       # powers of two (+ n)
    lines += ["", f"Values: dataset mean over {agg['num_problems']} test problems; mean ± std over RL seeds (the base "
              "model is evaluated once). Bold: best mean in the column. p: two-sided Wilcoxon signed-rank test of "
              f"{REFERENCE} vs the row, paired over problems (per-problem unbiased max@k averaged over seeds); the sign "
              f"says whether {REFERENCE} is higher (+) or lower (-) on average.", "",
              "## max@k for every k (mean over seeds)", "",
              "| Method | " + " | ".join(f"max@{k}" for k in shown) + " |", "|:--" + "|--:" * len(shown) + "|"]
    for name, entry in methods.items():
        lines.append(f"| {name} | " + " | ".join(f"{entry['max_at_k']['mean'][k]:.3f}" for k in shown) + " |")
    lines += ["", "## pass@k (mean over seeds)", "",
              "| Method | " + " | ".join(f"pass@{k}" for k in shown) + " |", "|:--" + "|--:" * len(shown) + "|"]
    for name, entry in methods.items():
        lines.append(f"| {name} | " + " | ".join(f"{entry['pass_at_k']['mean'][k]:.3f}" for k in shown) + " |")
    return "\n".join(lines) + "\n"


def plot_max_at_k(agg: dict[str, Any], path: str, title: str) -> None:
    """One figure: max@k vs k per method (left) and its difference to the base model (right), log2 k
    axis; mean over seeds with a +-1 std band; base dashed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ks = agg["ks"]
    base = np.array([agg["methods"]["base"]["max_at_k"]["mean"][k] for k in ks])
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.6))
    for name, entry in agg["methods"].items():
        mean = np.array([entry["max_at_k"]["mean"][k] for k in ks])
        std = (np.array([entry["max_at_k"]["std"][k] for k in ks]) if entry["max_at_k"]["std"] is not None
               else None)
        style = dict(ls="--", color="black") if name == "base" else dict(marker="o" if len(ks) <= 16 else None,
                                                                          ms=3, lw=2.2 if name == REFERENCE else 1.2)
        for ax, y in zip(axes, (mean, mean - base)):
            line, = ax.plot(ks, y, label=name, **style)
            if std is not None:
                ax.fill_between(ks, y - std, y + std, color=line.get_color(), alpha=0.12, linewidth=0)
    ticks = [k for k in ks if k & (k - 1) == 0]
    for ax, label in zip(axes, ("max@k", "max@k - base max@k")):
        ax.set_xscale("log", base=2)
        ax.set_xticks(ticks, [str(k) for k in ticks])
        ax.set(xlabel="k", ylabel=label)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_frontier(agg: dict[str, Any], path: str) -> None:
    """max@1 and max@K against KL to the reference policy at the last RL step, one point per
    (method, seed) and a larger marker at each method's mean: the frontier view that separates a
    better estimator from a larger step (the base model sits at KL = 0)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    big = agg["large_k"]
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.6))
    base = agg["methods"]["base"]
    for ax, k in zip(axes, (1, big)):
        ax.scatter([0.0], [base["max_at_k"]["mean"][k]], marker="*", s=140, color="black", label="base")
        for name, entry in agg["methods"].items():
            if "train" not in entry:
                continue
            kl = entry["train"]["kl_ref_final"]["per_seed"]
            ys = entry["max_at_k"]["per_seed"]
            seeds = [sd for sd in kl if sd in ys]
            pts = ax.scatter([kl[sd] for sd in seeds], [ys[sd][k] for sd in seeds], s=18, alpha=0.6)
            ax.scatter([np.mean([kl[sd] for sd in seeds])], [entry["max_at_k"]["mean"][k]], s=90,
                       color=pts.get_facecolor()[0], edgecolor="black", label=name)
        ax.set(xlabel="KL(policy || reference) at the last RL step", ylabel=f"max@{k}")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle("max@k against the distance moved (one small point per seed, large = mean)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


# ----------------------------------------------------------------------------------------------
# Driver
# ----------------------------------------------------------------------------------------------
def _settings(cfg: ConfigDict, methods: Sequence[str], seeds: Sequence[int], large_k: int) -> dict[str, Any]:
    shared = {k: v for k, v in cfg.to_dict().items() if k not in ("name", "runs_dir")}
    for key in ("estimator", "loss_kind", "estimator_options_json"):   # set per method
        shared["rl"]["algo"].pop(key, None)
    return {"config": shared, "methods": list(methods), "seeds": list(seeds), "large_k": large_k}


def run_comparison(cfg: ConfigDict, methods: Sequence[str], seeds: Sequence[int], *, name: str,
                   large_k: int | None = None, overwrite: bool = False, progress: bool = True,
                   executor: Any = None) -> dict[str, Any]:
    """Train and evaluate every (method, seed); write results.md / results.json / max_at_k.png.
    Returns ``{"out_dir", "results", "plot", "aggregate", "timings"}``."""
    from maxk_jax.rl import loop as rl_loop
    from maxk_jax.eval.report import read_report
    from maxk_jax.execution import make_executor
    from maxk_jax.models import convert
    from maxk_jax.models.tokenizer import load_tokenizer

    cfg = ConfigDict(cfg.to_dict())
    cfg.name = name
    large_k = cfg.eval.n if large_k is None else large_k
    if cfg.data.dataset != "synthetic" or cfg.model.path:
        raise ValueError("compare_methods runs on the synthetic task from the tiny warmed-up model; "
                         "unset data.dataset / model.path")
    methods = validate_methods(methods, cfg)
    if not isinstance(large_k, int) or not 1 <= large_k <= cfg.eval.n:
        raise ValueError(f"large_k={large_k!r} must be an int in [1, eval.n={cfg.eval.n}]")
    out_dir = os.path.abspath(os.path.join(cfg.runs_dir, name))
    settings = _settings(cfg, methods, seeds, large_k)
    settings_path = os.path.join(out_dir, "compare_config.json")
    if os.path.isdir(out_dir) and overwrite:
        shutil.rmtree(out_dir)
    if os.path.isfile(settings_path):
        with open(settings_path, encoding="utf-8") as f:
            old = json.load(f)
        if old["config"] != settings["config"]:
            raise ValueError(f"{out_dir!r} holds a comparison with different settings; pass --overwrite or "
                             "another --name")
    os.makedirs(out_dir, exist_ok=True)
    tp.write_json(settings_path, settings)
    cache_root = os.path.abspath(os.path.join(cfg.runs_dir, "_cache"))
    timer = tp.PhaseTimer()
    own = executor is None
    inner = make_executor(cfg.executor) if own else executor
    judge = tp.CachingExecutor(inner) if tp.uses_judge_cache(cfg) else inner
    try:
        train_path, train, test = timer.run("data", lambda: tp.prepare_data(cfg, cache_root))
        model_path, base_record, _ = timer.run("base model", lambda: tp.prepare_base(cfg, train, cache_root,
                                                                                      progress=progress))
        tokenizer = load_tokenizer(model_path)
        model_config, base_params = convert.load_hf(model_path)
        problems = tp.eval_problems(cfg, test, tokenizer)

        def evaluated(directory: str, params_fn: Any, label: str) -> Any:
            if os.path.isfile(os.path.join(directory, "summary.json")):
                return read_report(directory)[0]
            return timer.run(f"eval {label}", lambda: tp.evaluate_model(
                cfg, model_config, params_fn(), tokenizer, problems, judge, directory, label, progress=progress,
                ks=tuple(range(1, cfg.eval.n + 1))))

        base = evaluated(os.path.join(out_dir, "base"), lambda: base_params, "base")
        runs: dict[str, dict[int, Any]] = {m: {} for m in methods}
        stats: dict[str, dict[int, dict[str, float]]] = {m: {} for m in methods}
        for seed in seeds:
            for method in methods:
                run_dir = os.path.join(out_dir, method, f"seed{seed}")
                eval_dir, rl_dir = os.path.join(run_dir, "eval"), os.path.join(run_dir, "rl")
                if not os.path.isfile(os.path.join(eval_dir, "summary.json")):
                    final = os.path.join(rl_dir, "checkpoints", str(cfg.rl.max_steps))
                    if not os.path.isdir(final):
                        shutil.rmtree(run_dir, ignore_errors=True)  # an interrupted run restarts cleanly
                        run_cfg = ConfigDict(cfg.to_dict())
                        run_cfg.seed = seed
                        apply_method(run_cfg, method)
                        rcfg = tp.rl_config(run_cfg, model_path, rl_dir, train_path)
                        rcfg.name = f"{method}/seed{seed}"
                        timer.run(f"rl {method} seed {seed}", lambda: rl_loop.run(rcfg, executor=judge,
                                                                                 progress=progress))
                runs[method][seed] = evaluated(eval_dir, lambda: tp.load_trained(rl_dir, model_path).params,
                                               f"{method} seed {seed}")
                stats[method][seed] = training_stats(rl_dir)
        agg = aggregate(base, runs, large_k, stats)
    finally:
        if own:
            judge.close()
    rl = cfg.rl
    setup = [f"- base: {base_record['param_count']:,}-parameter tiny Qwen2 after {cfg.warmup.steps} warm-up steps "
             f"(`{model_path}`)",
             f"- every method: {rl.max_steps} RL steps x {rl.rollout.prompts} problems x n = {rl.rollout.n}, k = "
             f"{rl.algo.k}, lr {rl.optim.learning_rate}, {rl.algo.ppo_iterations} PPO iterations, KL beta "
             f"{rl.algo.kl_beta}, seeds {list(seeds)}",
             f"- evaluation: {len(problems)} synthetic test problems, n = {cfg.eval.n} samples per problem (same sample "
             f"keys for every model), temperature {cfg.eval.temperature}",
             (f"- judge: {judge.stats['judged']} distinct programs judged for {judge.stats['submissions']} "
              "submissions in this invocation" if tp.uses_judge_cache(cfg) else
              "- judge: every submission judged (executor_cache off)")]
    results = os.path.join(out_dir, "results.md")
    with open(results, "w", encoding="utf-8") as f:
        f.write(results_markdown(agg, setup))
    tp.write_json(os.path.join(out_dir, "results.json"), {**agg, "timings": timer.phases})
    plot = os.path.join(out_dir, "max_at_k.png")
    plot_max_at_k(agg, plot, f"max@k after {rl.max_steps} RL steps (mean over {len(seeds)} seeds)")
    plot_frontier(agg, os.path.join(out_dir, "frontier.png"))
    return {"out_dir": out_dir, "results": results, "plot": plot, "aggregate": agg, "timings": timer.phases}


def main(argv: Sequence[str]) -> None:
    """absl entry point."""
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    cfg = tp.apply_flags(FLAGS.config, runs_dir=FLAGS.runs_dir)
    seeds = parse_seeds(FLAGS.seeds)
    start = time.perf_counter()
    out = run_comparison(cfg, FLAGS.methods, seeds, name=FLAGS.name, large_k=FLAGS.large_k,
                         overwrite=FLAGS.overwrite, progress=FLAGS.progress)
    logging.info("comparison done")
    print(f"\nDone in {time.perf_counter() - start:.0f} s.\nTable: {out['results']}\nPlot: {out['plot']}")


if __name__ == "__main__":
    define_flags()
    app.run(main, flags_parser=config_overrides.parse_flags)
