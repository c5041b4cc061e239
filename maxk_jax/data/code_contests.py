"""CodeContests (``deepmind/code_contests``) loader with the max@k paper's processing.

Upstream row schema (``contest_problem.proto`` as parquet): ``name, description,
public_tests / private_tests / generated_tests {input: list[str], output: list[str]},
source (int), difficulty (int enum), solutions, incorrect_solutions, cf_contest_id, cf_index,
cf_points, cf_rating, cf_tags, is_description_translated, untranslated_description,
time_limit {seconds, nanos}, memory_limit_bytes, input_file, output_file``.

Difficulty enum (proto ``ContestProblem.Difficulty``): 0 UNKNOWN_DIFFICULTY, 1 EASY, 2 MEDIUM,
3 HARD, 4 HARDER, 5 HARDEST, 6 EXTERNAL, then letter grades 7 A, 8 B, ... (Codeforces problems
use the letters). Different sources grade differently. The paper keeps "complexity <= 3", i.e.
UNKNOWN_DIFFICULTY, EASY, MEDIUM and HARD -- in practice CodeChef / HackerEarth / AtCoder /
Aizu style gradings and ungraded problems; all Codeforces letter-graded problems (>= 7) go.
(The HF card numbers the letters without the proto's gap at 18; values 0..3 agree either way.)

Processing, in order (each dropped row is counted under the first failing reason):
  malformed_row          missing name/description, non-int difficulty
  difficulty_above_max   difficulty > max_difficulty (3)
  file_io                input_file/output_file set (program must read/write named files)
  malformed_tests        a test group whose input/output lists differ in length or are not strings
  no_tests               no test left in the selected groups
  prompt_too_long        token_count(description) > max_prompt_tokens (512); when no
                         token_count callable is given the filter is NOT applied and the report
                         says so (``notes`` and ``info["token_filter_unchecked"]``)
  duplicate_id           a second row with the same name
Then the kept problems are sorted by id and split at random with ``numpy.random.default_rng(seed)``
into test (`test_size`, default 276 as in the paper) and train (the rest; the paper has 2,490).

Reward tests: the groups in `test_groups` (default public, private, generated) are concatenated
in that order, exact duplicate (input, output) pairs removed, and the first `max_tests`
(default 32) kept -- so public and private tests always come first. Note that CodeContests has no
checkers: problems accepting several correct outputs are judged by output comparison only.
Limits: time_limit (seconds + nanos) * time_limit_scale as CPU seconds, memory_limit_bytes as
MiB; rows without them get `default_limits`.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from maxk_jax.data.problem import Limits, Problem, StdioCase, StdioTests
from maxk_jax.data.report import LoadReport
from maxk_jax.data.sources import progress, read_rows

HUB_NAME = "deepmind/code_contests"
TEST_GROUPS = ("public", "private", "generated")
DIFFICULTY_NAMES = {0: "UNKNOWN_DIFFICULTY", 1: "EASY", 2: "MEDIUM", 3: "HARD", 4: "HARDER", 5: "HARDEST",
                    6: "EXTERNAL", **{7 + i: c for i, c in enumerate("ABCDEFGHIJK")},
                    **{19 + i: c for i, c in enumerate("LMNOPQRSTUV")}}
DEFAULT_LIMITS = Limits(cpu_s=2.0, wall_s=5.0, memory_mb=256)
_USED_COLUMNS = ("name", "description", "public_tests", "private_tests", "generated_tests", "source", "difficulty",
                 "cf_contest_id", "cf_index", "cf_rating", "cf_tags", "time_limit", "memory_limit_bytes",
                 "input_file", "output_file")


class _RowError(ValueError):
    def __init__(self, reason: str, message: str = ""):
        super().__init__(message or reason)
        self.reason = reason


def _difficulty(value: Any) -> int:
    if isinstance(value, bool):
        raise _RowError("malformed_row", f"difficulty {value!r}")
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, str):  # tolerate enum names in hand-made mirrors
        by_name = {v: k for k, v in DIFFICULTY_NAMES.items()}
        if value.strip().upper() in by_name:
            return by_name[value.strip().upper()]
    raise _RowError("malformed_row", f"difficulty {value!r} is not an int enum value")


def _group(row: Mapping[str, Any], name: str) -> list[tuple[str, str]]:
    field = row.get(f"{name}_tests")
    if field is None:
        return []
    if not isinstance(field, Mapping):
        raise _RowError("malformed_tests", f"{name}_tests is not a {{input, output}} struct")
    inputs, outputs = field.get("input") or [], field.get("output") or []
    if len(inputs) != len(outputs):
        raise _RowError("malformed_tests", f"{name}_tests: {len(inputs)} inputs vs {len(outputs)} outputs")
    if not all(isinstance(x, str) for x in [*inputs, *outputs]):
        raise _RowError("malformed_tests", f"{name}_tests: non-string input/output")
    return list(zip(inputs, outputs))


def select_tests(row: Mapping[str, Any], groups: Sequence[str], max_tests: int | None) -> tuple[list[tuple[str, str]], bool]:
    """Concatenate test groups in order, drop exact duplicate pairs, cap; returns (tests, capped)."""
    seen, tests = set(), []
    for g in groups:
        for pair in _group(row, g):
            if pair not in seen:
                seen.add(pair)
                tests.append(pair)
    capped = max_tests is not None and len(tests) > max_tests
    return (tests[:max_tests] if capped else tests), capped


def _limits(row: Mapping[str, Any], scale: float, default: Limits) -> tuple[Limits, bool]:
    tl, mem = row.get("time_limit"), row.get("memory_limit_bytes")
    seconds = None
    if isinstance(tl, Mapping):
        seconds = float(tl.get("seconds") or 0) + float(tl.get("nanos") or 0) / 1e9
    if not seconds or not mem or mem <= 0:
        return default, True
    return Limits.from_time_memory(seconds * scale, mem / 2**20), False


def split_train_test(problems: Sequence[Problem], test_size: int, seed: int) -> tuple[list[Problem], list[Problem]]:
    """Deterministic random split: sort by id, permute with ``default_rng(seed)``, first `test_size` -> test."""
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ValueError(f"seed must be an int, got {seed!r}")
    if isinstance(test_size, bool) or not isinstance(test_size, int) or not 0 <= test_size <= len(problems):
        raise ValueError(f"test_size must be an int in [0, {len(problems)}] (kept problems), got {test_size!r}")
    ordered = sorted(problems, key=lambda p: p.id)
    perm = np.random.default_rng(seed).permutation(len(ordered))
    test_idx = set(perm[:test_size].tolist())
    train = [p for i, p in enumerate(ordered) if i not in test_idx]
    test = [ordered[i] for i in sorted(test_idx)]
    return train, test


def load_code_contests(path: str | None = None, split: str = "train", *,
                       upstream_splits: Sequence[str] = ("train",), max_difficulty: int = 3,
                       max_prompt_tokens: int | None = 512,
                       token_count: Callable[[str], int] | None = None,
                       test_size: int = 276, seed: int = 0,
                       test_groups: Sequence[str] = TEST_GROUPS, max_tests: int | None = 32,
                       time_limit_scale: float = 1.0,
                       default_limits: Limits = DEFAULT_LIMITS) -> tuple[list[Problem], LoadReport]:
    """Load CodeContests, filter as in the paper, and return our `split` of it.

    Args:
      path: hub name (default ``deepmind/code_contests``) or local parquet/jsonl file or directory.
      split: ``"train"`` | ``"test"`` (our random split) | ``"all"`` (every kept problem, id order).
      upstream_splits: upstream splits pooled before filtering (``train``/``valid``/``test``).
      max_difficulty: keep ``difficulty <= max_difficulty`` (paper: 3).
      max_prompt_tokens: drop statements longer than this many tokens (paper: 512); None disables.
      token_count: callable text -> number of tokens (e.g. `maxk_jax.data.prompts.make_token_counter`).
      test_size: size of our test split (paper: 276).
      seed: seed of the split permutation.
      test_groups: which upstream groups become reward tests, in order.
      max_tests: cap on reward tests per problem (None = all).
      time_limit_scale: multiply upstream time limits (they are set for C++).
      default_limits: limits for rows without time/memory limits.
    Returns:
      (problems, LoadReport) -- the report counts the pooled upstream rows.
    """
    _check_load_args(split, upstream_splits=upstream_splits, max_difficulty=max_difficulty,
                     max_prompt_tokens=max_prompt_tokens, seed=seed, test_groups=test_groups,
                     max_tests=max_tests, time_limit_scale=time_limit_scale)
    source = path or HUB_NAME
    report = LoadReport("code_contests", str(source), split, params={
        "upstream_splits": list(upstream_splits), "max_difficulty": max_difficulty,
        "max_prompt_tokens": max_prompt_tokens, "token_count": token_count is not None, "test_size": test_size,
        "seed": seed, "test_groups": list(test_groups), "max_tests": max_tests,
        "time_limit_scale": time_limit_scale})
    kept: list[Problem] = []
    seen: set[str] = set()
    unchecked = 0
    for up in upstream_splits:
        rows = read_rows(source, split=up)
        # Skip decoding the (large) solutions columns: only the fields used below are read.
        rows = rows.select_columns([c for c in _USED_COLUMNS if c in rows.column_names])
        for row in progress(rows, f"code_contests[{up}]"):
            report.n_rows += 1
            name = row.get("name") if isinstance(row, dict) else None
            try:
                pid, difficulty, tests, capped, checked = _screen_row(
                    row, name, seen, max_difficulty=max_difficulty, test_groups=test_groups, max_tests=max_tests,
                    max_prompt_tokens=max_prompt_tokens, token_count=token_count)
            except _RowError as e:
                report.skip(e.reason, name)
                continue
            unchecked += not checked
            seen.add(pid)
            limits, defaulted = _limits(row, time_limit_scale, default_limits)
            if capped:
                report.count("tests_capped")
            if defaulted:
                report.count("default_limits")
            kept.append(_problem(row, pid, name, up, difficulty, tests, limits))
            report.n_kept += 1
    if max_prompt_tokens is not None and token_count is None:
        report.count("token_filter_unchecked", unchecked)
        report.note(f"max_prompt_tokens={max_prompt_tokens} filter NOT applied (no token_count callable "
                    f"given): {unchecked} problems kept unchecked")
    if split == "all":
        out = sorted(kept, key=lambda p: p.id)
    else:
        train, test = split_train_test(kept, test_size, seed)
        report.count("split_train", len(train))
        report.count("split_test", len(test))
        out = train if split == "train" else test
    return out, report.finalize(len(out))


def _check_load_args(split: str, *, upstream_splits: Sequence[str], max_difficulty: int,
                     max_prompt_tokens: int | None, seed: int, test_groups: Sequence[str], max_tests: int | None,
                     time_limit_scale: float) -> None:
    """`load_code_contests`'s argument checks: one clear ValueError naming the bad value, before any read."""
    if split not in ("train", "test", "all"):
        raise ValueError(f"code_contests split must be 'train', 'test' or 'all', got {split!r}")
    bad_groups = [g for g in test_groups if g not in TEST_GROUPS]
    if bad_groups or not test_groups:
        raise ValueError(f"test_groups must be a non-empty subset of {TEST_GROUPS}, got {list(test_groups)!r}")
    if max_tests is not None and (isinstance(max_tests, bool) or not isinstance(max_tests, int) or max_tests < 1):
        raise ValueError(f"max_tests must be a positive int or None, got {max_tests!r}")
    if max_prompt_tokens is not None and (not isinstance(max_prompt_tokens, int) or max_prompt_tokens < 1):
        raise ValueError(f"max_prompt_tokens must be a positive int or None, got {max_prompt_tokens!r}")
    if not (isinstance(time_limit_scale, (int, float)) and time_limit_scale > 0):
        raise ValueError(f"time_limit_scale must be > 0, got {time_limit_scale!r}")
    if isinstance(max_difficulty, bool) or not isinstance(max_difficulty, int):
        raise ValueError(f"max_difficulty must be an int enum value, got {max_difficulty!r}")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ValueError(f"seed must be an int (the split is deterministic in it), got {seed!r}")
    if not upstream_splits:
        raise ValueError("upstream_splits must name at least one upstream split")


