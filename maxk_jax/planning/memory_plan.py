"""Per-device memory plans by AOT compilation on a (simulated) device mesh: nothing is allocated.

Parameters, optimizer state and batches are ``jax.ShapeDtypeStruct``s carrying their
``NamedSharding``; ``jax.jit(fn).lower(...).compile().memory_analysis()`` gives XLA's per-device
argument / output / temp / alias bytes. Two plans:

* :func:`plan_nll_grad` -- ``jax.grad`` of the mean next-token NLL of a Qwen2 model (float32 logits
  and log-softmax, activations constrained by :func:`maxk_jax.runtime.sharding.activation_sharding`); no
  optimizer state.
* :func:`plan_train_step` -- the real RL ``train_step`` (``rl.training.make_train_step``: params +
  Adam state, micro-batch scan, estimator, loss, KL, grad accumulation, clipping, donated state),
  optionally with the reference-policy log-prob pass; each row also gets the largest temp buffers
  read from XLA's dumped buffer assignment (:func:`temp_breakdown`, needs
  ``XLA_FLAGS=--xla_dump_to=<dir>`` set before JAX starts).

Layouts are written ``data2_fsdp4`` / ``fsdp4_tensor2`` / ``fsdp8`` (axes not named are 1).
A row is ``{"layout", "compile_s", "args", "outputs", "temps", "alias", "total"}`` (bytes per
device; ``total = args + outputs + temps - alias``). The entry points are
``experiments/plan_memory.py`` and ``experiments/plan_train.py``, which request their simulated CPU
devices through ``XLA_FLAGS`` before importing JAX; their flags are :mod:`maxk_jax.planning.plan_flags`,
their tables and plots :mod:`maxk_jax.planning.plan_report`; compiled HLO is read through
:mod:`maxk_jax.planning.hlo`.
"""
from __future__ import annotations

import collections
import glob
import math
import os
import re
import time
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from maxk_jax.planning import hlo
from maxk_jax.runtime import sharding as sh
from maxk_jax.models import auto, qwen2
from maxk_jax.rl import training

Row = dict[str, Any]


def parse_layout(name: str) -> dict[str, int]:
    """``'data2_fsdp4'`` -> ``{'data': 2, 'fsdp': 4, 'tensor': 1}``; ValueError on bad names."""
    sizes = {"data": 1, "fsdp": 1, "tensor": 1}
    for part in name.split("_"):
        m = re.fullmatch(r"(data|fsdp|tensor)(\d+)", part)
        if m is None:
            raise ValueError(f"bad layout {name!r}: parts must look like fsdp4, tensor2, data2")
        sizes[m.group(1)] = int(m.group(2))
    return sizes


def layout_sizes(name: str, num_devices: int) -> dict[str, int]:
    """`parse_layout` of a layout that must use exactly ``num_devices`` devices (ValueError
    otherwise)."""
    sizes = parse_layout(name)
    if sizes["data"] * sizes["fsdp"] * sizes["tensor"] != num_devices:
        raise ValueError(f"layout {name!r} does not use exactly {num_devices} devices")
    return sizes


def check_device_count(num_devices: int) -> None:
    """ValueError (naming XLA_FLAGS) unless JAX sees exactly ``num_devices`` devices."""
    if jax.device_count() != num_devices:
        raise ValueError(f"expected {num_devices} simulated devices, got {jax.device_count()} "
                         f"(XLA_FLAGS={os.environ.get('XLA_FLAGS')!r})")


def planned_config(preset: str, *, layers: int, dtype: str, param_dtype: str,
                   remat: bool, attention: str = "chunked", attention_chunk: int = 512,
                   remat_policy: str = "nothing") -> qwen2.Qwen2Config:
    """The Qwen2 preset to plan, with ``layers`` decoder layers (0 = the preset's), compute
    ``dtype``, parameter storage ``param_dtype``, per-layer rematerialisation ``remat`` keeping
    ``remat_policy``'s tensors (``qwen2.remat_policy``) and the ``attention`` implementation
    (``maxk_jax.models.attention``, blocks of ``attention_chunk``)."""
    overrides: dict[str, Any] = dict(dtype=dtype, param_dtype=param_dtype, remat=remat, attention=attention,
                                     attention_chunk=attention_chunk, remat_policy=remat_policy)
    if layers:
        overrides["num_layers"] = layers
    return qwen2.preset(preset, **overrides)


