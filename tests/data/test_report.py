"""LoadReport: per-reason counts, examples, row accounting check, summary/JSON form."""
import json

import pytest

from maxk_jax.data.report import LoadReport


def test_counts_examples_and_summary():
    r = LoadReport("demo", "path/x", "test", params={"seed": 0})
    r.n_rows = 9
    r.n_kept = 2
    for i in range(7):
        r.skip("no_tests", f"row{i}")
    r.count("tests_capped", 2)
    r.note("filter X not applied")
    r.finalize(2)
    assert r.n_skipped == 7 and r.examples["no_tests"] == [f"row{i}" for i in range(5)]
    text = r.summary()
    assert "read 9 rows, kept 2, returned 2, skipped 7" in text and "skipped no_tests: 7" in text
    assert "tests_capped: 2" in text and "note: filter X not applied" in text and "seed=0" in text
    assert json.loads(json.dumps(r.to_dict()))["skipped"] == {"no_tests": 7}


def test_accounting_mismatch_raises():
    r = LoadReport("demo", "p", "test")
    r.n_rows = 3
    r.n_kept = 1
    r.skip("x")
    with pytest.raises(RuntimeError, match="3 rows read != 1 kept \\+ 1 skipped"):
        r.finalize(1)


def test_keep_new_skips_repeated_ids():
    r, seen = LoadReport("demo", "path/x", "test"), set()
    assert r.keep_new("demo/a", seen, "a") and r.keep_new("demo/b", seen, "b")
    assert not r.keep_new("demo/a", seen, "a-again")
    assert seen == {"demo/a", "demo/b"}
    assert dict(r.skipped) == {"duplicate_id": 1} and r.examples["duplicate_id"] == ["a-again"]
