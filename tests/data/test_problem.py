"""Problem schema: submissions in the docs/contracts.md schema, code assembly, JSONL cache, validation."""
import gzip
import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from maxk_jax.data.problem import (ENTRY_SHIM_NAME, AssertTests, FunctionCase, FunctionTests, Limits, Problem,
                                   StdioCase, StdioTests, check_json_value, load_problems, problems_by_id,
                                   save_problems)

CONTRACT_SUBMISSION_KEYS = {"id", "code", "mode", "tests", "limits"}
CONTRACT_LIMIT_KEYS = {"cpu_s", "wall_s", "memory_mb"}


def _stdio_problem(**kw):
    base = dict(id="t/stdio", source="t", prompt="Add two numbers.",
                tests=StdioTests((StdioCase("1 2\n", "3\n"), StdioCase("5 5\n", "10\n"))),
                limits=Limits(cpu_s=1.5, wall_s=3.0, memory_mb=256), difficulty=2, metadata={"k": [1, "a"]})
    base.update(kw)
    return Problem(**base)


def _function_problem(class_name=None):
    return Problem(id="t/fn", source="t", prompt="Sum a list.",
                   tests=FunctionTests("total", (FunctionCase(([1, 2, 3],), 6), FunctionCase(([],), 0)), class_name))


def _check_design_schema(sub):
    """Field-by-field check of one submission against docs/contracts.md."""
    assert set(sub) == CONTRACT_SUBMISSION_KEYS
    assert isinstance(sub["id"], str) and isinstance(sub["code"], str)
    assert sub["mode"] in ("stdio", "function", "assert")
    assert set(sub["limits"]) == CONTRACT_LIMIT_KEYS
    assert isinstance(sub["limits"]["cpu_s"], float) and isinstance(sub["limits"]["wall_s"], float)
    assert isinstance(sub["limits"]["memory_mb"], int)
    if sub["mode"] == "stdio":
        assert isinstance(sub["tests"], list) and sub["tests"]
        for t in sub["tests"]:
            assert set(t) == {"stdin", "expected"} and all(isinstance(v, str) for v in t.values())
    elif sub["mode"] == "function":
        assert set(sub["tests"]) == {"entry_point", "cases"}
        for c in sub["tests"]["cases"]:
            assert set(c) == {"args", "expected"} and isinstance(c["args"], list)
    else:
        assert set(sub["tests"]) == {"code"} and isinstance(sub["tests"]["code"], str)
    json.dumps(sub, allow_nan=False)  # the whole body must be strict JSON


def test_stdio_submission_matches_design_schema():
    p = _stdio_problem()
    sub = p.to_submission("print(sum(map(int, input().split())))", "sub-1")
    _check_design_schema(sub)
    assert sub["mode"] == "stdio" and sub["id"] == "sub-1"
    assert sub["tests"] == [{"stdin": "1 2\n", "expected": "3\n"}, {"stdin": "5 5\n", "expected": "10\n"}]
    assert sub["limits"] == {"cpu_s": 1.5, "wall_s": 3.0, "memory_mb": 256}
    assert sub["code"] == "print(sum(map(int, input().split())))"
    override = p.to_submission("x", "s", limits=Limits(cpu_s=9.0, wall_s=10.0, memory_mb=64))
    assert override["limits"] == {"cpu_s": 9.0, "wall_s": 10.0, "memory_mb": 64}


def test_function_and_assert_submissions_match_design_schema():
    sub = _function_problem().to_submission("def total(xs):\n    return sum(xs)\n", "f-1")
    _check_design_schema(sub)
    assert sub["tests"] == {"entry_point": "total", "cases": [{"args": [[1, 2, 3]], "expected": 6},
                                                              {"args": [[]], "expected": 0}]}
    a = Problem(id="t/a", source="t", prompt="p", tests=AssertTests("assert f(1) == 2\n"))
    sub = a.to_submission("def f(x):\n    return x + 1\n", "a-1")
    _check_design_schema(sub)
    assert sub["mode"] == "assert" and sub["tests"] == {"code": "assert f(1) == 2\n"}


def _run_function_submission(sub):
    """Execute our own trusted fixture code in-process and call the submitted entry point."""
    namespace = {}
    exec(compile(sub["code"], "<submission>", "exec"), namespace)
    fn = namespace[sub["tests"]["entry_point"]]
    return [fn(*c["args"]) == c["expected"] for c in sub["tests"]["cases"]]