def _screen_row(row: Any, name: Any, seen: set[str], *, max_difficulty: int, test_groups: Sequence[str],
                max_tests: int | None, max_prompt_tokens: int | None,
                token_count: Callable[[str], int] | None) -> tuple[str, int, list, bool, bool]:
    """The paper's filters on one upstream row: (id, difficulty, reward tests, tests capped, prompt length
    checked), or `_RowError` naming why the row is skipped."""
    if not isinstance(name, str) or not name.strip() or not isinstance(row.get("description"), str) \
            or not row["description"].strip():
        raise _RowError("malformed_row")
    difficulty = _difficulty(row.get("difficulty"))
    if difficulty > max_difficulty:
        raise _RowError("difficulty_above_max")
    if (row.get("input_file") or "").strip() or (row.get("output_file") or "").strip():
        raise _RowError("file_io")
    tests, capped = select_tests(row, test_groups, max_tests)
    if not tests:
        raise _RowError("no_tests")
    checked = True
    if max_prompt_tokens is not None:
        if token_count is None:
            checked = False
        elif token_count(row["description"]) > max_prompt_tokens:
            raise _RowError("prompt_too_long")
    pid = f"code_contests/{name.strip()}"
    if pid in seen:
        raise _RowError("duplicate_id")
    return pid, difficulty, tests, capped, checked


def _problem(row: Mapping[str, Any], pid: str, name: str, upstream_split: str, difficulty: int,
             tests: Sequence[tuple[str, str]], limits: Limits) -> Problem:
    """A kept row as a `Problem` (stdin/stdout tests; upstream metadata kept for the record)."""
    return Problem(
        id=pid, source="code_contests", prompt=row["description"],
        tests=StdioTests(tuple(StdioCase(i, o) for i, o in tests)), limits=limits,
        difficulty=difficulty,
        metadata={"name": name, "upstream_split": upstream_split, "source": _int_or_none(row.get("source")),
                  "difficulty_name": DIFFICULTY_NAMES.get(difficulty),
                  "cf_contest_id": _int_or_none(row.get("cf_contest_id")),
                  "cf_index": row.get("cf_index") or None, "cf_rating": _int_or_none(row.get("cf_rating")),
                  "cf_tags": list(row.get("cf_tags") or []),
                  "n_upstream_tests": {g: _group_size(row, g) for g in TEST_GROUPS}})


def _group_size(row: Mapping[str, Any], name: str) -> int | None:
    try:
        return len(_group(row, name))
    except _RowError:
        return None


def _int_or_none(value: Any) -> int | None:
    if value is None or isinstance(value, bool):
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        return None
