"""maxk_jax.eval.run: batching plan, completion sources, judging (retries / exclusion), the loop,
HumanEval canonical solutions, exact pass@k / max@k against brute force, deterministic resume."""
import dataclasses
import itertools

import jax
import numpy as np
import pytest

from maxk_jax.eval import report as eval_report
from maxk_jax.data import load_dataset
from maxk_jax.data.problem import FunctionCase, FunctionTests, Problem, StdioCase, StdioTests
from maxk_jax.eval.run import (Completions, EvalOptions, StaticCompletionSource, check_ks, default_ks,
                                 judge_completions, host_calls, plan_groups, problem_sample_keys,
                                 run_evaluation)
from maxk_jax.execution import make_executor


@pytest.fixture(scope="module")
def executor():
    with make_executor("embedded:2") as ex:
        yield ex


# ------------------------------------------------------------------------------------------ problems
def double_problem(i: int) -> Problem:
    """stdio: print 2*x; 4 tests x = 1..4 (so a completion can pass 0..4 of them)."""
    return Problem(id=f"t/double{i}", source="t", prompt="Print twice the input integer.",
                   tests=StdioTests(tuple(StdioCase(f"{x}\n", f"{2 * x}\n") for x in range(1, 5))))


def passing(m: int) -> str:
    """A program passing exactly the first m of the 4 tests of `double_problem`."""
    return f"x = int(input())\nprint(2 * x if x <= {m} else -1)\n"


ADD = Problem(id="t/add", source="t", prompt="Write add(a, b).",
              tests=FunctionTests("add", (FunctionCase((1, 2), 3), FunctionCase((2, 2), 4), FunctionCase((0, 5), 5))))
ADD_TEXTS = {3: "```python\ndef add(a, b):\n    return a + b\n```",
             2: "Sure:\n```python\ndef add(a, b):\n    return a + b if a else 0\n```",  # fails (0, 5)
             0: "```python\ndef add(a, b):\n    return a - b\n```",
             -1: "In C++:\n```cpp\nint add(int a, int b) { return a + b; }\n```"}  # no Python code: a real 0


def brute_pass(correct, k):
    subsets = list(itertools.combinations(correct, k))
    return sum(any(s) for s in subsets) / len(subsets)


def brute_max(rewards, k):
    subsets = list(itertools.combinations(rewards, k))
    return sum(max(s) for s in subsets) / len(subsets)


# ------------------------------------------------------------------------------------------ plan / ks
def test_default_ks_and_check_ks():
    assert default_ks(256) == (1, 2, 4, 8, 16, 32, 64, 128)      # k <= n/2 only
    assert default_ks(12) == (1, 2, 4, 6)
    assert default_ks(3) == (1,) and default_ks(1) == (1,)
    assert check_ks([4, 1], 8) == (1, 4)
    with pytest.raises(ValueError, match=r"\[1, n/2=2\].*got k=4"):
        check_ks([4], 4)
    for bad in ([0], [5], [1, 1], [], [1.5], [True]):
        with pytest.raises(ValueError):
            check_ks(bad, 4)


@pytest.mark.parametrize("num,n,batch", [(7, 4, 8), (5, 8, 8), (3, 10, 4), (1, 256, 64), (9, 3, 10)])
def test_plan_groups_cover_every_problem_once_within_batch(num, n, batch):
    groups = plan_groups(num, n, batch)
    assert [i for g in groups for i in g.indices] == list(range(num))
    for g in groups:
        assert sum(g.chunks) == n
        assert len(g.indices) * max(g.chunks) <= batch
    with pytest.raises(ValueError, match="batch_size"):
        plan_groups(3, 4, 0)


@pytest.mark.parametrize("num,n,batch,hosts", [(7, 4, 8, 2), (5, 8, 8, 3), (3, 10, 4, 2), (2, 256, 64, 8),
                                               (2, 13, 4, 3), (1, 5, 2, 8), (9, 3, 10, 1), (3, 10, 4, 1)])
