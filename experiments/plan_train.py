"""7B RL train-step memory plan by simulation: AOT-compile ``train_step`` on 8 simulated devices.

    .venv/bin/python -m experiments.plan_train --layers=2          # quick check (2 decoder layers)
    .venv/bin/python -m experiments.plan_train                     # Qwen2.5-Coder-7B, 28 layers

Nothing is allocated: the TrainState (params + Adam moments + step) and the rollout Batch are
``jax.ShapeDtypeStruct``s carrying their ``NamedSharding`` (``training.abstract_train_state``);
``make_train_step(...).lower(state, batch).compile().memory_analysis()`` gives XLA's per-device
bytes of the REAL step (micro-batch scan, estimator, IS-weighted/clipped loss, KL to ref_logp,
entropy metric, grad accumulation in float32, global-norm clipping, Adam, donated state).
The reference-policy log-prob pass (``make_logprob_fn``, a no-grad forward with a second copy of
the weights) is planned too for the shipped layout.  Sampling (KV cache) is not part of this plan.

Shape of one RL step (paper: 8 samples, 256 new tokens, CodeContests prompts <= 512 tokens):
``--prompts`` x ``--n`` sequences of ``--prompt_len + --completion_len`` tokens, split into
``--micro_batches`` micro-batches.  Layouts are named as in experiments/plan_memory.py (whose
helpers this reuses); ``fsdp8`` is what experiments/configs/base.py ships (mesh fsdp=-1).
Writes ``plan_train.{json,md,png}`` to ``--results_dir``.
"""
from __future__ import annotations

# plan_memory first: it asks XLA for its NUM_DEVICES simulated CPU devices before JAX starts, and
# defines --preset --layers --dtype --param_dtype --remat --layouts --results_dir
from experiments import plan_memory  # isort: skip
from experiments.plan_memory import NUM_DEVICES  # isort: skip

import json  # noqa: E402
import math  # noqa: E402
import pathlib  # noqa: E402
import time  # noqa: E402
from typing import Any  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from absl import app, flags  # noqa: E402
from jax.sharding import NamedSharding, PartitionSpec  # noqa: E402
from tqdm import tqdm  # noqa: E402

from maxk_jax import sharding as sh  # noqa: E402
from maxk_jax.rl import training  # noqa: E402
from maxk_jax.models import qwen2  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_integer("prompts", 16, "Prompts per RL step (experiments/configs/base.py).")
flags.DEFINE_integer("n", 8, "Samples per prompt (paper: 8).")
flags.DEFINE_integer("prompt_len", 512, "Prompt bucket length in tokens (CodeContests filter: 512).")
flags.DEFINE_integer("completion_len", 256, "Completion tokens (paper: 256 new tokens).")
flags.DEFINE_integer("micro_batches", 16, "Gradient-accumulation micro-batches per step.")
flags.DEFINE_string("estimator", "maxk_offpolicy", "Estimator of the planned step.")
flags.DEFINE_integer("k", 4, "Training k of the estimator.")
flags.DEFINE_float("kl_beta", 0.01, "KL coefficient (> 0 adds ref_logp to the batch).")
flags.DEFINE_bool("plan_ref", True, "Also plan the reference log-prob pass for the first layout.")
FLAGS.set_default("results_dir", "runs/plan_train")
FLAGS.set_default("param_dtype", "float32")
FLAGS.set_default("layouts", ["fsdp8", "fsdp4_tensor2", "fsdp2_tensor4", "data2_fsdp4"])

GIB = 1024 ** 3


def abstract_batch(mesh: jax.sharding.Mesh, b: int, prompt_len: int, t: int, with_ref: bool) -> training.Batch:
    """A training.Batch of ShapeDtypeStructs with rows over ('data', 'fsdp')."""
    s = training.batch_sharding(mesh)
    spec = lambda shape, dtype: jax.ShapeDtypeStruct(shape, dtype, sharding=s)  # noqa: E731
    return training.Batch(
        tokens=spec((b, prompt_len + t), jnp.int32), attention_mask=spec((b, prompt_len + t), jnp.bool_),
        completion_mask=spec((b, t), jnp.bool_), old_logp=spec((b, t), jnp.float32),
        rewards=spec((b,), jnp.float32), valid=spec((b,), jnp.bool_), answer_ids=spec((b,), jnp.int32),
        ref_logp=spec((b, t), jnp.float32) if with_ref else None)


