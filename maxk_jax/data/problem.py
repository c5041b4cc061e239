"""The `Problem` schema shared by every dataset loader, its JSON(L) cache format, and submissions.

A `Problem` holds one programming task and the tests that define its reward:

* `StdioTests`    -- program reads stdin, its stdout is compared with `expected` (CodeContests,
                     CodeForces, LiveCodeBench/LiveBench stdin problems).
* `FunctionTests` -- a function (or a method of a LeetCode-style class) is called with JSON
                     positional args and its JSON-serialised return value is compared with
                     `expected` (LiveCodeBench functional problems, MBPP converted asserts).
* `AssertTests`   -- test code (asserts) is run after the candidate code; one pass/fail
                     (HumanEval, MBPP assert fallback).

`Problem.to_submission(code, submission_id)` produces one submission in the execution-service
schema of docs/contracts.md:
``{"id", "code", "mode": "stdio"|"function"|"assert", "tests": ..., "limits": {cpu_s, wall_s,
memory_mb}}`` where ``tests`` is ``[{"stdin", "expected"}]`` (stdio), ``{"entry_point",
"cases": [{"args", "expected"}]}`` (function) or ``{"code"}`` (assert).

How the submitted code is assembled (``Problem.assemble_code``)::

    preamble            always prepended (e.g. LiveCodeBench's import header)
    code_prefix         prepended unless the candidate already starts with it
                        (HumanEval prompt, LiveBench partial solution)
    candidate code      the model's extracted code
    entry-point shim    only for `FunctionTests.class_name` (LeetCode `class Solution`)

Problems are cached as JSON lines (`save_problems` / `load_problems`; ``.gz`` supported).
"""
from __future__ import annotations

import dataclasses
import gzip
import json
import math
import os
import zlib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Union

SCHEMA_VERSION = 1
MODES = ("stdio", "function", "assert")
# Name of the module-level wrapper appended for class-based (LeetCode) function problems.
ENTRY_SHIM_NAME = "_maxk_entry_point"


