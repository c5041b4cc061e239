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

# XLA writes each planned module's buffer assignment here (read by ``temp_breakdown``); set before
# plan_memory, which asks XLA for its NUM_DEVICES simulated CPU devices before JAX starts, and
# defines --preset --layers --dtype --param_dtype --remat --layouts --results_dir
import os  # isort: skip
import tempfile  # isort: skip

_DUMP_DIR = tempfile.mkdtemp(prefix="plan_train_xla_")
os.environ["XLA_FLAGS"] = (f"{os.environ.get('XLA_FLAGS', '')} --xla_dump_to={_DUMP_DIR} "
                           "--xla_dump_hlo_module_re=^jit_(step|fn)$")
from experiments import plan_memory  # isort: skip  # noqa: E402
from experiments.plan_memory import NUM_DEVICES  # isort: skip

import collections  # noqa: E402
import glob  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import pathlib  # noqa: E402
import re  # noqa: E402
import shutil  # noqa: E402
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
flags.DEFINE_integer("breakdown", 12, "Largest temp buffers listed per planned module.")
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


_ALLOC = re.compile(r"^allocation \d+: size (\d+), (.*):$")
_VALUE = re.compile(r"^ value: <\d+ (\S+) @\d+> \(size=(\d+),offset=\d+\): (\S+)")
_OP_NAME = re.compile(r'^\s*(?:ROOT )?%(\S+) = .*op_name="([^"]*)"')


def _dims(shape: str) -> list[int]:
    """'f32[1,256,152064]' -> [1, 256, 152064]."""
    inner = shape.split("[", 1)[1].rstrip("]") if "[" in shape else ""
    return [int(x) for x in inner.split(",") if x]


def temp_breakdown(module: str, top: int, vocab: int) -> dict[str, Any]:
    """Largest buffers in the temp allocations of the last compiled XLA module named ``module``
    (from its dumped buffer assignment): total temp bytes, and the ``top`` largest values grouped
    by (shape, JAX op) with their count.  Temp = not a parameter, output, constant or
    thread-local allocation; buffers with disjoint live ranges share temp bytes, so the listed
    sizes can add up to more than the total.  ``vocab_f32`` lists every float32 temp value whose
    last axis is the vocabulary (logits-sized buffers and LM-head weight copies)."""
    files = sorted(glob.glob(f"{_DUMP_DIR}/module_*.{module}.cpu_after_optimizations-buffer-assignment.txt"))
    if not files:
        raise FileNotFoundError(f"no buffer assignment of {module} in {_DUMP_DIR} (XLA_FLAGS dump)")
    path = files[-1]
    names = {}
    with open(path.replace("-buffer-assignment.txt", ".txt")) as f:
        for line in f:
            m = _OP_NAME.match(line)
            if m:
                names[m.group(1)] = m.group(2)
    total, values, in_temp = 0, collections.Counter(), False
    sizes = {}
    with open(path) as f:
        for line in f:
            m = _ALLOC.match(line.rstrip())
            if m:
                kinds = m.group(2)
                in_temp = not any(k in kinds for k in ("parameter", "output", "constant", "thread-local",
                                                       "maybe-live-out"))
                total += int(m.group(1)) if in_temp else 0
                continue
            m = _VALUE.match(line)
            if m and in_temp:
                op = re.sub(r"^jit\([^)]*\)/", "", names.get(m.group(1), m.group(1)))
                key = (m.group(3).split("{")[0], op[-90:])
                values[key] += 1
                sizes[key] = int(m.group(2))
    as_row = lambda k: {"shape": k[0], "op": k[1], "bytes": sizes[k], "count": values[k]}  # noqa: E731
    ranked = sorted(sizes, key=lambda k: -sizes[k])
    vocab_f32 = [as_row(k) for k in ranked if k[0].startswith("f32[") and _dims(k[0])[-1:] == [vocab]]
    return {"temp_bytes": total, "largest": [as_row(k) for k in ranked[:top]], "vocab_f32": vocab_f32}


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
                           cfg.loss.kl_beta > 0)
    step = training.make_train_step(config, cfg, tx, mesh, shardings, schedule=schedule)
    t0 = time.perf_counter()
    compiled = step.lower(state, batch).compile()
    row = _row(layout, compiled, time.perf_counter() - t0)
    row["temp_breakdown"] = temp_breakdown("jit_step", FLAGS.breakdown, config.vocab_size)
    row["state_analytic"] = state_bytes_per_device(state)
    rows = [row]
    if ref:
        fn = training.make_logprob_fn(config, cfg, mesh, shardings.params)
        t0 = time.perf_counter()
        compiled = fn.lower(state.params, batch.replace(ref_logp=None)).compile()
        ref_row = _row(f"{layout} ref-logp pass", compiled, time.perf_counter() - t0)
        ref_row["temp_breakdown"] = temp_breakdown("jit_fn", FLAGS.breakdown, config.vocab_size)
        ref_row["state_analytic"] = state_bytes_per_device(state.params)
        rows.append(ref_row)
    return rows


