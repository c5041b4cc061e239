"""Decode-loop plans for a GPU without a GPU: a deviceless XLA:GPU compile and a per-step report.

XLA builds the program for a GPU it cannot see from a target description: with the CUDA plugin
installed (``pip install "jax-cuda12-plugin[with-cuda]==<jax>" "jax-cuda12-pjrt==<jax>"``, the
the ``cuda`` extra at the installed jax; ``JAX_SKIP_CUDA_CONSTRAINTS_CHECK=1`` since no driver is there to check),
``jax.experimental.topologies.get_topology_desc(platform="cuda", target_config=<GpuTargetConfig
text proto>)`` gives devices to lower on. :func:`gpu_decode_report` compiles the sampler's
decode loop (``sampling.decode_loop``, abstract arguments as :mod:`maxk_jax.planning.sample_plan` builds
them) for such a device and reads, from the optimized GPU HLO (:func:`decode_step_costs`), what
ONE decode step (one iteration of the decode ``while`` loop, nested loops times their
``known_trip_count``) launches and moves:

* ``materialized_bytes``: result bytes of every op that only copies: a ``fusion`` (or async
  ``fusion-start``) whose fused ROOT is ``dynamic-slice`` / ``slice`` / ``copy``, a plain
  ``copy`` / ``copy-start``, and memcpy custom calls;
* ``kernels``: launched ops (fusions, custom calls such as cuBLAS / cuDNN, copies, collectives,
  any other op that is not bookkeeping), each counted per execution;
* ``est_bytes``: operands + results of every launched op, where an operand the op only slices is
  counted at the slice's size and a ``dynamic-update-slice`` root writes only its update (the
  buffer is updated in place); an estimate of HBM traffic without cache reuse.

They stand next to ``ideal_bytes``: the bf16 weight bytes plus the KV bytes a step must read (each
prompt's block once, each row's own generated tokens at the average step, ``new_tokens / 2``).

Target descriptions ship in ``maxk_jax/planning/targets/`` (:data:`TARGETS`); ``h100.txtpb`` is an NVIDIA
H100 80GB HBM3 (compute capability 9.0, 132 SMs, 50 MB L2, 3.35 TB/s) in XLA's GpuTargetConfig
text format, as the CUDA plugin reports it on that card.
"""
from __future__ import annotations

import functools
import os
import pathlib
import re
import time
from typing import Any

import jax
import numpy as np

from maxk_jax.planning import memory_plan, sample_plan
from maxk_jax.planning.hlo import (CALLS, Computation, Instruction, LoopPolicy, need, operands, parse, root_op,
                                   root_through_bitcasts, shape_bytes, walk_loop_iteration)
from maxk_jax.planning.hlo_cost import CONTROL_CALLS, SLICE_ROOTS, fused_traffic, matmul_flops
from maxk_jax.runtime import sharding as sh
from maxk_jax.models import decode_attention, qwen2
from maxk_jax.sampling import SamplerSettings, decode_loop

TARGET_DIR = pathlib.Path(__file__).resolve().parent / "targets"
#: target name -> (GpuTargetConfig text proto file, where its values come from)
TARGETS = {"h100": ("h100.txtpb", "NVIDIA H100 80GB HBM3 as reported by the CUDA plugin on that card "
                                  "(jax 0.11.2, CUDA 13): cc 9.0, 132 SMs, 50 MB L2, 3.35 TB/s")}

#: ops that launch nothing (bookkeeping, aliases, control flow walked into, async halves counted once)
NOT_LAUNCHED = frozenset({
    "parameter", "constant", "get-tuple-element", "tuple", "bitcast", "while", "conditional", "call",
    "after-all", "partition-id", "replica-id", "opt-barrier", "add-dependency", "domain",
    "fusion-done", "copy-done", "async-done", "async-update", "all-gather-done", "all-reduce-done",
    "collective-permute-done", "send-done", "recv-done", "get-dimension-size", "iota",
})
PLUGIN_HINT = (f"a GPU plan needs the CUDA plugin for jax {jax.__version__}: pip install "
               f"'jax-cuda12-plugin[with-cuda]=={jax.__version__}' 'jax-cuda12-pjrt=={jax.__version__}' "
               "(what the cuda extra installs), then run with JAX_SKIP_CUDA_CONSTRAINTS_CHECK=1")
