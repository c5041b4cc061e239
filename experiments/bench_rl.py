"""The RL step end to end on whatever ``jax.devices()`` gives: seconds per step split into rollout, judge,
log-probs, update and rollout copy, tokens per second per device, against a PyTorch peer.

    python -m experiments.bench_rl --smoke --results_dir=runs/bench_rl            # tiny model, CPU, < 1 min
    python -m experiments.bench_rl --preset=qwen2.5-coder-1.5b --reference_share=0.5 --results_dir=runs/bench_rl

Real RL steps of the project's loop with random weights of ``--preset`` on synthetic stdin/stdout problems
(``maxk_jax.rl.bench``: what each part measures, how tokens are counted). ``--reference_share`` judges
that share of each problem's completions as the problem's reference solution (random weights write
programs that fail at once; the judge then runs programs that pass). After ``--warmup`` untimed steps
(the first compiles) it times ``--steps`` steps and writes ``bench_rl.json`` and ``bench_rl.md`` to
``--results_dir``. ``--peer=torch`` (the default where torch and transformers import; skipped by
``--smoke`` unless given) first times the same step shape in PyTorch + transformers: ``generate`` of
prompts x n completions plus ``--ppo_iterations`` train steps of the RL loss form
(``maxk_jax.benchmarks.torch_baselines``; TRL is not installed), and reports the ratio of its seconds to ours.
"""
from __future__ import annotations

import importlib.util
import json
import os
import pathlib
import tempfile
from typing import Any

from absl import app, flags

FLAGS = flags.FLAGS


def define_flags() -> None:
    from maxk_jax.models.qwen2_config import DECODE_ATTENTION, REMAT_POLICIES
    from maxk_jax.rl.bench import PRESETS
    from maxk_jax.rl.method import DEFAULT_METHOD, method_names
    flags.DEFINE_bool("smoke", False, "Tiny model, 2 steps of 2 prompts x 4 completions of 16 tokens (CPU test; "
                      "the shape flags are ignored).")
    flags.DEFINE_enum("preset", "qwen2.5-coder-1.5b", list(PRESETS), "Model: a Qwen2.5-Coder preset with random "
                      "weights, or tiny.")
    flags.DEFINE_integer("steps", 3, "Timed RL steps.")
    flags.DEFINE_integer("warmup", 1, "Untimed RL steps before them (the first compiles).")
    flags.DEFINE_integer("prompts", 16, "Problems per RL step.")
    flags.DEFINE_integer("n", 32, "Completions per problem (rows per step = prompts x n).")
    flags.DEFINE_integer("max_new_tokens", 256, "New tokens per completion.")
    flags.DEFINE_integer("ppo_iterations", 3, "PPO iterations per RL step (the paper's 3).")
    flags.DEFINE_integer("micro_batches", 1, "Micro-batches of each PPO update (gradient accumulation; divides "
                         "--prompts).")
    flags.DEFINE_float("reference_share", 0.0, "Share of each problem's completions judged as its reference "
                       "solution instead (0..1).")
    flags.DEFINE_integer("judge_slots", 0, "Sandbox slots of the embedded judge (0 = one per host core).")
    flags.DEFINE_enum("dtype", "float32", ["float32", "bfloat16"], "Parameter and Adam moment dtype.")
    flags.DEFINE_enum("compute_dtype", "bfloat16", ["float32", "bfloat16"], "Matmul dtype.")
    flags.DEFINE_enum("decode_attention", "auto", list(DECODE_ATTENTION), "Qwen2Config.decode_attention.")
    flags.DEFINE_enum("remat_policy", "auto", list(REMAT_POLICIES), "Qwen2Config.remat_policy (auto: by memory).")
    flags.DEFINE_enum("peer", None, ["torch", "none"], "PyTorch peer: torch (default where torch and "
                      "transformers import, off with --smoke) or none.")
    flags.DEFINE_bool("judge_only", False, "Time the embedded judge alone on one step's prompts x n reference "
                      "solutions (3 rounds) and write bench_rl_judge.json.")
    flags.DEFINE_integer("seed", 0, "Seed of the weights, problems and sampling.")
    flags.DEFINE_string("method", DEFAULT_METHOD, "RL method by its registry name (maxk_jax.rl.method; valid: "
                        + ", ".join(method_names()) + ").")
    flags.DEFINE_string("results_dir", "runs/bench_rl", "Directory for bench_rl.json and bench_rl.md.")