def breakdown_markdown(rows: list[dict[str, Any]], vocab: int, seq_lens: tuple[int, ...]) -> str:
    """Markdown of every row's largest temp buffers and of its float32 vocabulary-sized temps; a
    [micro-batch, T, V] logits buffer is one whose second-to-last axis is a sequence length
    (``seq_lens``: T and S)."""
    out = ""
    is_logits = lambda shape: len(_dims(shape)) >= 2 and _dims(shape)[-2] in seq_lens  # noqa: E731
    for r in rows:
        bd = r.get("temp_breakdown")
        if not bd:
            continue
        out += (f"\n**{r['layout']}**: temps {bd['temp_bytes'] / GIB:.2f} GiB per device; largest temp "
                "buffers (shape, count, JAX op):\n\n| GiB | shape | count | op |\n|---:|---|---:|---|\n")
        out += "".join(f"| {v['bytes'] / GIB:.3f} | `{v['shape']}` | {v['count']} | {v['op']} |\n"
                       for v in bd["largest"])
        logits = [v for v in bd["vocab_f32"] if is_logits(v["shape"])]
        out += (f"\nfloat32 temps with a vocabulary (V = {vocab}) last axis: "
                + (", ".join(f"`{v['shape']}` {v['bytes'] / GIB:.3f} GiB" + (" (**[mb, T, V] logits**)"
                                                                           if is_logits(v["shape"]) else "")
                             for v in bd["vocab_f32"]) or "none")
                + f". [micro-batch, T, V] float32 logits buffers: {len(logits)}.\n")
    return out


def main(argv: list[str]) -> None:
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments {argv[1:]}")
    config = plan_memory.checked_config_from_flags()
    from maxk_jax.rl.losses import LossConfig
    from maxk_jax.sampling import SamplerSettings

    cfg = training.StepConfig(estimator=FLAGS.estimator, k=FLAGS.k,
                              sampler=SamplerSettings(n=FLAGS.n, max_new_tokens=FLAGS.completion_len),
                              loss=LossConfig(kind=training.loss_kind(FLAGS.estimator), kl_beta=FLAGS.kl_beta),
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
    table += breakdown_markdown(rows, config.vocab_size,
                                (FLAGS.completion_len, FLAGS.prompt_len + FLAGS.completion_len))
    out = pathlib.Path(FLAGS.results_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "plan_train.md").write_text(table)
    (out / "plan_train.json").write_text(json.dumps(
        {"header": header, "config": config.to_hf_dict(), "step_config": repr(cfg), "rows": rows}, indent=2))
    plan_memory.plot(rows, f"{FLAGS.preset} ({config.num_layers} layers): RL train_step, {b} x "
                     f"{FLAGS.prompt_len + FLAGS.completion_len}, {m} micro-batches", out / "plan_train.png")
    print(table)
    print(f"wrote {out}/plan_train.{{md,json,png}}")
    shutil.rmtree(_DUMP_DIR, ignore_errors=True)


if __name__ == "__main__":
    app.run(main)
