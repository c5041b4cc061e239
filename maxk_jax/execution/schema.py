"""Request validation for the judge (shared by the embedded executor and the HTTP service).

The wire format is fixed by docs/contracts.md. :func:`parse_request` turns the JSON
body into :class:`Submission` objects or raises :class:`RequestError` (a ValueError) whose
``field`` names the offending value, e.g. ``submissions[2].tests[0].stdin``; the service answers
it with HTTP 400. Extensions (all optional): ``limits.output_mb``; ``compare`` =
``{"mode": "tokens"|"lines"|"exact", "float_tol": x}``; ``checker`` = ``{"code": str}`` (stdio: a
program run in its own sandbox with argv ``input.txt output.txt expected.txt``, exit 0 = AC,
1 or 2 = WA); ``language`` = ``"python"``; assert-mode ``tests`` may be a list of ``{"code"}``.
"""
import dataclasses
import hashlib
import json
import math
from typing import Any

from maxk_jax.execution.judge import COMPARE_MODES, DEFAULT_FLOAT_TOL

MODES = ("stdio", "function", "assert")
MAX_CODE_BYTES = 4 << 20
MAX_STDIO_BYTES = 64 << 20
LIMIT_BOUNDS = {"cpu_s": (0.01, 60.0), "wall_s": (0.05, 300.0), "memory_mb": (32, 16384), "output_mb": (1, 1024)}
DEFAULT_CPU_S, DEFAULT_MEMORY_MB = 2.0, 512
_SUBMISSION_KEYS = {"id", "code", "mode", "tests", "limits", "compare", "checker", "language"}