def _settings() -> Any:
    from maxk_jax.rl import bench
    shape = {name: getattr(FLAGS, name) for name in (
        "steps", "warmup", "prompts", "n", "max_new_tokens", "ppo_iterations", "micro_batches", "reference_share",
        "judge_slots", "dtype", "compute_dtype", "decode_attention", "remat_policy", "seed", "method")}
    if FLAGS.smoke:
        return bench.smoke_settings(**{k: shape[k] for k in ("reference_share", "judge_slots", "decode_attention",
                                                             "remat_policy", "seed", "method")})
    return bench.BenchSettings(preset=FLAGS.preset, **shape)


def _peer(settings: Any) -> dict[str, Any] | None:
    """The PyTorch peer's seconds for the benchmark's step shape (see the module docstring), or None."""
    import numpy as np

    from maxk_jax.benchmarks import rollout_batch, torch_baselines
    from maxk_jax.rl import bench
    problems = bench.bench_problems(settings)
    config, tokenizer = bench.bench_model(settings, problems)
    cfg = bench.run_config(settings, "")
    from maxk_jax.sampling import prompt_length_bucket
    prompts = cfg.rollout_sampler(config, tokenizer).encode(problems[:settings.prompts])[0]
    tp = prompt_length_bucket(max(len(p) for p in prompts), cfg.rollout.min_prompt_bucket)
    case = bench.peer_case(settings, tp)
    gen = torch_baselines.hf_generate(config, case, settings.seed)
    data = rollout_batch.train_batch(np.random.default_rng(settings.seed), settings.prompts * settings.n, settings.n,
                                     tp, settings.max_new_tokens, config.vocab_size)
    train = torch_baselines.torch_train(config, data, settings.n, settings.micro_batches, 2)
    return {"what": f"transformers generate + {settings.ppo_iterations} x the torch_baselines train step, "
                    f"{case[0]} x {case[1]} rows of {tp} + {case[3]} tokens",
            "generate_s": gen["steady_s"], "train_step_s": train["steady_s"],
            "model_s": gen["steady_s"] + settings.ppo_iterations * train["steady_s"],
            "peak_mem_gb": train["peak_mem_gb"]}


def main(argv: list[str]) -> None:
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments {argv[1:]}")
    from maxk_jax import cli
    with cli.user_errors():
        settings = _settings()
        has_torch = all(importlib.util.find_spec(m) is not None for m in ("torch", "transformers"))
        peer = FLAGS.peer or ("none" if FLAGS.smoke or not has_torch else "torch")
        if peer == "torch" and not has_torch:
            raise ValueError("--peer=torch needs torch and transformers installed")
        out = pathlib.Path(FLAGS.results_dir)
        out.mkdir(parents=True, exist_ok=True)
    from maxk_jax.rl import bench
    if FLAGS.judge_only:
        judge = bench.judge_rate(settings)
        (out / "bench_rl_judge.json").write_text(json.dumps(judge, indent=2))
        print(f"judge: {judge['programs']} reference programs ({judge['tests_per_program']:.1f} tests each) on "
              f"{judge['slots']} slots: {judge['programs_per_s']:.1f} programs/s, {judge['programs_per_s_per_slot']:.1f} "
              f"per slot (load average {judge['loadavg_before'][0]:.1f} before, {judge['loadavg_after'][0]:.1f} after)")
        return
    peer_row = _peer(settings) if peer == "torch" else None    # first: its memory goes back before JAX's
    with tempfile.TemporaryDirectory() as scratch:
        result = bench.with_peer(bench.run_bench(settings, scratch), peer_row)
    (out / "bench_rl.json").write_text(json.dumps(result, indent=2))
    (out / "bench_rl.md").write_text(bench.markdown(result))
    print(bench.markdown(result), end="")
    print(f"wrote {out / 'bench_rl.json'} and {out / 'bench_rl.md'}")


if __name__ == "__main__":
    # JAX would take 75 % of the GPU at start-up; the torch peer in this process needs its share
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    from maxk_jax import cli
    define_flags()
    cli.run_main(main)
