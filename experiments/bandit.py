"""Tang et al. (2025), Figure 1: k-sample policy gradients on a 100-armed bandit.

    .venv/bin/python -m experiments.bandit                        # < 1 min on 2 CPU cores
    .venv/bin/python -m experiments.bandit --curves=rloo,maxk_offpolicy_exact@3,bon_mean

The experiment (setup, update rule with sample reuse, exact metrics, outputs) is
`maxk_jax.pipelines.bandit`; this entry point reads the flags, checks them and runs it.
"""
from __future__ import annotations

import os
import pathlib
import time
from typing import Sequence

from absl import app, flags

from maxk_jax import cli
from maxk_jax.planning import simulated_devices
from maxk_jax.pipelines.bandit import (DEFAULT_CURVES, BanditConfig, kl_table, parse_curve, run_experiment,
                                       summary_table, write_outputs)

FLAGS = flags.FLAGS


def define_flags() -> None:
    """Defines the command-line flags. Called by ``__main__`` only, so importing this module
    registers no flags and it can share a process with other absl apps (e.g. under pytest)."""
    flags.DEFINE_list("curves", list(DEFAULT_CURVES),
                      "Update rules to compare, each NAME[:KEY=VALUE...][@R]: a registry "
                      "estimator, its get_estimator options, and R = updates per sample batch "
                      "(off-policy reuse).")
    flags.DEFINE_integer("num_arms", 100, "Number of bandit arms |Y|.")
    flags.DEFINE_integer("k", 4, "The k of the k-sample objectives (max@k, pass@k).")
    flags.DEFINE_integer("n", 4, "Samples drawn per batch (n >= k; Tang et al. use n = k = 4).")
    flags.DEFINE_float("lr", 1.0, "SGD learning rate on the logits.")
    flags.DEFINE_integer("steps", 300, "Policy updates per run (a multiple of every curve's R).")
    flags.DEFINE_integer("seeds", 10, "Independent training seeds per curve (vmapped).")
    flags.DEFINE_integer("seed", 1, "Base PRNG seed of the training runs.")
    flags.DEFINE_integer("bandit_seed", 0,
                         "PRNG seed of the reward vector (and of theta_0 if random).")
    flags.DEFINE_float("clip_eps", 0.2,
                       "PPO trust region for reused samples (see module docstring); inf disables it.")
    flags.DEFINE_float("init_logit_std", 0.0,
                       "Std of the initial logits; 0 means the uniform policy.")
    flags.DEFINE_list("average_over_samples", ["rloo", "grpo"],
                      "Estimators whose per-sample advantages are averaged (scale 1/n), not summed.")
    flags.DEFINE_list("kl_levels", ["0.5", "1", "2", "3"],
                      "KL(pi || pi_0) levels at which the curves are compared (KL-matched table).")
    flags.DEFINE_string("out_dir", "runs/bandit", "Directory for bandit.png and bandit.json.")
    flags.DEFINE_bool("fast_compile", True,
                      "Compile with XLA's backend optimisation level 0 (about 3x faster compiles; "
                      "the compiled scans are tiny, so compile time dominates the run).")


def config_from_flags() -> BanditConfig:
    """BanditConfig from the absl flags (every value validated)."""
    return BanditConfig(
        curves=tuple(parse_curve(s) for s in FLAGS.curves), num_arms=FLAGS.num_arms, k=FLAGS.k,
        n=FLAGS.n, lr=FLAGS.lr, steps=FLAGS.steps, seeds=FLAGS.seeds, seed=FLAGS.seed,
        bandit_seed=FLAGS.bandit_seed, clip_eps=FLAGS.clip_eps,
        init_logit_std=FLAGS.init_logit_std,
        average_over_samples=tuple(FLAGS.average_over_samples),
        kl_levels=tuple(_parse_float(v, "kl_levels") for v in FLAGS.kl_levels))


def _parse_float(text: str, flag: str) -> float:
    try:
        return float(text)
    except ValueError as err:
        raise ValueError(f"--{flag}: {text!r} is not a number") from err


def main(argv: Sequence[str]) -> None:
    """Runs the experiment, prints a summary table and where the outputs are."""
    if len(argv) > 1:
        raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
    if FLAGS.fast_compile:  # read when JAX initialises its backend, i.e. at the first computation
        os.environ["XLA_FLAGS"] = " ".join(
            [os.environ.get("XLA_FLAGS", ""), simulated_devices.FAST_COMPILE_FLAG]).strip()
    from maxk_jax.cli import preflight

    with cli.user_errors():   # every check before work: one line per mistake
        config = config_from_flags()
        preflight.check_writable_dir(FLAGS.out_dir, "--out_dir")
    t0 = time.perf_counter()
    results = run_experiment(config, progress=lambda msg: print(f"  {msg}", flush=True))
    print(summary_table(results, sorted({config.steps // 10, config.steps // 2, config.steps})))
    print(kl_table(results))
    json_path, png_path = write_outputs(results, pathlib.Path(FLAGS.out_dir))
    print(f"total {time.perf_counter() - t0:.1f}s; wrote {png_path} and {json_path}")


if __name__ == "__main__":
    define_flags()
    cli.run_main(main)
