"""MBPP (``google-research-datasets/mbpp``) loader with assert -> input/output conversion.

Upstream schemas: ``full`` config -- ``task_id, text, code, test_list (list[str]),
test_setup_code, challenge_test_list``; ``sanitized`` config -- ``source_file, task_id, prompt,
code, test_imports (list[str]), test_list``. Both are accepted (``text`` or ``prompt``;
``test_setup_code`` or ``test_imports``).

The paper "processes tests for MBPP to support input/output format": every assert of the form
``assert f(<literals>) == <literal>`` (either side order, redundant parentheses allowed) is
parsed with `ast` into a function case ``{"args": [...JSON...], "expected": JSON}`` with entry
point ``f``. A row converts only if ALL its asserts do and they call the same function.
Anything else -- ``math.isclose(...)``, ``set(f(x)) == ...``, keyword args, ``assert f(x)``,
non-JSON values (sets, tuples as dict keys, bytes, NaN) -- makes the row unconvertible. Tuples
become JSON lists (the return value is JSON-serialised before comparison, so a list returned
where the assert expected a tuple also passes -- slightly looser than the original assert).

Modes (`mode`):
  ``"function"`` (default): unconvertible rows are dropped and counted (``unconvertible_assert``).
  ``"function_or_assert"``: unconvertible rows fall back to assert mode (``info["assert_fallback"]``).
  ``"assert"``: every row in assert mode (test code = setup code + asserts).

What becomes what: prompt <- ``text`` + "Your code should pass these tests:" + test_list (the
original MBPP prompt, which is also how the model learns the function name); tests <- test_list
(+ challenge_test_list if `include_challenge_tests`); preamble <- test_setup_code / test_imports.
"""
from __future__ import annotations

import ast
from collections.abc import Sequence
from typing import Any

from maxk_jax.data.problem import (AssertTests, FunctionCase, FunctionTests, Limits, Problem, Tests,
                                   check_json_value)
from maxk_jax.data.report import LoadReport
from maxk_jax.data.sources import progress, read_rows

HUB_NAME = "google-research-datasets/mbpp"
MODES = ("function", "function_or_assert", "assert")
DEFAULT_LIMITS = Limits(cpu_s=4.0, wall_s=8.0, memory_mb=1024)


class AssertConversionError(ValueError):
    """An MBPP assert that is not ``assert f(literals) == literal``."""


def _literal(node: ast.AST, what: str) -> Any:
    try:
        value = ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError) as e:
        raise AssertConversionError(f"{what} is not a literal: {ast.unparse(node)[:80]}") from e
    try:
        return check_json_value(value, what)
    except ValueError as e:
        raise AssertConversionError(str(e)) from e


def parse_assert(line: str) -> tuple[str, list[Any], Any]:
    """Parse ``assert f(a, b) == c`` into ``(f, [a, b], c)`` (JSON values); AssertConversionError otherwise."""
    try:
        tree = ast.parse(line.strip())
    except SyntaxError as e:
        raise AssertConversionError(f"syntax error in {line!r:.80}") from e
    if len(tree.body) != 1 or not isinstance(tree.body[0], ast.Assert):
        raise AssertConversionError(f"not a single assert statement: {line!r:.80}")
    test = tree.body[0].test
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq)):
        raise AssertConversionError(f"not an `a == b` comparison: {line!r:.80}")
    left, right = test.left, test.comparators[0]
    for call, other in ((left, right), (right, left)):
        if isinstance(call, ast.Call) and isinstance(call.func, ast.Name):
            if call.keywords or any(isinstance(a, ast.Starred) for a in call.args):
                raise AssertConversionError(f"keyword or starred arguments: {line!r:.80}")
            args = [_literal(a, f"argument {i}") for i, a in enumerate(call.args)]
            return call.func.id, args, _literal(other, "expected value")
    raise AssertConversionError(f"no direct call `f(...)` on either side: {line!r:.80}")


