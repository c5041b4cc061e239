"""A procedurally generated family of tiny stdin/stdout problems with partial-credit tests.

Built for the laptop-scale end-to-end run: a ~1-3M parameter Qwen2 policy, trained for a minute or
two on CPU, should learn this family *partially*. Every problem is a short pipeline of primitive
operations described by a templated one-line statement; its solution is a short program made of
one line per operation, so statement and solution each stay well under 64 tokens of the tiny
tokenizer (`maxk_jax.models.tiny`).

Two kinds of problem:

* ``scalar``: read one integer, apply 1..`max_ops` operations in order, print the result. Operations:
  add/subtract/multiply by c, floor-divide by c, modulo c, clamp to at least/at most c (max/min),
  absolute value, negate, square, digit sum of the absolute value.
* ``list``: read a line of integers, apply element-wise operations (the scalar ones) and filters
  (keep values greater/less than c, keep even/odd values), then reduce: sum, largest or smallest
  (0 if none remain), count, or print sorted.

Example (scalar)::

    statement:  Read an integer x. Add 3 to x, then multiply x by -2, then clamp x to at least 5. Print x.
    canonical:  x=int(input())
                x=x+3
                x=x*-2
                x=max(x,5)
                print(x)
    near miss:  the clamp dropped -> right exactly on the hidden inputs where -2*(x+3) >= 5,
                e.g. reward 5/8 when five of the eight hidden inputs are at most -6.

Partial credit. Each problem has `num_tests` hidden tests (random distinct inputs in
[-input_range, input_range], lists of 1..max_list_len values). Problems are kept only if removing any
single operation changes at least one expected output (every operation is tested) and, for a
largest/smallest reduction after a filter, between 1 and half of the tests leave no value (the
"0 if none remain" edge case matters only sometimes). Near-miss programs then pass *some* tests:
a dropped clamp/abs/filter is right wherever it was a no-op, ``x>c`` vs ``x>=c`` differs only when c
is in the list, truncating ``int(x/c)`` vs floor ``x//c`` only on negative non-multiples, a forgotten
``abs`` in the digit sum or a forgotten empty case crashes (RE) only on some inputs.

Every program here is rendered from a small spec (`Spec`) and the same spec is interpreted in
Python to produce expected outputs, so the reward a mutated program *will* get from the judge is
known exactly (`maxk_jax.data.synthetic_solutions`: `near_misses`, `sample_solutions`); tests check this
against the real sandbox.

Use::

    train, test = make_split(SyntheticConfig(seed=0, num_train=2000, num_test=200, max_ops=3))
    train[0].prompt, train[0].tests                    # the statement and its hidden tests
    synthetic_solutions.canonical_solution(train[0])   # its programs: see maxk_jax.data.synthetic_solutions

Splits (`make_split`): problems are drawn from one ``numpy`` generator seeded by `SyntheticConfig.seed`,
the test split first (so it depends only on the seed, the difficulty knobs and `num_test`), then the
train split; a spec is never reused, so the splits share no statement and no program.
"""
from __future__ import annotations

import ast
import dataclasses
import hashlib
import json
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, Optional

import numpy as np

from maxk_jax.data.problem import Limits, Problem, StdioCase, StdioTests

SOURCE = "synthetic"
LIMITS = Limits(cpu_s=1.0, wall_s=3.0, memory_mb=512)
_MAX_ABS_OUTPUT = 10**6
_MAX_ATTEMPTS = 20_000


class _Op(NamedTuple):
    phrase: Optional[str]        # statement text ({o}: "x" or "each value", {c}: constant); None = mutation only
    exprs: tuple[str, ...]       # expressions: {v} bare slot, {p} slot parenthesised unless atomic
    stmts: tuple[str, ...]       # extra scalar statement forms on variable {x}
    fn: Callable[[int, Any], int]


class _Filter(NamedTuple):
    phrase: Optional[str]
    conds: tuple[str, ...]       # conditions on element {v}
    fn: Callable[[int, Any], bool]


class _Reduce(NamedTuple):
    phrase: Optional[str]
    prints: tuple[str, ...]      # print statements on list {a}
    fn: Callable[[list[int]], str]


def _digsum(x: int) -> int:
    return sum(map(int, str(x)))


def _largest(a: list[int], default: bool, pick: Callable) -> str:
    if not a and not default:
        raise ValueError("empty")
    return str(pick(a) if a else 0)


