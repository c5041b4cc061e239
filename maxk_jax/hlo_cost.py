"""Loop-aware costs of an optimized HLO module: trip counts, matmul FLOPs, per-step HBM traffic on TPU.

Built on :func:`maxk_jax.memory_plan.parse_hlo` (the project's one HLO-text parser) and
:mod:`maxk_jax.gpu_plan`'s fusion reader. Three things a planner needs that ``compiled.cost_analysis()``
does not give on every backend:

* :func:`trip_count` -- how often a ``while`` body runs. XLA:GPU prints ``known_trip_count``;
  XLA:TPU prints none, so it is read off the loop itself: a condition ``counter < N`` (one integer
  constant) and the body's ``counter + k`` (XLA:TPU's windowed-einsum loops step by 2).
* :func:`matmul_flops` -- ``dot`` and ``convolution`` FLOPs with every loop body counted its trip
  count times. XLA:TPU's ``cost_analysis()["flops"]`` counts each while body once (a 10-trip
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

from maxk_jax import gpu_plan, memory_plan

_INT_CONST = re.compile(r"[su](?:8|16|32|64)\[\]\S* constant\((-?\d+)\)")
_ARRAY = re.compile(r"([a-z]+[0-9]*)\[([0-9,]*)\](\{[^}]*\})?")
_DIMS = re.compile(r"\[([\d,]*)\]")
#: ops that move no data of their own (bookkeeping; control flow is walked into; async halves
#: count at their start)
NOT_ISSUED = frozenset({"parameter", "constant", "get-tuple-element", "tuple", "bitcast", "while", "conditional",
                        "call", "after-all", "partition-id", "replica-id", "opt-barrier", "add-dependency",
                        "domain", "iota"})

Instructions = list[tuple[str, str, str, str]]


def dims(shape: str) -> list[int]:
    """Dimensions of the first array in an HLO shape string: ``'bf16[2,3]{1,0}'`` -> [2, 3]."""
    m = _DIMS.search(shape)
    return [int(d) for d in m.group(1).split(",") if d] if m else []


def trip_count(while_line: str, cond: Instructions, body: Instructions) -> int | None:
    """Trips of a ``while`` loop: its printed ``known_trip_count``, else read off the loop: the
    condition compares ``counter < N`` with a single integer constant N, and the body's ROOT tuple
    sets the counter to ``counter + k`` (k a constant, default 1): ceil(N / k), counting from 0 as
    JAX's scans / fori_loops and XLA's windowed einsums do. A data-dependent condition (the decode
    loop: ``step < T and not all done``) gets its bound T. None when neither is found."""
    known = memory_plan.TRIP.search(while_line)
    if known:
        return int(known.group(1))
    consts = {int(c) for *_, line in cond for c in _INT_CONST.findall(line)}
    compares = [(name, line) for name, _, op, line in cond if op == "compare" and "direction=LT" in line]
    if len(consts) != 1 or not compares:
        return None
    bound = consts.pop()
    cond_by_name = {n: line for n, _, _, line in cond}
    index = None
    for operand in gpu_plan._operands(compares[0][1]):
        g = re.search(r"get-tuple-element\(.*?index=(\d+)", cond_by_name.get(operand, ""))
        if g:
            index = int(g.group(1))
    step = 1
    root = next((line for _, _, op, line in body if op == "tuple" and line.lstrip().startswith("ROOT ")), None)
    if index is not None and root:
        body_by_name = {n: (op, line) for n, _, op, line in body}
        elems = gpu_plan._operands(root)
        op, line = body_by_name.get(elems[index], ("", "")) if index < len(elems) else ("", "")
        if op == "add":
            for operand in gpu_plan._operands(line):
                c_op, c_line = body_by_name.get(operand, ("", ""))
                c = _INT_CONST.search(c_line) if c_op == "constant" else None
                if c:
                    step = max(int(c.group(1)), 1)
    return -(-bound // step)


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


def _entry(text: str) -> str | None:
    m = re.search(r"^ENTRY %?([\w.\-]+)", text, re.M)
    return m.group(1) if m else None


def matmul_flops(text: str) -> dict[str, int]:
    """Matmul FLOPs of an optimized HLO module, every loop body counted :func:`trip_count` times
    -> ``{"flops", "loops_without_trip_count"}`` (those counted once). ``dot``: 2 x result
    elements x contracted size; ``convolution``: 2 x :func:`conv_macs`. Every branch of a
    ``conditional`` counts (an upper bound)."""
    comps = memory_plan.parse_hlo(text)
    shapes = {c: {n: s for n, s, _, _ in ins} for c, ins in comps.items()}
    out = {"flops": 0, "loops_without_trip_count": 0}

    def walk(comp: str, times: int, stack: frozenset[str]) -> None:
        if comp not in comps or comp in stack:
            return
        for _, shape, op, line in comps[comp]:
            operands = [dims(shapes[comp].get(o, "")) for o in gpu_plan._operands(line)]
            if op == "dot" and operands:
                contracting = re.search(r"lhs_contracting_dims=\{([\d,]*)\}", line)
                k = math.prod(operands[0][int(d)] for d in (contracting.group(1).split(",") if contracting and
                                                             contracting.group(1) else []))
                out["flops"] += 2 * math.prod(dims(shape)) * k * times
            elif op == "convolution" and len(operands) > 1:
                out["flops"] += 2 * conv_macs(line, operands[0], operands[1], dims(shape)) * times
            if op == "while":
                body = gpu_plan._need(r"body=%?([\w.\-]+)", line)
                cond = gpu_plan._need(r"condition=%?([\w.\-]+)", line)
                n = trip_count(line, comps.get(cond, []), comps.get(body, []))
                if n is None:
                    out["loops_without_trip_count"] += 1
                walk(body, times * (n or 1), stack | {comp})
            else:
                for called in memory_plan.called_computations(line):
                    walk(called, times, stack | {comp})

    entry = _entry(text)
    if entry:
        walk(entry, 1, frozenset())
    return out


def _arrays(shape: str) -> list[tuple[int, bool]]:
    """(bytes, in HBM) of each array of an HLO shape string: a layout with ``S(n)`` (n >= 1) is
    another memory space (VMEM, SMEM, ...); none is HBM. Tile padding ignored."""
    return [(memory_plan.ITEMSIZE[t] * math.prod(int(d) for d in ds.split(",") if d),
             not re.search(r"S\([1-9]\d*\)", layout or ""))
            for t, ds, layout in _ARRAY.findall(shape) if t in memory_plan.ITEMSIZE]


def hbm_bytes(shape: str) -> int:
    """Bytes of the arrays of an HLO shape string that live in HBM (no ``S(n)`` memory space)."""
    return sum(b for b, in_hbm in _arrays(shape) if in_hbm)


def _issued_bytes(comps: dict[str, Any], comp: Any, shape: str, op: str, line: str) -> tuple[int, int]:
    """(HBM bytes moved, bytes copied into HBM) of one issued instruction (see tpu_step_traffic)."""
    shapes = [comp.by_name[o][0] for o in gpu_plan._operands(line) if o in comp.by_name]
    if op in ("copy-start", "slice-start"):
        arrays = _arrays(shape)   # copy-start: (dst, src, ctx); slice-start: ((src), dst, ctx)
        if len(arrays) >= 2:
            (dst, dst_hbm), (_, src_hbm) = (arrays[0], arrays[1]) if op == "copy-start" else (arrays[1], arrays[0])
            return dst * (int(src_hbm) + int(dst_hbm)), dst if dst_hbm and src_hbm else 0
    if op.endswith("-start"):        # collectives and other async work: operands + results in HBM
        return sum(hbm_bytes(s) for s in shapes) + hbm_bytes(shape), 0
    fused = comps.get(gpu_plan._CALLS.search(line).group(1)) if op == "fusion" and gpu_plan._CALLS.search(
        line) else None
    if fused is not None:
        read, written = gpu_plan._fused_traffic(fused, [s if hbm_bytes(s) else "pred[0]" for s in shapes])
        arrays = _arrays(shape)
        total = sum(b for b, _ in arrays)
        written = written * sum(b for b, h in arrays if h) // total if total else 0
        copied = hbm_bytes(shape) if gpu_plan._root_op(fused)[1] in gpu_plan.SLICE_ROOTS else 0
        return read + written, copied
    if op == "dynamic-update-slice":   # in place: the update is read and written
        return 2 * (hbm_bytes(shapes[1]) if len(shapes) > 1 else 0), 0
    moved = sum(hbm_bytes(s) for s in shapes) + hbm_bytes(shape)
    return moved, hbm_bytes(shape) if op == "copy" else 0


def tpu_step_traffic(text: str, dynamic_trips: float = 1.0) -> dict[str, Any]:
    """One iteration of the decode loop (the outermost ``while`` reaching the most computations,
    :func:`maxk_jax.memory_plan.outer_loop`) of an XLA:TPU module -> ``{"ops", "dma_starts",
    "hbm_bytes", "copy_to_hbm_bytes", "traffic": [{"op", "name", "bytes", "times"}] (largest
    total first)}``. HBM bytes: an async copy / slice moves its destination's bytes once per HBM
    side (weights and cache streamed into VMEM: once); a fusion reads its HBM operands (sliced ones
    at the slice, in-place update targets not at all, as :func:`maxk_jax.gpu_plan._fused_traffic`)
    and writes its HBM results; other ops read their HBM operands and write their HBM result.
    Nested loops count :func:`trip_count` times, a loop whose bound is data-dependent (the decode
    attention's loop over the live own-cache blocks) ``dynamic_trips`` times (e.g. its average over
    the decode steps; ``"dynamic_loops"`` counts them); the condition once per iteration."""
    comps = gpu_plan._parse(text)
    outer, cond = memory_plan.outer_loop({c: comp.instructions for c, comp in comps.items()})
    out: dict[str, Any] = {"ops": 0, "dma_starts": 0, "hbm_bytes": 0, "copy_to_hbm_bytes": 0, "dynamic_loops": 0,
                           "traffic": []}

    def walk(name: str, times: int, stack: frozenset[str]) -> None:
        if name in stack or name not in comps:
            return
        comp = comps[name]
        for iname, shape, op, line in comp.instructions:
            if op == "while":
                body = gpu_plan._need(r"body=%?([\w.\-]+)", line)
                cnd = gpu_plan._need(r"condition=%?([\w.\-]+)", line)
                n = trip_count(line, comps[cnd].instructions if cnd in comps else [],
                               comps[body].instructions if body in comps else [])
                if n is None:
                    out["dynamic_loops"] += 1
                    n = dynamic_trips
                walk(body, times * n, stack | {name})
                walk(cnd, times * n, stack | {name})
            elif op in ("conditional", "call", "async-start"):
                for called in memory_plan.called_computations(line):   # every branch: an upper bound
                    walk(called, times, stack | {name})
            elif op not in NOT_ISSUED and not op.endswith("-done"):
                moved, copied = _issued_bytes(comps, comp, shape, op, line)
                out["ops"] += times
                out["dma_starts"] += times if op.endswith("-start") else 0
                out["hbm_bytes"] += moved * times
                out["copy_to_hbm_bytes"] += copied * times
                out["traffic"].append({"op": op, "name": iname, "bytes": moved, "times": times})

    walk(outer, 1, frozenset())
    walk(cond, 1, frozenset())
    for key in ("ops", "dma_starts", "hbm_bytes", "copy_to_hbm_bytes"):   # fractional with dynamic_trips
        out[key] = round(out[key])
    out["traffic"].sort(key=lambda c: -c["bytes"] * c["times"])
    return out
