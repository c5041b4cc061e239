r"""The paper's comparison (Tables 2-3) at laptop scale: every method, same budget, several seeds.

    nohup .venv/bin/python -m experiments.compare_methods --seeds=0,1 > compare.log 2>&1 &
    .venv/bin/python -m experiments.compare_methods --methods=grpo,maxk_offpolicy --seeds=0 \
        --config.rl.max_steps=10 --name=quick

Every method of the max@k paper's Table 2 -- ``bon_max_second``, ``bon_max_mean``, ``bon_loo1``,
``bon_mean``, ``maxk_offpolicy`` (the paper's off-policy BoN) -- plus plain ``grpo`` (reward
maximisation, the trade-off's reference) and ``maxk_offpolicy_exact`` (eq. 10 without the
first-order approximation) is trained with the RL loop from the SAME warmed-up base checkpoint
(the tiny pipeline's, cached) with identical settings (``--config`` = the tiny pipeline config
experiments/configs/tiny.py: steps, prompts, n, k, learning rate, PPO iterations, KL), once per
seed (the seed sets the RL sampling keys and data order). Each trained model and the base model
are evaluated on the same test problems with the same n samples per problem and the SAME sample
keys. Methods are names of the method registry `maxk_jax.rl.method` (``METHODS``, its ``VARIANTS``;
the same names as ``--method`` of every entry point that trains, listed by ``--help``), e.g.
``--methods=grpo,maxk_offpolicy_exact_loo1_rms`` (the project's default method against GRPO). The work
is `maxk_jax.pipelines.compare.run_comparison`.

Outputs in ``<runs_dir>/<name>/``:
  results.md     the Table 2/3 analogue: max@1 and max@K (K = --large_k, default eval n/2) and pass@1 /
                 pass@K per method as mean +- std over seeds, and two-sided Wilcoxon signed-rank
                 p-values of the reference (--reference; default maxk_offpolicy_exact_loo1_rms when
                 listed, else the paper's maxk_offpolicy) against every other method (paired over problems; each
                 problem's value is its mean over seeds); then max@k for every k.
  results.json   all numbers (per seed, per k); max_at_k.png: max@k vs k per method (mean over
                 seeds, band = +-1 std over seeds), base model dashed; frontier.png: max@k vs KL;
                 curves.png (with --config.rl.eval.interval > 0): max@1 and max@K vs RL step.

The paper's Table 1 (GRPO on continuous and on binary rewards against the base model) on the
testbed:

    .venv/bin/python -m experiments.compare_methods --config=experiments/configs/tiny.py:testbed \
        --methods=grpo,grpo_binary --reference=base --seeds=0,1,2 --name=table1
  <method>/seed<s>/{rl,eval}   the RL run and its evaluation; base/ the base evaluation.
Finished (method, seed) runs are skipped when the command is repeated (resumable; ``--resume`` says so
and is refused when there is nothing to resume), as long as the settings are unchanged (checked against
``compare_config.json``); an interrupted RL run continues from its last checkpoint. Ctrl-C prints what
was saved. ``--aggregate_only`` writes the table and plots of the runs finished so far (any
number of seeds per method; the others are listed as not finished) and trains nothing.
"""
from __future__ import annotations

import os
import time
from collections.abc import Sequence

from absl import app, flags
from ml_collections import config_flags

from maxk_jax import cli
from maxk_jax.cli import config_overrides, preflight
from maxk_jax.cli import parse_seeds
from maxk_jax.pipelines import (DEFAULT_METHOD, REFERENCE, TABLE2_METHODS, default_reference, from_config_dict,
                                run_comparison, shortcut_overrides)
from maxk_jax.pipelines.compare import check_comparison, saved_runs
from maxk_jax.rl.method import check_method, method_names

CONFIG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "configs", "tiny.py")

FLAGS = flags.FLAGS