_SCALAR: dict[str, _Op] = {
    "add": _Op("add {c} to {o}", ("{p}+{c}", "{c}+{p}"), ("{x}+={c}",), lambda x, c: x + c),
    "sub": _Op("subtract {c} from {o}", ("{p}-{c}",), ("{x}-={c}",), lambda x, c: x - c),
    "mul": _Op("multiply {o} by {c}", ("{p}*{c}", "{c}*{p}"), ("{x}*={c}",), lambda x, c: x * c),
    "div": _Op("floor-divide {o} by {c}", ("{p}//{c}",), ("{x}//={c}",), lambda x, c: x // c),
    "mod": _Op("reduce {o} modulo {c}", ("{p}%{c}",), ("{x}%={c}",), lambda x, c: x % c),
    "max": _Op("clamp {o} to at least {c}", ("max({v},{c})", "max({c},{v})"),
               ("if {x}<{c}:{x}={c}",), lambda x, c: max(x, c)),
    "min": _Op("clamp {o} to at most {c}", ("min({v},{c})", "min({c},{v})"),
               ("if {x}>{c}:{x}={c}",), lambda x, c: min(x, c)),
    "abs": _Op("replace {o} by its absolute value", ("abs({v})",), ("if {x}<0:{x}=-{x}",),
               lambda x, c: abs(x)),
    "neg": _Op("negate {o}", ("-{p}",), ("{x}*=-1",), lambda x, c: -x),
    "square": _Op("square {o}", ("{p}*{p}", "{p}**2"), ("{x}**=2",), lambda x, c: x * x),
    "digsum": _Op("replace {o} by the digit sum of its absolute value",
                  ("sum(map(int,str(abs({v}))))", "sum(int(d) for d in str(abs({v})))"), (),
                  lambda x, c: _digsum(abs(x))),
    # mutation-only (near-miss) variants
    "div_trunc": _Op(None, ("int({p}/{c})",), (), lambda x, c: int(x / c)),
    "digsum_noabs": _Op(None, ("sum(map(int,str({v})))",), (), lambda x, c: _digsum(x)),
}
_FILTERS: dict[str, _Filter] = {
    "gt": _Filter("keep only values greater than {c}", ("{v}>{c}", "{c}<{v}"), lambda x, c: x > c),
    "lt": _Filter("keep only values less than {c}", ("{v}<{c}", "{c}>{v}"), lambda x, c: x < c),
    "even": _Filter("keep only even values", ("{v}%2==0", "not {v}%2"), lambda x, c: x % 2 == 0),
    "odd": _Filter("keep only odd values", ("{v}%2==1", "{v}%2"), lambda x, c: x % 2 == 1),
    "ge": _Filter(None, ("{v}>={c}",), lambda x, c: x >= c),
    "le": _Filter(None, ("{v}<={c}",), lambda x, c: x <= c),
}
_REDUCERS: dict[str, _Reduce] = {
    "sum": _Reduce("print their sum", ("print(sum({a}))",), lambda a: str(sum(a))),
    "max": _Reduce("print the largest, or 0 if none remain",
                   ("print(max({a}) if {a} else 0)", "print(max({a},default=0))"),
                   lambda a: _largest(a, True, max)),
    "min": _Reduce("print the smallest, or 0 if none remain",
                   ("print(min({a}) if {a} else 0)", "print(min({a},default=0))"),
                   lambda a: _largest(a, True, min)),
    "count": _Reduce("print how many remain", ("print(len({a}))",), lambda a: str(len(a))),
    "sorted": _Reduce("print them in increasing order",
                      ("print(*sorted({a}))", "print(' '.join(map(str,sorted({a}))))"),
                      lambda a: " ".join(map(str, sorted(a)))),
    "max_nodefault": _Reduce(None, ("print(max({a}))",), lambda a: _largest(a, False, max)),
    "min_nodefault": _Reduce(None, ("print(min({a}))",), lambda a: _largest(a, False, min)),
}
CONST_OPS = {"add", "sub", "mul", "div", "mod", "max", "min", "div_trunc", "gt", "lt", "ge", "le"}
_GEN_SCALAR = tuple(k for k, v in _SCALAR.items() if v.phrase)
_GEN_FILTERS = tuple(k for k, v in _FILTERS.items() if v.phrase)
_GEN_REDUCERS = tuple(k for k, v in _REDUCERS.items() if v.phrase)
_ONCE = {"square", "digsum"}  # at most once per problem (keeps numbers small)
# Near-miss confusions (public: synthetic_solutions builds near misses from them): op -> ops it is mistaken for.
CONFUSE = {"add": ("sub",), "sub": ("add",), "max": ("min",), "min": ("max",), "div": ("mod", "div_trunc"),
           "mod": ("div",), "abs": ("neg",), "neg": ("abs",), "digsum": ("digsum_noabs",),
           "gt": ("ge", "lt"), "lt": ("le", "gt"), "even": ("odd",), "odd": ("even",)}
CONFUSE_REDUCE = {"sum": ("count",), "max": ("max_nodefault", "min"), "min": ("min_nodefault", "max"),
                  "count": ("sum",), "sorted": ()}
_SCALAR_VARS, _LIST_VARS, _ELEM_VARS = ("x", "n", "v", "y", "k"), ("a", "xs", "nums", "arr"), ("x", "v", "e", "y")
_SCALAR_INPUTS = ("{x}=int(input())", "{x}=int(input().strip())", "import sys\n{x}=int(sys.stdin.readline())")
_LIST_INPUTS = ("{a}=list(map(int,input().split()))", "{a}=[int(t) for t in input().split()]")


@dataclasses.dataclass(frozen=True)
class Spec:
    """A problem's program: ``kind`` ("scalar"|"list"), ``ops`` ((name, const|None), ...) and the
    list reduction ``reduce`` (None for scalar problems)."""

    kind: str
    ops: tuple[tuple[str, Optional[int]], ...]
    reduce: Optional[str] = None

    def __post_init__(self) -> None:
        if self.kind not in ("scalar", "list"):
            raise ValueError(f"Spec.kind must be 'scalar' or 'list', got {self.kind!r}")
        for name, c in self.ops:
            if name not in _SCALAR and (self.kind == "scalar" or name not in _FILTERS):
                raise ValueError(f"unknown {self.kind} op {name!r}")
            if (name in CONST_OPS) != (c is not None) or (c is not None and not valid_const(name, c)):
                raise ValueError(f"op {name!r} has invalid constant {c!r}")
        if (self.kind == "list") != (self.reduce in _REDUCERS):
            raise ValueError(f"reduce {self.reduce!r} does not fit a {self.kind} spec")

    def to_json(self) -> dict[str, Any]:
        """JSON form stored in ``Problem.metadata["spec"]``."""
        return {"kind": self.kind, "ops": [list(o) for o in self.ops], "reduce": self.reduce}

    @classmethod
    def from_json(cls, obj: Any) -> Spec:
        """Inverse of `to_json`; ValueError naming the bad field."""
        try:
            return cls(obj["kind"], tuple((str(n), None if c is None else int(c)) for n, c in obj["ops"]),
                       obj["reduce"])
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"malformed synthetic spec {obj!r:.200}: {e}") from e