def test_class_entry_point_shim_calls_method_or_module_function():
    p = _function_problem(class_name="Solution")
    method = "class Solution:\n    def total(self, xs):\n        return sum(xs)\n"
    sub = p.to_submission(method, "c-1")
    assert sub["tests"]["entry_point"] == ENTRY_SHIM_NAME
    assert _run_function_submission(sub) == [True, True]
    module_level = "def total(xs):\n    return sum(xs)\n"
    assert _run_function_submission(p.to_submission(module_level, "c-2")) == [True, True]
    wrong = "class Solution:\n    def total(self, xs):\n        return 0\n"
    assert _run_function_submission(p.to_submission(wrong, "c-3")) == [False, True]


def test_assemble_code_preamble_and_prefix_rules():
    p = _stdio_problem(preamble="import sys", code_prefix="def f():\n    return 1\n")
    body = "print(f())"
    assert p.assemble_code(body) == "import sys\ndef f():\n    return 1\nprint(f())"
    already = "def f():\n    return 1\n\nprint(f())"
    assert p.assemble_code(already) == "import sys\n" + already  # prefix not duplicated
    assert p.assemble_code("\n\n" + already).count("def f()") == 1


def test_problem_properties():
    p = _stdio_problem()
    assert p.mode == "stdio" and p.num_tests == 2
    assert len({p, _stdio_problem(), _function_problem()}) == 2  # hashable although fields hold lists
    assert _function_problem().mode == "function"
    assert Problem(id="x", source="t", prompt="p", tests=AssertTests("pass")).num_tests == 1


def test_jsonl_roundtrip_plain_and_gzip(tmp_path):
    problems = [_stdio_problem(), _function_problem("Solution"),
                Problem(id="t/a", source="t", prompt="p", tests=AssertTests("assert True"), starter_code="def f(): pass",
                        code_prefix="def f(): pass", preamble="import os", difficulty="easy")]
    for name in ("cache.jsonl", "cache.jsonl.gz"):
        path = tmp_path / name
        assert save_problems(problems, path) == 3
        loaded = load_problems(path)
        assert loaded == problems
        assert [p.to_submission("c", "s") for p in loaded] == [p.to_submission("c", "s") for p in problems]
    with gzip.open(tmp_path / "cache.jsonl.gz", "rt") as f:
        first = json.loads(f.readline())
    assert first["schema_version"] == 1 and first["tests"]["mode"] == "stdio"
    assert not (tmp_path / "cache.jsonl.tmp").exists()


def test_load_problems_names_bad_line_and_duplicates(tmp_path):
    path = tmp_path / "bad.jsonl"
    good = json.dumps(_stdio_problem().to_dict())
    path.write_text(good + "\n" + '{"schema_version": 1, "id": "x"}\n')
    with pytest.raises(ValueError, match=r"bad.jsonl:2: .*missing field 'source'"):
        load_problems(path)
    path.write_text(good + "\n" + good + "\n")
    with pytest.raises(ValueError, match="duplicate problem id 't/stdio'"):
        load_problems(path)
    path.write_text("not json\n")
    with pytest.raises(ValueError, match=r"bad.jsonl:1"):
        load_problems(path)
    with pytest.raises(ValueError, match="duplicate problem id"):
        problems_by_id([_stdio_problem(), _stdio_problem()])


