"""LiveCodeBench (``livecodebench/code_generation_lite``) loader and the LCB test-case codec.

Upstream row schema (all strings): ``question_title, question_content, platform
("leetcode"|"codeforces"|"atcoder"), question_id, contest_id, contest_date (ISO),
starter_code, difficulty ("easy"|"medium"|"hard"), public_test_cases, private_test_cases,
metadata``.

* ``public_test_cases``: JSON list of ``{"input", "output", "testtype": "stdin"|"functional"}``.
* ``private_test_cases``: the same list, either as plain JSON or -- the upstream compression --
  ``base64( zlib( pickle( json_string ) ) )``. Unpickling untrusted bytes can execute code,
  but the upstream payload is only a pickled *str*; `decode_private_tests` therefore uses a
  restricted `pickle.Unpickler` whose ``find_class``/``persistent_load`` refuse everything (so
  no callable can ever be resolved) and then insists the result is a ``str``. Decompressed
  size is capped (`MAX_DECOMPRESSED_BYTES`) against zlib bombs.
* ``metadata``: JSON object; ``func_name`` names the method for functional (LeetCode) problems.

What becomes what:
  prompt        <- question_content          starter_code <- starter_code
  tests         <- public + private test cases (upstream order; LCB grades on both)
                   stdin      -> StdioTests(stdin=input, expected=output)
                   functional -> FunctionTests(entry_point=metadata.func_name,
                                 class_name="Solution" if the starter code defines it,
                                 args = one JSON value per input line, expected = JSON(output))
  preamble      <- LCB's import header (``from typing import *`` ...), which upstream prepends
                   to every candidate (LeetCode starters use ``List`` without importing it)
  difficulty    <- difficulty; metadata <- platform, contest_id, contest_date, title, ...
Release selection: ``version="release_v6"`` (cumulative v1..v6, the paper's "version 6");
``"v6"`` means only the problems added in v6. Upstream stores release N's new problems in
``test{N}.jsonl`` (``test.jsonl`` for v1); the official hub repo still ships a loading script that
``datasets>=4`` refuses to run, so for it the jsonl files are read directly via ``hf://`` URLs
(`hub_data_files`); other hub mirrors are read with ``load_dataset(name, version)``. Optional ``start_date``/``end_date`` filter on
``contest_date`` (inclusive, ``YYYY-MM-DD``).
"""
from __future__ import annotations

import base64
import binascii
import datetime as dt
import io
import json
import pickle
import re
import zlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from maxk_jax.data.problem import (FunctionCase, FunctionTests, Limits, Problem, StdioCase, StdioTests,
                                   Tests, check_json_value)
from maxk_jax.data.report import LoadReport
from maxk_jax.data.sources import hf_datasets, progress, read_rows

if TYPE_CHECKING:
    import datasets

HUB_NAME = "livecodebench/code_generation_lite"
DEFAULT_VERSION = "release_v6"
# LCB grades each test with a 6 s alarm (lcb_runner/evaluation/testing_util.py).
DEFAULT_LIMITS = Limits(cpu_s=6.0, wall_s=12.0, memory_mb=1024)
MAX_DECOMPRESSED_BYTES = 1 << 30

# The header LiveCodeBench prepends to every candidate before running it (testing_util.py).
LCB_IMPORT_HEADER = (
    "from string import *\nfrom re import *\nfrom datetime import *\nfrom collections import *\n"
    "from heapq import *\nfrom bisect import *\nfrom copy import *\nfrom math import *\n"
    "from random import *\nfrom statistics import *\nfrom itertools import *\nfrom functools import *\n"
    "from operator import *\nfrom io import *\nfrom sys import *\nfrom json import *\n"
    "from builtins import *\nfrom typing import *\nimport string\nimport re\nimport datetime\n"
    "import collections\nimport heapq\nimport bisect\nimport copy\nimport math\nimport random\n"
    "import statistics\nimport itertools\nimport functools\nimport operator\nimport io\nimport sys\n"
    "import json\nsys.setrecursionlimit(50000)\n"
)


class CaseDecodeError(ValueError):
    """An upstream test-case field cannot be decoded or parsed."""