def test_host_calls_split_problems_or_samples_evenly_in_lock_step(num, n, batch, hosts):
    """Every (problem, sample) is sampled by exactly one host, each host's samples of a problem
    are contiguous and in host order, every host makes the same calls (sizes) per group, at
    most `batch` rows per host and call, and n > batch spreads the samples over the hosts."""
    groups = plan_groups(num, n, batch, hosts)
    assert [i for g in groups for i in g.indices] == list(range(num))
    for g in groups:
        per_host = [host_calls(g, n, h, hosts) for h in range(hosts)]
        assert len({tuple(c.size for c in calls) for calls in per_host}) == 1   # lock step
        seen = {i: [] for i in g.indices}
        for calls in per_host:
            for c in calls:
                assert len(c.indices) * c.size <= batch
                for i in c.indices:
                    seen[i].extend(range(c.first, c.first + c.size))
        assert all(s == list(range(n)) for s in seen.values())      # once each, host order = sample order
        if n > batch and hosts > 1:
            rows = [sum(c.size for c in calls if c.indices) for calls in per_host]
            assert max(rows) - min(rows) <= 1 and min(rows) == n // hosts
    assert len(plan_groups(8, 2, 4, 2)[0].indices) == 4        # batch_size is per host
    with pytest.raises(ValueError, match="host must be"):
        host_calls(groups[0], n, hosts, hosts)
    with pytest.raises(ValueError, match="do not add up"):
        host_calls(groups[0], n + 1, 0, hosts)


def test_problem_sample_keys_depend_on_index_only():
    key = jax.random.key(3)
    a, b = problem_sample_keys(key, 5, 8), problem_sample_keys(key, 5, 8)
    assert np.array_equal(jax.random.key_data(a), jax.random.key_data(b))
    c = problem_sample_keys(key, 6, 8)
    assert not np.array_equal(jax.random.key_data(a), jax.random.key_data(c))


# ------------------------------------------------------------------------------------------ sources
def test_static_source_serves_positions_and_rejects_missing():
    p = double_problem(0)
    src = StaticCompletionSource({p.id: ["a", "b", "c"]}, lengths={p.id: [1, 2, 3]})
    keys = jax.random.split(jax.random.key(0), (1, 2))
    (out,) = src([p], keys, 1)
    assert out.texts == ("b", "c") and out.lengths == (2, 3)
    with pytest.raises(ValueError, match="only 3 texts"):
        src([p], jax.random.split(jax.random.key(0), (1, 3)), 1)
    with pytest.raises(ValueError, match="no completions for problem 't/add'"):
        src([ADD], keys, 0)
    with pytest.raises(ValueError, match="texts\\[0\\] must be a str"):
        Completions((None,))


# ------------------------------------------------------------------------------------------ HumanEval
def _canonical_humaneval(executor, count):
    problems, _ = load_dataset("humaneval")
    problems = problems[:count]
    # Two completion styles: a base-model continuation of the opened fence (body only) and a chat
    # answer re-defining the whole function in a fenced block with prose around it.
    body = {p.id: [p.metadata["canonical_solution"] + "```\n"] * 2 for p in problems}
    chat = {p.id: ["Here is the solution.\n```python\n" + p.prompt + p.metadata["canonical_solution"]
                   + "```\nIt works."] * 2 for p in problems}
    for texts, inside in ((body, True), (chat, False)):
        result = run_evaluation(problems, StaticCompletionSource(texts, inside_block=inside), executor=executor, n=2, key=jax.random.key(0), options=EvalOptions(batch_size=16, progress=False))
        means = result.means()
        assert means["pass_at_k"] == {1: 1.0} and means["max_at_k"] == {1: 1.0}
        assert means["num_problems"] == {1: count}
        assert result.totals()["status_counts"] == {"ok": 2 * count}


def test_humaneval_canonical_solutions_score_one_subset(executor):
    _canonical_humaneval(executor, 12)


