"""Loop-aware costs of an optimized HLO module: trip counts, matmul FLOPs, per-step HBM traffic on TPU.

Read through :mod:`maxk_jax.planning.hlo` (the project's one HLO reader: parser, trip counts,
loop walker); the fusion reader (:func:`fused_traffic`: what a fused computation reads and writes)
is shared with :mod:`maxk_jax.planning.gpu_plan`. Two things a planner needs that
``compiled.cost_analysis()`` does not give on every backend:

* :func:`matmul_flops` -- ``dot`` and ``convolution`` FLOPs with every loop body counted its trip
  count times (:func:`maxk_jax.planning.hlo.trip_count`). XLA:TPU's ``cost_analysis()["flops"]`` counts each while body once (a 10-trip
  ``fori_loop`` of matmuls reports one matmul), which makes it useless for a scanned model.
* :func:`tpu_step_traffic` -- HBM bytes one iteration of the decode loop reads and writes on
  TPU. XLA:TPU marks where each array lives in its layout (``S(1)`` on-chip VMEM, ``S(2)`` SMEM,
  none = HBM), so operands already in VMEM cost no HBM traffic, and weights / cache streamed into
  VMEM by async copies (``copy-start``, ``slice-start``) count once per HBM side.
"""
from __future__ import annotations

import math
import re
from typing import Any

from maxk_jax.planning.hlo import (CALLS, ITEMSIZE, Computation, Instruction, LoopPolicy, dims, element_count,
                                   entry, need, operands, parse, root_op, shape_bytes, walk, walk_loop_iteration)

_ARRAY = re.compile(r"([a-z]+[0-9]*)\[([0-9,]*)\](\{[^}]*\})?")
#: ops that move no data of their own (bookkeeping; control flow is walked into; async halves
#: count at their start)
NOT_ISSUED = frozenset({"parameter", "constant", "get-tuple-element", "tuple", "bitcast", "while", "conditional",
                        "call", "after-all", "partition-id", "replica-id", "opt-barrier", "add-dependency",
                        "domain", "iota"})
#: element-preserving ops a fused parameter may pass through before it is sliced
PASS_THROUGH = frozenset({"convert", "bitcast", "reshape", "copy", "transpose"})
SLICE_ROOTS = frozenset({"dynamic-slice", "slice", "copy"})
#: ops whose called computations the per-step walkers enter (fusion bodies are read as one kernel)
CONTROL_CALLS = frozenset({"conditional", "call", "async-start"})


def fused_traffic(comp: Computation, operand_shapes: list[str]) -> tuple[int, int]:
    """(bytes read, bytes written) by a fused computation with the given operand shapes: a
    parameter used only as the source of slices / gathers (possibly through element-preserving ops:
    ``PASS_THROUGH``) counts at their result size (in its own dtype); a
    ``dynamic-update-slice`` root (or tuple of them) writes its update into its operand 0 in
    place (that buffer is neither read nor written whole)."""
    users: dict[str, list[tuple[str, str, str, list[str]]]] = {}
    params: dict[int, str] = {}
    for name, shape, op, line in comp.instructions:
        if op == "parameter":
            params[int(need(r"parameter\((\d+)\)", line))] = name
        for o in operands(line):
            users.setdefault(o, []).append((name, shape, op, operands(line)))
    root_shape, root_op, root_line = comp.root
    roots = [(root_shape, root_op, operands(root_line))]
    if root_op == "tuple":
        roots = [(comp.by_name[o][0], comp.by_name[o][1], operands(comp.by_name[o][2])) for o in roots[0][2]
                 if o in comp.by_name]
    in_place, written = set(), 0
    for shape, op, ops in roots:
        if op == "dynamic-update-slice" and len(ops) > 1:
            in_place.add(ops[0])
            written += shape_bytes(comp.by_name[ops[1]][0]) if ops[1] in comp.by_name else 0
        else:
            written += shape_bytes(shape)
    def sliced_elements(name: str, depth: int = 0) -> int | None:
        """Elements of ``name`` the fusion reads when every path from it reaches a slice (through
        element-preserving ops), else None (read whole). In-place update targets read nothing."""
        uses = users.get(name, [])
        if not uses or depth > 8:
            return None
        total = 0
        for user, shape, op, ops in uses:
            if op in ("dynamic-slice", "slice", "gather") and ops[0] == name:
                total += element_count(shape)
            elif op == "dynamic-update-slice" and ops[0] == name and name in in_place:
                continue
            elif op in PASS_THROUGH and len(ops) == 1:
                inner = sliced_elements(user, depth + 1)
                if inner is None:
                    return None
                total += inner
            else:
                return None
        return total

    read = 0
    for i, shape in enumerate(operand_shapes):
        name = params.get(i)
        elements = sliced_elements(name) if name is not None else None
        if elements is None:
            read += shape_bytes(shape)
        else:
            read += elements * shape_bytes(shape) // max(element_count(shape), 1)
    return read, written



