"""Sampling plans by AOT compilation on a (simulated) device mesh: the decode loop's bytes, no weights.

The twin of :mod:`maxk_jax.planning.memory_plan` for the sampler. Parameters, the shared-prefix KV cache
and the per-row loop inputs are ``jax.ShapeDtypeStruct``s carrying their ``NamedSharding``; the
sampler's own jitted decode (``sampling.decode_loop``: a ``lax.while_loop`` of one
``models.decode.decode_step`` per token) is lowered and compiled, and two things are read off it:

* ``compiled.memory_analysis()``: per-device argument / temp bytes of the decode program;
* every collective (all-gather, all-reduce, reduce-scatter, all-to-all, collective-permute) in the
  computations reachable from the decode ``while`` loop's body, from the compiled HLO text
  (:func:`loop_collectives`): its result bytes per device times how often it runs per token (a
  collective inside the layer scan runs ``num_layers`` times; XLA's ``known_trip_count``).

Two parameter layouts are planned (:func:`abstract_params`): ``"training"`` (the trainer's
weights as they are: ``param_dtype``, ``embed`` over fsdp -- what the sampler decoded from before
the rollout copy) and ``"rollout"`` (:mod:`maxk_jax.sampling.rollout_copy`: compute dtype,
replicated over data/fsdp, tensor-parallel over ``tensor``).
"""
from __future__ import annotations

import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from maxk_jax.planning import hlo, memory_plan
from maxk_jax.runtime import sharding as sh
from maxk_jax.models import kv_cache, qwen2
from maxk_jax.sampling import (SamplerSettings, batch_shards, cache_shardings, decode_loop, prompt_batch_bucket,
                               prompt_length_bucket, rollout_copy)

COLLECTIVES = ("all-gather", "all-reduce", "reduce-scatter", "all-to-all", "collective-permute")
#: Peak memory bandwidth per chip (bytes/s) used by the roofline.
BANDWIDTH = {"H100 (3.35 TB/s)": 3.35e12, "TPU v5p (2.76 TB/s)": 2.76e12}

def loop_collectives(text: str) -> list[dict[str, Any]]:
    """Collectives executed per iteration of the outermost ``while`` loop of an HLO module with
    the largest body (the decode loop): one entry per collective instruction, ``{"op", "shape",
    "bytes" (result bytes per device), "times" (executions per iteration: product of the trip
    counts of the nested loops it sits in, :func:`maxk_jax.planning.hlo.trip_count`), "where"}``. [] when the
    loop body has none."""
    out: list[dict[str, Any]] = []

    def visit(where: str, _: hlo.Computation, ins: hlo.Instruction, times: int) -> None:
        _, shape, op, _ = ins
        base = op.removesuffix("-start")
        if base in COLLECTIVES and not op.endswith("-done"):
            out.append({"op": base, "shape": shape, "bytes": hlo.shape_bytes(shape), "times": times, "where": where})

    # the loop condition runs once per iteration too; fusions and reducers are entered (a collective may sit there)
    hlo.walk_loop_iteration(hlo.parse(text), visit)
    return out


def abstract_params(config: qwen2.Qwen2Config, mesh: jax.sharding.Mesh, layout: str) -> Any:
    """Sharded ShapeDtypeStructs of the weights the decode loop reads: ``"training"`` (the
    trainer's layout and ``config.params_dtype``) or ``"rollout"`` (the rollout copy)."""
    if layout == "rollout":
        return rollout_copy.RolloutLayout.create(config, mesh).abstract()
    if layout != "training":
        raise ValueError(f"params layout must be 'training' or 'rollout', got {layout!r}")
    shapes = qwen2.abstract_params(config)
    shard = sh.param_shardings(mesh, qwen2.logical_axes(config), shapes)
    return jax.tree.map(lambda s, d: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=d), shapes, shard)


def _sharded(x: Any, sharding: Any) -> jax.ShapeDtypeStruct:
    return jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding)