@dataclasses.dataclass(frozen=True)
class SyntheticConfig:
    """Split size and difficulty knobs. `seed` is required (no silent default seed).

    min_ops/max_ops: operations per problem (the main difficulty knob); max_const: constants are
    drawn from [-max_const, max_const] (per-op valid subset); num_tests: hidden tests per problem;
    input_range: test integers in [-input_range, input_range]; max_list_len: list lengths 1..this;
    list_fraction: probability that a problem is a list problem.
    """

    seed: int
    num_train: int = 2000
    num_test: int = 200
    min_ops: int = 1
    max_ops: int = 3
    max_const: int = 9
    num_tests: int = 8
    input_range: int = 30
    max_list_len: int = 6
    list_fraction: float = 0.4

    def __post_init__(self) -> None:
        for name in ("seed", "num_train", "num_test", "min_ops", "max_ops", "max_const", "num_tests",
                     "input_range", "max_list_len"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
                raise ValueError(f"SyntheticConfig.{name} must be an int, got {v!r}")
        checks = [("num_train", self.num_train >= 0), ("num_test", self.num_test >= 0),
                  ("min_ops", 1 <= self.min_ops <= self.max_ops), ("max_ops", self.max_ops <= 6),
                  ("max_const", self.max_const >= 2), ("num_tests", 2 <= self.num_tests <= 2 * self.input_range + 1),
                  ("input_range", self.input_range >= 2), ("max_list_len", self.max_list_len >= 1),
                  ("list_fraction", 0.0 <= self.list_fraction <= 1.0)]
        for name, ok in checks:
            if not ok:
                raise ValueError(f"SyntheticConfig.{name}={getattr(self, name)!r} is out of range "
                                 f"(min_ops={self.min_ops}, max_ops={self.max_ops}, input_range={self.input_range})")


# --- Semantics (the reference interpreter of a spec) ---
def valid_const(name: str, c: int) -> bool:
    """Whether constant `c` is allowed for operation `name` (no no-op or degenerate constants)."""
    if name in ("add", "sub"):
        return c >= 1
    if name == "mul":
        return c not in (-1, 0, 1)
    if name in ("div", "mod", "div_trunc"):
        return c >= 2
    return True


def expected_output(spec: Spec, value: Any) -> Optional[str]:
    """Expected stdout of `spec` on one input (int or tuple of ints); None if the program crashes."""
    try:
        if spec.kind == "scalar":
            x = value
            for name, c in spec.ops:
                x = _SCALAR[name].fn(x, c)
            return str(x)
        a = list(value)
        for name, c in spec.ops:
            if name in _FILTERS:
                a = [v for v in a if _FILTERS[name].fn(v, c)]
            else:
                a = [_SCALAR[name].fn(v, c) for v in a]
        return _REDUCERS[spec.reduce].fn(a)
    except (ValueError, ZeroDivisionError):
        return None


def _stdin(value: Any) -> str:
    return f"{value}\n" if isinstance(value, int) else " ".join(map(str, value)) + "\n"


def parse_stdin(kind: str, stdin: str) -> Any:
    """A test's stdin as the spec interpreter's input: an int ("scalar") or a tuple of ints ("list")."""
    try:
        return int(stdin) if kind == "scalar" else tuple(int(t) for t in stdin.split())
    except ValueError as e:
        raise ValueError(f"synthetic {kind} test input {stdin!r} is malformed") from e


# --- Statements and programs ---
def statement(spec: Spec) -> str:
    """The templated problem statement of a (generatable) spec."""
    obj = "x" if spec.kind == "scalar" else "each value"
    parts = []
    for name, c in spec.ops:
        op = _FILTERS[name] if name in _FILTERS else _SCALAR[name]
        if op.phrase is None:
            raise ValueError(f"op {name!r} is a mutation, not part of any statement")
        parts.append(op.phrase.format(o=obj, c=c))
    body = ", then ".join(parts)
    body = body[0].upper() + body[1:]
    if spec.kind == "scalar":
        return f"Read an integer x. {body}. Print x."
    red = _REDUCERS[spec.reduce].phrase
    return f"Read a line of integers. {body}. {red[0].upper() + red[1:]}."


def _is_atom(expr: str) -> bool:
    """True for a name or a call ``f(...)``: safe as an operand without parentheses."""
    return isinstance(ast.parse(expr, mode="eval").body, (ast.Name, ast.Call))


def _fill(template: str, inner: str, c: Optional[int]) -> str:
    p = inner if _is_atom(inner) else f"({inner})"
    return template.format(v=inner, p=p, c=c)


def render(spec: Spec, rng: Optional[np.random.Generator] = None) -> str:
    """Program text of `spec`: canonical with ``rng=None``, else a random equivalent rewrite
    (variable names, input/print forms, augmented assignments, if-statements, fused expressions)."""

    def pick(options: Sequence[str]) -> str:
        return options[0] if rng is None else options[int(rng.integers(len(options)))]

    if spec.kind == "scalar":
        x = pick(_SCALAR_VARS)
        lines = [pick(_SCALAR_INPUTS).format(x=x)]
        if rng is not None and rng.random() < 0.25:  # one fused expression
            expr = x
            for name, c in spec.ops:
                single = [t for t in _SCALAR[name].exprs if t.count("{p}") + t.count("{v}") == 1]
                expr = _fill(pick(single), expr, c)
            return "\n".join(lines + [f"print({expr})"])
        for name, c in spec.ops:
            form = pick([f"{{x}}={t}" for t in _SCALAR[name].exprs] + list(_SCALAR[name].stmts))
            lines.append(form.format(x=x, v=x, p=x, c=c))
        return "\n".join(lines + [f"print({x})"])
    a, e = pick(_LIST_VARS), pick(_ELEM_VARS)
    lines = [pick(_LIST_INPUTS).format(a=a)]
    for name, c in spec.ops:
        if name in _FILTERS:
            cond = pick(_FILTERS[name].conds).format(v=e, c=c)
            lines.append(pick((f"{a}=[{e} for {e} in {a} if {cond}]", f"{a}=list(filter(lambda {e}:{cond},{a}))")))
        else:
            val = _fill(pick(_SCALAR[name].exprs), e, c)
            lines.append(pick((f"{a}=[{val} for {e} in {a}]", f"{a}=list(map(lambda {e}:{val},{a}))")))
    lines.append(pick(_REDUCERS[spec.reduce].prints).format(a=a))
    return "\n".join(lines)


# --- Generation and splits ---
def _draw_const(name: str, cfg: SyntheticConfig, rng: np.random.Generator) -> Optional[int]:
    if name not in CONST_OPS:
        return None
    lo = {"add": 1, "sub": 1, "div": 2, "mod": 2}.get(name, -cfg.max_const)
    while True:
        c = int(rng.integers(lo, cfg.max_const + 1))
        if valid_const(name, c):
            return c


def _draw_spec(cfg: SyntheticConfig, rng: np.random.Generator) -> Spec:
    kind = "list" if rng.random() < cfg.list_fraction else "scalar"
    n = int(rng.integers(cfg.min_ops, cfg.max_ops + 1))
    ops: list[tuple[str, Optional[int]]] = []
    while len(ops) < n:
        pool = _GEN_SCALAR if kind == "scalar" or rng.random() < 0.6 else _GEN_FILTERS
        name = pool[int(rng.integers(len(pool)))]
        if (ops and ops[-1][0] == name) or (name in _ONCE and any(o[0] == name for o in ops)):
            continue
        ops.append((name, _draw_const(name, cfg, rng)))
    reduce = None if kind == "scalar" else _GEN_REDUCERS[int(rng.integers(len(_GEN_REDUCERS)))]
    return Spec(kind, tuple(ops), reduce)


def _draw_inputs(cfg: SyntheticConfig, kind: str, rng: np.random.Generator) -> list[Any]:
    r, seen, out = cfg.input_range, set(), []
    while len(out) < cfg.num_tests:
        if kind == "scalar":
            v: Any = int(rng.integers(-r, r + 1))
        else:
            v = tuple(int(t) for t in rng.integers(-r, r + 1, size=int(rng.integers(1, cfg.max_list_len + 1))))
        if v not in seen:
            seen.add(v)
            out.append(v)
    return out


def _accept(spec: Spec, inputs: list[Any]) -> Optional[list[str]]:
    """Expected outputs if the problem is well-formed (see module docstring), else None."""
    expected = [expected_output(spec, v) for v in inputs]
    if any(e is None for e in expected) or len(set(expected)) < min(3, len(inputs)):
        return None
    if any(abs(int(t)) > _MAX_ABS_OUTPUT for e in expected for t in e.split()):
        return None
    for i in range(len(spec.ops)):
        dropped = Spec(spec.kind, spec.ops[:i] + spec.ops[i + 1:], spec.reduce)
        if [expected_output(dropped, v) for v in inputs] == expected:
            return None
    if spec.reduce in ("max", "min") and any(n in _FILTERS for n, _ in spec.ops):
        empty = sum(expected_output(Spec("list", spec.ops, "count"), v) == "0" for v in inputs)
        if not 1 <= empty <= len(inputs) // 2:
            return None
    return expected


def _problem(spec: Spec, inputs: list[Any], expected: list[str], split: str) -> Problem:
    key = json.dumps(spec.to_json(), sort_keys=True)
    tests = StdioTests(tuple(StdioCase(_stdin(v), e + "\n") for v, e in zip(inputs, expected)))
    return Problem(id=f"{SOURCE}/{hashlib.sha1(key.encode()).hexdigest()[:12]}", source=SOURCE,
                   prompt=statement(spec), tests=tests, limits=LIMITS, difficulty=len(spec.ops),
                   metadata={"spec": spec.to_json(), "split": split})


def _generate(cfg: SyntheticConfig, rng: np.random.Generator, count: int, split: str,
              seen: set[Spec]) -> list[Problem]:
    out: list[Problem] = []
    attempts = 0
    while len(out) < count:
        attempts += 1
        if attempts > _MAX_ATTEMPTS + 50 * count:
            raise ValueError(f"could only generate {len(out)} of {count} distinct {split} problems with "
                             f"{cfg}; widen min_ops/max_ops/max_const or ask for fewer problems")
        spec = _draw_spec(cfg, rng)
        if spec in seen:
            continue
        inputs = _draw_inputs(cfg, spec.kind, rng)
        expected = _accept(spec, inputs)
        if expected is not None:
            seen.add(spec)
            out.append(_problem(spec, inputs, expected, split))
    return out


def make_split(config: SyntheticConfig) -> tuple[list[Problem], list[Problem]]:
    """``(train, test)`` lists of `Problem` (stdio tests), deterministic in `config`; the two splits
    share no spec (hence no statement). The test split is drawn first, so it does not depend on
    `num_train`."""
    if not isinstance(config, SyntheticConfig):
        raise ValueError(f"make_split needs a SyntheticConfig, got {type(config).__name__}")
    rng = np.random.default_rng(config.seed)
    seen: set[Spec] = set()
    test = _generate(config, rng, config.num_test, "test", seen)
    train = _generate(config, rng, config.num_train, "train", seen)
    return train, test
