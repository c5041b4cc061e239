"""LiveBench coding (``livebench/coding``) loader.

Upstream row schema (``test`` split): ``question_id, category ("coding"), turns (list[str], the
fully formatted upstream prompt), question_title, public_test_cases (JSON str),
private_test_cases (JSON str or LCB compression), original_json {question_title,
question_content, platform, question_id, contest_id, contest_date, starter_code, difficulty,
metadata (JSON str with func_name)}, release_date, citation, task ("LCB_generation" |
"coding_completion"), livebench_release_date, livebench_removal_date, remainder, solution,
partial_solution``.

Both tasks are derived from LiveCodeBench problems and graded by LiveBench with LCB's runner
(``livebench/process_results/coding/utils.py``), so the test decoding is shared with
`maxk_jax.data.livecodebench`. What becomes what:

  prompt        <- original_json.question_content     starter_code <- original_json.starter_code
  tests         <- public + private test cases (stdin -> StdioTests, functional -> FunctionTests)
  code_prefix   <- partial_solution (``coding_completion`` only; prepended unless the candidate
                   already starts with it -- LiveBench's own rule)
  preamble      <- LCB import header
  metadata      <- task, upstream_prompt (= turns[0]), platform, dates, ...
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from maxk_jax.data.livecodebench import (DEFAULT_LIMITS, LCB_IMPORT_HEADER, new_row_tests, parse_date,
                                         to_iso)
from maxk_jax.data.problem import Limits, Problem
from maxk_jax.data.report import LoadReport
from maxk_jax.data.sources import progress, read_rows

HUB_NAME = "livebench/coding"
TASKS = ("LCB_generation", "coding_completion")


def load_livebench(path: str | None = None, split: str = "test", *, tasks: Sequence[str] = TASKS,
                   release_date: str | None = None, max_tests: int | None = None,
                   limits: Limits = DEFAULT_LIMITS) -> tuple[list[Problem], LoadReport]:
    """Load LiveBench coding problems (both LCB-derived tasks by default).

    Args:
      path: hub name (default ``livebench/coding``) or local file/directory in the upstream schema.
      split: upstream split (``test``).
      tasks: which LiveBench tasks to keep (subset of ``LCB_generation``, ``coding_completion``).
      release_date: optional ``YYYY-MM-DD``; keep questions live on that date
        (``livebench_release_date <= date`` and no ``livebench_removal_date <= date``).
      max_tests: keep at most this many tests (public first); None keeps all.
      limits: per-test limits (LiveBench uses LCB's 6 s timeout).
    Returns:
      (problems in upstream order, LoadReport).
    """
    unknown = set(tasks) - set(TASKS)
    if unknown or not tasks:
        raise ValueError(f"tasks must be a non-empty subset of {TASKS}, got {list(tasks)!r}")
    when = parse_date(release_date, "release_date") if release_date is not None else None
    if max_tests is not None and (isinstance(max_tests, bool) or not isinstance(max_tests, int) or max_tests < 1):
        raise ValueError(f"max_tests must be a positive int or None, got {max_tests!r}")
    source = path or HUB_NAME
    rows = read_rows(source, split=split)
    report = LoadReport("livebench", str(source), split,
                        params={"tasks": list(tasks), "release_date": release_date, "max_tests": max_tests})
    problems: list[Problem] = []
    seen: set[str] = set()
    for row in progress(rows, "livebench"):
        report.n_rows += 1
        qid = row.get("question_id") if isinstance(row, dict) else None
        orig = row.get("original_json") if isinstance(row, dict) else None
        if not isinstance(qid, str) or not qid.strip() or not isinstance(orig, dict) \
                or not isinstance(orig.get("question_content"), str) or not orig["question_content"].strip():
            report.skip("malformed_row", qid)
            continue
        task = row.get("task")
        if task not in TASKS:
            report.skip("unsupported_task", qid)
            continue
        if task not in tasks:
            report.skip("task_not_selected", qid)
            continue
        if when is not None:
            try:
                released = parse_date(row.get("livebench_release_date"), "livebench_release_date")
                removed = row.get("livebench_removal_date")
                removed = parse_date(removed, "livebench_removal_date") if removed not in (None, "") else None
            except ValueError:
                report.skip("malformed_row", qid)
                continue
            if released > when or (removed is not None and removed <= when):
                report.skip("not_live_on_release_date", qid)
                continue
        partial = row.get("partial_solution") or ""
        if task == "coding_completion" and not (isinstance(partial, str) and partial.strip()):
            report.skip("missing_partial_solution", qid)
            continue
        pid = f"livebench/{qid}"
        built = new_row_tests(row, orig.get("metadata"), orig.get("starter_code") or "", max_tests,
                              pid=pid, qid=qid, seen=seen, report=report)
        if built is None:
            continue
        tests, info = built
        turns = row.get("turns") or []
        upstream_prompt: Any = turns[0] if isinstance(turns, (list, tuple)) and turns else None
        problems.append(Problem(
            id=pid, source="livebench", prompt=orig["question_content"], tests=tests, limits=limits,
            starter_code=orig.get("starter_code") or "",
            code_prefix=partial if task == "coding_completion" else "",
            preamble=LCB_IMPORT_HEADER, difficulty=orig.get("difficulty"),
            metadata={"task": task, "question_title": row.get("question_title"),
                      "platform": orig.get("platform"), "contest_date": to_iso(orig.get("contest_date")),
                      "livebench_release_date": to_iso(row.get("livebench_release_date")),
                      **info,
                      "upstream_prompt": upstream_prompt if isinstance(upstream_prompt, str) else None}))
        report.n_kept += 1
    return problems, report.finalize(len(problems))