_ALIASED = re.compile(r"output_to_operand_aliasing=\{(.*?)\}, (?:[a-z_]+=|$)")
_ARRAY_SHAPE = re.compile(r"[a-z]+[0-9]*\[[0-9,]*\](?:\{[^}]*\})?")


def _aliased_output_bytes(shape: str, line: str) -> int:
    """Bytes of the outputs of a custom call that alias an operand (``output_to_operand_aliasing``,
    e.g. a Pallas kernel writing a slot of a KV cache in place): the kernel writes into the operand's
    buffer only what it stores, not the whole output, so those outputs do not count as written."""
    m = _ALIASED.search(line)
    if not m:
        return 0
    elements = _ARRAY_SHAPE.findall(shape)
    indices = {int(i) for i in re.findall(r"\{(\d+)\}\s*:", m.group(1))}
    return sum(shape_bytes(elements[i]) for i in indices if i < len(elements))


def _reduces_leading(fused: Computation, index: int) -> bool:
    """Whether fused computation ``fused`` reads its parameter ``index`` only through reductions
    over its leading dimension (possibly after bitcasts): how a split-K GEMM's partials are summed."""
    param = next((n for n, _, op, line in fused.instructions
                  if op == "parameter" and int(need(r"parameter\((\d+)\)", line)) == index), None)
    names, seen = [param] if param else [], False
    while names:
        name = names.pop()
        for user, _, op, line in fused.instructions:
            if name not in operands(line):
                continue
            if op == "bitcast":
                names.append(user)
            elif op == "reduce" and operands(line)[0] == name and re.search(r"dimensions=\{0\}", line):
                seen = True
            else:
                return False
    return seen


def _split_k_results(comp: Computation, comps: dict[str, Computation]) -> dict[str, int]:
    """GEMM fusions of ``comp`` whose result holds split-K partial sums -> their result bytes: XLA
    split the contraction into S slices (a fused ROOT ``dot`` with a batch dimension of S) and
    another fusion sums the [S, ...] result over its leading dimension."""
    def fused_of(line: str) -> Computation | None:
        m = CALLS.search(line)
        return comps.get(m.group(1)) if m else None

    gemms = {}
    for name, shape, op, line in comp.instructions:
        fused = fused_of(line) if op in ("fusion", "fusion-start") else None
        if fused is None:
            continue
        root_shape, root_op, root_line = root_through_bitcasts(fused)
        if root_op == "dot" and "lhs_batch_dims" in root_line:
            gemms[name] = shape_bytes(root_shape)
    found: dict[str, int] = {}
    for name, shape, op, line in comp.instructions if gemms else ():
        fused = fused_of(line) if op in ("fusion", "fusion-start") else None
        for i, operand in enumerate(operands(line) if fused is not None else ()):
            while operand in comp.by_name and comp.by_name[operand][1] == "bitcast" and operands(
                    comp.by_name[operand][2]):
                operand = operands(comp.by_name[operand][2])[0]
            if operand in gemms and _reduces_leading(fused, i):
                found[operand] = gemms[operand]
    return found


def _launched(out: dict[str, Any], comps: dict[str, Computation], comp: Computation, ins: Instruction,
              times: int) -> None:
    """Adds one launched op of ``comp`` (run ``times`` times per step) to :func:`decode_step_costs`'s ``out``."""
    name, shape, op, line = ins
    ops = operands(line)
    shapes = [comp.by_name[o][0] for o in ops if o in comp.by_name]
    fused = comps.get(CALLS.search(line).group(1)) if op in ("fusion", "fusion-start") and CALLS.search(
        line) else None
    if fused is not None:
        read, written = fused_traffic(fused, shapes)
        root_shape, root = root_op(fused)
        copy = root in SLICE_ROOTS
        result = shape_bytes(root_shape)
    else:
        result = shape_bytes(shape) if not op.endswith("-start") else shape_bytes(shapes[0]) if shapes else 0
        read, written = sum(shape_bytes(s) for s in shapes), result - _aliased_output_bytes(shape, line)
        copy = op in ("copy", "copy-start") or (op == "custom-call" and "memcpy" in line.lower())
    kind = "fusion" if op in ("fusion", "fusion-start") else op
    out["kernels"] += times
    out["kernel_ops"][kind] = out["kernel_ops"].get(kind, 0) + times
    out["est_bytes"] += (read + written) * times
    out["traffic"].append({"op": op if fused is None else f"fusion:{root_op(fused)[1]}", "name": name,
                           "bytes": read + written, "times": times})
    if copy:
        out["materialized_bytes"] += result * times
        out["copies"].append({"op": op, "name": name, "shape": shape if fused is None else root_shape,
                              "bytes": result, "times": times})


