"""The project's one reader of optimized HLO text: parser, shapes, trip counts and the loop walker.

Every planner reads compiled programs through this module:

* :func:`parse_hlo` / :func:`parse` -- module text -> computations of ``(name, result shape,
  opcode, line)`` instructions (:class:`Computation` adds a by-name index and the ROOT);
* shapes: :func:`shape_bytes`, :func:`dims`, :func:`element_count`, :data:`ITEMSIZE`;
* instruction lines: :func:`operands`, :func:`called_computations`, :func:`need`;
* loops: :func:`trip_count` (XLA:GPU prints ``known_trip_count``; XLA:TPU prints none, so it is read
  off the loop's condition and counter), :func:`outer_loop` (the decode loop: the ``while`` whose
  body reaches the most computations) and :func:`walk` / :func:`walk_loop_iteration`, the one
  walker that visits every instruction of a computation and of what it calls, each with how often
  it runs (nested loop bodies times their trip counts).

The planners differ only in the walker's policy (which loop trips count, whether a loop's
condition is walked, which ops' called computations are entered) and in what their visitor
counts: :func:`maxk_jax.planning.gpu_plan.decode_step_costs` (kernels and bytes per decode step on
GPU), :func:`maxk_jax.planning.sample_plan.loop_collectives` (collectives per token),
:func:`maxk_jax.planning.hlo_cost.matmul_flops` and :func:`maxk_jax.planning.hlo_cost.tpu_step_traffic`.
"""
from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable, Collection

#: bytes per element of each HLO element type
ITEMSIZE = {"pred": 1, "s8": 1, "u8": 1, "s16": 2, "u16": 2, "f16": 2, "bf16": 2, "s32": 4, "u32": 4,
            "f32": 4, "s64": 8, "u64": 8, "f64": 8}
#: one parsed instruction: (name, result shape, opcode, the whole line)
Instruction = tuple[str, str, str, str]
Instructions = list[Instruction]

_COMPUTATION = re.compile(r"^(?:ENTRY )?%?([\w.\-]+) .*\{\s*$")
_INSTRUCTION = re.compile(r"^\s*(?:ROOT )?%?([\w.\-]+) = (.+?) ([\w\-]+)\(")
_SHAPE = re.compile(r"\b(pred|[suf]\d+|bf16)\[([\d,]*)\]")
_DIMS = re.compile(r"\[([\d,]*)\]")
_CALLED = re.compile(r"(?:calls|to_apply|body|condition|branch_computations)=(\{[^}]*\}|%?[\w.\-]+)")
_OPERAND_NAMES = re.compile(r"%([\w.\-]+)")
_INT_CONST = re.compile(r"[su](?:8|16|32|64)\[\]\S* constant\((-?\d+)\)")
#: the ``known_trip_count`` of a ``while`` instruction's backend config
TRIP = re.compile(r'"known_trip_count":\{"n":"(\d+)"')
#: the fused computation a ``fusion`` instruction calls
CALLS = re.compile(r"calls=%?([\w.\-]+)")


def shape_bytes(shape: str) -> int:
    """Bytes of an HLO result shape (a tuple's elements summed): ``'(f32[2,3], bf16[4])'`` -> 32."""
    return sum(ITEMSIZE[t] * math.prod(int(d) for d in ds.split(",") if d) for t, ds in _SHAPE.findall(shape))


def dims(shape: str) -> list[int]:
    """Dimensions of the first array in an HLO shape string: ``'bf16[2,3]{1,0}'`` -> [2, 3]; [] for
    a scalar or a shape without brackets (``'token'``)."""
    m = _DIMS.search(shape)
    return [int(d) for d in m.group(1).split(",") if d] if m else []


def element_count(shape: str) -> int:
    """Element count of an array shape string: ``'bf16[2,3]{1,0}'`` -> 6."""
    return math.prod(dims(shape))


def need(pattern: str, line: str) -> str:
    """Group 1 of ``pattern`` in an instruction ``line``; ValueError naming the line when absent."""
    m = re.search(pattern, line)
    if m is None:
        raise ValueError(f"malformed HLO line (no {pattern!r}): {line.strip()[:200]}")
    return m.group(1)


def parse_hlo(text: str) -> dict[str, Instructions]:
    """HLO module text -> {computation name: [(instruction name, result shape, opcode, line)]}."""
    comps: dict[str, Instructions] = {}
    current = None
    for line in text.splitlines():
        m = _COMPUTATION.match(line)
        if m and not line.startswith(" "):     # headers start at column 0, instructions are indented
            current = m.group(1)
            comps[current] = []
            continue
        m = _INSTRUCTION.match(line)
        if m and current is not None:
            comps[current].append((m.group(1), m.group(2), m.group(3), line))
    return comps