def convert_asserts(lines: Sequence[str]) -> FunctionTests:
    """All asserts of one problem -> `FunctionTests`; AssertConversionError if any line fails."""
    if not lines:
        raise AssertConversionError("no asserts")
    names, cases = set(), []
    for line in lines:
        name, args, expected = parse_assert(line)
        names.add(name)
        cases.append(FunctionCase(tuple(args), expected))
    if len(names) != 1:
        raise AssertConversionError(f"asserts call different functions {sorted(names)}")
    return FunctionTests(names.pop(), tuple(cases))


def entry_point_of(lines: Sequence[str]) -> str | None:
    """Best-effort function name called by the first assert (for prompts/metadata)."""
    for line in lines:
        try:
            for node in ast.walk(ast.parse(line.strip())):
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                    return node.func.id
        except SyntaxError:
            continue
    return None


def format_prompt(text: str, test_list: Sequence[str]) -> str:
    """The original MBPP prompt: description + the three visible asserts."""
    return f"{text.strip()}\nYour code should pass these tests:\n\n" + "\n".join(t.strip() for t in test_list)


def load_mbpp(path: str | None = None, split: str = "test", *, config: str = "full", mode: str = "function",
              include_challenge_tests: bool = False,
              limits: Limits = DEFAULT_LIMITS) -> tuple[list[Problem], LoadReport]:
    """Load MBPP problems.

    Args:
      path: hub name (default ``google-research-datasets/mbpp``) or local file/directory.
      split: upstream split (``train``/``test``/``validation``/``prompt``; the paper evaluates).
      config: hub config ``full`` or ``sanitized`` (local files: schema is detected per row).
      mode: ``function`` | ``function_or_assert`` | ``assert`` (module docstring).
      include_challenge_tests: also use ``challenge_test_list`` as reward tests.
      limits: per-test limits.
    Returns:
      (problems in upstream order, LoadReport).
    """
    if mode not in MODES:
        raise ValueError(f"mbpp mode must be one of {MODES}, got {mode!r}")
    source = path or HUB_NAME
    rows = read_rows(source, split=split, config=config)
    report = LoadReport("mbpp", str(source), split, params={
        "config": config, "mode": mode, "include_challenge_tests": include_challenge_tests})
    problems: list[Problem] = []
    seen: set[str] = set()
    for row in progress(rows, "mbpp"):
        report.n_rows += 1
        task_id = row.get("task_id") if isinstance(row, dict) else None
        text = (row.get("text") or row.get("prompt")) if isinstance(row, dict) else None
        test_list = row.get("test_list") if isinstance(row, dict) else None
        if task_id is None or not isinstance(text, str) or not text.strip() or not isinstance(test_list, list) \
                or not all(isinstance(t, str) for t in test_list):
            report.skip("malformed_row", task_id)
            continue
        if not test_list:
            report.skip("no_tests", task_id)
            continue
        lines = list(test_list)
        if include_challenge_tests:
            lines += [t for t in (row.get("challenge_test_list") or []) if isinstance(t, str) and t.strip()]
        setup = row.get("test_setup_code") or ""
        if not setup and row.get("test_imports"):
            setup = "\n".join(row["test_imports"])
        tests: Tests
        preamble = ""
        if mode == "assert":
            tests = AssertTests(_assert_code(setup, lines))
        else:
            try:
                tests = convert_asserts(lines)
                preamble = setup.strip()
            except AssertConversionError:
                if mode == "function":
                    report.skip("unconvertible_assert", task_id)
                    continue
                tests = AssertTests(_assert_code(setup, lines))
                report.count("assert_fallback")
        pid = f"mbpp/{task_id}"
        if not report.keep_new(pid, seen, task_id):
            continue
        problems.append(Problem(
            id=pid, source="mbpp", prompt=format_prompt(text, test_list), tests=tests, limits=limits,
            preamble=preamble,
            metadata={"task_id": task_id, "entry_point": entry_point_of(lines),
                      "reference_code": row.get("code") if isinstance(row.get("code"), str) else None}))
        report.n_kept += 1
    return problems, report.finalize(len(problems))


def _assert_code(setup: str, lines: Sequence[str]) -> str:
    body = "\n".join(line.strip() for line in lines)
    return (setup.strip() + "\n\n" + body + "\n") if setup.strip() else body + "\n"
