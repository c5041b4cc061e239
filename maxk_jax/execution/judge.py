"""Output comparison and verdicts (pure Python; runs in the supervisor, outside the sandbox).

Verdicts: AC accepted, WA wrong answer, RE runtime error, TLE time limit (CPU or wall clock),
MLE memory limit, OLE output limit, CE compile error, SE sandbox (infrastructure) error.

Token comparison (the default for stdio): both sides are split on ASCII whitespace (so CRLF,
trailing spaces and a missing final newline do not matter) and compared as bytes (invalid UTF-8 is
fine). An expected integer token needs an integer with the same value (exact at any size, no
float conversion); an expected float token (has ``.`` or an exponent) accepts any decimal number
within ``float_tol`` absolutely or relatively; ``YES``/``NO`` compare case-insensitively; anything
else must match exactly.
"""
import json
import math
import re
from typing import Any

VERDICTS = ("AC", "WA", "RE", "TLE", "MLE", "OLE", "CE", "SE")
COMPARE_MODES = ("tokens", "lines", "exact")
DEFAULT_FLOAT_TOL = 1e-6
_INT = re.compile(rb"[+-]?\d+")
_FLOAT = re.compile(rb"[+-]?(?:\d+\.?\d*(?:[eE][+-]?\d+)?|\.\d+(?:[eE][+-]?\d+)?)")
_YES_NO = (b"yes", b"no")


def _show(token: bytes, limit: int = 40) -> str:
    text = token.decode("utf-8", "backslashreplace")
    return repr(text if len(text) <= limit else text[:limit] + "...")


def _canonical_int(token: bytes) -> bytes:
    sign = b"-" if token[:1] == b"-" else b""
    digits = token.lstrip(b"+-").lstrip(b"0") or b"0"
    return (sign if digits != b"0" else b"") + digits


def floats_close(expected: float, actual: float, float_tol: float) -> bool:
    """|actual - expected| <= tol, or <= tol * |expected|; NaN equals only NaN, inf only itself."""
    if math.isnan(expected) or math.isnan(actual):
        return math.isnan(expected) and math.isnan(actual)
    if math.isinf(expected) or math.isinf(actual):
        return expected == actual
    diff = abs(actual - expected)
    return diff <= float_tol or diff <= float_tol * abs(expected)


def tokens_equal(expected: bytes, actual: bytes, float_tol: float = DEFAULT_FLOAT_TOL) -> bool:
    """Compare one expected token with one produced token under the rules in the module doc."""
    if expected == actual:
        return True
    if _INT.fullmatch(expected):
        return bool(_INT.fullmatch(actual)) and _canonical_int(expected) == _canonical_int(actual)
    if _FLOAT.fullmatch(expected):
        if not _FLOAT.fullmatch(actual):
            return False
        return floats_close(float(expected), float(actual), float_tol)
    lowered = expected.lower()
    if lowered in _YES_NO or lowered == b"nan":
        return actual.lower() == lowered
    return False


def compare_tokens(expected: bytes, actual: bytes, float_tol: float = DEFAULT_FLOAT_TOL) -> tuple:
    """Token-wise comparison; returns ``(ok, message)`` (message explains the first difference)."""
    want, got = expected.split(), actual.split()
    for index, (e, a) in enumerate(zip(want, got)):
        if not tokens_equal(e, a, float_tol):
            return False, f"token {index + 1}: expected {_show(e)}, got {_show(a)}"
    if len(want) != len(got):
        return False, f"expected {len(want)} tokens, got {len(got)}"
    return True, ""


def _lines(data: bytes) -> list:
    lines = [line.rstrip(b" \t\r") for line in data.replace(b"\r\n", b"\n").split(b"\n")]
    while lines and not lines[-1]:
        lines.pop()
    return lines


