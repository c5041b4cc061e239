r"""The embedded main job: tiny Qwen2 -> warm-up -> RL with the off-policy max@k estimator -> report.

    .venv/bin/python -m experiments.tiny_pipeline                          # ~6 min on 2 CPU cores
    .venv/bin/python -m experiments.tiny_pipeline --method=grpo --name=tiny_grpo
    .venv/bin/python -m experiments.tiny_pipeline --config=experiments/configs/tiny.py:toy   # ~65 CPU-s, learns a little
    .venv/bin/python -m experiments.tiny_pipeline --name=tiny_grpo --method=grpo --resume    # after Ctrl-C
    .venv/bin/python -m experiments.tiny_pipeline --model_path=/models/qwen2.5-coder-0.5b-instruct \
        --dataset=mbpp --config.data.train_split=train --config.data.eval_split=test

Phases (each with a progress bar; wall and CPU seconds of each are reported), implemented in
`maxk_jax.pipelines.tiny`:
  1. data      the synthetic family's train / test split (`maxk_jax.data.synthetic`), written as
               Problem JSONL caches; or a real dataset (--dataset / --dataset_path).
  2. base      a byte-level BPE tokenizer + ~0.9M-parameter Qwen2 (`maxk_jax.models.tiny`), then
               the supervised warm-up (`maxk_jax.rl.warmup`) on noisy generated solutions; the result
               is a HF-format checkpoint cached under ``<runs_dir>/_cache/base-<hash>`` (the hash
               covers every setting that changes it) and reused by later runs. --model_path skips it.
  3. rl        the RL loop (`maxk_jax.rl.loop.run`) with the chosen method (--method, a name of
               the registry `maxk_jax.rl.method`; default: the project's unbiased off-policy max@k
               ``maxk_offpolicy_exact_loo1_rms`` = estimator ``maxk_offpolicy_exact`` with the LOO-1
               baseline and ``loo_rms`` scale in the IS-weighted loss; --method=maxk_offpolicy is the
               paper's z-scored form), writing ``<run>/rl``.
  4. eval      base and trained model on the test problems, n = 64 samples each with the SAME
               sample keys (paired), judged by the embedded sandbox.
  5. report    ``<run>/report.md`` (phase timings, pass@k and max@k for k = 1, 2, 4, ..., 32 (k <= n/2 of n = 64),
               base vs the trained model labelled by its method name, paired Wilcoxon p-values) and ``<run>/curves.png``; per-model
               details in ``<run>/base`` and ``<run>/trained`` (`maxk_jax.eval.report`).

Ctrl-C prints what was saved; ``--resume`` (same flags) continues the run: the RL run from its newest
checkpoint (or skipped when finished), finished evaluations read back.

On the synthetic data judging goes through `maxk_jax.execution.CachingExecutor`: identical
(program, tests) submissions are judged once per process. The synthetic programs are
deterministic, so this changes no reward; it matters because a warmed-up tiny model repeats
itself a lot.
"""
from __future__ import annotations

import os
import time
from collections.abc import Sequence

from absl import app, flags
from ml_collections import config_flags

from maxk_jax import cli
from maxk_jax.cli import config_overrides
from maxk_jax.pipelines import apply_method, from_config_dict, run_pipeline, shortcut_overrides
from maxk_jax.pipelines.tiny import check_run_dir, resume_note, run_dir_of
from maxk_jax.rl.method import define_method_flag, method_flag, method_label

CONFIG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "configs", "tiny.py")

FLAGS = flags.FLAGS