def conv_macs(line: str, lhs: list[int], rhs: list[int], out: list[int]) -> int:
    """Multiply-adds of an HLO ``convolution`` with operand dims ``lhs``, ``rhs`` and result dims
    ``out``: per output element, the window taps that land on a real input element (padding and
    lhs-dilation holes excluded) times the input features. XLA:TPU writes matmuls as convolutions
    whose spatial dims are batch tricks or contraction chunks, so the taps matter."""
    labels = re.search(r"dim_labels=(\w+)_(\w+)->(\w+)", line)
    if not labels or not lhs or not rhs or not out:
        return 0
    lhs_l, rhs_l, out_l = labels.groups()
    spatial = [c for c in out_l if c.isdigit()]
    window: dict[str, list[str]] = {}
    w = re.search(r"window=\{([^}]*)\}", line)
    for item in (w.group(1).split() if w else []):
        key, val = item.split("=")
        window[key] = val.split("x")

    def get(key: str, n: int, default: str) -> str:
        return window.get(key, [default] * len(spatial))[n]

    taps = 1
    for n, d in enumerate(spatial):
        size, stride = int(get("size", n, "1")), int(get("stride", n, "1"))
        lo, ld, rd = int(get("pad", n, "0_0").split("_")[0]), int(get("lhs_dilate", n, "1")), int(get("rhs_dilate", n, "1"))
        span = (lhs[lhs_l.index(d)] - 1) * ld + 1
        taps *= sum(1 for o in range(out[out_l.index(d)]) for k in range(size)
                    if 0 <= o * stride + k * rd - lo < span and (o * stride + k * rd - lo) % ld == 0)
    per_position = math.prod(out) // max(math.prod(out[out_l.index(d)] for d in spatial), 1)
    return per_position * taps * rhs[rhs_l.index("i")]


def matmul_flops(text: str) -> dict[str, int]:
    """Matmul FLOPs of an optimized HLO module, every loop body counted
    :func:`maxk_jax.planning.hlo.trip_count` times -> ``{"flops", "loops_without_trip_count"}``
    (those counted once). ``dot``: 2 x result elements x contracted size; ``convolution``: 2 x
    :func:`conv_macs`. Every branch of a ``conditional`` counts (an upper bound)."""
    out = {"flops": 0, "loops_without_trip_count": 0}

    def visit(_: str, comp: Computation, ins: Instruction, times: float) -> None:
        _, shape, op, line = ins
        operand_dims = [dims(comp.by_name[o][0] if o in comp.by_name else "") for o in operands(line)]
        if op == "dot" and operand_dims:
            contracting = re.search(r"lhs_contracting_dims=\{([\d,]*)\}", line)
            k = math.prod(operand_dims[0][int(d)] for d in (contracting.group(1).split(",") if contracting and
                                                         contracting.group(1) else []))
            out["flops"] += 2 * math.prod(dims(shape)) * k * times
        elif op == "convolution" and len(operand_dims) > 1:
            out["flops"] += 2 * conv_macs(line, operand_dims[0], operand_dims[1], dims(shape)) * times

    start = entry(text)
    if start:
        out["loops_without_trip_count"] = walk(parse(text), start, visit)
    return out


def _arrays(shape: str) -> list[tuple[int, bool]]:
    """(bytes, in HBM) of each array of an HLO shape string: a layout with ``S(n)`` (n >= 1) is
    another memory space (VMEM, SMEM, ...); none is HBM. Tile padding ignored."""
    return [(ITEMSIZE[t] * math.prod(int(d) for d in ds.split(",") if d),
             not re.search(r"S\([1-9]\d*\)", layout or ""))
            for t, ds, layout in _ARRAY.findall(shape) if t in ITEMSIZE]