def decode_step_costs(text: str) -> dict[str, Any]:
    """Per iteration of the decode ``while`` loop of an optimized HLO module (the while whose body
    reaches the most computations) -> ``{"kernels", "materialized_bytes", "est_bytes",
    "split_k_bytes" (of est_bytes: split-K partial sums written by GEMMs and read back to be summed,
    :func:`_split_k_results`), "kernel_ops": {opcode: count}, "copies": [{"op", "name", "shape", "bytes", "times"}],
    "traffic": [{"op", "name", "bytes", "times"}] (every launched op, largest total first)}``, every
    figure multiplied by the trip counts of the nested loops it sits in (the printed
    ``known_trip_count`` only, :func:`maxk_jax.planning.hlo.walk`). The loop's condition
    counts once per iteration, as do those of nested loops without a ``known_trip_count`` (XLA:GPU
    runs a loop of known trip count without evaluating its condition). ValueError without a loop."""
    comps = parse(text)
    out: dict[str, Any] = {"kernels": 0, "materialized_bytes": 0, "est_bytes": 0, "split_k_bytes": 0, "copies": [],
                           "kernel_ops": {}, "traffic": []}

    def enter(_: str, comp: Computation, times: int) -> None:
        out["split_k_bytes"] += 2 * times * sum(_split_k_results(comp, comps).values())   # written, then read

    def visit(_: str, comp: Computation, ins: Instruction, times: int) -> None:
        if ins[2] not in NOT_LAUNCHED and ins[2] not in CONTROL_CALLS:
            _launched(out, comps, comp, ins, times)

    # a branch of a conditional counted as if taken: an upper bound
    walk_loop_iteration(comps, visit, LoopPolicy(infer_trips=False, condition="unknown", enter=CONTROL_CALLS), enter)
    out["copies"].sort(key=lambda c: -c["bytes"] * c["times"])
    out["traffic"].sort(key=lambda c: -c["bytes"] * c["times"])
    return out


def target_config(target: str = "h100") -> tuple[str, str]:
    """(GpuTargetConfig text proto, a line naming its file and source) of a shipped target."""
    if target not in TARGETS:
        raise ValueError(f"unknown GPU target {target!r}; available: {sorted(TARGETS)}")
    file, source = TARGETS[target]
    path = TARGET_DIR / file
    return path.read_text(), f"{path.relative_to(TARGET_DIR.parent.parent)} ({source})"


def plugin_available() -> bool:
    """True when a CUDA PJRT plugin for this jax is importable (what a deviceless compile needs)."""
    import importlib.util
    try:
        return any(importlib.util.find_spec(f"jax_plugins.xla_cuda{v}") is not None for v in (12, 13))
    except ModuleNotFoundError:     # no jax_plugins namespace at all
        return False


@functools.cache
def target_mesh(target: str = "h100", tensor: int = 1) -> jax.sharding.Mesh:
    """A mesh with the project's axes over deviceless ``target`` GPUs (no GPU needed): one device,
    or ``tensor`` devices of one host along the ``tensor`` axis. RuntimeError naming the missing
    plugin when the CUDA plugin is not installed; ValueError for ``tensor`` < 1."""
    from jax.experimental import topologies
    if isinstance(tensor, bool) or not isinstance(tensor, int) or tensor < 1:
        raise ValueError(f"tensor={tensor!r} must be an int >= 1")
    text, _ = target_config(target)
    if not plugin_available():
        raise RuntimeError(PLUGIN_HINT)
    os.environ.setdefault("JAX_SKIP_CUDA_CONSTRAINTS_CHECK", "1")
    topo = topologies.get_topology_desc(platform="cuda", target_config=text, topology=f"1x{tensor}x1")
    devices = list(topo.devices)[:tensor]
    return sh.make_mesh(1, 1, tensor, devices=devices)