def define_flags() -> None:
    """Define the command-line flags (called by ``__main__`` only, so tests can import this module)."""
    with config_overrides.explained_errors("config", CONFIG):  # unknown --config.x: clear error
        config_flags.DEFINE_config_file("config", CONFIG, "Pipeline config (ml_collections); override fields "
                                        "with --config.<field>=<value>, e.g. --config.rl.max_steps=40.",
                                        lock_config=False)
    flags.DEFINE_string("name", None, "Run name: the report goes to <runs_dir>/<name> (default: config.name).")
    flags.DEFINE_string("runs_dir", None, "Directory of run directories and of the base-model cache "
                        "(default: config.runs_dir).")
    define_method_flag()
    flags.DEFINE_string("estimator", None, "Low-level knob: train this registry estimator "
                        "(maxk_jax.estimators.list_estimators()) with its defaults; --method is the usual way "
                        "(every estimator is also a method of its own name). Not together with --method.")
    flags.DEFINE_integer("k", None, "Training k of the estimator, 1 <= k <= rollout n (default: config.rl.algo.k).")
    flags.DEFINE_string("model_path", None, "A Hugging Face Qwen2 directory to start from instead of the tiny "
                        "model: skips the tokenizer/model build and the warm-up.")
    flags.DEFINE_string("dataset", None, "Dataset: 'synthetic' (default) or a maxk_jax.data.load_dataset name "
                        "(code_contests, mbpp, ...; needs --model_path).")
    flags.DEFINE_string("dataset_path", None, "Hub name or local path of --dataset in its upstream schema.")
    flags.DEFINE_string("reward", None, "Score completions (RL and evaluation) with your own Python reward function "
                        "instead of the code judge: 'module:function', a callable (problem, completion) -> float "
                        "in [0, 1] (docs/usage/rewards.md); sets config.executor='reward:module:function'.")
    flags.DEFINE_bool("overwrite", False, "Delete an existing run directory of the same name first.")
    flags.DEFINE_bool("resume", False, "Continue the interrupted run <runs_dir>/<name> (same settings): the RL "
                      "run from its newest checkpoint (every --config.rl.checkpoint.interval steps and the last), "
                      "finished evaluations read back; without it an existing run directory is refused.")
    flags.DEFINE_bool("progress", True, "Show tqdm progress bars for warm-up, RL and evaluation.")


def main(argv: Sequence[str]) -> None:
    """absl entry point: --config with the shortcut flags applied, converted once to the typed
    `PipelineConfig` (ValueError naming a bad field), then the pipeline (which checks the devices
    and the model directory once jax.distributed is up, before anything is built)."""
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    with cli.user_errors():   # every check before work: one line per mistake, nothing written
        if FLAGS.reward is not None:   # imports the function now: a bad value is one line, exit 2
            from maxk_jax.data.rewards import reward_executor_spec

            if "config.executor" in FLAGS and FLAGS["config.executor"].present:
                raise ValueError(f"--reward={FLAGS.reward!r} and --config.executor={FLAGS.config.executor!r} both "
                                 "choose the judge; give one")
            FLAGS.config.executor = reward_executor_spec(FLAGS.reward, what="--reward")
        method = method_flag("rl.")
        if method is not None and FLAGS.estimator is not None:
            raise ValueError(f"--method={method} and --estimator={FLAGS.estimator} both choose the RL method: give one")
        cfg = from_config_dict(FLAGS.config, shortcut_overrides(
            name=FLAGS.name, runs_dir=FLAGS.runs_dir, estimator=FLAGS.estimator, k=FLAGS.k,
            model_path=FLAGS.model_path, dataset=FLAGS.dataset, dataset_path=FLAGS.dataset_path))
        if method is not None:
            cfg = apply_method(cfg, method)
        check_pipeline_inputs(cfg, overwrite=FLAGS.overwrite, resume=FLAGS.resume)
    cli.on_interrupt(lambda: resume_note(cfg))
    print(f"tiny pipeline {cfg.name!r}: method {method_label(cfg.rl)} -> {run_dir_of(cfg)}", flush=True)
    start = time.perf_counter()
    out = run_pipeline(cfg, overwrite=FLAGS.overwrite, resume=FLAGS.resume, progress=FLAGS.progress)
    if out["report"] is not None:   # process 0: the headline numbers (the rest is in the report)
        from maxk_jax.eval.report import markdown_table

        c = out["comparison"]
        for metric in ("pass_at_k", "max_at_k"):
            print("\n" + markdown_table([(name, c["means"][name][metric]) for name in c["names"]], c["ks"], metric))
    print(f"\nDone in {time.perf_counter() - start:.0f} s.\nReport: {out['report']}\nCurves: {out['curves']}")


def check_pipeline_inputs(cfg, *, overwrite: bool, resume: bool = False) -> None:
    """Before any phase: --model_path (when given) is an intact HF model directory, runs_dir is
    writable, the run directory is new (or --overwrite, or --resume of a run of the same settings)
    and the judge answers."""
    from maxk_jax.cli import preflight

    if cfg.model.path:
        preflight.check_model_dir(cfg.model.path)
    preflight.check_writable_dir(cfg.runs_dir, "runs directory (--runs_dir)")
    check_run_dir(cfg, overwrite=overwrite, resume=resume)
    preflight.check_executor(cfg.executor)


if __name__ == "__main__":
    define_flags()
    cli.run_main(main)