def nll_loss(config: qwen2.Qwen2Config, params: Any, tokens: jax.Array,
             mask: jax.Array) -> jax.Array:
    """Mean next-token NLL over real target tokens. tokens, mask: [B, T] -> scalar float32."""
    logits = qwen2.logits(config, params, tokens, mask)[:, :-1]
    logp = jax.nn.log_softmax(logits, axis=-1)
    nll = -jnp.take_along_axis(logp, tokens[:, 1:, None], axis=-1)[..., 0]
    weights = mask[:, 1:].astype(jnp.float32)
    return jnp.sum(nll * weights) / jnp.maximum(jnp.sum(weights), 1.0)


def memory_row(name: str, compiled: Any, seconds: float) -> Row:
    """The per-device bytes of a compiled executable (``compiled.memory_analysis()``) as a row
    named ``name``, with its compile time ``seconds``."""
    mem = compiled.memory_analysis()
    row = {"layout": name, "compile_s": round(seconds, 1), "args": int(mem.argument_size_in_bytes),
           "outputs": int(mem.output_size_in_bytes), "temps": int(mem.temp_size_in_bytes),
           "alias": int(mem.alias_size_in_bytes)}
    row["total"] = row["args"] + row["outputs"] + row["temps"] - row["alias"]
    return row


def plan_nll_grad(config: qwen2.Qwen2Config, layout: str, batch: int, seq: int) -> Row:
    """AOT-compile grad(nll_loss) of a [batch, seq] token batch for one layout -> its row."""
    mesh = sh.make_mesh(**parse_layout(layout))
    shapes = qwen2.abstract_params(config)
    p_shard = sh.param_shardings(mesh, qwen2.logical_axes(config), shapes)
    params = jax.tree.map(lambda s, d: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=d),
                          shapes, p_shard)
    b_shard = sh.batch_sharding(mesh, 2)
    tokens = jax.ShapeDtypeStruct((batch, seq), jnp.int32, sharding=b_shard)
    mask = jax.ShapeDtypeStruct((batch, seq), jnp.int32, sharding=b_shard)
    step = jax.jit(jax.grad(nll_loss, argnums=1), static_argnums=0, out_shardings=p_shard)
    t0 = time.perf_counter()
    with sh.activation_sharding(mesh):
        compiled = step.lower(config, params, tokens, mask).compile()
    return memory_row(layout, compiled, time.perf_counter() - t0)


def abstract_batch(mesh: jax.sharding.Mesh, b: int, prompt_len: int, t: int,
                   with_ref: bool) -> training.Batch:
    """A training.Batch of ShapeDtypeStructs with rows over ('data', 'fsdp'): ``b`` sequences of
    ``prompt_len + t`` tokens, ``t`` completion positions; ``ref_logp`` [b, t] iff ``with_ref``."""
    s = training.batch_sharding(mesh)
    spec = lambda shape, dtype: jax.ShapeDtypeStruct(shape, dtype, sharding=s)  # noqa: E731
    return training.Batch(
        tokens=spec((b, prompt_len + t), jnp.int32), attention_mask=spec((b, prompt_len + t), jnp.bool_),
        completion_mask=spec((b, t), jnp.bool_), old_logp=spec((b, t), jnp.float32),
        rewards=spec((b,), jnp.float32), valid=spec((b,), jnp.bool_), answer_ids=spec((b,), jnp.int32),
        ref_logp=spec((b, t), jnp.float32) if with_ref else None)


def state_bytes_per_device(abstract: Any) -> int:
    """Analytic bytes of one device's shard of a tree of sharded ShapeDtypeStructs."""
    total = 0
    for leaf in jax.tree.leaves(abstract):
        shard = leaf.sharding.shard_shape(leaf.shape)
        total += math.prod(shard) * jnp.dtype(leaf.dtype).itemsize
    return total


