"""Comparison corpus for the judge (pure functions; the end-to-end corpus is in test_supervisor.py)."""
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from maxk_jax.execution import judge


@pytest.mark.parametrize("expected, actual", [
    (b"1 2 3\n", b"1 2 3\n"),
    (b"1 2 3\n", b"1   2\t3"),                    # whitespace runs, missing final newline
    (b"1 2 3\n", b"1\r\n2\r\n3\r\n"),             # CRLF
    (b"a\r\nb\r\n", b"a\nb"),                     # CRLF on the expected side
    (b"YES\n", b"yes\n"), (b"No", b"NO"),        # case-insensitive YES/NO
    (b"1.0", b"1"), (b"0.5", b"0.5000001"), (b"1e9", b"1000000000.5"),
    (b"3.14159", b"3.141590000001"), (b"-0.0", b"0"),
    (b"123456789012345678901234567890", b"123456789012345678901234567890"),
    (b"9007199254740993", b"+9007199254740993"),  # 2^53 + 1, exact
    (b"007", b"7"), (b"0", b"-0"),
    (b"", b""), (b"", b" \n\r\n\t"),              # empty expected output
    (b"nan", b"NaN"),
    (b"\xff\xfe bytes", b"\xff\xfe   bytes\n"),   # invalid UTF-8 compared as bytes
])
def test_tokens_accept(expected: bytes, actual: bytes) -> None:
    ok, message = judge.compare_tokens(expected, actual)
    assert ok, message


@pytest.mark.parametrize("expected, actual, fragment", [
    (b"1 2 3", b"1 2", "expected 3 tokens, got 2"),
    (b"1 2", b"1 2 3", "expected 2 tokens, got 3"),
    (b"YES", b"YESS", "token 1"),
    (b"1", b"1.0", "token 1"),                               # integer expected: integer required
    (b"9007199254740993", b"9007199254740992", "token 1"),   # beyond 2^53: no float rounding
    (b"2", b"2e0", "token 1"),
    (b"0.5", b"0.6", "token 1"),
    (b"1.5", b"nan", "token 1"),                             # NaN never equals a number
    (b"1.5", b"inf", "token 1"),
    (b"1.0", b"1_0", "token 1"),                             # Python-only float syntax rejected
    (b"abc", b"ABC", "token 1"),                             # only YES/NO are case-insensitive
    (b"", b"0", "expected 0 tokens, got 1"),
    (b"\xff", b"\xfe", "token 1"),
])
def test_tokens_reject(expected: bytes, actual: bytes, fragment: str) -> None:
    ok, message = judge.compare_tokens(expected, actual)
    assert not ok
    assert fragment in message


def test_float_tolerance_is_absolute_or_relative() -> None:
    assert judge.compare_tokens(b"1000000.0", b"1000000.5", float_tol=1e-6)[0]    # relative
    assert not judge.compare_tokens(b"1000000.0", b"1000002.0", float_tol=1e-6)[0]
    assert judge.compare_tokens(b"0.0", b"0.0000009")[0]                          # absolute
    assert not judge.compare_tokens(b"0.0", b"0.00001")[0]
    assert judge.compare_tokens(b"0.5", b"0.6", float_tol=0.2)[0]


def test_lines_mode_is_strict_about_lines() -> None:
    assert judge.compare_lines(b"a b\nc\n", b"a b  \r\nc\r\n\n\n")[0]
    ok, message = judge.compare_lines(b"a b\nc\n", b"a  b\nc\n")
    assert not ok and "line 1" in message
    ok, message = judge.compare_lines(b"a\nb\n", b"a b\n")
    assert not ok


def test_compare_output_dispatch() -> None:
    assert judge.compare_output(b"x\n", b"x\n", "exact")[0]
    assert not judge.compare_output(b"x\n", b"x", "exact")[0]
    assert judge.compare_output(b"1 2", b"1\n2", "tokens")[0]
    with pytest.raises(ValueError, match="compare mode must be one of"):
        judge.compare_output(b"", b"", "fuzzy")


@pytest.mark.parametrize("expected, actual, ok", [
    (3, 3, True), (3, 3.0, True), (3, 3.5, False), (True, True, True), (True, 1, False), (1, True, False),
    (0.1 + 0.2, 0.3, True), (1.5, 2, False), (2.0, 2, True), (float("nan"), float("nan"), True),
    (float("inf"), float("inf"), True), (1.0, float("nan"), False),
    ([1, [2, 3]], [1, [2, 3]], True), ([1, 2], [1, 2, 3], False), ({"a": [1.0]}, {"a": [1.0000000001]}, True),
    ({"a": 1}, {"b": 1}, False), ("x", "x", True), ("x", "X", False), (None, None, True), (None, 0, False),
    (2 ** 80, 2 ** 80, True), (2 ** 80, 2 ** 80 + 1, False), ([1], "[1]", False),
])
def test_compare_values(expected, actual, ok: bool) -> None:
    assert judge.compare_values(expected, actual)[0] is ok