def _row(name: str, compiled: Any, seconds: float) -> dict[str, Any]:
    mem = compiled.memory_analysis()
    row = {"layout": name, "compile_s": round(seconds, 1), "args": int(mem.argument_size_in_bytes),
           "outputs": int(mem.output_size_in_bytes), "temps": int(mem.temp_size_in_bytes),
           "alias": int(mem.alias_size_in_bytes)}
    row["total"] = row["args"] + row["outputs"] + row["temps"] - row["alias"]
    return row


def state_bytes_per_device(abstract: Any) -> int:
    """Analytic bytes of one device's shard of a tree of sharded ShapeDtypeStructs."""
    total = 0
    for leaf in jax.tree.leaves(abstract):
        shard = leaf.sharding.shard_shape(leaf.shape)
        total += math.prod(shard) * jnp.dtype(leaf.dtype).itemsize
    return total


def plan_layout(config: qwen2.Qwen2Config, cfg: training.StepConfig, layout: str, *, ref: bool) -> list[dict]:
    """AOT-compile the train step (and optionally the ref log-prob pass) for one layout."""
    mesh = sh.make_mesh(**plan_memory.parse_layout(layout))
    tx, schedule = training.make_optimizer(5e-6, total_steps=1000)
    state, shardings = training.abstract_train_state(config, tx, mesh)
    batch = abstract_batch(mesh, FLAGS.prompts * FLAGS.n, FLAGS.prompt_len, FLAGS.completion_len,
                           cfg.kl_beta > 0)
    step = training.make_train_step(config, cfg, tx, mesh, shardings, schedule=schedule)
    t0 = time.perf_counter()
    compiled = step.lower(state, batch).compile()
    row = _row(layout, compiled, time.perf_counter() - t0)
    row["state_analytic"] = state_bytes_per_device(state)
    rows = [row]
    if ref:
        fn = training.make_logprob_fn(config, cfg, mesh, shardings.params)
        t0 = time.perf_counter()
        compiled = fn.lower(state.params, batch.replace(ref_logp=None)).compile()
        ref_row = _row(f"{layout} ref-logp pass", compiled, time.perf_counter() - t0)
        ref_row["state_analytic"] = state_bytes_per_device(state.params)
        rows.append(ref_row)
    return rows


def main(argv: list[str]) -> None:
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments {argv[1:]}")
    config = plan_memory.checked_config_from_flags()
    cfg = training.StepConfig(estimator=FLAGS.estimator, k=FLAGS.k, n=FLAGS.n, kl_beta=FLAGS.kl_beta,
                              micro_batches=FLAGS.micro_batches)
    for layout in FLAGS.layouts:   # validate every layout before the first (slow) compile
        sizes = plan_memory.layout_sizes(layout)
        cfg.check_batch(FLAGS.prompts * FLAGS.n, sizes["data"] * sizes["fsdp"])
    rows = []
    for i, layout in enumerate(tqdm(FLAGS.layouts, desc="layouts")):
        rows += plan_layout(config, cfg, layout, ref=FLAGS.plan_ref and i == 0)
    b, m = FLAGS.prompts * FLAGS.n, FLAGS.micro_batches
    header = (f"{FLAGS.preset} ({config.num_layers} layers, {qwen2.param_count(config):,} params): RL "
              f"train_step ({FLAGS.estimator}, k={FLAGS.k}, {cfg.kind} loss, KL beta {FLAGS.kl_beta}) on "
              f"{FLAGS.prompts} prompts x n={FLAGS.n} = {b} sequences of {FLAGS.prompt_len}+"
              f"{FLAGS.completion_len} tokens, {m} micro-batches of {b // m}; params {FLAGS.param_dtype}, "
              f"compute {FLAGS.dtype}, remat {FLAGS.remat}, Adam; {NUM_DEVICES} simulated CPU devices; "
              "per-device bytes from compiled.memory_analysis() (state donated: outputs alias args)")
    table = plan_memory.to_markdown(rows, header)
    table += "\n| layout | params+Adam state per device (analytic) GiB |\n|---|---:|\n" + "".join(
        f"| {r['layout']} | {r['state_analytic'] / GIB:.2f} |\n" for r in rows)
    out = pathlib.Path(FLAGS.results_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "plan_train.md").write_text(table)
    (out / "plan_train.json").write_text(json.dumps(
        {"header": header, "config": config.to_hf_dict(), "step_config": repr(cfg), "rows": rows}, indent=2))
    plan_memory.plot(rows, f"{FLAGS.preset} ({config.num_layers} layers): RL train_step, {b} x "
                     f"{FLAGS.prompt_len + FLAGS.completion_len}, {m} micro-batches", out / "plan_train.png")
    print(table)
    print(f"wrote {out}/plan_train.{{md,json,png}}")


if __name__ == "__main__":
    app.run(main)