def compare_lines(expected: bytes, actual: bytes) -> tuple:
    """Strict line comparison: same lines in order (CRLF, trailing blanks and blank tail ignored)."""
    want, got = _lines(expected), _lines(actual)
    for index, (e, a) in enumerate(zip(want, got)):
        if e != a:
            return False, f"line {index + 1}: expected {_show(e)}, got {_show(a)}"
    if len(want) != len(got):
        return False, f"expected {len(want)} lines, got {len(got)}"
    return True, ""


def compare_output(expected: bytes, actual: bytes, mode: str = "tokens",
                   float_tol: float = DEFAULT_FLOAT_TOL) -> tuple:
    """Dispatch on the comparison ``mode`` ("tokens", "lines" or "exact" bytes)."""
    if mode == "tokens":
        return compare_tokens(expected, actual, float_tol)
    if mode == "lines":
        return compare_lines(expected, actual)
    if mode == "exact":
        return (True, "") if expected == actual else (False, "output differs from the expected bytes")
    raise ValueError(f"compare mode must be one of {COMPARE_MODES}, got {mode!r}")


class HugeInt(str):
    """An integer literal beyond Python's int-to-str digit limit, kept as canonical text."""


def _parse_int(text: str):
    try:
        return int(text)
    except ValueError:
        return HugeInt(_canonical_int(text.encode("ascii")).decode("ascii"))


def parse_value(text: bytes) -> Any:
    """Parse the JSON value a function-mode run reported (NaN/Infinity and huge ints allowed)."""
    return json.loads(text, parse_int=_parse_int)


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, HugeInt)):
        return "int"
    if isinstance(value, float):
        return "float"
    if isinstance(value, (list, tuple)):
        return "list"
    return type(value).__name__


def compare_values(expected: Any, actual: Any, float_tol: float = DEFAULT_FLOAT_TOL, path: str = "value") -> tuple:
    """Structural comparison of JSON values: exact ints and bools, floats within tolerance
    when the expected value is a float, lists/dicts element-wise. Returns ``(ok, message)``."""
    kind_e, kind_a = _kind(expected), _kind(actual)
    if kind_e == "float" and kind_a in ("int", "float") and not isinstance(actual, HugeInt):
        ok = floats_close(float(expected), float(actual), float_tol)
        return (True, "") if ok else (False, f"{path}: expected {expected!r}, got {actual!r}")
    if kind_e == "int" and kind_a == "float" and not isinstance(expected, HugeInt):
        ok = math.isfinite(actual) and float(actual).is_integer() and int(actual) == expected
        return (True, "") if ok else (False, f"{path}: expected {expected!r}, got {actual!r}")
    if kind_e != kind_a:
        return False, f"{path}: expected a {kind_e}, got a {kind_a}"
    if kind_e == "int":
        same = str(expected) == str(actual) if isinstance(expected, HugeInt) or isinstance(actual, HugeInt) \
            else expected == actual
        return (True, "") if same else (False, f"{path}: expected {str(expected)[:40]}, got {str(actual)[:40]}")
    if kind_e == "list":
        if len(expected) != len(actual):
            return False, f"{path}: expected {len(expected)} items, got {len(actual)}"
        for index, (e, a) in enumerate(zip(expected, actual)):
            ok, message = compare_values(e, a, float_tol, f"{path}[{index}]")
            if not ok:
                return ok, message
        return True, ""
    if kind_e == "dict":
        if set(expected) != set(actual):
            return False, f"{path}: expected keys {sorted(expected)[:10]}, got {sorted(actual)[:10]}"
        for key in expected:
            ok, message = compare_values(expected[key], actual[key], float_tol, f"{path}[{key!r}]")
            if not ok:
                return ok, message
        return True, ""
    return (True, "") if expected == actual else (False, f"{path}: expected {expected!r:.60}, got {actual!r:.60}")


