"""maxk_jax.eval.report: append-only JSONL log (torn line repair), result directories, tables, plot."""
import json

import pytest

from maxk_jax.eval import report as eval_report
from maxk_jax.eval.result import EvalResult, ProblemResult


def make(index, passed, total=2):
    return ProblemResult(index=index, problem_id=f"p{index}", rewards=tuple(p / total for p in passed),
                         passed=tuple(passed), total=(total,) * len(passed), statuses=("ok",) * len(passed),
                         verdict_counts={"AC": sum(passed), "WA": total * len(passed) - sum(passed)},
                         lengths=tuple(range(len(passed))))


RESULTS = (make(0, [2, 0, 1, 0]), make(1, [0, 0, 0, 0]), make(2, [1, 1, 2, 2]))


def test_result_log_appends_lines_and_read_results_repairs_torn_tail(tmp_path):
    path = tmp_path / "log.jsonl"
    with eval_report.ResultLog(path) as log:
        for r in RESULTS[:2]:
            log.append(r)
    assert eval_report.read_results(path) == list(RESULTS[:2])
    good = path.read_bytes()
    with open(path, "ab") as f:
        f.write(b'{"index": 2, "id": "p2", "rew')
    with pytest.raises(ValueError, match="last line is incomplete"):
        eval_report.read_results(path)
    assert eval_report.read_results(path, repair=True) == list(RESULTS[:2])
    assert path.read_bytes() == good
    with eval_report.ResultLog(path) as log:   # appending after the repair continues cleanly
        log.append(RESULTS[2])
    assert eval_report.read_results(path) == list(RESULTS)
    log = eval_report.ResultLog(path)
    log.close()
    log.close()
    with pytest.raises(ValueError, match="closed"):
        log.append(RESULTS[0])


def test_read_results_names_a_corrupt_line(tmp_path):
    path = tmp_path / "log.jsonl"
    lines = [json.dumps(r.to_json()) for r in RESULTS]
    lines[1] = lines[1][:-5]
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match=r"log.jsonl:2: malformed problem result"):
        eval_report.read_results(path, repair=True)


def test_write_and_read_report_round_trip(tmp_path):
    result = EvalResult(RESULTS, 4, (1, 2, 4), {"seed": 3, "temperature": 1.0})
    paths = eval_report.write_report(result, tmp_path / "run", name="base")
    back, name = eval_report.read_report(tmp_path / "run")
    assert name == "base" and back == result
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["config"] == {"seed": 3, "temperature": 1.0} and summary["ks"] == [1, 2, 4]
    assert summary["max_at_k"]["4"] == pytest.approx((1.0 + 0.0 + 1.0) / 3)
    assert summary["totals"]["mean_completion_length"] == pytest.approx(1.5)
    table = (tmp_path / "run" / "table.md").read_text()
    # k <= n/2 = 2 reported, each mean with its bootstrap interval over the 3 problems
    assert "| Method | pass@1 | pass@2 |\n" in table and "| base | 0.250 [" in table and "| 0.444 [" in table
    assert "| Method | max@1 | max@2 |\n" in table and "max@4" not in table
    assert open(paths["curves"], "rb").read(8) == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(ValueError, match="summary.json is missing"):
        eval_report.read_report(tmp_path)


def test_markdown_table_formats_missing_values_and_escapes_names():
    text = eval_report.markdown_table([("a|b", {1: 0.12345, 2: None})], (1, 2), "max_at_k")
    assert text.splitlines() == ["| Method | max@1 | max@2 |", "|:--|--:|--:|", "| a\\|b | 0.123 | n/a |"]
    with pytest.raises(ValueError, match="metric"):
        eval_report.markdown_table([], (1,), "mean")


def test_check_resumable(tmp_path):
    config = {"seed": 0, "n": 4, "executor": "embedded"}
    assert eval_report.check_resumable(tmp_path, config, ("seed", "n")) is False
    (tmp_path / eval_report.RUN_CONFIG).write_text(json.dumps(config))
    assert eval_report.check_resumable(tmp_path, dict(config, executor="http://x"), ("seed", "n")) is True
    with pytest.raises(ValueError, match=r"different settings .*'seed': \(0, 1\)"):
        eval_report.check_resumable(tmp_path, dict(config, seed=1), ("seed", "n"))
    (tmp_path / eval_report.RUN_CONFIG).unlink()
    (tmp_path / eval_report.PER_PROBLEM).write_text("")
    with pytest.raises(ValueError, match="no run_config.json"):
        eval_report.check_resumable(tmp_path, config, ("seed",))