# ----------------------------------------------------------------------------------------------
# Codec
# ----------------------------------------------------------------------------------------------
class _StrOnlyUnpickler(pickle.Unpickler):
    """Unpickler that cannot resolve any global or persistent id: only plain data survives."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"refusing to load global {module}.{name} from untrusted test data")

    def persistent_load(self, pid: Any) -> Any:
        raise pickle.UnpicklingError("refusing persistent id in untrusted test data")


def encode_private_tests(tests: Sequence[Mapping[str, Any]]) -> str:
    """The upstream compression: ``base64(zlib(pickle(json.dumps(tests))))`` as an ASCII str."""
    return base64.b64encode(zlib.compress(pickle.dumps(json.dumps(list(tests))))).decode("ascii")


def decode_private_tests(blob: str, *, max_bytes: int = MAX_DECOMPRESSED_BYTES) -> list[dict[str, Any]]:
    """Decode a ``private_test_cases`` field (plain JSON or the compressed form) to a list of dicts.

    Raises CaseDecodeError for bad base64, zlib, pickle (including any non-str payload or global
    reference), JSON, or an over-size payload.
    """
    if not isinstance(blob, str):
        raise CaseDecodeError(f"private_test_cases must be a str, got {type(blob).__name__}")
    text = blob.strip()
    if not text or text.startswith("["):  # base64 never contains '['; empty -> json error below
        return _parse_test_list(text, "private_test_cases")
    try:
        raw = base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError, ValueError) as e:
        raise CaseDecodeError(f"private_test_cases: invalid base64 ({e})") from e
    d = zlib.decompressobj()
    try:
        data = d.decompress(raw, max_bytes)
    except zlib.error as e:
        raise CaseDecodeError(f"private_test_cases: invalid zlib stream ({e})") from e
    if d.unconsumed_tail:
        raise CaseDecodeError(f"private_test_cases: decompressed payload exceeds {max_bytes} bytes")
    try:
        payload = _StrOnlyUnpickler(io.BytesIO(data)).load()
    except Exception as e:  # any unpickling failure of untrusted bytes is a data error
        raise CaseDecodeError(f"private_test_cases: rejected pickle payload ({e})") from e
    if not isinstance(payload, str):
        raise CaseDecodeError(f"private_test_cases: pickle payload must be a str, got {type(payload).__name__}")
    return _parse_test_list(payload, "private_test_cases")


def _load_json(text: Any, field: str, kind: type, what: str) -> Any:
    """``json.loads(text)``, which must be a ``kind`` (``what`` names it in the error);
    CaseDecodeError naming ``field`` otherwise."""
    try:
        value = json.loads(text)
    except (json.JSONDecodeError, TypeError) as e:
        raise CaseDecodeError(f"{field}: invalid JSON ({e})") from e
    if not isinstance(value, kind):
        raise CaseDecodeError(f"{field}: expected a JSON {what}, got {type(value).__name__}")
    return value


def _parse_test_list(text: str, field: str) -> list[dict[str, Any]]:
    tests = _load_json(text, field, list, "list")
    for i, t in enumerate(tests):
        if (not isinstance(t, dict) or not isinstance(t.get("input"), str)
                or not isinstance(t.get("output"), str) or t.get("testtype") not in ("stdin", "functional")):
            raise CaseDecodeError(f"{field}[{i}]: expected {{input: str, output: str, testtype: stdin|functional}}, "
                                f"got {str(t)[:120]}")
    return tests


def parse_public_tests(text: Any) -> list[dict[str, Any]]:
    """Parse a ``public_test_cases`` JSON string; CaseDecodeError on malformed input."""
    if not isinstance(text, str):
        raise CaseDecodeError(f"public_test_cases must be a str, got {type(text).__name__}")
    return _parse_test_list(text, "public_test_cases")


def parse_metadata(text: Any) -> dict[str, Any]:
    """Parse the ``metadata`` JSON string ('' -> {}); CaseDecodeError on malformed input."""
    if text is None or (isinstance(text, str) and not text.strip()):
        return {}
    if isinstance(text, dict):
        return text
    return _load_json(text, "metadata", dict, "object")


def build_lcb_tests(tests: Sequence[Mapping[str, Any]], func_name: str | None, starter_code: str) -> Tests:
    """Turn decoded LCB test dicts into `StdioTests` or `FunctionTests`.

    Raises CaseDecodeError (``.reason`` attribute set) for no tests, mixed test types, a
    functional problem without ``func_name``, or unparsable functional inputs/outputs.
    """
    if not tests:
        raise _reason(CaseDecodeError("no test cases"), "no_tests")
    kinds = {t["testtype"] for t in tests}
    if len(kinds) > 1:
        raise _reason(CaseDecodeError(f"mixed test types {sorted(kinds)}"), "mixed_testtypes")
    if kinds == {"stdin"}:
        return StdioTests(tuple(StdioCase(t["input"], t["output"]) for t in tests))
    if not func_name or not isinstance(func_name, str) or not func_name.isidentifier():
        raise _reason(CaseDecodeError(f"functional problem without a valid metadata.func_name ({func_name!r})"),
                      "missing_func_name")
    cases = []
    for i, t in enumerate(tests):
        try:
            args = [json.loads(line) for line in t["input"].split("\n")]
            expected = json.loads(t["output"])
            cases.append(FunctionCase(tuple(check_json_value(args)), check_json_value(expected)))
        except (json.JSONDecodeError, ValueError) as e:
            raise _reason(CaseDecodeError(f"functional test {i}: {e}"), "unparsable_tests") from e
    class_name = "Solution" if re.search(r"^\s*class\s+Solution\b", starter_code or "", re.M) else None
    return FunctionTests(func_name, tuple(cases), class_name)


def lcb_row_tests(row: Mapping[str, Any], meta_source: Any, starter_code: str,
                  max_tests: int | None) -> tuple[Tests, bool, dict[str, Any]]:
    """Decode a row's public + private LCB test cases and build its tests (capped at `max_tests`).

    Shared by the LiveCodeBench and LiveBench loaders (same upstream encodings).
    Returns (tests, capped, info) with info = {"func_name", "n_public", "n_private"} for the
    Problem metadata. Raises CaseDecodeError like `build_lcb_tests`.
    """
    public = parse_public_tests(row.get("public_test_cases"))
    private = decode_private_tests(row.get("private_test_cases"))
    meta = parse_metadata(meta_source)
    all_tests = public + private
    capped = max_tests is not None and len(all_tests) > max_tests
    if capped:
        all_tests = all_tests[:max_tests]
    tests = build_lcb_tests(all_tests, meta.get("func_name"), starter_code or "")
    return tests, capped, {"func_name": meta.get("func_name"), "n_public": len(public),
                           "n_private": len(private)}


def _reason(err: CaseDecodeError, reason: str) -> CaseDecodeError:
    err.reason = reason  # type: ignore[attr-defined]
    return err


def reason_of(err: CaseDecodeError) -> str:
    """The skip reason attached to a CaseDecodeError (``unparsable_tests`` by default)."""
    return getattr(err, "reason", "unparsable_tests")


def new_row_tests(row: Mapping[str, Any], meta_source: Any, starter_code: str, max_tests: int | None, *,
                  pid: str, qid: Any, seen: set[str],
                  report: LoadReport) -> tuple[Tests, dict[str, Any]] | None:
    """`lcb_row_tests` of a row that is to become Problem `pid`, with the loaders' bookkeeping.

    A row whose cases cannot be decoded is skipped under its reason, a `pid` already in `seen`
    as ``duplicate_id`` (both recorded in `report` under `qid`; None is returned). Otherwise `pid`
    joins `seen`, a row capped at `max_tests` counts as ``tests_capped``, and (tests, info) is
    returned (info as `lcb_row_tests`).
    """
    try:
        tests, capped, info = lcb_row_tests(row, meta_source, starter_code, max_tests)
    except CaseDecodeError as e:
        report.skip(reason_of(e), qid)
        return None
    if not report.keep_new(pid, seen, qid):
        return None
    if capped:
        report.count("tests_capped")
    return tests, info


# ----------------------------------------------------------------------------------------------
# Release / date selection
# ----------------------------------------------------------------------------------------------
def version_file_stems(version: str) -> list[str] | None:
    """Upstream jsonl stems for a release tag (None = every file).

    ``release_vN`` -> test, test2..testN; ``vN`` -> only the Nth file; ``vN_vM`` -> Nth..Mth;
    ``release_latest`` -> all. ValueError for anything else.
    """
    def stem(i: int) -> str:
        return "test" if i == 1 else f"test{i}"

    if version == "release_latest":
        return None
    if m := re.fullmatch(r"release_v(\d+)", version):
        return [stem(i) for i in range(1, int(m.group(1)) + 1)]
    if m := re.fullmatch(r"v(\d+)", version):
        return [stem(int(m.group(1)))]
    if m := re.fullmatch(r"v(\d+)_v(\d+)", version):
        return [stem(i) for i in range(int(m.group(1)), int(m.group(2)) + 1)]
    raise ValueError(f"unknown LiveCodeBench version {version!r}; use release_vN, vN, vN_vM or release_latest")


def _file_selector(version: str):
    stems = version_file_stems(version)

    def select(files: list[Path]) -> list[Path]:
        if stems is None:
            return files
        wanted = [f for f in files if f.name.split(".")[0] in stems]
        # A directory that does not follow the upstream test{N}.jsonl naming is read entirely.
        looks_upstream = all(re.fullmatch(r"test\d*", f.name.split(".")[0]) for f in files)
        return wanted if looks_upstream else files

    return select


def hub_data_files(version: str, repo: str = HUB_NAME) -> list[str]:
    """``hf://`` URLs of the upstream jsonl files of a release (bypassing the repo's loading script)."""
    stems = version_file_stems(version)
    names = ["test*.jsonl"] if stems is None else [f"{s}.jsonl" for s in stems]
    return [f"hf://datasets/{repo}/{n}" for n in names]


