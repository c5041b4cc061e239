"""CodeForces (``open-r1/codeforces``, ``test`` split) loader with CodeContests overlap removed.

Upstream row schema: ``id ("<contest>/<index>"), aliases (list of other ids of the same problem),
contest_id, contest_name, contest_type, contest_start, contest_start_year, index, time_limit
(float s), memory_limit (float MB), title, description, input_format, output_format,
interaction_format, note, examples [{input, output}], editorial, rating, tags, testset_size,
official_tests [{input, output}], official_tests_complete, input_mode, generated_checker,
executable, generated_tests``.

What becomes what:
  prompt  <- "{title}\\n\\n{description}\\n\\nInput\\n{input_format}\\n\\nOutput\\n{output_format}"
             + the examples + the note (the usual Codeforces statement layout)
  tests   <- official_tests (and/or examples, option `test_groups`), exact duplicates removed,
             optional cap `max_tests`
  limits  <- time_limit (s) * time_limit_scale, memory_limit (MB)
  difficulty <- rating

Rows dropped (counted, first failing reason): ``malformed_row`` (no id/description),
``interactive`` (interaction_format set: needs an interactor), ``file_io`` (input_mode other
than stdio), ``needs_checker`` (generated_checker set: several outputs are correct and our
judge only compares output; keep them with ``keep_checker_problems=True``), ``not_executable``
(executable is False), ``malformed_tests``, ``no_tests``, ``overlap_code_contests_id``,
``overlap_code_contests_name``, ``duplicate_id``.

CodeContests overlap rule: a CodeForces problem is removed when (a) its ``id`` or any
``aliases`` entry equals ``f"{cf_contest_id}/{cf_index}"`` of a CodeContests problem, or (b) its
normalised title equals the normalised title of a CodeContests Codeforces problem (the name
without its ``"1548_A. "`` prefix; normalisation = lower-case, only letters and digits).
Rule (b) catches renumbered mirrors and may also remove a few distinct problems with identical
titles -- erring towards decontamination. The reference set is read from `overlap_with`
(hub name or path) over `overlap_splits`; with ``overlap_with=None`` the removal is skipped
and the report says so.
"""
from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

from maxk_jax.data.problem import Limits, Problem, StdioCase, StdioTests
from maxk_jax.data.report import LoadReport
from maxk_jax.data.sources import progress, read_rows

HUB_NAME = "open-r1/codeforces"
CODE_CONTESTS_HUB = "deepmind/code_contests"
TEST_GROUPS = ("official", "examples")
DEFAULT_LIMITS = Limits(cpu_s=2.0, wall_s=5.0, memory_mb=256)
_CC_NAME_PREFIX = re.compile(r"^\s*\d+_[A-Za-z]\d*\.\s*")


def normalize_title(title: str) -> str:
    """Lower-case letters and digits only (``"Web of Lies!"`` -> ``"weboflies"``)."""
    return "".join(ch for ch in title.lower() if ch.isalnum())


def code_contests_keys(source: str, splits: Sequence[str]) -> tuple[set[str], set[str]]:
    """``({"contest/index"}, {normalised titles})`` of the Codeforces problems in CodeContests."""
    ids, titles = set(), set()
    for split in splits:
        cols = ["name", "cf_contest_id", "cf_index"]
        rows = read_rows(source, split=split, columns=cols)
        rows = rows.select_columns([c for c in cols if c in rows.column_names])
        for row in progress(rows, f"code_contests overlap [{split}]"):
            cid, idx, name = row.get("cf_contest_id"), row.get("cf_index"), row.get("name")
            if not cid or not idx:
                continue
            ids.add(f"{int(cid)}/{str(idx).strip()}")
            if isinstance(name, str) and _CC_NAME_PREFIX.match(name):
                titles.add(normalize_title(_CC_NAME_PREFIX.sub("", name)))
    titles.discard("")
    return ids, titles


def format_statement(row: Mapping[str, Any]) -> str:
    """The problem text shown to the model, in the usual Codeforces layout."""
    parts = [row.get("title") or "", row["description"]]
    if row.get("input_format"):
        parts.append("Input\n" + row["input_format"])
    if row.get("output_format"):
        parts.append("Output\n" + row["output_format"])
    for i, ex in enumerate(row.get("examples") or [], 1):
        if isinstance(ex, Mapping):
            parts.append(f"Example {i}\nInput\n{ex.get('input', '')}\nOutput\n{ex.get('output', '')}")
    if row.get("note"):
        parts.append("Note\n" + row["note"])
    return "\n\n".join(p.strip("\n") for p in parts if p)


def _tests(row: Mapping[str, Any], groups: Sequence[str], max_tests: int | None) -> tuple[list[tuple[str, str]], bool]:
    seen, out = set(), []
    for g in groups:
        items = row.get("official_tests" if g == "official" else "examples") or []
        for t in items:
            if not isinstance(t, Mapping) or not isinstance(t.get("input"), str) or not isinstance(t.get("output"), str):
                raise ValueError("malformed_tests")
            pair = (t["input"], t["output"])
            if pair not in seen:
                seen.add(pair)
                out.append(pair)
    capped = max_tests is not None and len(out) > max_tests
    return (out[:max_tests] if capped else out), capped