@dataclasses.dataclass(frozen=True)
class Computation:
    """One parsed computation: ordered instructions and name -> (shape, opcode, line)."""

    instructions: Instructions
    by_name: dict[str, tuple[str, str, str]]

    @property
    def root(self) -> tuple[str, str, str]:
        """(shape, opcode, line) of the ROOT instruction; ValueError without one."""
        for name, shape, op, line in self.instructions:
            if line.lstrip().startswith("ROOT "):
                return shape, op, line
        raise ValueError("computation without ROOT")


def parse(text: str) -> dict[str, Computation]:
    """HLO module text -> {computation name: :class:`Computation`}."""
    return {c: Computation(ins, {n: (s, o, line) for n, s, o, line in ins}) for c, ins in parse_hlo(text).items()}


def entry(text: str) -> str | None:
    """Name of the module's ENTRY computation (None when it has none)."""
    m = re.search(r"^ENTRY %?([\w.\-]+)", text, re.M)
    return m.group(1) if m else None


def operands(line: str) -> list[str]:
    """Operand names of an instruction line (inside the opcode's parentheses)."""
    start = re.search(r" [\w\-]+\(", line)
    if start is None:
        return []
    depth, i = 0, start.end() - 1
    for j in range(i, len(line)):
        depth += {"(": 1, ")": -1}.get(line[j], 0)
        if depth == 0:
            return _OPERAND_NAMES.findall(line[i + 1:j])
    return _OPERAND_NAMES.findall(line[i + 1:])


def called_computations(line: str) -> list[str]:
    """Computations an HLO instruction line calls (fusion bodies, loop bodies / conditions, branches)."""
    return [name.strip().lstrip("%") for group in _CALLED.findall(line) for name in group.strip("{}").split(",")
            if name.strip()]


def known_trip_count(while_line: str) -> int | None:
    """The ``known_trip_count`` XLA printed on a ``while`` line (XLA:GPU does, XLA:TPU does not)."""
    known = TRIP.search(while_line)
    return int(known.group(1)) if known else None


def _counter_step(index: int | None, body: Instructions) -> int:
    """``k`` of the body's ``counter + k`` (tuple element ``index`` of its ROOT), default 1."""
    root = next((line for _, _, op, line in body if op == "tuple" and line.lstrip().startswith("ROOT ")), None)
    if index is None or not root:
        return 1
    body_by_name = {n: (op, line) for n, _, op, line in body}
    elems = operands(root)
    op, line = body_by_name.get(elems[index], ("", "")) if index < len(elems) else ("", "")
    step = 1
    if op == "add":
        for operand in operands(line):
            c_op, c_line = body_by_name.get(operand, ("", ""))
            c = _INT_CONST.search(c_line) if c_op == "constant" else None
            if c:
                step = max(int(c.group(1)), 1)
    return step