def define_flags() -> None:
    """Define the command-line flags (called by ``__main__`` only)."""
    with config_overrides.explained_errors("config", CONFIG):  # unknown --config.x: clear error
        config_flags.DEFINE_config_file("config", CONFIG, "Shared settings of every run (the tiny pipeline config); "
                                        "override with --config.<field>=<value>.", lock_config=False)
    flags.DEFINE_list("methods", list(TABLE2_METHODS), "Methods to compare, names of the registry "
                      "maxk_jax.rl.method (the --method names of every entry point that trains; default: the "
                      "paper's Table 2). Valid: " + ", ".join(method_names()) + ".")
    flags.DEFINE_string("reference", None, "The row the Wilcoxon tests compare every other row with: a method "
                        f"of --methods, or 'base' (the base model: the paper's Table 1 question). Default: "
                        f"{DEFAULT_METHOD} when listed, else {REFERENCE} (the paper's method) when listed, else "
                        "the first of --methods.")
    flags.DEFINE_list("seeds", ["0", "1"], "RL seeds (sampling keys and data order); each method runs once per seed.")
    flags.DEFINE_string("name", "compare_methods", "Output directory name under the runs directory.")
    flags.DEFINE_string("runs_dir", None, "Runs directory (default: config.runs_dir); the base-model cache is shared "
                        "with experiments.tiny_pipeline.")
    flags.DEFINE_integer("large_k", None, "The 'large k' column of the table (default and at most: config.eval.sampler.n / 2).")
    flags.DEFINE_bool("overwrite", False, "Delete earlier results of this comparison instead of resuming them.")
    flags.DEFINE_bool("resume", False, "Continue the interrupted comparison <runs_dir>/<name> (refused when there "
                      "is none): evaluated (method, seed) runs are kept, an interrupted RL run continues from its "
                      "newest checkpoint (every --config.rl.checkpoint.interval steps). Repeating the command "
                      "without it resumes as well.")
    flags.DEFINE_bool("aggregate_only", False, "Train and evaluate nothing: write the table and plots of the "
                      "(method, seed) runs already evaluated, listing the others as not finished.")
    flags.DEFINE_bool("progress", True, "Show tqdm progress bars for warm-up, RL and evaluation.")


def main(argv: Sequence[str]) -> None:
    """absl entry point: --config with --runs_dir applied (converted once to the typed
    `PipelineConfig`), the parsed seeds and the methods (names of the registry `maxk_jax.rl.method`),
    checked before any work (`check_comparison`), into `run_comparison`."""
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    with cli.user_errors():   # every check before work: one line per mistake
        cfg = from_config_dict(FLAGS.config, shortcut_overrides(runs_dir=FLAGS.runs_dir, name=FLAGS.name))
        seeds = parse_seeds(FLAGS.seeds)
        if FLAGS.aggregate_only and FLAGS.overwrite:
            raise ValueError("--aggregate_only reads the finished runs that --overwrite would delete: give one")
        for method in FLAGS.methods:
            check_method(method)
        reference = FLAGS.reference or default_reference(FLAGS.methods)
        check_comparison(cfg, FLAGS.methods, seeds, large_k=FLAGS.large_k, reference=reference,
                         overwrite=FLAGS.overwrite, finished_only=FLAGS.aggregate_only, resume=FLAGS.resume)
        preflight.check_writable_dir(cfg.runs_dir, "runs directory (--runs_dir)")
        preflight.check_executor(cfg.executor)
    out_dir = os.path.abspath(os.path.join(cfg.runs_dir, FLAGS.name))
    cli.on_interrupt(lambda: saved_runs(out_dir))
    start = time.perf_counter()
    out = run_comparison(cfg, FLAGS.methods, seeds, name=FLAGS.name, large_k=FLAGS.large_k, reference=reference,
                         overwrite=FLAGS.overwrite, progress=FLAGS.progress, finished_only=FLAGS.aggregate_only)
    print(f"\nDone in {time.perf_counter() - start:.0f} s.\nTable: {out['results']}\nPlot: {out['plot']}")


if __name__ == "__main__":
    define_flags()
    cli.run_main(main)