def ideal_bytes(config: qwen2.Qwen2Config, prompts: int, n: int, prompt_len: int, new_tokens: int
                ) -> dict[str, int]:
    """What one decode step must read at least: ``weights`` (bf16 bytes of every parameter) and
    ``kv`` (bf16 K and V of each prompt's ``prompt_len`` tokens once, plus each of the
    ``prompts * n`` rows' own generated tokens at the average step, ``new_tokens / 2``)."""
    per_token = 2 * config.num_layers * config.num_kv_heads * config.head_dim_ * 2
    kv = per_token * (prompts * prompt_len + prompts * n * new_tokens // 2)
    return {"weights": 2 * qwen2.param_count(config), "kv": kv, "total": 2 * qwen2.param_count(config) + kv}


def gpu_decode_report(config: qwen2.Qwen2Config, settings: SamplerSettings, num_prompts: int, prompt_len: int,
                      target: str = "h100", compiler_options: dict[str, Any] | None = None) -> dict[str, Any]:
    """Compile the sampler's decode loop for ``num_prompts`` x ``settings.n`` rows of a
    ``prompt_len``-token prompt and ``settings.max_new_tokens`` new tokens on a deviceless
    ``target`` GPU -> ``{"target", "target_source", "compile_s", "rows", "prompt_bucket",
    **decode_step_costs, "ideal": ideal_bytes, "weight_bytes_bf16", "materialized_pct" (of the bf16
    weight bytes), "est_over_ideal", "est_live_over_ideal", "memory": per-device args/temps}``.
    ``compiler_options``: XLA options of this compile only (e.g. ``{"xla_gpu_experimental_force_split_k":
    1}``; what ``XLA_FLAGS`` would set for the whole process), recorded in the report."""
    if num_prompts < 1 or prompt_len < 1:
        raise ValueError(f"num_prompts and prompt_len must be >= 1, got {num_prompts}, {prompt_len}")
    _, source = target_config(target)
    mesh = target_mesh(target)
    params, args, info = sample_plan.abstract_decode_inputs(config, settings, mesh, "rollout", num_prompts,
                                                            prompt_len)
    t0 = time.perf_counter()
    with sh.activation_sharding(mesh):
        compiled = decode_loop.lower(config, settings, mesh, params, *args).compile(compiler_options or None)
    compile_s = time.perf_counter() - t0
    costs = decode_step_costs(compiled.as_text())
    ideal = ideal_bytes(config, num_prompts, settings.n, prompt_len, settings.max_new_tokens)
    mem = memory_plan.memory_row(target, compiled, compile_s)
    unread = own_cache_unread_bytes(config, num_prompts * settings.n, settings.max_new_tokens)
    return {"target": target, "target_source": source, "compile_s": compile_s, **info, **costs, "ideal": ideal,
            "decode_attention": decode_attention.resolve(config.decode_attention, "gpu"),
            "compiler_options": dict(compiler_options or {}),
            "weight_bytes_bf16": ideal["weights"],
            "materialized_pct": 100.0 * costs["materialized_bytes"] / ideal["weights"],
            "est_over_ideal": costs["est_bytes"] / ideal["total"],
            "est_live_over_ideal": (costs["est_bytes"] - unread) / ideal["total"],
            "memory": {k: mem[k] for k in ("args", "temps", "total")}}


def own_cache_unread_bytes(config: qwen2.Qwen2Config, rows: int, new_tokens: int) -> int:
    """Bytes of the rows' own generated K/V that ``decode_attention="pallas"`` does not read at the
    average decode step (its own-cache kernel loops over the ``length`` live slots only, about
    ``new_tokens / 2`` of the ``new_tokens - 1`` allocated, where the operand counts them all);
    0 for ``"xla"``, whose fusions read every slot."""
    if decode_attention.resolve(config.decode_attention, "gpu") != "pallas":
        return 0
    slots = max(new_tokens - 1, 1)
    per_slot = 2 * config.num_layers * rows * config.num_kv_heads * config.head_dim_ * config.compute_dtype.itemsize
    return per_slot * max(slots - new_tokens // 2, 0)


def report_lines(r: dict[str, Any], top: int = 5) -> list[str]:
    """The printed per-decode-step report of :func:`gpu_decode_report`'s dict."""
    gb = 1e9
    options = ", ".join(f"{k}={v}" for k, v in r.get("compiler_options", {}).items())
    out = [f"target: {r['target_source']}" + (f"; XLA options: {options}" if options else ""),
           f"decode loop, {r['rows']} rows, prompt bucket {r['prompt_bucket']}: compiled in {r['compile_s']:.1f} s",
           f"  slice/copy bytes materialised per decode step: {r['materialized_bytes'] / gb:.3f} GB "
           f"({r['materialized_pct']:.1f} % of the {r['weight_bytes_bf16'] / gb:.3f} GB of bf16 weights)",
           f"  kernels per decode step: {r['kernels']:,} ("
           + ", ".join(f"{k} {v:,}" for k, v in sorted(r["kernel_ops"].items(), key=lambda kv: -kv[1])) + ")",
           f"  est. bytes moved per decode step: {r['est_bytes'] / gb:.3f} GB = {r['est_over_ideal']:.2f} x the "
           f"ideal {r['ideal']['total'] / gb:.3f} GB (weights {r['ideal']['weights'] / gb:.3f} + KV "
           f"{r['ideal']['kv'] / gb:.3f})"]
    if r.get("split_k_bytes"):
        out.append(f"    of which split-K partial sums: {r['split_k_bytes'] / gb:.3f} GB ("
                   f"{r['split_k_bytes'] / r['ideal']['total']:.2f} x the ideal): GEMMs split along their "
                   "contraction write partial products that the next kernel reads back to sum (here XLA's "
                   "untuned default tiling; on a GPU the autotuner picks each GEMM's split)")
    if r.get("decode_attention") == "pallas":
        out.append(f"  decode attention: pallas; with its own-cache kernel reading the live slots only (not the whole "
                   f"operand): {r['est_live_over_ideal']:.2f} x the ideal")
    for c in r["copies"][:top]:
        out.append(f"    {c['name']} ({c['op']}) {c['shape']}: {c['bytes']:,} B x {c['times']}")
    return out


def summary(r: dict[str, Any]) -> dict[str, float]:
    """The headline figures of a report (JSON-friendly scalars)."""
    return {k: float(np.round(r[k], 4)) for k in ("materialized_pct", "est_over_ideal", "est_live_over_ideal",
                                                  "compile_s")} | {"decode_attention": r["decode_attention"],
        "kernels": r["kernels"], "materialized_bytes": r["materialized_bytes"], "est_bytes": r["est_bytes"],
        "split_k_bytes": r["split_k_bytes"], "ideal_bytes": r["ideal"]["total"]}


def gpu_train_memory(config: qwen2.Qwen2Config, step_config: Any, sequences: int, prompt_len: int,
                     completion_len: int, target: str = "h100", mu_dtype: str | None = None) -> dict[str, Any]:
    """Compile the RL train step (``training.make_train_step``, Adam with first moment in
    ``mu_dtype``, donated state) on ``sequences`` rows of ``prompt_len + completion_len`` tokens for
    one deviceless ``target`` GPU -> its memory row (``memory_plan.memory_row``: per-device args,
    outputs, temps, alias and ``total`` bytes, ``compile_s``; ``matmul_flops`` per step,
    :func:`maxk_jax.planning.hlo_cost.matmul_flops`) with ``target``, ``target_source``,
    ``remat`` and ``remat_policy``. What a rematerialisation policy costs in memory on the card,
    before renting one (XLA:GPU's buffer assignment, not XLA:CPU's)."""
    if sequences < 1 or prompt_len < 1 or completion_len < 1:
        raise ValueError(f"sequences, prompt_len and completion_len must be >= 1, got {sequences}, {prompt_len}, "
                         f"{completion_len}")
    row, _ = memory_plan.compile_train_step(config, step_config, target_mesh(target), target, sequences=sequences,
                                            prompt_len=prompt_len, completion_len=completion_len, mu_dtype=mu_dtype)
    row["matmul_flops"] = matmul_flops(row.pop("hlo"))["flops"]   # per device, loops counted
    return {**row, "target": target, "target_source": target_config(target)[1], "remat": config.remat,
            "remat_policy": config.remat_policy}