def trip_count(while_line: str, cond: Instructions, body: Instructions) -> int | None:
    """Trips of a ``while`` loop: its printed ``known_trip_count``, else read off the loop: the
    condition compares ``counter < N`` with a single integer constant N, and the body's ROOT tuple
    sets the counter to ``counter + k`` (k a constant, default 1): ceil(N / k), counting from 0 as
    JAX's scans / fori_loops and XLA's windowed einsums do. A data-dependent condition (the decode
    loop: ``step < T and not all done``) gets its bound T. None when neither is found."""
    known = known_trip_count(while_line)
    if known is not None:
        return known
    consts = {int(c) for *_, line in cond for c in _INT_CONST.findall(line)}
    compares = [(name, line) for name, _, op, line in cond if op == "compare" and "direction=LT" in line]
    if len(consts) != 1 or not compares:
        return None
    bound = consts.pop()
    cond_by_name = {n: line for n, _, _, line in cond}
    index = None
    for operand in operands(compares[0][1]):
        g = re.search(r"get-tuple-element\(.*?index=(\d+)", cond_by_name.get(operand, ""))
        if g:
            index = int(g.group(1))
    return -(-bound // _counter_step(index, body))


def _reachable(comps: dict[str, Instructions], name: str) -> int:
    seen, todo = set(), [name]
    while todo:
        c = todo.pop()
        if c in seen or c not in comps:
            continue
        seen.add(c)
        for *_, line in comps[c]:
            todo += called_computations(line)
    return len(seen)


def outer_loop(comps: dict[str, Instructions] | dict[str, Computation]) -> tuple[str, str]:
    """(body, condition) of the ``while`` loop of a parsed module (:func:`parse_hlo` or :func:`parse`)
    whose body reaches the most computations: the decode loop (the layer loop, scanned or not, sits
    inside it). ValueError when the module has no loop."""
    lists = {c: (v.instructions if isinstance(v, Computation) else v) for c, v in comps.items()}
    whiles = [line for body in lists.values() for _, _, op, line in body if op == "while"]
    if not whiles:
        raise ValueError("no while loop in the compiled module")
    line = max(whiles, key=lambda w: _reachable(lists, need(r"body=%?([\w.\-]+)", w)))
    return need(r"body=%?([\w.\-]+)", line), need(r"condition=%?([\w.\-]+)", line)


#: visitor of :func:`walk`: (computation name, computation, instruction, executions) -> None
Visit = Callable[[str, Computation, Instruction, float], None]


@dataclasses.dataclass(frozen=True)
class LoopPolicy:
    """How :func:`walk` counts loops and enters calls.

    ``infer_trips``: a ``while`` without ``known_trip_count`` gets :func:`trip_count`'s reading of
    its condition (False: only the printed count); ``unknown_trips``: the trips of a loop whose
    count is still unknown; ``condition``: when a nested loop's condition is walked -- ``"never"``,
    ``"unknown"`` (only when its trip count is unknown: XLA:GPU runs a loop of known trip count
    without evaluating its condition) or ``"always"`` (once per trip); ``enter``: opcodes whose
    called computations are walked (None: every instruction's, fusion bodies and reducers too)."""

    infer_trips: bool = True
    unknown_trips: float = 1
    condition: str = "never"
    enter: Collection[str] | None = None

    def __post_init__(self) -> None:
        if self.condition not in ("never", "unknown", "always"):
            raise ValueError(f"condition={self.condition!r} must be 'never', 'unknown' or 'always'")


def walk(comps: dict[str, Computation], start: str, visit: Visit, policy: LoopPolicy = LoopPolicy(),
         times: float = 1, on_enter: Callable[[str, Computation, float], None] | None = None) -> int:
    """Visit every instruction of computation ``start`` (run ``times`` times) and of what it calls,
    in program order, each with how often it runs: a ``while`` body its trip count times more
    (``policy``); a computation already on the call stack is not re-entered. ``visit`` sees every
    instruction, ``while`` and entered calls included, before what it calls is walked;
    ``on_enter(name, computation, times)`` runs on entering each computation. Returns how many
    ``while`` instructions had no trip count (counted ``policy.unknown_trips`` times)."""
    unknown = 0

    def go(name: str, n_times: float, stack: frozenset[str]) -> None:
        nonlocal unknown
        if name in stack or name not in comps:
            return
        comp = comps[name]
        if on_enter is not None:
            on_enter(name, comp, n_times)
        inner = stack | {name}
        for ins in comp.instructions:
            visit(name, comp, ins, n_times)
            op, line = ins[2], ins[3]
            if op == "while":
                body, cond = need(r"body=%?([\w.\-]+)", line), need(r"condition=%?([\w.\-]+)", line)
                trips = (trip_count(line, comps[cond].instructions if cond in comps else [],
                                    comps[body].instructions if body in comps else [])
                         if policy.infer_trips else known_trip_count(line))
                if trips is None:
                    unknown += 1
                n = policy.unknown_trips if trips is None else trips
                go(body, n_times * n, inner)
                if policy.condition == "always" or (policy.condition == "unknown" and trips is None):
                    go(cond, n_times * n, inner)
            elif policy.enter is None or op in policy.enter:
                for called in called_computations(line):
                    go(called, n_times, inner)

    go(start, times, frozenset())
    return unknown


def walk_loop_iteration(comps: dict[str, Computation], visit: Visit, policy: LoopPolicy = LoopPolicy(),
                        on_enter: Callable[[str, Computation, float], None] | None = None) -> int:
    """:func:`walk` over ONE iteration of the decode loop (:func:`outer_loop`): its body, then its
    condition (which runs once per iteration too). Returns the loops without a trip count."""
    body, cond = outer_loop(comps)
    return (walk(comps, body, visit, policy, on_enter=on_enter)
            + walk(comps, cond, visit, policy, on_enter=on_enter))


def root_through_bitcasts(comp: Computation) -> tuple[str, str, str]:
    """(shape of the ROOT, opcode, line) of the first op below a computation's ROOT that is not a
    bitcast (a free reinterpretation)."""
    shape, op, line = comp.root
    while op == "bitcast" and operands(line) and operands(line)[0] in comp.by_name:
        _, op, line = comp.by_name[operands(line)[0]]
    return shape, op, line


def root_op(comp: Computation) -> tuple[str, str]:
    """(shape, opcode) of a computation's ROOT, looking through bitcasts."""
    return root_through_bitcasts(comp)[:2]
