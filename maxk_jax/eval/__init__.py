"""Evaluation: sample n completions per problem -> judge -> unbiased pass@k / max@k per problem and
dataset, reports (JSONL, summary, table, plot), paired comparisons (Wilcoxon), checkpoint loading.

    result = evaluate(sampler, problems, executor=ex, key=jax.random.key(0), options=EvalOptions(ks=(1, 8, 32)))
    write_report(result, out_dir)

Modules: ``run`` (the entry point `evaluate`, the loop, completion sources, k values), ``result`` (EvalResult, per-problem
metrics), ``report`` (files), ``compare`` (paired tests, side-by-side tables), ``checkpoint``
(HF directories and orbax training checkpoints as evaluable models).  Judging completions lives
in ``maxk_jax.execution.completions`` (shared with the RL rollout).
"""
from maxk_jax.eval.compare import compare_runs, wilcoxon_test
from maxk_jax.eval.report import read_report, write_report
from maxk_jax.eval.result import METRICS, EvalResult, problem_metrics
from maxk_jax.eval.run import (EvalOptions, SamplerCompletionSource, StaticCompletionSource, check_ks, default_ks,
                               evaluate, run_evaluation)
from maxk_jax.execution.completions import STATUSES, Completions, ProblemResult, judge_completions

__all__ = [
    "METRICS", "STATUSES", "Completions", "EvalOptions", "EvalResult", "ProblemResult", "SamplerCompletionSource",
    "StaticCompletionSource", "check_ks", "compare_runs", "default_ks", "evaluate", "judge_completions", "problem_metrics", "read_report", "run_evaluation",
    "wilcoxon_test", "write_report",
]