@pytest.mark.slow
def test_humaneval_canonical_solutions_score_one_all_164(executor):
    _canonical_humaneval(executor, 164)


# ------------------------------------------------------------------------------------------ exact metrics
def test_mixed_completions_give_brute_force_pass_and_max_at_k(executor):
    problems = [double_problem(0), double_problem(1), ADD, double_problem(2)]
    plan = {"t/double0": [4, 0, 2, 1, 3, 0], "t/double1": [0, 0, 1, 0, 0, 0], "t/add": [3, 2, -1, 0, 2, 3],
            "t/double2": [4, 4, 4, 4, 4, 4]}
    texts = {pid: [ADD_TEXTS[m] if pid == "t/add" else passing(m) for m in ms] for pid, ms in plan.items()}
    result = run_evaluation(problems, StaticCompletionSource(texts), executor=executor, n=6, key=jax.random.key(0), options=EvalOptions(batch_size=8, progress=False))
    assert result.ks == (1, 2, 3)          # k <= n/2 reported; the estimators are checked at every k
    result = dataclasses.replace(result, ks=(1, 2, 3, 4, 5, 6))
    per = result.per_problem()
    for row, p in enumerate(problems):
        r = result.problems[row]
        total = p.num_tests
        want_passed = [max(m, 0) for m in plan[p.id]]
        assert list(r.passed) == want_passed and set(r.total) == {total}
        rewards = [m / total for m in want_passed]
        correct = [m == total for m in want_passed]   # binary reward: ALL tests passed
        assert list(r.rewards) == rewards
        assert r.n_no_code == (1 if p.id == "t/add" else 0)
        for j, k in enumerate(result.ks):
            assert per["pass_at_k"][row, j] == pytest.approx(brute_pass(correct, k), abs=1e-6)
            assert per["max_at_k"][row, j] == pytest.approx(brute_max(rewards, k), abs=1e-6)
    means = result.means()
    for j, k in enumerate(result.ks):
        assert means["pass_at_k"][k] == pytest.approx(np.mean(per["pass_at_k"][:, j]), abs=1e-12)
        assert means["max_at_k"][k] == pytest.approx(np.mean(per["max_at_k"][:, j]), abs=1e-12)
    # partial credit counts for max@k but not for pass@k
    assert means["max_at_k"][1] > means["pass_at_k"][1]
    assert result.problems[2].verdict_counts["AC"] == 3 + 2 + 2 + 3
    assert result.problems[1].statuses == ("ok",) * 6


# ------------------------------------------------------------------------------------------ null rewards
class FlakyExecutor:
    """Wraps a real executor; answers sandbox_error / invalid for chosen submission ids."""

    def __init__(self, inner, fail_times: dict, invalid: frozenset = frozenset()):
        self.inner, self.fail_times, self.invalid = inner, dict(fail_times), invalid
        self.calls: list[list[str]] = []

    def judge(self, subs):
        self.calls.append([s["id"] for s in subs])
        out = []
        for s, r in zip(subs, self.inner.judge(subs)):
            if s["id"] in self.invalid:
                r = dict(r, status="invalid", reward=None)
            elif self.fail_times.get(s["id"], 0) > 0:
                self.fail_times[s["id"]] -= 1
                r = dict(r, status="sandbox_error", reward=None, passed=0,
                         tests=[{"verdict": "SE"} for _ in r["tests"]])
            out.append(r)
        return out


