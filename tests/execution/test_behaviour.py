"""Behaviour fingerprints: same outputs -> same fingerprint whatever the source text; different
outputs -> different; undetermined runs (TLE, sandbox errors) -> None; the embedded executor, the
HTTP service and the SandboxFusion backend agree."""
import pytest

from maxk_jax.execution import behaviour
from maxk_jax.execution import HttpExecutor, make_executor
from maxk_jax.execution.service import create_app

from tests.execution.judge_fixtures import fake_sandboxfusion

STDIN = ["1 2", "5 5", "-3 4"]


def stdio(sub_id: str, code: str, expected=("3", "10", "1"), **extra) -> dict:
    return dict({"id": sub_id, "code": code, "mode": "stdio",
                 "tests": [{"stdin": s, "expected": e} for s, e in zip(STDIN, expected)]}, **extra)


def function(sub_id: str, code: str) -> dict:
    return {"id": sub_id, "code": code, "mode": "function",
            "tests": {"entry_point": "f", "cases": [{"args": [1], "expected": {"a": 1, "b": 2}},
                                                    {"args": [2], "expected": {"a": 2, "b": 4}}]}}


def assert_mode(sub_id: str, code: str) -> dict:
    return {"id": sub_id, "code": code, "mode": "assert",
            "tests": [{"code": "assert f(1) == 2"}, {"code": "assert f(3) == 6"}]}


SUM = "a, b = map(int, input().split())\nprint(a + b)"
SUBS = [
    stdio("sum", SUM),
    stdio("sum_other_text", "import sys\nx = sys.stdin.read().split()\nprint(  int(x[0])+int(x[1])  )\n"),
    stdio("wrong", "a, b = map(int, input().split())\nprint(a * b)"),
    stdio("wrong_other_text", "x, y = (int(t) for t in input().split())\nprint(y * x, end='\\n\\n')"),
    stdio("wrong_differently", "a, b = map(int, input().split())\nprint(a - b)"),
    stdio("crash", "raise SystemExit(input() and 3)"),
    stdio("crash_other_text", "import sys\nsys.exit(2)"),
    stdio("syntax", "print(("),
    stdio("syntax_other", "def f(:\n  pass"),
    stdio("slow_on_one_test", "a, b = map(int, input().split())\nwhile a == 5: pass\nprint(a + b)",
          limits={"cpu_s": 0.5, "wall_s": 1}),
    function("fn", "def f(x):\n    return {'a': x, 'b': 2 * x}"),
    function("fn_other_text", "def f(x):\n    d = {}\n    d['b'] = x + x\n    d['a'] = x\n    return d"),
    function("fn_wrong", "def f(x):\n    return {'a': x, 'b': 3 * x}"),
    function("fn_wrong_other_text", "def f(x):\n    return dict(b=x * 3, a=x)"),
    function("fn_wrong_float", "def f(x):\n    return {'a': x, 'b': 3.0 * x}"),
    assert_mode("asrt", "def f(x):\n    return 2 * x"),
    assert_mode("asrt_wrong_1", "def f(x):\n    return x + 1"),            # passes test 1 only
    assert_mode("asrt_wrong_2", "def f(x):\n    return 3 if x == 1 else 6"),  # passes test 2 only
    assert_mode("asrt_wrong_1_other", "def f(x):\n    return 2 if x == 1 else 0"),
]


def fingerprints(results: list) -> dict:
    assert all(r["status"] == "ok" for r in results), [(r["id"], r["status"]) for r in results]
    return {r["id"]: r["behaviour"] for r in results}


def check_fingerprints(fp: dict, *, assert_tle_masked: bool = True) -> None:
    for a, b in [("sum", "sum_other_text"), ("wrong", "wrong_other_text"), ("crash", "crash_other_text"),
                 ("syntax", "syntax_other"), ("fn", "fn_other_text"), ("fn_wrong", "fn_wrong_other_text"),
                 ("asrt_wrong_1", "asrt_wrong_1_other")]:
        assert fp[a] is not None and fp[a] == fp[b], (a, b)
    for a, b in [("sum", "wrong"), ("wrong", "wrong_differently"), ("sum", "crash"), ("crash", "syntax"),
                 ("fn", "fn_wrong"), ("fn_wrong", "fn_wrong_float"), ("asrt", "asrt_wrong_1"),
                 ("asrt_wrong_1", "asrt_wrong_2"), ("sum", "fn")]:
        assert fp[a] != fp[b], (a, b)
    if assert_tle_masked:
        assert fp["slow_on_one_test"] is None      # TLE on test 2: its answer there was never seen


def test_embedded_fingerprints_group_by_outputs_not_text(executor):
    results = executor.judge(SUBS)
    by_id = {r["id"]: r for r in results}
    assert [t["verdict"] for t in by_id["slow_on_one_test"]["tests"]] == ["AC", "TLE", "AC"]
    assert "_behaviour" not in str(results)                  # the private per-test token is not leaked
    check_fingerprints(fingerprints(results))
    again = fingerprints(executor.judge(SUBS[:3]))            # stable across calls
    assert again == {k: v for k, v in fingerprints(results).items() if k in again}


def test_http_service_carries_the_same_fingerprints(executor, serve_app):
    with HttpExecutor(serve_app(create_app(executor.supervisor, cache_size=0))) as client:
        remote = fingerprints(client.judge(SUBS[:9] + SUBS[10:]))
    local = fingerprints(executor.judge(SUBS[:9] + SUBS[10:]))
    assert remote == local


def test_sandboxfusion_fingerprints(serve_app):
    with make_executor("sandboxfusion+" + serve_app(fake_sandboxfusion())) as client:
        fp = fingerprints(client.judge(SUBS))
    check_fingerprints(fp)


def test_sandbox_error_and_unjudged_results_have_no_fingerprint():
    from maxk_jax.execution.executor import sandbox_error_result
    from maxk_jax.execution.schema import parse_submissions

    assert sandbox_error_result(parse_submissions([SUBS[0]])[0], "down")["behaviour"] is None
    assert behaviour.summarise([{"verdict": "AC"}, {"verdict": "SE"}]) is None
    assert behaviour.summarise([{"verdict": "AC"}, {"verdict": "WA"}]) is None   # WA without its output
    assert behaviour.summarise([]) is None


@pytest.mark.parametrize("verdict", ["TLE", "MLE", "OLE", "SE"])
def test_undetermined_verdicts(verdict):
    assert behaviour.run_token("stdio", verdict, stdout=b"42") is None
    assert behaviour.fingerprint([b"AC", behaviour.run_token("function", verdict)]) is None


def test_tokens_follow_the_comparison_mode():
    tok = lambda out, mode="tokens": behaviour.run_token("stdio", "WA", stdout=out, compare_mode=mode)  # noqa: E731
    assert tok(b"1  2\r\n") == tok(b"1 2") != tok(b"1 3")
    assert tok(b"1  2\n", "lines") != tok(b"1 2\n", "lines") and tok(b"1 2  \n\n", "lines") == tok(b"1 2", "lines")
    assert tok(b"1 2\n", "exact") != tok(b"1 2", "exact")
    assert behaviour.run_token("assert", "WA") == b"WA" == behaviour.run_token("assert", "WA", stdout=b"x")
    big = behaviour.canonical_value(10 ** 30)
    assert big == behaviour.canonical_value(behaviour.HugeInt(str(10 ** 30))) != behaviour.canonical_value(str(10 ** 30))
    assert behaviour.canonical_value(1) != behaviour.canonical_value(1.0) != behaviour.canonical_value(True)
