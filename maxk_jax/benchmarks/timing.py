"""The benchmarks' timer: the median of repeated calls (a compiling first call is the caller's)."""
from __future__ import annotations

import time
from typing import Any, Callable

import numpy as np


def median_time(fn: Callable[[], Any], repeats: int) -> tuple[float, list[float]]:
    """Median seconds of ``repeats`` calls of fn (which blocks until its result is ready), and every time."""
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times)), times
