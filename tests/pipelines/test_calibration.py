"""maxk_jax.pipelines.calibration: headroom statistics of a base evaluation (hand-made results with
known per-problem success counts) and the testbed target."""
import numpy as np
import pytest

from maxk_jax.pipelines.calibration import headroom, meets_target
from tests.pipelines.fixtures import eval_result


def _counts_result(counts, n=16, tests=4):
    """A result whose problem i has counts[i] fully correct samples of n (others reward 0.25)."""
    rewards = np.full((len(counts), n), 0.25)
    for i, c in enumerate(counts):
        rewards[i, :c] = 1.0
    return eval_result(rewards, tests)


def test_headroom_counts_undecided_problems():
    # n = 16, k = 8: pass@8 of c correct = 1 - C(16 - c, 8) / C(16, 8): c = 0 -> 0, c = 1 -> 0.5,
    # c = 2 -> 0.767, c = 3 -> 0.9, c = 4 -> 0.962, c >= 9 -> 1
    stats = headroom(_counts_result([0, 1, 2, 3, 4, 16]), 8)
    assert stats["num_problems"] == 6 and stats["n"] == 16 and stats["k"] == 8
    assert stats["correct_counts"] == [0, 1, 2, 3, 4, 16]
    assert stats["undecided_share"] == pytest.approx(3 / 6)
    assert stats["pass_at_1"] == pytest.approx((0 + 1 + 2 + 3 + 4 + 16) / 16 / 6)
    assert stats["max_at_1"] > stats["pass_at_1"]          # partial credit
    assert stats["max_at_k"] >= stats["pass_at_k"]


def test_target_and_bad_arguments():
    assert meets_target({"max_at_k": 0.6, "undecided_share": 0.3})
    assert not meets_target({"max_at_k": 0.9, "undecided_share": 0.3})
    assert not meets_target({"max_at_k": 0.6, "undecided_share": 0.2})
    result = _counts_result([1, 2])
    with pytest.raises(ValueError, match="k <= n/2"):
        headroom(result, 9)
    with pytest.raises(ValueError, match="undecided"):
        headroom(result, 4, undecided=(0.9, 0.1))


def test_calibration_table_lists_what_each_point_tried():
    from maxk_jax.pipelines.calibration import calibration_markdown

    stats = headroom(_counts_result([0, 1, 2, 3, 4, 16]), 8)
    row = {**stats, "point": "p1", "changed": {"synthetic.max_ops": 4, "runs_dir": "/x"},
           "target_met": meets_target(stats)}
    table = calibration_markdown([row])
    assert "| p1 | `synthetic.max_ops=4` | 6 × 16 |" in table and "runs_dir" not in table
    assert "undecided at k=8" in table and table.rstrip().endswith("| 0.50 | no |")
    with pytest.raises(ValueError, match="no calibration rows"):
        calibration_markdown([])