_ALLOC = re.compile(r"^allocation \d+: size (\d+), (.*):$")
_VALUE = re.compile(r"^ value: <\d+ (\S+) @\d+> \(size=(\d+),offset=\d+\): (\S+)")
_OP_NAME = re.compile(r'^\s*(?:ROOT )?%(\S+) = .*op_name="([^"]*)"')


def temp_breakdown(dump_dir: str, module: str, top: int, vocab: int) -> dict[str, Any]:
    """Largest buffers in the temp allocations of the last compiled XLA module named ``module``
    (from its buffer assignment dumped to ``dump_dir``): total temp bytes, and the ``top`` largest
    values grouped by (shape, JAX op) with their count.  Temp = not a parameter, output, constant
    or thread-local allocation; buffers with disjoint live ranges share temp bytes, so the listed
    sizes can add up to more than the total.  ``vocab_f32`` lists every float32 temp value whose
    last axis is the vocabulary (``vocab``: logits-sized buffers and LM-head weight copies)."""
    files = sorted(glob.glob(f"{dump_dir}/module_*.{module}.cpu_after_optimizations-buffer-assignment.txt"))
    if not files:
        raise FileNotFoundError(f"no buffer assignment of {module} in {dump_dir} (XLA_FLAGS dump)")
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
    vocab_f32 = [as_row(k) for k in ranked if k[0].startswith("f32[") and hlo.dims(k[0])[-1:] == [vocab]]
    return {"temp_bytes": total, "largest": [as_row(k) for k in ranked[:top]], "vocab_f32": vocab_f32}


def is_cpu_mesh(mesh: jax.sharding.Mesh) -> bool:
    """Whether ``mesh``'s devices are CPU devices (where XLA:CPU's float32 weight copies exist)."""
    return mesh.devices.flat[0].platform == "cpu"


def cpu_weight_upcast(text: str, params: Any) -> int:
    """Bytes of float32 copies of bfloat16 weights in a compiled module: ``convert`` to f32 of a
    shape equal to a bf16 parameter's per-device shard, each parameter counted at most once (so at
    most twice the bf16 weight bytes). XLA:CPU has no bf16 matmul and converts the weights (in a
    forward-only program: once, outside the loops); GPU / TPU multiply bf16 directly, so these
    temps are a CPU artefact of a plan (0 for float32 weights)."""
    leaves = collections.Counter(",".join(map(str, leaf.sharding.shard_shape(leaf.shape)))
                                 for leaf in jax.tree.leaves(params) if leaf.dtype == jnp.bfloat16)
    seen: collections.Counter = collections.Counter()
    for comp in hlo.parse_hlo(text).values():
        for _, shape, op, _ in comp:
            m = re.fullmatch(r"f32\[([\d,]*)\]\{[\d,]*\}", shape.strip())
            if op == "convert" and m and m.group(1) in leaves:
                seen[m.group(1)] += 1
    return sum(min(seen[s], leaves[s]) * 4 * math.prod(int(d) for d in s.split(",") if d) for s in seen)


def compile_train_step(config: qwen2.Qwen2Config, cfg: training.StepConfig, mesh: jax.sharding.Mesh, name: str, *,
                       sequences: int, prompt_len: int, completion_len: int, mu_dtype: str | None = None
                       ) -> tuple[Row, tuple[Any, Any, training.Batch]]:
    """AOT-compile the RL train step (Adam, lr 5e-6, first moment in ``mu_dtype``, donated state) on
    ``sequences`` rows of ``prompt_len + completion_len`` tokens on ``mesh`` (simulated CPU devices
    or a deviceless GPU) -> (its :func:`memory_row` named ``name``, (the abstract state, its
    shardings, the abstract batch))."""
    tx, schedule = training.make_optimizer(5e-6, total_steps=1000, mu_dtype=mu_dtype)
    state, shardings = training.abstract_train_state(config, tx, mesh)
    batch = abstract_batch(mesh, sequences, prompt_len, completion_len, cfg.loss.needs_reference)
    step = training.make_train_step(config, cfg, tx, mesh, shardings, schedule=schedule)
    t0 = time.perf_counter()
    compiled = step.lower(state, batch).compile()
    row = memory_row(name, compiled, time.perf_counter() - t0)
    row["hlo"] = compiled.as_text()
    return row, (state, shardings, batch)


