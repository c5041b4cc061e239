"""maxk_jax.eval.result: ProblemResult validation / JSON round trip, binary vs continuous rewards,
per-problem metrics with excluded samples, dataset means per k."""
import itertools

import numpy as np
import pytest

from maxk_jax.eval.result import EvalResult, ProblemResult, problem_metrics


def make(index, passed, total=4, statuses=None, pid=None):
    statuses = statuses or ["ok"] * len(passed)
    rewards = tuple(p / total if s == "ok" else None for p, s in zip(passed, statuses))
    return ProblemResult(index=index, problem_id=pid or f"p{index}", rewards=rewards, passed=tuple(passed),
                         total=(total,) * len(passed), statuses=tuple(statuses), verdict_counts={"AC": sum(passed)})


def brute(values, k, agg):
    subsets = list(itertools.combinations(values, k))
    return sum(agg(s) for s in subsets) / len(subsets)


def test_json_round_trip_and_fixed_key_order():
    r = ProblemResult(index=3, problem_id="x/1", rewards=(1.0, None, 0.25), passed=(4, 0, 1), total=(4, 4, 4),
                      statuses=("ok", "sandbox_error", "ok"), verdict_counts={"WA": 3, "AC": 5, "SE": 4},
                      lengths=(10, 12, 256), n_no_code=1, sandbox_retries=2, completions=("a", "b", "c"))
    obj = r.to_json()
    assert list(obj)[:5] == ["index", "id", "n_sampled", "n", "rewards"]
    assert obj["n"] == 2 and obj["status_counts"] == {"ok": 2, "sandbox_error": 1}
    assert list(obj["verdict_counts"]) == ["AC", "SE", "WA"]
    assert ProblemResult.from_json(obj) == r
    del obj["completions"]
    assert ProblemResult.from_json(obj).completions is None
    assert "behaviours" not in obj                       # kept only on request (the trainer's vote)
    with_fp = ProblemResult(**{**r.__dict__, "behaviours": ("0f1e", None, "0f1e")})
    assert with_fp.to_json()["behaviours"] == ["0f1e", None, "0f1e"]
    assert ProblemResult.from_json(with_fp.to_json()) == with_fp


@pytest.mark.parametrize("change,match", [
    (dict(statuses=("ok", "bogus")), "unknown status 'bogus'"),
    (dict(rewards=(0.5, 0.0)), "reward 0.0 does not match status 'sandbox_error'"),
    (dict(rewards=(0.75, None)), "not passed/total = 2/4"),
    (dict(passed=(2,)), "passed has 1 entries"),
    (dict(lengths=(1, 2, 3)), "lengths has 3 entries"),
    (dict(behaviours=("a",)), "behaviours has 1 entries"),
])
def test_inconsistent_results_are_rejected(change, match):
    base = dict(index=0, problem_id="p", rewards=(0.5, None), passed=(2, 0), total=(4, 4),
                statuses=("ok", "sandbox_error"), verdict_counts={})
    with pytest.raises(ValueError, match=match):
        ProblemResult(**{**base, **change})


def test_from_json_names_missing_field():
    with pytest.raises(ValueError, match="missing field 'rewards'"):
        ProblemResult.from_json({"index": 0, "id": "p"})
    with pytest.raises(ValueError, match="JSON object"):
        ProblemResult.from_json([1])


def test_binary_reward_is_all_tests_passed_and_continuous_is_fraction():
    r = make(0, [4, 3, 0, 4], total=4, statuses=["ok", "ok", "ok", "invalid"])
    assert r.correct_array().tolist() == [True, False, False, False]   # excluded sample is never correct
    assert r.reward_array().tolist() == [1.0, 0.75, 0.0, 0.0]
    assert r.valid().tolist() == [True, True, True, False]


def test_problem_metrics_match_brute_force_with_masks():
    rng = np.random.default_rng(0)
    results = []
    for i in range(5):
        passed = rng.integers(0, 5, size=7).tolist()
        statuses = ["ok" if rng.random() > 0.2 else "sandbox_error" for _ in passed]
        results.append(make(i, passed, statuses=statuses))
    result = EvalResult(tuple(results), 7, (1, 2, 3, 7))
    per = result.per_problem()
    for row, r in enumerate(results):
        valid = [x for x in r.rewards if x is not None]
        for j, k in enumerate(result.ks):
            if len(valid) < k:
                assert np.isnan(per["pass_at_k"][row, j]) and np.isnan(per["max_at_k"][row, j])
                continue
            assert per["max_at_k"][row, j] == pytest.approx(brute(valid, k, max), abs=1e-6)
            assert per["pass_at_k"][row, j] == pytest.approx(brute([v == 1.0 for v in valid], k, any), abs=1e-6)
    means = result.means()
    for j, k in enumerate(result.ks):
        col = per["max_at_k"][:, j]
        assert means["num_problems"][k] == int((~np.isnan(col)).sum())
        if means["num_problems"][k]:
            assert means["max_at_k"][k] == pytest.approx(np.nanmean(col))
    with pytest.raises(ValueError, match="must all be"):
        problem_metrics(np.zeros((2, 3), bool), np.zeros((2, 4)), np.ones((2, 3), bool), (1,))


def test_eval_result_checks_and_orders():
    a, b = make(1, [1, 2]), make(0, [4, 4])
    result = EvalResult((a, b), 2, (2, 1))
    assert result.ids == ["p0", "p1"] and result.ks == (2, 1)
    with pytest.raises(ValueError, match="has 2 samples, the run has n=3"):
        EvalResult((a,), 3, (1,))
    with pytest.raises(ValueError, match="duplicate problem id"):
        EvalResult((a, make(2, [0, 0], pid="p1")), 2, (1,))
    with pytest.raises(ValueError, match="ks must be"):
        EvalResult((a,), 2, (3,))
    totals = result.totals()
    assert totals["samples"] == 4 and totals["excluded_samples"] == 0 and totals["verdict_counts"] == {"AC": 11}
    summary = result.summary()
    assert summary["pass_at_k"] == {"2": 0.5, "1": 0.5} and summary["max_at_k"]["1"] == pytest.approx(
        (1.0 + 0.375) / 2)
