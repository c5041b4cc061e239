"""LiveCodeBench: private-test codec (round trip, restricted unpickling), loader on upstream-schema files."""
import base64
import json
import pickle
import subprocess
import sys
import zlib

import pytest

from maxk_jax.data.livecodebench import (LCB_IMPORT_HEADER, CaseDecodeError, decode_private_tests,
                                         encode_private_tests, load_livecodebench, new_row_tests,
                                         parse_metadata, parse_public_tests, version_file_stems)
from maxk_jax.data.problem import FunctionTests, StdioTests
from maxk_jax.data.report import LoadReport


def _t(inp, out, kind="stdin"):
    return {"input": inp, "output": out, "testtype": kind}


def _row(qid, *, content="Read two ints, print the sum.", public=None, private=None, starter="", meta="{}",
         date="2024-09-01T00:00:00", platform="atcoder", difficulty="easy"):
    public = [_t("1 2\n", "3\n")] if public is None else public
    private = encode_private_tests([_t("5 6\n", "11\n"), _t("0 0\n", "0\n")]) if private is None else private
    return {"question_title": f"title {qid}", "question_content": content, "platform": platform,
            "question_id": qid, "contest_id": "c1", "contest_date": date, "starter_code": starter,
            "difficulty": difficulty, "public_test_cases": json.dumps(public) if not isinstance(public, str) else public,
            "private_test_cases": private, "metadata": meta}


LEETCODE_STARTER = "class Solution:\n    def twoSum(self, nums: List[int], target: int) -> List[int]:\n        "


class _Evil:
    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


def test_codec_round_trip_matches_upstream_decoder():
    tests = [_t("1\n", "2\n"), _t("[1,2]\n3", "[0]", "functional"), _t("ünïcode\n", "ok\n")]
    blob = encode_private_tests(tests)
    assert isinstance(blob, str) and blob.isascii()
    assert decode_private_tests(blob) == tests
    # the upstream decoder (trusted pickle.loads) reads our encoding identically
    assert json.loads(pickle.loads(zlib.decompress(base64.b64decode(blob.encode("utf-8"))))) == tests
    assert decode_private_tests(json.dumps(tests)) == tests  # plain-JSON private tests also accepted


def test_restricted_unpickler_refuses_code_execution(tmp_path):
    sentinel = tmp_path / "pwned"
    blob = base64.b64encode(zlib.compress(pickle.dumps(_Evil(str(sentinel))))).decode()
    with pytest.raises(CaseDecodeError, match="refusing to load global"):
        decode_private_tests(blob)
    assert not sentinel.exists()
    not_str = base64.b64encode(zlib.compress(pickle.dumps([1, 2]))).decode()
    with pytest.raises(CaseDecodeError, match="pickle payload must be a str, got list"):
        decode_private_tests(not_str)


@pytest.mark.parametrize("blob, match", [
    ("@@not base64@@", "invalid base64"),
    (base64.b64encode(b"not zlib").decode(), "invalid zlib"),
    (base64.b64encode(zlib.compress(b"garbage")).decode(), "rejected pickle payload"),
    (base64.b64encode(zlib.compress(pickle.dumps("{not json"))).decode(), "invalid JSON"),
    (encode_private_tests([{"input": "1"}]), r"private_test_cases\[0\]: expected"),
    ("", "invalid JSON"),
])
def test_decode_errors(blob, match):
    with pytest.raises(CaseDecodeError, match=match):
        decode_private_tests(blob)


def test_decompression_size_cap():
    blob = encode_private_tests([_t("x" * 10_000, "y")])
    with pytest.raises(CaseDecodeError, match="exceeds 1000 bytes"):
        decode_private_tests(blob, max_bytes=1000)


def test_version_file_stems():
    assert version_file_stems("release_v6") == ["test", "test2", "test3", "test4", "test5", "test6"]
    assert version_file_stems("v6") == ["test6"] and version_file_stems("v1") == ["test"]
    assert version_file_stems("v2_v3") == ["test2", "test3"]
    assert version_file_stems("release_latest") is None
    with pytest.raises(ValueError, match="unknown LiveCodeBench version 'v6.1'"):
        version_file_stems("v6.1")


