r"""Compare two or more evaluation result directories (from experiments.evaluate).

    .venv/bin/python -m experiments.compare --runs=results/base_cc,results/grpo_cc,results/maxk_cc \
        --out_dir=results/compare_cc

Writes to --out_dir: comparison.md (pass@k and max@k per k, one row per run, like the paper's
Tables 5-14; then Wilcoxon signed-rank p-values per k of every run against the FIRST run, paired
over problems, two-sided; all-zero differences reported as p = 1 and marked), comparison.json
(the same numbers plus pair counts and mean differences) and comparison.png (all runs' pass@k
and max@k curves against k, log2 axis). See `maxk_jax.eval.compare`.
"""
from __future__ import annotations

import os

from absl import app, flags

from maxk_jax import cli

FLAGS = flags.FLAGS
flags.DEFINE_list("runs", None, "Comma-separated result directories (each with summary.json and "
                  "per_problem.jsonl); the first is the reference of the significance tests.")
flags.DEFINE_list("names", [], "Names of the runs in tables and plots (default: each run's name in summary.json).")
flags.DEFINE_string("out_dir", None, "Output directory for comparison.{md,json,png}.")
flags.DEFINE_bool("intersect", False, "Compare only the problems shared by all runs when their problem sets "
                  "differ (default: differing problem sets are an error).")
flags.DEFINE_string("title", "", "Title of the plot.")
flags.mark_flags_as_required(["runs", "out_dir"])


def main(argv: list[str]) -> None:
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    if len(FLAGS.runs) < 2:
        raise app.UsageError(f"--runs needs at least two result directories, got {FLAGS.runs}")
    if FLAGS.names and len(FLAGS.names) != len(FLAGS.runs):
        raise app.UsageError(f"--names has {len(FLAGS.names)} entries for {len(FLAGS.runs)} runs")
    from maxk_jax.cli import preflight
    from maxk_jax.eval.compare import compare_runs, write_comparison
    from maxk_jax.eval.report import SUMMARY, read_report

    with cli.user_errors():   # every check before work: one line per mistake
        for d in FLAGS.runs:
            if not os.path.isfile(os.path.join(d, SUMMARY)):
                raise ValueError(f"--runs entry {d!r} is not a finished evaluation directory (no {SUMMARY})")
        preflight.check_writable_dir(FLAGS.out_dir, "--out_dir")
        loaded = [read_report(d) for d in FLAGS.runs]
        names = list(FLAGS.names) or [name for _, name in loaded]
        if len(set(names)) != len(names):
            names = [f"{name} ({d})" for name, d in zip(names, FLAGS.runs)]
        comparison = compare_runs([r for r, _ in loaded], names, intersect=FLAGS.intersect)
    paths = write_comparison(comparison, FLAGS.out_dir, title=FLAGS.title)
    with open(paths["table"], encoding="utf-8") as f:
        print(f.read())
    print(f"results: {os.path.abspath(FLAGS.out_dir)}")


if __name__ == "__main__":
    cli.run_main(main)