def plan_train_step(config: qwen2.Qwen2Config, cfg: training.StepConfig, layout: str, *,
                    sequences: int, prompt_len: int, completion_len: int, dump_dir: str,
                    breakdown: int, ref: bool, mu_dtype: str | None = None,
                    ref_dtype: str | None = None, devices: list[Any] | None = None) -> list[Row]:
    """AOT-compile the RL train step (Adam, lr 5e-6, first moment in ``mu_dtype``) on
    ``sequences`` rows of ``prompt_len + completion_len`` tokens for one layout -> [its row] (+ the
    reference log-prob pass's row when ``ref``, its weights stored in ``ref_dtype``, default the
    params'). Each row also has ``temp_breakdown`` (``breakdown`` largest temps, read from
    ``dump_dir``; none when ``dump_dir`` is empty), ``state_analytic`` (bytes of this device's shard
    of the state / params) and ``hlo`` (the optimized HLO text, e.g. for
    :func:`maxk_jax.planning.hlo_cost.matmul_flops`; callers drop it before writing rows out). ``devices``: the
    mesh's devices (default all JAX's; e.g. a TPU slice's compile-only devices, :mod:`maxk_jax.planning.targets.tpu`)."""
    mesh = sh.make_mesh(**parse_layout(layout), devices=devices)
    row, (state, shardings, batch) = compile_train_step(config, cfg, mesh, layout, sequences=sequences,
                                                        prompt_len=prompt_len, completion_len=completion_len,
                                                        mu_dtype=mu_dtype)
    row["temp_breakdown"] = temp_breakdown(dump_dir, "jit_step", breakdown, config.vocab_size) if dump_dir else None
    row["state_analytic"] = state_bytes_per_device(state)
    rows = [row]
    if ref:
        fn = training.make_logprob_fn(config, cfg, mesh, shardings.params)
        ref_params = state.params if ref_dtype is None else jax.tree.map(
            lambda x: jax.ShapeDtypeStruct(x.shape, jnp.dtype(ref_dtype), sharding=x.sharding), state.params)
        t0 = time.perf_counter()
        compiled = fn.lower(ref_params, batch.replace(ref_logp=None)).compile()
        ref_row = memory_row(f"{layout} ref-logp pass", compiled, time.perf_counter() - t0)
        ref_row["temp_breakdown"] = temp_breakdown(dump_dir, "jit_fn", breakdown, config.vocab_size) if dump_dir else None
        ref_row["state_analytic"] = state_bytes_per_device(ref_params)
        text = compiled.as_text()
        ref_row["cpu_weight_upcast"] = cpu_weight_upcast(text, ref_params) if is_cpu_mesh(mesh) else 0
        ref_row["hlo"] = text
        rows.append(ref_row)
    return rows


def train_step_remat(config: Any, step_config: Any, mesh: jax.sharding.Mesh, *, sequences: int,
                     prompt_len: int | Callable[[], int], completion_len: int, mu_dtype: str | None = None,
                     device: Any = None) -> str:
    """``config.remat_policy`` with ``"auto"`` resolved by `maxk_jax.models.auto.remat_policy` for the RL
    train step of ``sequences`` rows of ``prompt_len + completion_len`` tokens on ``mesh`` (each candidate
    AOT-compiled: ``compile_train_step``; ``prompt_len`` may be a function, called only
    when a candidate is compiled); ``device`` defaults to the mesh's first. Other policies come back
    unchanged."""
    if config.remat_policy != "auto":
        return config.remat_policy

    def memory_of(policy: str) -> int:
        width = prompt_len() if callable(prompt_len) else prompt_len
        row, _ = compile_train_step(config.replace(remat_policy=policy), step_config, mesh, policy,
                                    sequences=sequences, prompt_len=width, completion_len=completion_len,
                                    mu_dtype=mu_dtype)
        return row["total"]

    return auto.remat_policy(mesh.devices.flat[0] if device is None else device, memory_of)