class RequestError(ValueError):
    """A malformed request; ``field`` is the JSON path of the offending value."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field


@dataclasses.dataclass(frozen=True)
class Limits:
    """Per-test limits: CPU seconds, wall seconds, address space MB, output MB (stdout and stderr each)."""

    cpu_s: float = DEFAULT_CPU_S
    wall_s: float = 2 * DEFAULT_CPU_S + 1
    memory_mb: int = DEFAULT_MEMORY_MB
    output_mb: int = 32


@dataclasses.dataclass(frozen=True)
class Test:
    """One test: stdio (stdin/expected bytes), function (args JSON text, expected value), or assert."""

    stdin: bytes = b""
    expected: bytes = b""
    args_json: str = "[]"
    expected_value: Any = None
    test_code: bytes = b""


@dataclasses.dataclass(frozen=True)
class Submission:
    """A validated submission: the program, how to run it, and its tests."""

    id: str
    code: bytes
    mode: str
    tests: tuple
    limits: Limits
    entry_point: str = ""
    compare_mode: str = "tokens"
    float_tol: float = DEFAULT_FLOAT_TOL
    checker: bytes | None = None
    cache_key: str = ""


def _type_name(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def _require(value: Any, kind: type | tuple, field: str, what: str) -> Any:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
        raise RequestError(field, f"expected {what}, got {_type_name(value)}")
    return value


def _text(value: Any, field: str, max_bytes: int) -> bytes:
    """A str field as UTF-8 bytes (Python callers may also pass bytes, e.g. invalid UTF-8)."""
    value = _require(value, (str, bytes), field, "a string")
    data = value if isinstance(value, bytes) else value.encode("utf-8", "surrogatepass")
    if len(data) > max_bytes:
        raise RequestError(field, f"is {len(data)} bytes, more than the {max_bytes} allowed")
    return data


def _keys(obj: dict, allowed: set, required: set, field: str) -> None:
    for key in obj:
        if key not in allowed:
            raise RequestError(f"{field}.{key}", f"unknown field (allowed: {sorted(allowed)})")
    for key in sorted(required):
        if key not in obj:
            raise RequestError(f"{field}.{key}", "is required")


def _json_value(value: Any, field: str, depth: int = 0) -> Any:
    """Check that ``value`` is JSON-representable; tuples become lists."""
    if depth > 100:
        raise RequestError(field, "is nested more than 100 levels deep")
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [_json_value(v, f"{field}[{i}]", depth + 1) for i, v in enumerate(value)]
    if isinstance(value, dict):
        for key in value:
            if not isinstance(key, str):
                raise RequestError(field, f"has a non-string key {key!r}")
        return {k: _json_value(v, f"{field}[{k!r}]", depth + 1) for k, v in value.items()}
    raise RequestError(field, f"is not a JSON value (got {_type_name(value)})")


def parse_limits(obj: Any, field: str, default_output_mb: int = 32) -> Limits:
    """Validate the optional ``limits`` object; wall_s defaults to 2 * cpu_s + 1."""
    if obj is None:
        return Limits(output_mb=default_output_mb)
    _require(obj, dict, field, "an object")
    _keys(obj, set(LIMIT_BOUNDS), set(), field)
    values = {}
    for key, value in obj.items():
        integral = key in ("memory_mb", "output_mb")
        kind = int if integral else (int, float)
        _require(value, kind, f"{field}.{key}", "an integer" if integral else "a number")
        low, high = LIMIT_BOUNDS[key]
        if not math.isfinite(value) or not low <= value <= high:
            raise RequestError(f"{field}.{key}", f"must be between {low} and {high}, got {value!r}")
        values[key] = value
    cpu = float(values.get("cpu_s", values.get("wall_s", DEFAULT_CPU_S)))
    wall = float(values.get("wall_s", min(2 * cpu + 1, LIMIT_BOUNDS["wall_s"][1])))
    return Limits(cpu_s=cpu, wall_s=wall, memory_mb=int(values.get("memory_mb", DEFAULT_MEMORY_MB)),
                  output_mb=int(values.get("output_mb", default_output_mb)))


def _non_empty_list(value: Any, field: str) -> list:
    _require(value, (list, tuple), field, "a list")
    if not value:
        raise RequestError(field, "must not be empty")
    return list(value)


def _stdio_tests(obj: Any, field: str) -> tuple:
    tests = []
    for index, test in enumerate(_non_empty_list(obj, field)):
        where = f"{field}[{index}]"
        _require(test, dict, where, "an object with stdin and expected")
        _keys(test, {"stdin", "expected"}, {"expected"}, where)
        tests.append(Test(stdin=_text(test.get("stdin", ""), f"{where}.stdin", MAX_STDIO_BYTES),
                          expected=_text(test["expected"], f"{where}.expected", MAX_STDIO_BYTES)))
    return tuple(tests)


def _function_tests(obj: Any, field: str) -> tuple:
    _require(obj, dict, field, "an object with entry_point and cases")
    _keys(obj, {"entry_point", "cases"}, {"entry_point", "cases"}, field)
    entry = _require(obj["entry_point"], str, f"{field}.entry_point", "a string")
    if not entry.isidentifier():
        raise RequestError(f"{field}.entry_point", f"must be a Python identifier, got {entry!r}")
    tests = []
    for index, case in enumerate(_non_empty_list(obj["cases"], f"{field}.cases")):
        where = f"{field}.cases[{index}]"
        _require(case, dict, where, "an object with args and expected")
        _keys(case, {"args", "expected"}, {"args", "expected"}, where)
        args = _json_value(_require(case["args"], (list, tuple), f"{where}.args", "a list"), f"{where}.args")
        expected = _json_value(case["expected"], f"{where}.expected")
        try:
            args_json = json.dumps(args, allow_nan=True)
        except ValueError as err:
            raise RequestError(f"{where}.args", str(err)) from None
        tests.append(Test(args_json=args_json, expected_value=expected))
    return entry, tuple(tests)


def _assert_tests(obj: Any, field: str) -> tuple:
    if isinstance(obj, (list, tuple)):
        items = [(f"{field}[{i}]", test) for i, test in enumerate(_non_empty_list(obj, field))]
    else:
        items = [(field, obj)]
    tests = []
    for where, test in items:
        _require(test, dict, where, "an object with code")
        _keys(test, {"code"}, {"code"}, where)
        tests.append(Test(test_code=_text(test["code"], f"{where}.code", MAX_CODE_BYTES)))
    return tuple(tests)


def cache_key(raw: dict) -> str:
    """Content key of a submission: SHA-256 hex of its canonical JSON (id included), for the repeat cache."""
    text = json.dumps(raw, sort_keys=True, separators=(",", ":"), allow_nan=True, default=repr)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def parse_submission(raw: Any, field: str, default_output_mb: int = 32) -> Submission:
    """Validate one submission object (see module doc); raises RequestError naming the field."""
    _require(raw, dict, field, "an object")
    _keys(raw, _SUBMISSION_KEYS, {"id", "code", "mode", "tests"}, field)
    sub_id = _require(raw["id"], str, f"{field}.id", "a string")
    code = _text(raw["code"], f"{field}.code", MAX_CODE_BYTES)
    mode = raw["mode"]
    if mode not in MODES:
        raise RequestError(f"{field}.mode", f"must be one of {list(MODES)}, got {mode!r}")
    language = raw.get("language", "python")
    if language not in ("python", "python3"):
        raise RequestError(f"{field}.language", f"only python is supported, got {language!r}")
    entry = ""
    if mode == "stdio":
        tests = _stdio_tests(raw["tests"], f"{field}.tests")
    elif mode == "function":
        entry, tests = _function_tests(raw["tests"], f"{field}.tests")
    else:
        tests = _assert_tests(raw["tests"], f"{field}.tests")
    compare_mode, float_tol = "tokens", DEFAULT_FLOAT_TOL
    if raw.get("compare") is not None:
        cmp = _require(raw["compare"], dict, f"{field}.compare", "an object")
        _keys(cmp, {"mode", "float_tol"}, set(), f"{field}.compare")
        compare_mode = cmp.get("mode", "tokens")
        if compare_mode not in COMPARE_MODES:
            raise RequestError(f"{field}.compare.mode", f"must be one of {list(COMPARE_MODES)}, got {compare_mode!r}")
        float_tol = _require(cmp.get("float_tol", DEFAULT_FLOAT_TOL), (int, float), f"{field}.compare.float_tol", "a number")
        if not math.isfinite(float_tol) or float_tol < 0:
            raise RequestError(f"{field}.compare.float_tol", f"must be a finite number >= 0, got {float_tol!r}")
    checker = None
    if raw.get("checker") is not None:
        if mode != "stdio":
            raise RequestError(f"{field}.checker", f"is only supported in stdio mode, not {mode!r}")
        spec = _require(raw["checker"], dict, f"{field}.checker", "an object with code")
        _keys(spec, {"code"}, {"code"}, f"{field}.checker")
        checker = _text(spec["code"], f"{field}.checker.code", MAX_CODE_BYTES)
    return Submission(id=sub_id, code=code, mode=mode, tests=tests, entry_point=entry,
                      limits=parse_limits(raw.get("limits"), f"{field}.limits", default_output_mb),
                      compare_mode=compare_mode, float_tol=float(float_tol), checker=checker,
                      cache_key=cache_key(raw))


def parse_submissions(items: Any, default_output_mb: int = 32, field: str = "submissions") -> list:
    """Validate a list of submission objects; returns ``list[Submission]``."""
    _require(items, (list, tuple), field, "a list of submissions")
    return [parse_submission(item, f"{field}[{i}]", default_output_mb) for i, item in enumerate(items)]


def parse_request(body: Any, default_output_mb: int = 32) -> list:
    """Validate a ``POST /v1/judge`` body ``{"submissions": [...]}``; returns ``list[Submission]``."""
    _require(body, dict, "body", "a JSON object")
    _keys(body, {"submissions"}, {"submissions"}, "body")
    return parse_submissions(body["submissions"], default_output_mb)