def _fixture_dir(tmp_path, write_rows):
    good_fn = _row("lc1", content="Two sum.", platform="leetcode", starter=LEETCODE_STARTER,
                   meta=json.dumps({"func_name": "twoSum"}),
                   public=[_t("[2,7,11,15]\n9", "[0, 1]", "functional")],
                   private=json.dumps([_t("[3,2,4]\n6", "[1, 2]", "functional")]))
    v1 = [
        _row("s1"),
        good_fn,
        _row("bad_public", public="{not json"),
        _row("bad_private", private="%%%"),
        _row("no_func", public=[_t("1", "1", "functional")], private="[]"),
        _row("mixed", public=[_t("1", "1", "functional")], meta=json.dumps({"func_name": "f"})),
        _row("empty", public=[], private="[]"),
        _row("no_content", content=""),
        _row("bad_args", public=[_t("[1,\n2", "3", "functional")], private="[]", meta=json.dumps({"func_name": "f"})),
    ]
    write_rows(tmp_path / "lcb" / "test.jsonl", v1)
    write_rows(tmp_path / "lcb" / "test2.jsonl", [_row("s2", date="2024-12-01T00:00:00")])
    write_rows(tmp_path / "lcb" / "test6.jsonl", [_row("s6", date="2025-03-01T00:00:00", difficulty="hard")])
    return tmp_path / "lcb"


def test_loader_counts_every_malformed_row(tmp_path, write_rows):
    problems, report = load_livecodebench(str(_fixture_dir(tmp_path, write_rows)))
    ids = [p.id for p in problems]
    assert ids == ["livecodebench/s1", "livecodebench/lc1", "livecodebench/s2", "livecodebench/s6"]
    assert report.n_rows == 11 and report.n_kept == 4 and report.n_returned == 4
    assert dict(report.skipped) == {"unparsable_tests": 3, "missing_func_name": 1, "mixed_testtypes": 1,
                                    "no_tests": 1, "malformed_row": 1}
    assert "bad_private" in report.examples["unparsable_tests"]
    s1 = problems[0]
    assert isinstance(s1.tests, StdioTests) and s1.num_tests == 3  # public + private, upstream order
    assert [c.stdin for c in s1.tests.cases] == ["1 2\n", "5 6\n", "0 0\n"]
    assert s1.preamble == LCB_IMPORT_HEADER and s1.difficulty == "easy"
    fn = problems[1]
    assert isinstance(fn.tests, FunctionTests) and fn.tests.class_name == "Solution"
    assert fn.tests.entry_point == "twoSum"
    assert [(c.args, c.expected) for c in fn.tests.cases] == [(([2, 7, 11, 15], 9), [0, 1]), (([3, 2, 4], 6), [1, 2])]
    assert fn.starter_code == LEETCODE_STARTER and fn.metadata["platform"] == "leetcode"


def test_release_and_date_selection(tmp_path, write_rows):
    d = str(_fixture_dir(tmp_path, write_rows))
    only_v6, rep = load_livecodebench(d, version="v6")
    assert [p.id for p in only_v6] == ["livecodebench/s6"] and rep.n_rows == 1
    v1, rep = load_livecodebench(d, version="release_v1")
    assert rep.n_rows == 9 and len(v1) == 2
    window, rep = load_livecodebench(d, start_date="2024-10-01", end_date="2024-12-31")
    assert [p.id for p in window] == ["livecodebench/s2"]
    assert rep.skipped["outside_date_range"] == 9  # date filter runs before test decoding
    leetcode, rep = load_livecodebench(d, platforms=["leetcode"])
    assert [p.id for p in leetcode] == ["livecodebench/lc1"] and rep.skipped["platform_not_selected"] == 9
    capped, rep = load_livecodebench(d, max_tests=2, version="release_v1")
    assert capped[0].num_tests == 2 and rep.info["tests_capped"] == 1
    with pytest.raises(ValueError, match="start_date must be an ISO date"):
        load_livecodebench(d, start_date="yesterday")
    with pytest.raises(ValueError, match="max_tests must be a positive int or None, got 0"):
        load_livecodebench(d, max_tests=0)