def test_sandbox_errors_are_retried_then_excluded_never_zeroed(executor):
    p = double_problem(0)
    ms = [4, 2, 0, 4]
    src = StaticCompletionSource({p.id: [passing(m) for m in ms]})
    # sample 0 recovers after one retry; sample 3 never does; sample 2 is 'invalid' (not retried)
    flaky = FlakyExecutor(executor, {"0/0": 1, "0/3": 99}, invalid=frozenset({"0/2"}))
    result = run_evaluation([p], src, executor=flaky, n=4, key=jax.random.key(0), options=EvalOptions(sandbox_retries=2, progress=False))
    (r,) = result.problems
    assert r.statuses == ("ok", "ok", "invalid", "sandbox_error")
    assert r.rewards == (1.0, 0.5, None, None) and r.n == 2 and r.n_sampled == 4
    assert flaky.calls == [["0/0", "0/1", "0/2", "0/3"], ["0/0", "0/3"], ["0/3"]]
    assert r.sandbox_retries == 3
    means = dataclasses.replace(result, ks=(1, 2, 4)).means()
    # estimators on the 2 valid samples only; k > 2 has no value for the problem
    assert means["max_at_k"][1] == pytest.approx(0.75) and means["max_at_k"][2] == pytest.approx(1.0)
    assert means["pass_at_k"][1] == pytest.approx(0.5)
    assert means["max_at_k"][4] is None and means["num_problems"] == {1: 1, 2: 1, 4: 0}
    assert result.totals()["excluded_samples"] == 2
    one = run_evaluation([p], src, executor=FlakyExecutor(executor, {"0/1": 99, "0/3": 99}, invalid=frozenset({"0/2"})), n=4, key=jax.random.key(0), options=EvalOptions(sandbox_retries=0, progress=False))
    assert one.means()["num_problems"] == {1: 1, 2: 0}     # 1 valid sample: no value at k = 2
    assert "fewer valid samples than k" in eval_report.report_markdown(one, "x")
    flaky = FlakyExecutor(executor, {"0/3": 99})
    with pytest.raises(RuntimeError, match="1 of 4 samples could not be judged.*fail_on_excluded"):
        run_evaluation([p], src, executor=flaky, n=4, key=jax.random.key(0), options=EvalOptions(fail_on_excluded=True, progress=False))


def test_judge_completions_validates_arguments(executor):
    p = double_problem(0)
    with pytest.raises(ValueError, match="sandbox_retries"):
        judge_completions(executor, [p], [0], [Completions(("print(1)",))], sandbox_retries=-1)
    with pytest.raises(ValueError, match="1 problems, 2 indices"):
        judge_completions(executor, [p], [0, 1], [Completions(("print(1)",))])


# ------------------------------------------------------------------------------------------ resume
class RandomSource:
    """Picks each sample's text with its own key (like a sampler); records the calls."""

    def __init__(self, options):
        self.options, self.calls = options, []

    def __call__(self, problems, keys, first_sample):
        self.calls.append(([p.id for p in problems], first_sample, keys.shape))
        data = np.asarray(jax.random.key_data(keys)).astype(np.uint64)   # [P, m, 2]: the keys' bits
        choice = (data[..., 0] * 2654435761 + data[..., 1]) % len(self.options)
        return [Completions(tuple(self.options[c] for c in row), tuple(int(c) + 1 for c in row)) for row in choice]


OPTIONS = [passing(m) for m in range(5)]


class Interrupt(Exception):
    pass


def _files(d):
    return {name: (d / name).read_bytes() for name in (eval_report.PER_PROBLEM, eval_report.SUMMARY,
                                                       eval_report.TABLE, eval_report.CURVES)}


