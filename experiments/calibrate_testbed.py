r"""Calibrate a testbed: the base policy's large-k headroom for one pipeline config.

    .venv/bin/python -m experiments.calibrate_testbed --point=ops24 \
        --config.synthetic.min_ops=2 --config.synthetic.max_ops=4 --config.synthetic.num_test=96 \
        --config.eval.num_problems=96 --config.eval.sampler.n=256
    .venv/bin/python -m experiments.calibrate_testbed --print_table --table=runs/calibration.jsonl

Builds (or reuses, from ``<runs_dir>/_cache``) the synthetic split and the warmed-up base of the
config exactly as experiments/tiny_pipeline.py does, evaluates only the base (eval.sampler.n
samples on eval.num_problems test problems) and prints its headroom at --k: max@1, max@k, pass@1,
pass@k and the share of problems whose own pass@k is strictly inside (0.05, 0.95)
(`maxk_jax.pipelines.calibration.headroom`). One JSON line per point is appended to --table, the
calibration table of docs/results/testbed_calibration.md (``--print_table`` prints it as markdown); the point's per-problem
evaluation files go to ``<runs_dir>/calibration/<point>``.
"""
from __future__ import annotations

import json
import os
from collections.abc import Sequence

from absl import app, flags
from ml_collections import config_flags

from maxk_jax import cli
from maxk_jax.cli import config_overrides
from maxk_jax.pipelines import from_config_dict

CONFIG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "configs", "tiny.py")

FLAGS = flags.FLAGS


def define_flags() -> None:
    """Define the command-line flags (called by ``__main__`` only, so tests can import this module)."""
    with config_overrides.explained_errors("config", CONFIG):
        config_flags.DEFINE_config_file("config", CONFIG, "Pipeline config (ml_collections) of the point; "
                                        "override fields with --config.<field>=<value>.", lock_config=False)
    flags.DEFINE_string("point", "point", "Name of this calibration point (a row of --table).")
    flags.DEFINE_integer("k", 128, "k of the headroom statistics; needs eval.sampler.n >= 2k.", lower_bound=1)
    flags.DEFINE_string("table", None, "JSONL file to append this point's row to (default: "
                        "<runs_dir>/calibration.jsonl).")
    flags.DEFINE_bool("progress", True, "Show tqdm progress bars for warm-up and evaluation.")
    flags.DEFINE_bool("print_table", False, "Only print --table (JSONL of earlier points) as a markdown table.")


def changed_fields(cfg) -> dict[str, object]:
    """The pipeline fields of `cfg` that differ from the main job's defaults (dotted typed paths),
    i.e. what this calibration point tried."""
    from maxk_jax.pipelines import default_config, to_config_dict

    def flat(tree, prefix=""):
        for key, value in tree.items():
            if isinstance(value, dict):
                yield from flat(value, f"{prefix}{key}.")
            else:
                yield f"{prefix}{key}", value

    base = dict(flat(to_config_dict(default_config()).to_dict()))
    return {path: value for path, value in flat(to_config_dict(cfg).to_dict())
            if base.get(path) != value and not path.startswith("rl.")}


def main(argv: Sequence[str]) -> None:
    """absl entry point: the typed config, one calibration point, a printed summary and a table row."""
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    from maxk_jax.pipelines.calibration import calibrate_base, calibration_markdown

    with cli.user_errors():
        cfg = from_config_dict(FLAGS.config)
        table = FLAGS.table or os.path.join(cfg.runs_dir, "calibration.jsonl")
        if FLAGS.print_table:
            if not os.path.isfile(table):
                raise ValueError(f"--table {table!r} does not exist")
            with open(table, encoding="utf-8") as f:
                print(calibration_markdown([json.loads(line) for line in f if line.strip()]))
            return
        if not 1 <= 2 * FLAGS.k <= cfg.eval.sampler.n:
            raise ValueError(f"--k={FLAGS.k} needs eval.sampler.n >= 2k, got eval.sampler.n={cfg.eval.sampler.n}")
    row = {"point": FLAGS.point, "changed": changed_fields(cfg),
           **calibrate_base(cfg, FLAGS.k, progress=FLAGS.progress,
                          out_dir=os.path.join(cfg.runs_dir, "calibration", FLAGS.point))}
    os.makedirs(os.path.dirname(os.path.abspath(table)), exist_ok=True)
    with open(table, "a", encoding="utf-8") as f:
        f.write(json.dumps(row, default=str) + "\n")
    k = row["k"]
    print(f"\n{FLAGS.point}: {row['num_problems']} problems, n = {row['n']}: max@1 {row['max_at_1']:.3f}, "
          f"max@{k} {row['max_at_k']:.3f}, pass@1 {row['pass_at_1']:.3f}, pass@{k} {row['pass_at_k']:.3f}, "
          f"undecided at k={k}: {row['undecided_share']:.2f} -> target {'met' if row['target_met'] else 'NOT met'}"
          f"\nrow appended to {table}")


if __name__ == "__main__":
    define_flags()
    cli.run_main(main)