def load_codeforces(path: str | None = None, split: str = "test", *,
                    overlap_with: str | None = CODE_CONTESTS_HUB,
                    overlap_splits: Sequence[str] = ("train", "valid", "test"),
                    test_groups: Sequence[str] = ("official",), max_tests: int | None = None,
                    keep_checker_problems: bool = False, time_limit_scale: float = 1.0,
                    default_limits: Limits = DEFAULT_LIMITS) -> tuple[list[Problem], LoadReport]:
    """Load CodeForces problems minus the CodeContests overlap.

    Args:
      path: hub name (default ``open-r1/codeforces``) or local file/directory in its schema.
      split: upstream split (the paper evaluates on ``test``).
      overlap_with: CodeContests hub name or local path for the overlap set; None skips removal.
      overlap_splits: CodeContests splits forming the overlap set.
      test_groups: ``official`` and/or ``examples`` tests, in order.
      max_tests: cap on tests per problem (None = all).
      keep_checker_problems: keep problems that have a generated checker (judged by comparison).
      time_limit_scale: multiply upstream time limits.
      default_limits: limits for rows without time/memory limits.
    Returns:
      (problems in upstream order, LoadReport with ``overlap_*`` skip counts).
    """
    bad = [g for g in test_groups if g not in TEST_GROUPS]
    if bad or not test_groups:
        raise ValueError(f"test_groups must be a non-empty subset of {TEST_GROUPS}, got {list(test_groups)!r}")
    if max_tests is not None and (isinstance(max_tests, bool) or not isinstance(max_tests, int) or max_tests < 1):
        raise ValueError(f"max_tests must be a positive int or None, got {max_tests!r}")
    if not (isinstance(time_limit_scale, (int, float)) and time_limit_scale > 0):
        raise ValueError(f"time_limit_scale must be > 0, got {time_limit_scale!r}")
    source = path or HUB_NAME
    report = LoadReport("codeforces", str(source), split, params={
        "overlap_with": overlap_with, "overlap_splits": list(overlap_splits), "test_groups": list(test_groups),
        "max_tests": max_tests, "keep_checker_problems": keep_checker_problems,
        "time_limit_scale": time_limit_scale})
    if overlap_with is None:
        cc_ids, cc_titles = set(), set()
        report.note("CodeContests overlap removal SKIPPED (overlap_with=None)")
    else:
        cc_ids, cc_titles = code_contests_keys(overlap_with, overlap_splits)
        report.count("code_contests_reference_ids", len(cc_ids))
    rows = read_rows(source, split=split)
    problems: list[Problem] = []
    seen: set[str] = set()
    for row in progress(rows, "codeforces"):
        report.n_rows += 1
        pid_up = row.get("id") if isinstance(row, dict) else None
        reason = _format_skip(row, pid_up, keep_checker_problems)
        if reason is None:
            try:
                tests, capped = _tests(row, test_groups, max_tests)
            except ValueError:
                reason = "malformed_tests"
            else:
                reason = "no_tests" if not tests else _overlap(row, pid_up, cc_ids, cc_titles)
        if reason is not None:
            report.skip(reason, pid_up)
            continue
        pid = f"codeforces/{pid_up.strip()}"
        if not report.keep_new(pid, seen, pid_up):
            continue
        if capped:
            report.count("tests_capped")
        if not row.get("official_tests_complete", True):
            report.count("official_tests_incomplete")
        limits, defaulted = _limits(row, time_limit_scale, default_limits)
        if defaulted:
            report.count("default_limits")
        problems.append(_problem(row, pid, tests, limits))
        report.n_kept += 1
    removed = report.skipped["overlap_code_contests_id"] + report.skipped["overlap_code_contests_name"]
    report.count("overlap_removed", removed)
    return problems, report.finalize(len(problems))


def _format_skip(row: Any, pid_up: Any, keep_checker_problems: bool) -> str | None:
    """Why a row cannot be judged by stdin/stdout comparison (the skip reason), or None when it can."""
    if not isinstance(pid_up, str) or not pid_up.strip() or not isinstance(row.get("description"), str) \
            or not row["description"].strip():
        return "malformed_row"
    if (row.get("interaction_format") or "").strip():
        return "interactive"
    if row.get("input_mode") not in (None, "", "stdio"):
        return "file_io"
    if (row.get("generated_checker") or "").strip() and not keep_checker_problems:
        return "needs_checker"
    if row.get("executable") is False:
        return "not_executable"
    return None


def _overlap(row: Mapping[str, Any], pid_up: str, cc_ids: set[str], cc_titles: set[str]) -> str | None:
    """Whether a row is a CodeContests problem (by id / alias, else by normalised title), as a skip reason."""
    keys = {pid_up.strip(), *[a.strip() for a in (row.get("aliases") or []) if isinstance(a, str)]}
    if keys & cc_ids:
        return "overlap_code_contests_id"
    if normalize_title(row.get("title") or "") in cc_titles:
        return "overlap_code_contests_name"
    return None


def _limits(row: Mapping[str, Any], scale: float, default: Limits) -> tuple[Limits, bool]:
    """The row's limits (time scaled by `scale`), or (`default`, True) when it gives none."""
    tl, ml = row.get("time_limit"), row.get("memory_limit")
    if tl and ml and tl > 0 and ml > 0:
        return Limits.from_time_memory(float(tl) * scale, float(ml)), False
    return default, True


def _problem(row: Mapping[str, Any], pid: str, tests: Sequence[tuple[str, str]], limits: Limits) -> Problem:
    """A kept row as a `Problem` (stdin/stdout tests, the statement formatted, upstream metadata)."""
    return Problem(
        id=pid, source="codeforces", prompt=format_statement(row),
        tests=StdioTests(tuple(StdioCase(i, o) for i, o in tests)), limits=limits,
        difficulty=_rating(row.get("rating")),
        metadata={"contest_id": row.get("contest_id"), "index": row.get("index"), "title": row.get("title"),
                  "aliases": list(row.get("aliases") or []), "tags": list(row.get("tags") or []),
                  "official_tests_complete": row.get("official_tests_complete"),
                  "has_checker": bool((row.get("generated_checker") or "").strip())})


def _rating(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return int(value)