def run_failure(header: dict, record: dict | None, cpu_limit_s: float, memory_mb: int) -> tuple | None:
    """Verdict implied by how a run ended before looking at its answer, or None.

    ``header``: the worker's run report (exit_code, signal, timed_out, cpu_s, maxrss_kb,
    output_limited (stdout or stderr beyond the output limit), file_limited ("" | "memory" |
    "scratch": which file hit RLIMIT_FSIZE), and with a slot cgroup ``oom_kills`` and
    ``program_bytes`` (the group's peak less the page cache the test's reads left: all the test's
    processes, memfds, shm and tmpfs pages; output is never charged)); ``record``: the harness record
    (nonce verified) or None.

    Precedence: CE, then MLE (memory use does not depend on the host's load, so a memory bomb that
    also ran out of time is MLE), then TLE, OLE, RE.
    """
    kind = record.get("k") if record else None
    if kind == "ce":
        return "CE", record.get("msg", "compile error")
    if header.get("oom_kills"):
        return "MLE", f"memory limit of {memory_mb} MB exceeded (the slot's cgroup OOM-killed a process)"
    if header.get("file_limited") == "memory":
        return "MLE", "a memory file (memfd or shared memory) grew beyond the per-file limit (SIGXFSZ)"
    if header.get("program_bytes", 0) > memory_mb << 20:
        return "MLE", (f"memory limit of {memory_mb} MB exceeded (the test's processes, memfds and tmpfs files "
                       f"peaked at {header['program_bytes'] / (1 << 20):.0f} MB together)")
    if (record and record.get("mem")) or header["maxrss_kb"] > memory_mb * 1024:
        return "MLE", f"memory limit of {memory_mb} MB exceeded"
    if header["timed_out"]:
        return "TLE", "wall-clock limit exceeded"
    if header["signal"] == "SIGXCPU":
        return "TLE", f"CPU time limit of {cpu_limit_s:g}s exceeded (SIGXCPU)"
    if header["cpu_s"] > cpu_limit_s:
        return "TLE", f"CPU time {header['cpu_s']:.3f}s exceeds {cpu_limit_s:g}s"
    if header["output_limited"]:
        return "OLE", f"output exceeds the limit (stdout {header['stdout_size']} B, stderr {header['stderr_size']} B)"
    if header.get("file_limited") == "scratch":
        return "RE", "a scratch file grew beyond the scratch limit (SIGXFSZ)"
    if header["signal"]:
        return "RE", f"killed by {header['signal']}"
    return None


def _exc_message(record: dict) -> str:
    where = {"module": "while running the program", "call": "in the entry point", "tests": "in the tests"}
    text = f"{record.get('exc')}: {record.get('msg', '')}".strip()
    return f"{text} ({where[record['where']]})" if record.get("where") in where else text


def answer_verdict(mode: str, header: dict, record: dict | None) -> tuple:
    """Verdict for a run that ended without CE/TLE/OLE/MLE/signal, apart from output comparison.

    Returns ``(verdict, message)``; verdict ``None`` for stdio/function runs whose answer still
    has to be compared (``message`` then empty).
    """
    kind = record.get("k") if record else None
    code = header["exit_code"]
    if kind == "exc":
        return "RE", _exc_message(record)
    if kind == "noentry":
        return "RE", record.get("msg", "entry point missing")
    if kind == "early_exit":
        verdict = "WA" if record.get("code") == 0 else "RE"
        return verdict, f"the program exited (status {record.get('code')}) before the tests finished"
    if mode == "stdio":
        if code != 0:
            detail = f" ({record.get('exc')})" if kind == "exit" and record.get("exc") else ""
            return "RE", f"exit status {code}{detail}"
        return None, ""
    if mode == "function":
        if kind == "value":
            return None, ""
        if kind == "unser":
            return "WA", f"return value is not a plain value: {record.get('msg')}"
    elif kind == "done":
        return "AC", ""
    elif kind == "assert":
        return "WA", record.get("msg", "assertion failed")
    if code != 0:
        return "RE", f"exit status {code}"
    return "WA", "the process ended before reporting a result"
