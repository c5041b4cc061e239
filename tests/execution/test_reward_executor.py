"""RewardFunctionExecutor: a Python reward function as a judge backend (per-sample and batched
forms, graded results, errors naming the problem and completion, the "reward:" spec, and the
path through judge_completions / JudgeCounter that the RL loop and evaluation take)."""
import math

import pytest

from maxk_jax.data import Problem, StdioCase, StdioTests
from maxk_jax.data.rewards import batched_reward
from maxk_jax.execution import JudgeCounter, RewardFunctionExecutor, make_executor
from maxk_jax.execution.completions import Completions, ProblemResult, judge_completions


def _problem(i, answer):
    return Problem(id=f"q/{i}", source="q", prompt=f"What is {answer}?", tests=StdioTests((StdioCase("", "x"),)),
                   metadata={"answer": answer})


def length_reward(problem, completion):
    """A graded reward: len / 4, capped at 1."""
    return min(len(completion) / 4, 1.0)


def test_per_sample_rewards_through_judge_completions():
    problems = [_problem(0, 1), _problem(1, 2)]
    comps = [Completions(("", "ab", "abcd")), Completions(("abcdef", "a", "abc"))]
    results = judge_completions(JudgeCounter(RewardFunctionExecutor(length_reward)), problems, [5, 6], comps)
    assert [r.rewards for r in results] == [(0.0, 0.5, 1.0), (1.0, 0.25, 0.75)]
    assert [r.passed for r in results] == [(0, 0, 1), (1, 0, 0)] and results[0].total == (1, 1, 1)
    assert results[0].correct_array().tolist() == [False, False, True]
    assert results[0].n_no_code == 1 and results[1].n_no_code == 0    # empty completions
    assert results[0].verdict_counts == {"AC": 1, "WA": 2}
    assert ProblemResult.from_json(results[1].to_json()) == results[1]     # graded results round-trip


def test_the_function_sees_the_raw_completion_and_its_problem():
    seen = []
    texts = ("```python\nprint(1)\n```", "42")
    judge_completions(RewardFunctionExecutor(lambda p, c: seen.append((p.id, c)) or 0.0),
                      [_problem(0, 1)], [0], [Completions(texts, inside_block=True)])
    assert seen == [("q/0", texts[0]), ("q/0", texts[1])]    # no code extraction


def test_batched_form_is_called_once_per_judge_call():
    calls = []

    @batched_reward
    def rewards(problems, completions):
        calls.append(len(completions))
        return [float(c == str(p.metadata["answer"])) for p, c in zip(problems, completions)]

    problems = [_problem(0, 1), _problem(1, 2)]
    results = judge_completions(RewardFunctionExecutor(rewards), problems, [0, 1],
                                [Completions(("1", "2")), Completions(("2", "3"))])
    assert calls == [4] and [r.rewards for r in results] == [(1.0, 0.0), (1.0, 0.0)]
    assert RewardFunctionExecutor(lambda ps, cs: [0.0] * len(cs), batched=True).judge(
        [{"id": "0/0", "problem": problems[0], "completion": "x"}])[0]["reward"] == 0.0


@pytest.mark.parametrize("value, message", [
    (1.5, "the reward 1.5 is not a finite number in [0, 1]"), (-1, "the reward -1.0 is not"),
    (math.nan, "the reward nan is not"), (None, "got NoneType"),
])
def test_bad_rewards_name_the_problem_and_completion(value, message):
    def reward(problem, completion):
        return value if completion == "bad" else 0.0

    with pytest.raises(ValueError) as err:
        judge_completions(RewardFunctionExecutor(reward), [_problem(0, 1), _problem(1, 2)], [0, 1],
                          [Completions(("ok", "ok")), Completions(("ok", "bad"))])
    text = str(err.value)
    assert message in text and "problem 1, completion 1 (problem id 'q/1', completion 'bad')" in text, text