def test_parse_value_handles_huge_ints_and_nan() -> None:
    huge = "9" * 5000
    value = judge.parse_value(("[" + huge + ", NaN]").encode())
    assert isinstance(value[0], judge.HugeInt) and math.isnan(value[1])
    assert judge.compare_values(judge.parse_value(huge.encode()), judge.parse_value(huge.encode()))[0]
    assert not judge.compare_values(judge.parse_value(huge.encode()), judge.parse_value(("8" + huge[1:]).encode()))[0]


def _run(**overrides) -> dict:
    run = {"exit_code": 0, "signal": None, "timed_out": False, "cpu_s": 0.01, "maxrss_kb": 10000,
           "output_limited": False, "stdout_size": 0, "stderr_size": 0}
    run.update(overrides)
    return run


@pytest.mark.parametrize("run, record, verdict", [
    (_run(), {"k": "ce", "msg": "SyntaxError"}, "CE"),
    (_run(timed_out=True, signal="SIGKILL", exit_code=None), None, "TLE"),
    (_run(cpu_s=1.5), None, "TLE"),
    (_run(signal="SIGXCPU", exit_code=None), None, "TLE"),
    (_run(output_limited=True, signal="SIGXFSZ", exit_code=None), None, "OLE"),
    (_run(file_limited="memory", signal="SIGXFSZ", exit_code=None), None, "MLE"),   # a memfd, not output
    (_run(file_limited="scratch", signal="SIGXFSZ", exit_code=None), None, "RE"),   # the scratch limit
    (_run(exit_code=1), {"k": "exit", "exc": "MemoryError", "mem": True}, "MLE"),
    (_run(maxrss_kb=300 * 1024), None, "MLE"),
    # the slot cgroup: the program's total (all processes, memfds) and OOM kills beat a TLE (issue 44)
    (_run(program_bytes=257 << 20), None, "MLE"),
    (_run(program_bytes=256 << 20), None, None),
    (_run(oom_kills=1, cpu_s=1.01, signal="SIGKILL", exit_code=None), None, "MLE"),
    (_run(oom_kills=1, timed_out=True, signal="SIGKILL", exit_code=None), None, "MLE"),
    (_run(program_bytes=300 << 20, cpu_s=1.5), None, "MLE"),
    (_run(signal="SIGSEGV", exit_code=None), None, "RE"),
    (_run(), None, None),
])
def test_run_failure(run: dict, record, verdict) -> None:
    failure = judge.run_failure(run, record, cpu_limit_s=1.0, memory_mb=256)
    assert (failure[0] if failure else None) == verdict


@pytest.mark.parametrize("mode, run, record, verdict", [
    ("stdio", _run(), {"k": "exit", "code": 0}, None),
    ("stdio", _run(exit_code=3), {"k": "exit", "code": 3}, "RE"),
    ("stdio", _run(exit_code=1), {"k": "exit", "exc": "ValueError"}, "RE"),
    ("function", _run(), {"k": "value", "v": 1}, None),
    ("function", _run(), {"k": "unser", "msg": "x"}, "WA"),
    ("function", _run(exit_code=1), {"k": "noentry", "msg": "x"}, "RE"),
    ("function", _run(), None, "WA"),                    # os._exit(0) before returning
    ("assert", _run(), {"k": "done"}, "AC"),
    ("assert", _run(), {"k": "assert", "msg": "AssertionError"}, "WA"),
    ("assert", _run(), {"k": "early_exit", "code": 0}, "WA"),
    ("assert", _run(), {"k": "early_exit", "code": 2}, "RE"),
    ("assert", _run(exit_code=1), {"k": "exc", "exc": "TypeError", "msg": "x", "where": "tests"}, "RE"),
    ("assert", _run(), None, "WA"),                      # os._exit(0) before the asserts
    ("assert", _run(exit_code=7), None, "RE"),
])
def test_answer_verdict(mode: str, run: dict, record, verdict) -> None:
    assert judge.answer_verdict(mode, run, record)[0] == verdict


_ws = st.lists(st.sampled_from([b" ", b"\n", b"\r\n", b"\t"]), min_size=1, max_size=3).map(b"".join)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(min_value=-10 ** 30, max_value=10 ** 30), max_size=20), _ws)
def test_integer_tokens_survive_any_whitespace(values: list, sep: bytes) -> None:
    expected = b" ".join(str(v).encode() for v in values) + b"\n"
    assert judge.compare_tokens(expected, sep.join(str(v).encode() for v in values))[0]
    if values:
        changed = list(values)
        changed[-1] += 1
        assert not judge.compare_tokens(expected, b" ".join(str(v).encode() for v in changed))[0]


@settings(max_examples=60, deadline=None)
@given(st.floats(min_value=-1e6, max_value=1e6, allow_nan=False))
def test_float_tokens_within_tolerance(x: float) -> None:
    expected = repr(x).encode()
    assert judge.compare_tokens(expected, f"{x:.9f}".encode())[0]
    assert not judge.compare_tokens(expected, repr(x + 1e-3 + abs(x) * 1e-5).encode())[0]
