"""rollout.answer_ids: majority voting over program BEHAVIOUR (judged outputs), not source text;
undetermined behaviour is masked, never guessed."""
import numpy as np
import pytest

from maxk_jax.rl import rollout
from maxk_jax.data.problem import Limits, Problem, StdioCase, StdioTests
from maxk_jax.estimators import get_estimator
from maxk_jax.execution.completions import Completions, judge_completions
from maxk_jax.execution import make_executor

PROBLEM = Problem(id="double", source="t", prompt="Read x, print 2x.", limits=Limits(cpu_s=0.5, wall_s=1.0),
                  tests=StdioTests(tuple(StdioCase(f"{x}\n", f"{2 * x}\n") for x in (1, 4, 7))))
PROGRAMS = {
    "correct": "x = int(input())\nprint(2 * x)",
    "square": "x = int(input())\nprint(x * x)",                             # wrong: 1, 16, 49
    "square_other_text": "import sys\nv = int(sys.stdin.readline())\nprint(v ** 2)\n",   # same outputs
    "triple": "x = int(input())\nprint(3 * x)",                              # wrong differently
    "zero": "print(0)",
    "hangs_on_4": "x = int(input())\nwhile x == 4:\n    pass\nprint(2 * x)",  # TLE on test 2
}


@pytest.fixture(scope="module")
def judged():
    """{program name: (reward, behaviour fingerprint)} from the sandboxed embedded judge."""
    names = list(PROGRAMS)
    comps = Completions(tuple(f"```python\n{PROGRAMS[k]}\n```" for k in names))
    with make_executor("embedded:2") as ex:
        (res,) = judge_completions(ex, [PROBLEM], [0], [comps], keep_behaviours=True)
    assert res.statuses == ("ok",) * len(names)
    return {k: (r, b) for k, r, b in zip(names, res.rewards, res.behaviours)}


def _group(judged, names):
    rewards = np.array([[judged[k][0] for k in names]], np.float32)
    ids = rollout.answer_ids([[judged[k][1] for k in names]], len(names))
    return rewards, ids


def test_same_outputs_different_text_share_an_answer_id_and_change_the_vote(judged):
    same = ["correct", "square", "square_other_text", "zero"]   # two wrong programs, identical outputs
    diff = ["correct", "square", "triple", "zero"]              # two wrong programs, different outputs
    r_same, ids_same = _group(judged, same)
    r_diff, ids_diff = _group(judged, diff)
    np.testing.assert_array_equal(r_same, r_diff)               # the rewards cannot tell them apart
    np.testing.assert_array_equal(ids_same, [[0, 1, 1, 2]])
    np.testing.assert_array_equal(ids_diff, [[0, 1, 2, 3]])
    vote = get_estimator("majority_vote")
    a_same = np.asarray(vote(r_same, k=3, answer_ids=ids_same))
    a_diff = np.asarray(vote(r_diff, k=3, answer_ids=ids_diff))
    assert np.abs(a_same - a_diff).max() > 1e-3, (a_same, a_diff)
    # The agreeing wrong pair outvotes the correct program in every subset holding both: its
    # advantage drops below the one it has when the wrong programs disagree.
    assert a_same[0, 0] < a_diff[0, 0]
    # Ids from source text (all distinct) would give the "different outputs" advantages to both.
    text_ids = np.arange(4)[None]
    np.testing.assert_allclose(np.asarray(vote(r_same, k=3, answer_ids=text_ids)), a_diff, atol=1e-6)


def test_undetermined_behaviour_is_masked_not_guessed(judged):
    names = ["correct", "square", "hangs_on_4", "zero", "triple"]
    rewards, ids = _group(judged, names)
    assert judged["hangs_on_4"][1] is None and ids[0, 2] == -1     # TLE on one test: answer unknown
    assert rewards[0, 2] == pytest.approx(2 / 3)                     # ... although its reward is valid
    vote = get_estimator("majority_vote")
    adv = np.asarray(vote(rewards, k=2, answer_ids=ids))
    masked = np.asarray(vote(rewards, k=2, answer_ids=np.where(ids < 0, 99, ids), mask=ids >= 0))
    assert adv[0, 2] == 0.0
    np.testing.assert_allclose(adv, masked, atol=1e-7)


def test_answer_ids_dense_per_prompt():
    ids = rollout.answer_ids([["b", "a", "b", None], None, ["x", "x", "x", "x"]], 4)
    np.testing.assert_array_equal(ids, [[0, 1, 0, -1], [-1] * 4, [0] * 4])
    assert ids.dtype == np.int32
    with pytest.raises(ValueError, match=r"behaviours\[0\] has 3 entries, expected n=4"):
        rollout.answer_ids([["a", "b", "c"]], 4)