def test_functional_submission_runs_with_lcb_header(tmp_path, write_rows):
    problems, _ = load_livecodebench(str(_fixture_dir(tmp_path, write_rows)), platforms=["leetcode"])
    candidate = ("class Solution:\n    def twoSum(self, nums: List[int], target: int) -> List[int]:\n"
                 "        seen = {}\n        for i, x in enumerate(nums):\n"
                 "            if target - x in seen:\n                return [seen[target - x], i]\n"
                 "            seen[x] = i\n")
    sub = problems[0].to_submission(candidate, "lc1-0")
    # Our own trusted fixture code, run in a fresh interpreter (the LCB header changes sys state).
    runner = ("import json, sys\nsub = json.load(sys.stdin)\nns = {}\nexec(sub['code'], ns)\n"
              "fn = ns[sub['tests']['entry_point']]\n"
              "print(json.dumps([json.loads(json.dumps(fn(*c['args']))) == c['expected'] "
              "for c in sub['tests']['cases']]))\n")
    out = subprocess.run([sys.executable, "-c", runner], input=json.dumps(sub), capture_output=True, text=True,
                         timeout=60, check=True)
    assert json.loads(out.stdout) == [True, True]


def test_official_hub_reads_raw_jsonl_files(monkeypatch, tmp_path, write_rows):
    """The official repo's loading script is refused by datasets>=4: its jsonl files are read directly."""
    import datasets

    from maxk_jax.data.livecodebench import hub_data_files

    assert hub_data_files("release_v2") == ["hf://datasets/livecodebench/code_generation_lite/test.jsonl",
                                            "hf://datasets/livecodebench/code_generation_lite/test2.jsonl"]
    assert hub_data_files("release_latest") == ["hf://datasets/livecodebench/code_generation_lite/test*.jsonl"]
    local = write_rows(tmp_path / "one.jsonl", [_row("s1")])
    calls = []
    real = datasets.load_dataset

    def fake_load_dataset(builder, *args, data_files=None, split=None, **kw):
        calls.append((builder, data_files, split))
        return real("json", data_files=[local], split="train")

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    problems, report = load_livecodebench(version="v6")
    assert calls == [("json", ["hf://datasets/livecodebench/code_generation_lite/test6.jsonl"], "train")]
    assert [p.id for p in problems] == ["livecodebench/s1"] and report.source == "livecodebench/code_generation_lite"


def test_new_row_tests_skips_undecodable_and_repeated_rows_and_counts_capped():
    report, seen = LoadReport("livecodebench", "fixture", "test"), set()
    build = lambda row, pid, max_tests=None: new_row_tests(  # noqa: E731
        row, row["metadata"], row["starter_code"], max_tests, pid=pid, qid=row["question_id"], seen=seen,
        report=report)
    tests, info = build(_row("a"), "x/a")
    assert isinstance(tests, StdioTests) and len(tests.cases) == 3
    assert info == {"func_name": None, "n_public": 1, "n_private": 2}
    assert build(_row("a"), "x/a") is None                      # same id again
    assert build(_row("b", private="@@not base64@@"), "x/b") is None
    tests, _ = build(_row("c"), "x/c", max_tests=2)
    assert len(tests.cases) == 2 and seen == {"x/a", "x/c"}
    assert dict(report.skipped) == {"duplicate_id": 1, "unparsable_tests": 1}
    assert report.info["tests_capped"] == 1


def test_json_fields_name_the_field_and_the_expected_type():
    assert parse_metadata("") == {} and parse_metadata('{"func_name": "f"}') == {"func_name": "f"}
    assert parse_public_tests('[{"input": "1", "output": "2", "testtype": "stdin"}]')[0]["output"] == "2"
    for call, match in [(lambda: parse_metadata("[1]"), "^metadata: expected a JSON object, got list$"),
                        (lambda: parse_metadata("{x"), "^metadata: invalid JSON"),
                        (lambda: parse_public_tests("{}"), "^public_test_cases: expected a JSON list, got dict$"),
                        (lambda: parse_public_tests("[1"), "^public_test_cases: invalid JSON")]:
        with pytest.raises(CaseDecodeError, match=match):
            call()