def _official_hub_rows(version: str) -> datasets.Dataset:
    # The official repo still ships a loading script, which datasets>=4 refuses to run
    # ("Dataset scripts are no longer supported"), so its raw jsonl files are read directly.
    files = hub_data_files(version)
    hub = hf_datasets()   # a missing package says so, not "offline?"
    try:
        return hub.load_dataset("json", data_files=files, split="train")
    except Exception as e:  # network/cache failures: re-raise with the offline hint
        raise RuntimeError(f"could not read {files} from the hub: {e}. Offline? Download the test*.jsonl files "
                           f"of {HUB_NAME} and pass their directory as path.") from e


def parse_date(value: Any, name: str) -> dt.date:
    """Parse an ISO date/datetime (str, date or datetime) to a date; ValueError names `name`."""
    if isinstance(value, dt.datetime):
        return value.date()
    if isinstance(value, dt.date):
        return value
    if isinstance(value, str):
        try:
            return dt.datetime.fromisoformat(value.strip().replace("Z", "+00:00")).date()
        except ValueError:
            pass
    raise ValueError(f"{name} must be an ISO date (YYYY-MM-DD...), got {value!r}")


# ----------------------------------------------------------------------------------------------
# Loader
# ----------------------------------------------------------------------------------------------
def load_livecodebench(path: str | None = None, split: str = "test", *, version: str = DEFAULT_VERSION,
                       start_date: str | None = None, end_date: str | None = None,
                       platforms: Sequence[str] | None = None, max_tests: int | None = None,
                       limits: Limits = DEFAULT_LIMITS) -> tuple[list[Problem], LoadReport]:
    """Load LiveCodeBench code-generation problems.

    Args:
      path: hub name (default ``livecodebench/code_generation_lite``) or local file/directory in
        the upstream schema (a directory of ``test*.jsonl`` files is narrowed to `version`).
      split: upstream split (only ``test`` exists upstream).
      version: release tag, default ``release_v6``.
      start_date, end_date: optional inclusive ``contest_date`` window (``YYYY-MM-DD``).
      platforms: optional subset of ``leetcode``/``codeforces``/``atcoder``.
      max_tests: keep at most this many tests (public first, then private); None keeps all.
      limits: per-test limits (upstream has none; LCB uses a 6 s timeout).
    Returns:
      (problems in upstream order, LoadReport).
    """
    source = path or HUB_NAME
    version_file_stems(version)  # validate early
    lo = parse_date(start_date, "start_date") if start_date is not None else None
    hi = parse_date(end_date, "end_date") if end_date is not None else None
    if max_tests is not None and (isinstance(max_tests, bool) or not isinstance(max_tests, int) or max_tests < 1):
        raise ValueError(f"max_tests must be a positive int or None, got {max_tests!r}")
    if source == HUB_NAME:
        rows = _official_hub_rows(version)
    else:
        rows = read_rows(source, split=split, config=version, select_files=_file_selector(version))
    report = LoadReport("livecodebench", str(source), split,
                        params={"version": version, "start_date": start_date, "end_date": end_date,
                                "platforms": list(platforms) if platforms else None, "max_tests": max_tests})
    problems: list[Problem] = []
    seen: set[str] = set()
    for row in progress(rows, "livecodebench"):
        report.n_rows += 1
        qid = row.get("question_id") if isinstance(row, dict) else None
        if not isinstance(qid, str) or not qid.strip() or not isinstance(row.get("question_content"), str) \
                or not row["question_content"].strip():
            report.skip("malformed_row", qid)
            continue
        if platforms is not None and row.get("platform") not in platforms:
            report.skip("platform_not_selected", qid)
            continue
        if lo is not None or hi is not None:
            try:
                date = parse_date(row.get("contest_date"), "contest_date")
            except ValueError:
                report.skip("malformed_row", qid)
                continue
            if (lo is not None and date < lo) or (hi is not None and date > hi):
                report.skip("outside_date_range", qid)
                continue
        pid = f"livecodebench/{qid}"
        built = new_row_tests(row, row.get("metadata"), row.get("starter_code") or "", max_tests,
                              pid=pid, qid=qid, seen=seen, report=report)
        if built is None:
            continue
        tests, info = built
        problems.append(Problem(
            id=pid, source="livecodebench", prompt=row["question_content"], tests=tests, limits=limits,
            starter_code=row.get("starter_code") or "", preamble=LCB_IMPORT_HEADER,
            difficulty=row.get("difficulty"),
            metadata={"question_title": row.get("question_title"), "platform": row.get("platform"),
                      "contest_id": row.get("contest_id"), "contest_date": to_iso(row.get("contest_date")),
                      **info}))
        report.n_kept += 1
    return problems, report.finalize(len(problems))


def to_iso(value: Any) -> str | None:
    """ISO string of a date/datetime (str passes through, None stays None)."""
    if value is None:
        return None
    if isinstance(value, (dt.date, dt.datetime)):
        return value.isoformat()
    return str(value)
