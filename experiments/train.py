r"""RL fine-tuning launcher: sample -> execute -> estimate -> PPO -> evaluate -> checkpoint.

    .venv/bin/python -m experiments.train --method=maxk_offpolicy_exact_loo1_rms \
        --config.model.path=/models/qwen2.5-coder-7b-instruct \
        --config.data.problems=cache/cc_train.jsonl.gz --config.output_dir=runs/maxk
    .venv/bin/python -m experiments.train --method=maxk_offpolicy_exact_loo1_rms \
        --config.model.path=... --config.output_dir=runs/maxk --resume      # continue exactly
    .venv/bin/python -m experiments.train --config.model.path=... --config.output_dir=runs/arith \
        --config.data.dataset=arithmetic --reward=maxk_jax.data.arithmetic:first_integer_reward  # your reward

Methods (--method=<name>, the same names as every entry point that trains: the registry
maxk_jax.rl.method, listed by --help; default: the config's method, maxk_offpolicy_exact_loo1_rms in
every shipped config; --config=experiments/configs/base.py:<method> names one too). Configs:
experiments/configs/base.py (the paper's hyperparameters) and experiments/configs/tiny_synthetic.py
(laptop scale); any field can be overridden with --config.<field>=<value> (typed: --config.eval.ks='(1,2,4)',
--config.algo.estimator_options="(('clamp_delta',0.5),)", --config.data.chat=true).
The config is converted once to the typed maxk_jax.rl.run_config.RunConfig and validated (estimator, k <= n, mesh vs devices, batch vs data axis, micro-batches)
before anything is loaded or compiled; then the model directory, problem files, output directory,
checkpoints (with --resume) and the judge (GET /healthz) are checked (`maxk_jax.cli.preflight`). A
user's mistake is one line on stderr and exit status 2 (`maxk_jax.cli`); a step in which every
sample is masked (no reward: the judge is down) stops the run (``rollout.masked_steps_tolerated``).
The console gets the last step's headline metrics as a table. Outputs in config.output_dir:
config.json, metrics.jsonl, tensorboard/, checkpoints/<step>/ (orbax), eval/step_<s>/ (if eval.interval).
"""
from __future__ import annotations

import json
import os
from typing import Any

from absl import app, flags
from ml_collections import config_flags

from maxk_jax import cli
from maxk_jax.cli import config_overrides
from maxk_jax.rl.method import define_method_flag, method_flag

FLAGS = flags.FLAGS
_DEFAULT_CONFIG = "experiments/configs/base.py"
with config_overrides.explained_errors("config", _DEFAULT_CONFIG):  # unknown --config.x: clear error
    config_flags.DEFINE_config_file(
        "config", _DEFAULT_CONFIG,
        "Path to an ml_collections config file, optionally with a method: "
        "experiments/configs/base.py:<method> (a --method name); override fields "
        "with --config.<field>=<value>, e.g. --config.algo.k=2.", lock_config=True)
define_method_flag()
flags.DEFINE_bool("resume", False, "Continue from the newest checkpoint in "
                  "<output_dir>/checkpoints (same data order and PRNG state; refused when there is none); "
                  "without it an output_dir that already holds checkpoints is refused.")
flags.DEFINE_bool("progress", True, "Show a tqdm progress bar over RL steps.")
flags.DEFINE_string("reward", None, "Score completions with your own Python reward function instead of the code "
                    "judge: 'module:function', a callable (problem, completion) -> float in [0, 1] (or batched, "
                    "see docs/usage/rewards.md), e.g. maxk_jax.data.arithmetic:first_integer_reward with "
                    "--config.data.dataset=arithmetic; sets config.rollout.executor='reward:module:function'.")
flags.DEFINE_bool("validate_only", False, "Validate the config (no model loading, no "
                  "compilation), print it as JSON and exit.")


