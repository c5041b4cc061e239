"""maxk_jax/benchmarks/timing.py: the median timer calls fn once per repeat and reports every time."""
import numpy as np
import pytest

from maxk_jax.benchmarks.timing import median_time


@pytest.mark.parametrize("repeats", [1, 4])
def test_median_time_calls_once_per_repeat_and_reports_the_median_of_its_times(repeats):
    calls = []
    median, times = median_time(lambda: calls.append(1), repeats)
    assert len(calls) == repeats and len(times) == repeats
    assert all(t >= 0 for t in times) and median == float(np.median(times))