def test_load_problems_corrupt_or_truncated_gzip_names_the_file(tmp_path):
    path = tmp_path / "cache.jsonl.gz"
    save_problems([Problem(id=f"t/{i}", source="t", prompt="p" * 200, tests=AssertTests("assert True"))
                   for i in range(50)], path)
    data = path.read_bytes()
    (tmp_path / "trunc.jsonl.gz").write_bytes(data[:len(data) // 2])
    (tmp_path / "notgz.jsonl.gz").write_bytes(b"plain text\n")
    (tmp_path / "latin1.jsonl").write_bytes(b"\xff\xfe{}\n")
    for name, why in (("trunc.jsonl.gz", "EOFError"), ("notgz.jsonl.gz", "BadGzipFile"),
                      ("latin1.jsonl", "UnicodeDecodeError")):
        with pytest.raises(ValueError, match=f"{tmp_path / name}: not a readable .*{why}"):
            load_problems(tmp_path / name)


def test_from_dict_rejects_wrong_version_and_modes():
    d = _stdio_problem().to_dict()
    with pytest.raises(ValueError, match="schema_version must be 1, got 7"):
        Problem.from_dict({**d, "schema_version": 7})
    with pytest.raises(ValueError, match="tests.mode must be one of"):
        Problem.from_dict({**d, "tests": {"mode": "interactive"}})
    with pytest.raises(ValueError, match="malformed stdio tests"):
        Problem.from_dict({**d, "tests": {"mode": "stdio", "cases": [{"stdin": "1"}]}})
    with pytest.raises(ValueError, match="limits is missing fields"):
        Problem.from_dict({**d, "limits": {"cpu_s": 1.0}})


@pytest.mark.parametrize("kwargs, match", [
    (dict(cpu_s=-1.0), "Limits.cpu_s must be a positive finite number, got -1.0"),
    (dict(wall_s=float("nan")), "Limits.wall_s"),
    (dict(cpu_s=True), "Limits.cpu_s"),
    (dict(memory_mb=0), "Limits.memory_mb must be a positive int, got 0"),
    (dict(memory_mb=1.5), "Limits.memory_mb"),
])
def test_limits_validation(kwargs, match):
    with pytest.raises(ValueError, match=match):
        Limits(**kwargs)


def test_limits_from_time_memory():
    lim = Limits.from_time_memory(2.0, 255.5)
    assert lim == Limits(cpu_s=2.0, wall_s=5.0, memory_mb=256)


def test_problem_and_tests_validation():
    with pytest.raises(ValueError, match="StdioTests needs at least one case, got 0"):
        StdioTests(())
    with pytest.raises(ValueError, match="FunctionTests needs at least one case"):
        FunctionTests("f", ())
    with pytest.raises(ValueError, match="entry_point must be a Python identifier, got 'not valid'"):
        FunctionTests("not valid", (FunctionCase((1,), 1),))
    with pytest.raises(ValueError, match="AssertTests.code must be a non-empty string"):
        AssertTests("  ")
    with pytest.raises(ValueError, match="Problem.id must be a non-empty string"):
        _stdio_problem(id="")
    with pytest.raises(ValueError, match="Problem.prompt"):
        _stdio_problem(prompt="   ")
    with pytest.raises(ValueError, match="Problem.difficulty"):
        _stdio_problem(difficulty=1.5)
    with pytest.raises(ValueError, match="StdioCase.expected must be a str"):
        StdioCase("1", 3)
    with pytest.raises(ValueError, match="submission_id must be a non-empty string"):
        _stdio_problem().to_submission("x", "")
    with pytest.raises(ValueError, match="code must be a str"):
        _stdio_problem().to_submission(None, "s")


@pytest.mark.parametrize("value, match", [
    ({1, 2}, "set"), (float("nan"), "non-finite float"), (float("inf"), "non-finite"),
    ({1: "a"}, "dict key 1 is not a string"), (b"x", "bytes"), ([1, (2, {3})], r"\[1\]\[1\]"),
])
def test_non_json_values_rejected(value, match):
    with pytest.raises(ValueError, match=match):
        check_json_value(value)
    with pytest.raises(ValueError):
        FunctionCase((value,), 1)


def test_tuples_become_lists():
    case = FunctionCase(((1, 2), "x"), (3, (4,)))
    assert case.args == ([1, 2], "x") and case.expected == [3, [4]]


_json = st.recursive(
    st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.text(max_size=8)
    | st.floats(allow_nan=False, allow_infinity=False),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=5), children, max_size=4),
    max_leaves=12)


@settings(max_examples=60, deadline=None)
@given(args=st.lists(_json, max_size=4), expected=_json)
def test_function_case_json_roundtrip_property(args, expected):
    p = Problem(id="h/1", source="h", prompt="p", tests=FunctionTests("f", (FunctionCase(tuple(args), expected),)))
    text = json.dumps(p.to_dict(), allow_nan=False)
    back = Problem.from_dict(json.loads(text))
    assert back == p
    sub = back.to_submission("def f(*a): pass", "s")
    case = sub["tests"]["cases"][0]
    assert case["args"] == args and case["expected"] == expected
    assert all(not isinstance(v, float) or math.isfinite(v) for v in case["args"] if not isinstance(v, (list, dict)))