def abstract_decode_inputs(config: qwen2.Qwen2Config, settings: SamplerSettings, mesh: jax.sharding.Mesh,
                           params_layout: str, prompts: int, prompt_len: int
                           ) -> tuple[Any, tuple[Any, ...], dict[str, int]]:
    """Sharded ShapeDtypeStructs of everything ``sampling.decode_loop`` takes after its static
    arguments, for ``prompts`` x ``settings.n`` rows of a ``prompt_len``-token prompt (bucketed as
    the sampler does) on ``mesh`` -> (params (:func:`abstract_params`), the loop's other arguments
    (first logits [B, V], cache, keys, prompt lengths, dummy rows, stop ids, pad id), ``{"rows": B,
    "prompt_bucket": Tp}``)."""
    tp = prompt_length_bucket(prompt_len)
    pb = prompt_batch_bucket(prompts, batch_shards(mesh))
    b = pb * settings.n
    params = abstract_params(config, mesh, params_layout)
    cache = jax.eval_shape(lambda: qwen2.init_cache(config, pb, tp, max(settings.max_new_tokens - 1, 1), settings.n))
    cache = jax.tree.map(_sharded, cache, cache_shardings(cache, mesh))
    rows = sh.batch_sharding(mesh, 1)
    keys = jax.eval_shape(lambda: jax.random.split(jax.random.key(0), b))
    args = (_sharded(jax.ShapeDtypeStruct((b, config.vocab_size), jnp.float32), sh.batch_sharding(mesh, 2)),
            cache, _sharded(keys, rows), _sharded(jax.ShapeDtypeStruct((b,), jnp.int32), rows),
            _sharded(jax.ShapeDtypeStruct((b,), jnp.bool_), rows),
            jax.ShapeDtypeStruct((8,), jnp.int32), jax.ShapeDtypeStruct((), jnp.int32))
    return params, args, {"rows": b, "prompt_bucket": tp}


def plan_decode(config: qwen2.Qwen2Config, layout: str, params_layout: str, *, prompts: int, n: int,
                prompt_len: int, new_tokens: int, devices: list[Any] | None = None) -> dict[str, Any]:
    """AOT-compile the sampler's decode loop for ``prompts`` x ``n`` rows of a ``prompt_len``-token
    prompt (bucketed as the sampler does) and ``new_tokens`` new tokens on mesh ``layout`` with
    ``params_layout`` weights -> a row: per-device bytes (``weights``, ``kv_cache``, ``args``,
    ``temps``), ``collectives`` (:func:`loop_collectives`), ``collective_bytes_per_token``,
    ``weight_bytes_bf16`` (whole model), ``compile_s``, ``matmul_flops`` (per device, the loop at
    its ``new_tokens`` bound), ``cpu_weight_upcast`` (XLA:CPU's float32
    copies of bf16 weights; 0 off CPU) and, on TPU devices, ``tpu_step`` (per decode step:
    :func:`maxk_jax.planning.hlo_cost.tpu_step_traffic` without its op list; the attention's live-block
    loop at its average trips, ``kv_cache.mean_live_blocks``). ``devices``: the mesh's devices
    (default all JAX's; e.g. a TPU slice's compile-only devices)."""
    from maxk_jax.planning import hlo_cost

    mesh = sh.make_mesh(**memory_plan.parse_layout(layout), devices=devices)
    if params_layout == "rollout":
        mesh = rollout_copy.RolloutLayout.create(config, mesh).mesh
    settings = SamplerSettings(n=n, max_new_tokens=new_tokens)
    params, args, info = abstract_decode_inputs(config, settings, mesh, params_layout, prompts, prompt_len)
    cache = args[1]
    t0 = time.perf_counter()
    with sh.activation_sharding(mesh):
        compiled = decode_loop.lower(config, settings, mesh, params, *args).compile()
    row = memory_plan.memory_row(f"{layout} ({params_layout} weights)", compiled, time.perf_counter() - t0)
    text = compiled.as_text()
    collectives = loop_collectives(text)
    row.update(
        mesh=layout, params_layout=params_layout, **info,
        decode_mesh="_".join(f"{a}{mesh.shape[a]}" for a in sh.MESH_AXES if mesh.shape[a] > 1) or "single",
        weights=memory_plan.state_bytes_per_device(params),
        kv_cache=memory_plan.state_bytes_per_device(cache),
        weight_bytes_bf16=2 * qwen2.param_count(config),
        collectives=collectives,
        collective_bytes_per_token=int(sum(c["bytes"] * c["times"] for c in collectives)),
        cpu_weight_upcast=memory_plan.cpu_weight_upcast(text, params) if memory_plan.is_cpu_mesh(mesh) else 0)
    row["matmul_flops"] = hlo_cost.matmul_flops(text)["flops"]   # the decode loop at its new_tokens bound
    if mesh.devices.flat[0].platform == "tpu":
        # the decode attention's loop over live own-cache blocks: its average trips over the steps
        step = hlo_cost.tpu_step_traffic(text, dynamic_trips=kv_cache.mean_live_blocks(new_tokens))
        row["tpu_step"] = {k: v for k, v in step.items() if k != "traffic"}
    return row