def main(argv: list[str]) -> None:
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    from maxk_jax.cli import preflight
    from maxk_jax.pipelines.compare import checkpoint_steps
    from maxk_jax.rl import loop as rl_loop
    from maxk_jax.rl.config_dict import from_config_dict, to_config_dict
    from maxk_jax.rl.method import apply_method, method_label

    with cli.user_errors():   # every check before work: one line per mistake, nothing written
        if FLAGS.reward is not None:   # imports the function now: a bad value is one line, exit 2
            from maxk_jax.data.rewards import reward_executor_spec

            if "config.rollout.executor" in FLAGS and FLAGS["config.rollout.executor"].present:
                raise ValueError(f"--reward={FLAGS.reward!r} and --config.rollout.executor={FLAGS.config.rollout.executor!r} both "
                                 "choose the judge; give one")
            FLAGS.config.rollout.executor = reward_executor_spec(FLAGS.reward, what="--reward")
        method = method_flag()
        cfg = from_config_dict(FLAGS.config)   # the one conversion: ml_collections tree -> typed RunConfig
        if method is not None:
            cfg = apply_method(cfg, method)
        cfg.distributed.initialize()
        cfg.require_paths()
        step = cfg.validate()
        if FLAGS.validate_only:
            print(json.dumps({"config": json.loads(to_config_dict(cfg).to_json_best_effort()),
                              "loss_kind": step.kind}, indent=2))
            return
        preflight.check_training_run(cfg, resume=FLAGS.resume)
        if FLAGS.resume and not checkpoint_steps(cfg.output_dir):
            raise ValueError(f"--resume: {os.path.join(cfg.output_dir, 'checkpoints')!r} holds no checkpoint to "
                             "resume from; drop --resume to start the run")
    ckpt_dir = os.path.join(cfg.output_dir, "checkpoints")
    cli.on_interrupt(lambda: (f"checkpoints of steps {checkpoint_steps(cfg.output_dir)} in {ckpt_dir!r} (every "
                              f"{cfg.checkpoint.interval} steps); continue with the same command and --resume"
                              if checkpoint_steps(cfg.output_dir) else
                              f"no checkpoint yet (every {cfg.checkpoint.interval} steps, in {ckpt_dir!r})"))
    print(f"training {cfg.name!r} (method {method_label(cfg)}) -> {cfg.output_dir}", flush=True)
    try:
        record = rl_loop.run(cfg, resume=FLAGS.resume, progress=FLAGS.progress)
    except (rl_loop.MaskedRolloutError, rl_loop.ResumeError) as err:   # a dead judge, a damaged checkpoint
        raise cli.UserError(str(err)) from err
    print(metrics_table(record))
    print(f"all metrics: {os.path.join(cfg.output_dir, 'metrics.jsonl')}")


SUMMARY_PREFIXES = ("reward/mean", "reward/best_of_n_mean", "train/pass_at_k/", "train/max_at_k/",
                    "eval/pass_at_k/", "eval/max_at_k/", "samples/masked", "ppo/loss", "ppo/kl_ref")


def metrics_table(record: dict[str, Any]) -> str:
    """The last metrics record's headline numbers (`SUMMARY_PREFIXES`) as a markdown table."""
    rows = [(k, v) for prefix in SUMMARY_PREFIXES for k, v in sorted(record.items(), key=lambda kv: _natural(kv[0]))
            if k == prefix or (prefix.endswith("/") and k.startswith(prefix))]
    fmt = (lambda v: "null" if v is None else f"{v:.4g}" if isinstance(v, float) else str(v))
    step = record.get("step", "?")
    return "\n".join([f"| metric (step {step}) | value |", "|---|---|", *(f"| {k} | {fmt(v)} |" for k, v in rows)])


def _natural(key: str) -> tuple[str, int]:
    head, _, tail = key.rpartition("/")
    return (head, int(tail)) if tail.isdigit() else (key, 0)


if __name__ == "__main__":
    cli.run_main(main)
