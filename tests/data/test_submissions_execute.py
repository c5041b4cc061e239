"""Slow end-to-end check: submissions built by the data layer are judged by the real embedded executor."""
import pytest

from maxk_jax.data.humaneval import load_humaneval
from maxk_jax.data.livecodebench import LCB_IMPORT_HEADER
from maxk_jax.data.mbpp import convert_asserts
from maxk_jax.data.problem import FunctionCase, FunctionTests, Problem, StdioCase, StdioTests

pytestmark = pytest.mark.slow

TWO_SUM = ("class Solution:\n    def twoSum(self, nums: List[int], target: int) -> List[int]:\n"
           "        seen = {}\n        for i, x in enumerate(nums):\n"
           "            if target - x in seen:\n                return [seen[target - x], i]\n"
           "            seen[x] = i\n")


@pytest.fixture(scope="module")
def executor():
    client = pytest.importorskip("maxk_jax.execution")
    with client.make_executor("embedded") as ex:
        yield ex


def test_all_modes_judged_by_embedded_executor(executor):
    he, _ = load_humaneval()
    lc = Problem(id="t/lc", source="t", prompt="p", preamble=LCB_IMPORT_HEADER,
                 tests=FunctionTests("twoSum", (FunctionCase(([2, 7, 11, 15], 9), [0, 1]),
                                                FunctionCase(([3, 2, 4], 6), [1, 2])), "Solution"))
    mbpp = Problem(id="t/m", source="t", prompt="p",
                   tests=convert_asserts(["assert similar((3, 4, 5), (5, 4, 10)) == (4, 5)",
                                          "assert similar((1, 2), (3,)) == ()"]))
    stdio = Problem(id="t/s", source="t", prompt="p",
                    tests=StdioTests((StdioCase("1 2\n", "3\n"), StdioCase("5 5\n", "10\n"))))
    subs = [p.to_submission(p.metadata["canonical_solution"], f"{p.id}#good") for p in he]
    subs += [p.to_submission("    return None\n", f"{p.id}#bad") for p in he[:10]]
    subs += [lc.to_submission(TWO_SUM, "lc#good"),
             lc.to_submission("class Solution:\n    def twoSum(self, nums, target):\n        return [0, 1]\n", "lc#half"),
             mbpp.to_submission("def similar(a, b):\n    return tuple(sorted(set(a) & set(b)))\n", "mbpp#good"),
             stdio.to_submission("a, b = map(int, input().split())\nprint(a + b)", "stdio#good"),
             stdio.to_submission("print(3)", "stdio#half")]
    results = executor.judge(subs)
    assert [r["id"] for r in results] == [s["id"] for s in subs]
    assert all(r["status"] == "ok" for r in results), [r for r in results if r["status"] != "ok"][:3]
    rewards = [r["reward"] for r in results]
    assert rewards[:164] == [1.0] * 164
    assert rewards[164:174] == [0.0] * 10
    assert rewards[174:] == [1.0, 0.5, 1.0, 1.0, 0.5]