def roofline(row: dict[str, Any], kv_cache: int | None = None) -> dict[str, float]:
    """Memory-bandwidth bound of one decode step of ``row``: every device reads its weights, its
    whole KV cache (``kv_cache`` bytes per device, default the row's; an upper bound: the
    samples' block fills as decoding goes) and the results of the loop's collectives (gathered
    weights are written, then read) once per step, so tokens/s <= rows * bandwidth / bytes read
    per device; ``{"bytes_read": ..., <chip>: tokens/s}``. Interconnect time is not included."""
    read = row["weights"] + (row["kv_cache"] if kv_cache is None else kv_cache) + row["collective_bytes_per_token"]
    return {"bytes_read": float(read), **{chip: row["rows"] * bw / read for chip, bw in BANDWIDTH.items()}}


def collective_line(row: dict[str, Any]) -> str:
    """The one-line summary: ``decode-loop collective bytes per token: <bytes> (<percent> of the
    bf16 weight bytes)``."""
    pct = 100.0 * row["collective_bytes_per_token"] / row["weight_bytes_bf16"]
    return (f"{row['layout']}: decode-loop collective bytes per token: {row['collective_bytes_per_token']:,} "
            f"({pct:.3f}% of the bf16 weight bytes)")


def summarize_collectives(row: dict[str, Any]) -> list[tuple[str, str, int, int]]:
    """(op, shape, bytes, times per token) of the row's collectives, largest total first."""
    items = [(c["op"], c["shape"], c["bytes"], c["times"]) for c in row["collectives"]]
    return sorted(items, key=lambda c: -c[2] * c[3])


def kv_cache_bytes(config: qwen2.Qwen2Config, prompts: int, n: int, prompt_len: int, new_tokens: int,
                   dtype: Any = jnp.bfloat16) -> int:
    """Total bytes of the shared-prefix KV cache (all devices): prompt block once per prompt plus
    each sample's own ``new_tokens - 1`` slots, at the sampler's prompt bucket."""
    cache = jax.eval_shape(lambda: qwen2.init_cache(config, prompts, prompt_length_bucket(prompt_len),
                                                    max(new_tokens - 1, 1), n, dtype))
    return int(sum(np.prod(x.shape) * jnp.dtype(x.dtype).itemsize for x in jax.tree.leaves(cache)))


def repeated_kv_bytes(config: qwen2.Qwen2Config, prompts: int, n: int, prompt_len: int, new_tokens: int,
                      dtype: Any = jnp.bfloat16) -> int:
    """Bytes of the KV cache the sampler kept before the shared prefix: every sample row held its
    own copy of the prompt, bucketed to the next power of two (minimum 16), plus its
    ``new_tokens - 1`` slots: ``2 * L * prompts * n * K * (pow2(prompt_len) + new_tokens - 1) * D``."""
    tp = max(16, 1 << (prompt_len - 1).bit_length())
    return int(2 * config.num_layers * prompts * n * config.num_kv_heads * (tp + new_tokens - 1)
               * config.head_dim_ * jnp.dtype(dtype).itemsize)