def test_resume_after_interruption_and_torn_line_gives_identical_files(executor, tmp_path):
    problems = [double_problem(i) for i in range(7)]
    kw = dict(executor=executor, n=4, config={"run_name": "r"},
              options=EvalOptions(batch_size=8, progress=False, keep_completions=True))
    full = run_evaluation(problems, RandomSource(OPTIONS), key=jax.random.key(11), **kw)
    eval_report.write_report(full, tmp_path / "a")
    rewards = [x for r in full.problems for x in r.rewards]
    assert len(set(rewards)) > 2   # the key really drives the choice

    b = tmp_path / "b"
    b.mkdir()
    jsonl = b / eval_report.PER_PROBLEM
    written = []

    def stop_after_three(r):
        if len(written) == 3:
            raise Interrupt
        log.append(r)
        written.append(r)

    with eval_report.ResultLog(jsonl) as log, pytest.raises(Interrupt):
        run_evaluation(problems, RandomSource(OPTIONS), key=jax.random.key(11), on_result=stop_after_three, **kw)
    with open(jsonl, "ab") as f:   # a torn append of problem 3
        f.write(eval_report._line(full.problems[3].to_json())[:40])
    with pytest.raises(ValueError, match="incomplete"):
        eval_report.read_results(jsonl)
    done = eval_report.read_results(jsonl, repair=True)
    assert [r.index for r in done] == [0, 1, 2]
    source = RandomSource(OPTIONS)
    with eval_report.ResultLog(jsonl) as log:
        resumed = run_evaluation(problems, source, key=jax.random.key(11), done=done, on_result=log.append, **kw)
    # groups of 2 problems (batch 8 / n 4): problems 0-1 are skipped, group 2-3 is re-sampled whole
    assert [c[0] for c in source.calls] == [["t/double2", "t/double3"], ["t/double4", "t/double5"], ["t/double6"]]
    assert jsonl.read_bytes() == (tmp_path / "a" / eval_report.PER_PROBLEM).read_bytes()
    eval_report.write_report(resumed, b)
    a_files, b_files = _files(tmp_path / "a"), _files(b)
    for name in a_files:
        assert a_files[name] == b_files[name], name


def test_batch_size_does_not_change_samples(executor):
    problems = [double_problem(i) for i in range(3)]
    runs = [run_evaluation(problems, RandomSource(OPTIONS), executor=executor, n=6, key=jax.random.key(5), options=EvalOptions(batch_size=bs, progress=False)) for bs in (4, 64)]
    assert runs[0].problems == runs[1].problems


def test_done_results_must_match_the_run(executor):
    problems = [double_problem(i) for i in range(2)]
    full = run_evaluation(problems, RandomSource(OPTIONS), executor=executor, n=2, key=jax.random.key(0), options=EvalOptions(progress=False))
    with pytest.raises(ValueError, match="does not match the problem list"):
        run_evaluation(problems[::-1], RandomSource(OPTIONS), executor=executor, n=2, key=jax.random.key(0), done=full.problems, options=EvalOptions(progress=False))
    with pytest.raises(ValueError, match="has 2 samples, this run has n=3"):
        run_evaluation(problems, RandomSource(OPTIONS), executor=executor, n=3, key=jax.random.key(0), done=full.problems, options=EvalOptions(progress=False))
    with pytest.raises(ValueError, match="keep_completions=True"):
        run_evaluation(problems, RandomSource(OPTIONS), executor=executor, n=2, key=jax.random.key(0), done=full.problems, options=EvalOptions(keep_completions=True, progress=False))


def test_run_evaluation_rejects_bad_input(executor):
    src = RandomSource(OPTIONS)
    p = double_problem(0)
    with pytest.raises(ValueError, match="no problems"):
        run_evaluation([], src, executor=executor, n=2, key=jax.random.key(0))
    with pytest.raises(ValueError, match="not unique"):
        run_evaluation([p, p], src, executor=executor, n=2, key=jax.random.key(0))
    with pytest.raises(ValueError, match="key must be a jax PRNG key"):
        run_evaluation([p], src, executor=executor, n=2, key=0)
    with pytest.raises(ValueError, match="k=3"):
        run_evaluation([p], src, executor=executor, n=2, key=jax.random.key(0), options=EvalOptions(ks=[3]))
    with pytest.raises(ValueError, match="n must be a positive int"):
        run_evaluation([p], src, executor=executor, n=0, key=jax.random.key(0))


def test_eval_options_reject_bad_values():
    with pytest.raises(ValueError, match="batch_size must be a positive int, got 0"):
        EvalOptions(batch_size=0)
    with pytest.raises(ValueError, match="sandbox_retries=-1 must be an int >= 0"):
        EvalOptions(sandbox_retries=-1)
    with pytest.raises(ValueError, match=r"host must be \(index, count\)"):
        EvalOptions(host=(2, 2))