def hbm_bytes(shape: str) -> int:
    """Bytes of the arrays of an HLO shape string that live in HBM (no ``S(n)`` memory space)."""
    return sum(b for b, in_hbm in _arrays(shape) if in_hbm)


def _issued_bytes(comps: dict[str, Computation], comp: Computation, shape: str, op: str, line: str) -> tuple[int, int]:
    """(HBM bytes moved, bytes copied into HBM) of one issued instruction (see tpu_step_traffic)."""
    shapes = [comp.by_name[o][0] for o in operands(line) if o in comp.by_name]
    if op in ("copy-start", "slice-start"):
        arrays = _arrays(shape)   # copy-start: (dst, src, ctx); slice-start: ((src), dst, ctx)
        if len(arrays) >= 2:
            (dst, dst_hbm), (_, src_hbm) = (arrays[0], arrays[1]) if op == "copy-start" else (arrays[1], arrays[0])
            return dst * (int(src_hbm) + int(dst_hbm)), dst if dst_hbm and src_hbm else 0
    if op.endswith("-start"):        # collectives and other async work: operands + results in HBM
        return sum(hbm_bytes(s) for s in shapes) + hbm_bytes(shape), 0
    fused = comps.get(CALLS.search(line).group(1)) if op == "fusion" and CALLS.search(
        line) else None
    if fused is not None:
        read, written = fused_traffic(fused, [s if hbm_bytes(s) else "pred[0]" for s in shapes])
        arrays = _arrays(shape)
        total = sum(b for b, _ in arrays)
        written = written * sum(b for b, h in arrays if h) // total if total else 0
        copied = hbm_bytes(shape) if root_op(fused)[1] in SLICE_ROOTS else 0
        return read + written, copied
    if op == "dynamic-update-slice":   # in place: the update is read and written
        return 2 * (hbm_bytes(shapes[1]) if len(shapes) > 1 else 0), 0
    moved = sum(hbm_bytes(s) for s in shapes) + hbm_bytes(shape)
    return moved, hbm_bytes(shape) if op == "copy" else 0


def tpu_step_traffic(text: str, dynamic_trips: float = 1.0) -> dict[str, Any]:
    """One iteration of the decode loop (the outermost ``while`` reaching the most computations,
    :func:`maxk_jax.planning.hlo.outer_loop`) of an XLA:TPU module -> ``{"ops", "dma_starts",
    "hbm_bytes", "copy_to_hbm_bytes", "traffic": [{"op", "name", "bytes", "times"}] (largest
    total first)}``. HBM bytes: an async copy / slice moves its destination's bytes once per HBM
    side (weights and cache streamed into VMEM: once); a fusion reads its HBM operands (sliced ones
    at the slice, in-place update targets not at all, as :func:`fused_traffic`)
    and writes its HBM results; other ops read their HBM operands and write their HBM result.
    Nested loops count :func:`maxk_jax.planning.hlo.trip_count` times, a loop whose bound is data-dependent (the decode
    attention's loop over the live own-cache blocks) ``dynamic_trips`` times (e.g. its average over
    the decode steps; ``"dynamic_loops"`` counts them); the condition once per iteration."""
    comps = parse(text)
    out: dict[str, Any] = {"ops": 0, "dma_starts": 0, "hbm_bytes": 0, "copy_to_hbm_bytes": 0, "dynamic_loops": 0,
                           "traffic": []}

    def visit(_: str, comp: Computation, ins: Instruction, times: float) -> None:
        iname, shape, op, line = ins
        if op in NOT_ISSUED or op in CONTROL_CALLS or op.endswith("-done"):
            return
        moved, copied = _issued_bytes(comps, comp, shape, op, line)
        out["ops"] += times
        out["dma_starts"] += times if op.endswith("-start") else 0
        out["hbm_bytes"] += moved * times
        out["copy_to_hbm_bytes"] += copied * times
        out["traffic"].append({"op": op, "name": iname, "bytes": moved, "times": times})

    # every branch of a conditional counts (an upper bound); nested conditions run once per trip
    policy = LoopPolicy(unknown_trips=dynamic_trips, condition="always", enter=CONTROL_CALLS)
    out["dynamic_loops"] = walk_loop_iteration(comps, visit, policy)
    for key in ("ops", "dma_starts", "hbm_bytes", "copy_to_hbm_bytes"):   # fractional with dynamic_trips
        out[key] = round(out[key])
    out["traffic"].sort(key=lambda c: -c["bytes"] * c["times"])
    return out