# ----------------------------------------------------------------------------------------------
# JSON value validation
# ----------------------------------------------------------------------------------------------
def check_json_value(value: Any, where: str = "value") -> Any:
    """Validate that `value` is a plain JSON value and return it with tuples turned into lists.

    Allowed: None, bool, int, finite float, str, list/tuple of JSON values, dict with str keys.
    Raises ValueError naming `where` for anything else (sets, bytes, NaN, non-str dict keys, ...).
    """
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{where}: non-finite float {value!r} is not valid JSON")
        return value
    if isinstance(value, (list, tuple)):
        return [check_json_value(v, f"{where}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise ValueError(f"{where}: dict key {k!r} is not a string (not JSON round-trippable)")
            out[k] = check_json_value(v, f"{where}[{k!r}]")
        return out
    raise ValueError(f"{where}: {type(value).__name__} {value!r:.80} is not a JSON value")


def _require_str(value: Any, name: str, *, allow_empty: bool = True) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{name} must be a str, got {type(value).__name__} {value!r:.80}")
    if not allow_empty and not value.strip():
        raise ValueError(f"{name} must be a non-empty string, got {value!r}")
    return value


# ----------------------------------------------------------------------------------------------
# Limits and tests
# ----------------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Limits:
    """Per-test resource limits: CPU seconds, wall-clock seconds, address space in MiB."""

    cpu_s: float = 4.0
    wall_s: float = 8.0
    memory_mb: int = 1024

    def __post_init__(self) -> None:
        for name in ("cpu_s", "wall_s"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
                raise ValueError(f"Limits.{name} must be a positive finite number, got {v!r}")
        m = self.memory_mb
        if isinstance(m, bool) or not isinstance(m, int) or m <= 0:
            raise ValueError(f"Limits.memory_mb must be a positive int, got {m!r}")

    def to_json(self) -> dict[str, Any]:
        """The docs/contracts.md ``limits`` object ``{"cpu_s", "wall_s", "memory_mb"}``."""
        return {"cpu_s": float(self.cpu_s), "wall_s": float(self.wall_s), "memory_mb": int(self.memory_mb)}

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> Limits:
        """Inverse of `to_json`; raises ValueError on missing or bad fields."""
        if not isinstance(obj, Mapping):
            raise ValueError(f"limits must be an object, got {obj!r:.80}")
        missing = {"cpu_s", "wall_s", "memory_mb"} - set(obj)
        if missing:
            raise ValueError(f"limits is missing fields {sorted(missing)}")
        return cls(cpu_s=obj["cpu_s"], wall_s=obj["wall_s"], memory_mb=obj["memory_mb"])

    @classmethod
    def from_time_memory(cls, time_s: float, memory_mb: float, *, wall_factor: float = 2.0,
                         wall_slack_s: float = 1.0) -> Limits:
        """Limits from an upstream time limit (s) and memory limit (MiB): wall = factor*cpu + slack."""
        cpu = float(time_s)
        return cls(cpu_s=cpu, wall_s=wall_factor * cpu + wall_slack_s, memory_mb=int(math.ceil(memory_mb)))


@dataclasses.dataclass(frozen=True)
class StdioCase:
    """One stdin -> expected-stdout pair."""

    stdin: str
    expected: str

    def __post_init__(self) -> None:
        _require_str(self.stdin, "StdioCase.stdin")
        _require_str(self.expected, "StdioCase.expected")


@dataclasses.dataclass(frozen=True)
class StdioTests:
    """Standard-input tests: the whole program is run once per case."""

    cases: tuple[StdioCase, ...]
    mode = "stdio"

    def __post_init__(self) -> None:
        object.__setattr__(self, "cases", tuple(self.cases))
        if not self.cases:
            raise ValueError("StdioTests needs at least one case, got 0")
        for i, c in enumerate(self.cases):
            if not isinstance(c, StdioCase):
                raise ValueError(f"StdioTests.cases[{i}] must be a StdioCase, got {type(c).__name__}")

    def __len__(self) -> int:
        return len(self.cases)

    def payload(self) -> list[dict[str, str]]:
        """docs/contracts.md stdio ``tests``: ``[{"stdin", "expected"}]``."""
        return [{"stdin": c.stdin, "expected": c.expected} for c in self.cases]

    def to_json(self) -> dict[str, Any]:
        """Cache form."""
        return {"mode": self.mode, "cases": self.payload()}


@dataclasses.dataclass(frozen=True)
class FunctionCase:
    """One call: positional JSON `args` and the JSON `expected` return value."""

    args: tuple
    expected: Any

    def __post_init__(self) -> None:
        if not isinstance(self.args, (list, tuple)):
            raise ValueError(f"FunctionCase.args must be a list of JSON values, got {self.args!r:.80}")
        object.__setattr__(self, "args", tuple(check_json_value(list(self.args), "FunctionCase.args")))
        object.__setattr__(self, "expected", check_json_value(self.expected, "FunctionCase.expected"))


@dataclasses.dataclass(frozen=True)
class FunctionTests:
    """Function-call tests.

    `entry_point` is the function name; with `class_name` set (LeetCode: ``"Solution"``) the
    function is a method: each case calls ``class_name().entry_point(*args)``, falling back to a
    module-level ``entry_point`` when the class is absent (LiveCodeBench's own rule). The service
    contract only knows module-level entry points, so `to_submission` appends a small wrapper
    function named `ENTRY_SHIM_NAME` and submits that as the entry point.
    """

    entry_point: str
    cases: tuple[FunctionCase, ...]
    class_name: str | None = None
    mode = "function"

    def __post_init__(self) -> None:
        if not isinstance(self.entry_point, str) or not self.entry_point.isidentifier():
            raise ValueError(f"FunctionTests.entry_point must be a Python identifier, got {self.entry_point!r}")
        if self.class_name is not None and (not isinstance(self.class_name, str)
                                            or not self.class_name.isidentifier()):
            raise ValueError(f"FunctionTests.class_name must be an identifier or None, got {self.class_name!r}")
        object.__setattr__(self, "cases", tuple(self.cases))
        if not self.cases:
            raise ValueError("FunctionTests needs at least one case, got 0")
        for i, c in enumerate(self.cases):
            if not isinstance(c, FunctionCase):
                raise ValueError(f"FunctionTests.cases[{i}] must be a FunctionCase, got {type(c).__name__}")

    def __len__(self) -> int:
        return len(self.cases)

    @property
    def submitted_entry_point(self) -> str:
        """The module-level name the executor calls."""
        return ENTRY_SHIM_NAME if self.class_name else self.entry_point

    def shim(self) -> str:
        """Wrapper source appended to the candidate for class-based problems ("" otherwise)."""
        if not self.class_name:
            return ""
        return (
            f"\n\ndef {ENTRY_SHIM_NAME}(*args):\n"
            f"    try:\n"
            f"        _maxk_cls = {self.class_name}\n"
            f"    except NameError:\n"
            f"        return {self.entry_point}(*args)\n"
            f"    return getattr(_maxk_cls(), {self.entry_point!r})(*args)\n"
        )

    def payload(self) -> dict[str, Any]:
        """docs/contracts.md function ``tests``: ``{"entry_point", "cases": [{"args", "expected"}]}``."""
        return {"entry_point": self.submitted_entry_point,
                "cases": [{"args": list(c.args), "expected": c.expected} for c in self.cases]}

    def to_json(self) -> dict[str, Any]:
        """Cache form (keeps the original entry point and class name)."""
        return {"mode": self.mode, "entry_point": self.entry_point, "class_name": self.class_name,
                "cases": [{"args": list(c.args), "expected": c.expected} for c in self.cases]}


@dataclasses.dataclass(frozen=True)
class AssertTests:
    """Assert-style tests: `code` runs after the candidate code; it passes iff it finishes."""

    code: str
    mode = "assert"

    def __post_init__(self) -> None:
        _require_str(self.code, "AssertTests.code", allow_empty=False)

    def __len__(self) -> int:
        return 1

    def payload(self) -> dict[str, str]:
        """docs/contracts.md assert ``tests``: ``{"code"}``."""
        return {"code": self.code}

    def to_json(self) -> dict[str, Any]:
        """Cache form."""
        return {"mode": self.mode, "code": self.code}


Tests = Union[StdioTests, FunctionTests, AssertTests]


def tests_from_json(obj: Mapping[str, Any]) -> Tests:
    """Rebuild a tests object from its cache form; ValueError on malformed input."""
    if not isinstance(obj, Mapping):
        raise ValueError(f"tests must be an object, got {obj!r:.80}")
    mode = obj.get("mode")
    try:
        if mode == "stdio":
            return StdioTests(tuple(StdioCase(c["stdin"], c["expected"]) for c in obj["cases"]))
        if mode == "function":
            return FunctionTests(obj["entry_point"],
                                 tuple(FunctionCase(tuple(c["args"]), c["expected"]) for c in obj["cases"]),
                                 obj.get("class_name"))
        if mode == "assert":
            return AssertTests(obj["code"])
    except (KeyError, TypeError) as e:
        raise ValueError(f"malformed {mode} tests: {e!r}") from e
    raise ValueError(f"tests.mode must be one of {MODES}, got {mode!r}")


# ----------------------------------------------------------------------------------------------
# Problem
# ----------------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Problem:
    """One programming problem with its reward tests.

    Attributes:
      id: globally unique id, ``"<dataset>/<upstream id>"``.
      source: dataset name (``"code_contests"``, ``"livecodebench"``, ...).
      prompt: the problem statement text shown to the model (see `maxk_jax.data.prompts`).
      tests: `StdioTests` | `FunctionTests` | `AssertTests`.
      limits: per-test `Limits`.
      starter_code: code shown to the model to complete (LeetCode class stub, HumanEval stub).
      code_prefix: prepended to the candidate unless it already starts with it.
      preamble: always prepended to the candidate (e.g. import header).
      difficulty: upstream difficulty (int enum for CodeContests, "easy"/... for LCB, rating...).
      metadata: JSON-serialisable extra fields (treat as read-only).
    """

    id: str
    source: str
    prompt: str
    tests: Tests
    limits: Limits = Limits()
    starter_code: str = ""
    code_prefix: str = ""
    preamble: str = ""
    difficulty: Union[int, str, None] = None
    metadata: dict[str, Any] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        _require_str(self.id, "Problem.id", allow_empty=False)
        _require_str(self.source, "Problem.source", allow_empty=False)
        _require_str(self.prompt, f"Problem.prompt ({self.id})", allow_empty=False)
        for name in ("starter_code", "code_prefix", "preamble"):
            _require_str(getattr(self, name), f"Problem.{name} ({self.id})")
        if not isinstance(self.tests, (StdioTests, FunctionTests, AssertTests)):
            raise ValueError(f"Problem.tests ({self.id}) must be StdioTests/FunctionTests/AssertTests, "
                             f"got {type(self.tests).__name__}")
        if not isinstance(self.limits, Limits):
            raise ValueError(f"Problem.limits ({self.id}) must be Limits, got {type(self.limits).__name__}")
        if self.difficulty is not None and (isinstance(self.difficulty, bool)
                                            or not isinstance(self.difficulty, (int, str))):
            raise ValueError(f"Problem.difficulty ({self.id}) must be int, str or None, got {self.difficulty!r}")
        if not isinstance(self.metadata, dict):
            raise ValueError(f"Problem.metadata ({self.id}) must be a dict, got {type(self.metadata).__name__}")

    def __hash__(self) -> int:
        # Fields hold lists/dicts (JSON args, metadata); ids are unique, and equal problems share one.
        return hash(self.id)

    @property
    def mode(self) -> str:
        """``"stdio"`` | ``"function"`` | ``"assert"``."""
        return self.tests.mode

    @property
    def num_tests(self) -> int:
        """Number of reward tests (1 for assert mode)."""
        return len(self.tests)

    def assemble_code(self, code: str) -> str:
        """Full program submitted for a candidate `code`: preamble + code_prefix + code + shim."""
        _require_str(code, "code")
        parts = []
        if self.preamble:
            parts.append(self.preamble.rstrip("\n") + "\n")
        if self.code_prefix and not code.lstrip().startswith(self.code_prefix.strip()):
            parts.append(self.code_prefix if self.code_prefix.endswith("\n") else self.code_prefix + "\n")
        parts.append(code)
        if isinstance(self.tests, FunctionTests):
            parts.append(self.tests.shim())
        return "".join(parts)

    def to_submission(self, code: str, submission_id: str, *, limits: Limits | None = None) -> dict[str, Any]:
        """One execution-service submission (docs/contracts.md schema) for candidate `code`.

        Returns ``{"id", "code", "mode", "tests", "limits"}``; `limits` overrides the problem's.
        """
        _require_str(submission_id, "submission_id", allow_empty=False)
        lim = self.limits if limits is None else limits
        if not isinstance(lim, Limits):
            raise ValueError(f"limits must be a Limits, got {type(lim).__name__}")
        return {"id": submission_id, "code": self.assemble_code(code), "mode": self.mode,
                "tests": self.tests.payload(), "limits": lim.to_json()}

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable cache form (``schema_version`` included)."""
        return {
            "schema_version": SCHEMA_VERSION, "id": self.id, "source": self.source, "prompt": self.prompt,
            "tests": self.tests.to_json(), "limits": self.limits.to_json(),
            "starter_code": self.starter_code, "code_prefix": self.code_prefix, "preamble": self.preamble,
            "difficulty": self.difficulty,
            "metadata": check_json_value(self.metadata, f"Problem.metadata ({self.id})"),
        }

    @classmethod
    def from_dict(cls, obj: Mapping[str, Any]) -> Problem:
        """Inverse of `to_dict`; raises ValueError naming the bad field."""
        if not isinstance(obj, Mapping):
            raise ValueError(f"problem must be an object, got {obj!r:.80}")
        version = obj.get("schema_version")
        if version != SCHEMA_VERSION:
            raise ValueError(f"problem schema_version must be {SCHEMA_VERSION}, got {version!r}")
        for key in ("id", "source", "prompt", "tests", "limits"):
            if key not in obj:
                raise ValueError(f"problem is missing field {key!r}")
        return cls(id=obj["id"], source=obj["source"], prompt=obj["prompt"],
                   tests=tests_from_json(obj["tests"]), limits=Limits.from_json(obj["limits"]),
                   starter_code=obj.get("starter_code", ""), code_prefix=obj.get("code_prefix", ""),
                   preamble=obj.get("preamble", ""), difficulty=obj.get("difficulty"),
                   metadata=dict(obj.get("metadata") or {}))


# ----------------------------------------------------------------------------------------------
# JSONL cache
# ----------------------------------------------------------------------------------------------
def _open_text(path: str | os.PathLike, mode: str, *, gz: bool | None = None):
    path = os.fspath(path)
    if gz if gz is not None else path.endswith(".gz"):
        return gzip.open(path, mode + "t", encoding="utf-8")
    return open(path, mode, encoding="utf-8")


def save_problems(problems: Iterable[Problem], path: str | os.PathLike) -> int:
    """Write problems as JSON lines (gzip if `path` ends in .gz), atomically; returns the count."""
    path = os.fspath(path)
    tmp = path + ".tmp"
    n = 0
    try:
        with _open_text(tmp, "w", gz=path.endswith(".gz")) as f:
            for p in problems:
                if not isinstance(p, Problem):
                    raise ValueError(f"save_problems expects Problem objects, got {type(p).__name__}")
                f.write(json.dumps(p.to_dict(), ensure_ascii=False, allow_nan=False) + "\n")
                n += 1
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return n


def load_problems(path: str | os.PathLike) -> list[Problem]:
    """Read a JSONL cache written by `save_problems`; ValueError names the file and the first bad
    line, or the file when it cannot be read (corrupt or truncated gzip, not UTF-8)."""
    out: list[Problem] = []
    ids: set[str] = set()
    lineno = 0
    with _open_text(path, "r") as f:
        try:
            for lineno, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    p = Problem.from_dict(json.loads(line))
                except (json.JSONDecodeError, ValueError) as e:
                    raise ValueError(f"{os.fspath(path)}:{lineno}: malformed problem: {e}") from e
                if p.id in ids:
                    raise ValueError(f"{os.fspath(path)}:{lineno}: duplicate problem id {p.id!r}")
                ids.add(p.id)
                out.append(p)
        except (EOFError, zlib.error, gzip.BadGzipFile, UnicodeDecodeError) as e:
            kind = "gzip file (corrupt or truncated?)" if os.fspath(path).endswith(".gz") else "UTF-8 text file"
            raise ValueError(f"{os.fspath(path)}: not a readable {kind} after line {lineno}: "
                             f"{type(e).__name__}: {e}") from e
    return out


def problems_by_id(problems: Sequence[Problem]) -> dict[str, Problem]:
    """Index problems by id; ValueError on duplicates."""
    out: dict[str, Problem] = {}
    for p in problems:
        if p.id in out:
            raise ValueError(f"duplicate problem id {p.id!r}")
        out[p.id] = p
    return out