def test_batched_length_mismatch_and_exceptions_are_named():
    short = RewardFunctionExecutor(batched_reward(lambda ps, cs: [0.0]))
    with pytest.raises(ValueError, match="returned 1 rewards for 2 completions"):
        judge_completions(short, [_problem(0, 1)], [0], [Completions(("a", "b"))])

    def broken(problem, completion):
        raise KeyError("answer")

    with pytest.raises(KeyError) as err:
        judge_completions(RewardFunctionExecutor(broken), [_problem(0, 1)], [3], [Completions(("a",))])
    assert any("problem 3, completion 0 (problem id 'q/0'" in note for note in err.value.__notes__)


def test_code_submissions_are_refused_with_a_clear_error():
    with pytest.raises(ValueError, match="scores completions: each submission must be"):
        RewardFunctionExecutor(length_reward).judge([{"id": "a", "code": "print(1)", "mode": "stdio", "tests": []}])
    with pytest.raises(ValueError, match="reward function must be callable, got int"):
        RewardFunctionExecutor(3)


def test_make_executor_reward_spec():
    ex = make_executor("reward:maxk_jax.data.arithmetic:first_integer_rewards")
    assert isinstance(ex, RewardFunctionExecutor) and ex.batched and ex.judges_completions
    assert not make_executor("reward:maxk_jax.data.arithmetic:first_integer_reward").batched
    with pytest.raises(ValueError, match=r"reward function 'nope_mod:f': module 'nope_mod' cannot be imported"):
        make_executor("reward:nope_mod:f")


def test_a_graded_result_that_breaks_the_contract_is_refused():
    class Liar(RewardFunctionExecutor):
        def judge(self, submissions):
            out = super().judge(submissions)
            out[0]["passed"] = 1          # claims solved at reward 0.5
            return out

    with pytest.raises(RuntimeError, match=r"graded reward 0.5 with passed/total 1/1"):
        judge_completions(Liar(lambda p, c: 0.5), [_problem(0, 1)], [0], [Completions(("a",))])
    with pytest.raises(ValueError, match="nor a graded reward"):
        ProblemResult(index=0, problem_id="p", rewards=(0.5,), passed=(1,), total=(1,), statuses=("ok",),
                      verdict_counts={})


def test_evaluation_scores_with_the_reward_function():
    """maxk_jax.eval.run_evaluation with a reward function: pass@k counts reward-1 samples, max@k
    is the expected best reward of k samples (here by hand: 2 problems x 2 samples)."""
    import jax

    from maxk_jax.data.arithmetic import closeness_reward
    from maxk_jax.eval import run_evaluation
    from maxk_jax.eval.run import EvalOptions, StaticCompletionSource

    problems = [_problem(0, 42), _problem(1, 7)]     # rewards [1, 1/2, 1/3, 0] and [0, 0, 0, 1/2]
    source = StaticCompletionSource({"q/0": ["42", "41", "44", "x"], "q/1": ["x", "y", "z", "8"]})
    result = run_evaluation(problems, source, executor=RewardFunctionExecutor(closeness_reward), n=4,
                            key=jax.random.key(0), options=EvalOptions(ks=(1, 2), progress=False))
    means = result.means()
    assert means["pass_at_k"][1] == pytest.approx((1 / 4 + 0) / 2)
    assert means["pass_at_k"][2] == pytest.approx((1 - 3 / 6 + 0) / 2)           # 1 - C(3,2)/C(4,2)
    assert means["max_at_k"][1] == pytest.approx(((1 + 1 / 2 + 1 / 3) / 4 + 1 / 8) / 2)
    # the best of each of the 6 pairs: 1/3, 1/2, 1, 1/2, 1, 1 (problem 0); 1/2 in 3 of 6 pairs (problem 1)
    assert means["max_at_k"][2] == pytest.approx(((1 / 3 + 1 / 2 + 1 + 1 / 2 + 1 + 1) / 6 + 0.25) / 2)


def test_the_judge_package_stays_light():
    """Reward functions add nothing to ``import maxk_jax.execution`` (the judge service's import):
    maxk_jax.data and numpy load only when a reward function is used."""
    import subprocess
    import sys

    code = ("import sys, maxk_jax.execution, maxk_jax.cli.preflight\n"
            "print(sorted(m for m in ('numpy', 'maxk_jax.data') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "[]", out.stdout
