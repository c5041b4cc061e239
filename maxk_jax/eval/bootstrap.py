"""What an evaluation may report, and how uncertain it is.

* `reported_ks`: max@k and pass@k are reported only for k <= n/2 (n >= 2k samples per problem, as
  the max@k paper's n = 256 for k <= 128). At k = n the unbiased estimator sees exactly one
  k-subset, the noisiest possible estimate; with n >= 2k it averages over C(n, k) >= C(2k, k).
* `bootstrap_ci`: a percentile bootstrap confidence interval of a dataset mean over problems, and
  over RL seeds too when values come per seed: each replicate draws problems with replacement and
  (with seeds) seeds with replacement, and averages the drawn [seeds x problems] block.
"""
from __future__ import annotations

from collections.abc import Iterable

import numpy as np

CI_LEVEL = 0.95
CI_REPLICATES = 2000


def max_reported_k(n: int) -> int:
    """Largest k reported for n samples per problem: n // 2, and 1 when n = 1."""
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"n must be an int >= 1, got n={n!r}")
    return max(1, int(n) // 2)


def reported_ks(ks: Iterable[int], n: int) -> tuple[int, ...]:
    """The k values of `ks` with k <= `max_reported_k` (n), in their order."""
    top = max_reported_k(n)
    return tuple(int(k) for k in ks if int(k) <= top)


def bootstrap_ci(values: np.ndarray, *, level: float = CI_LEVEL, replicates: int = CI_REPLICATES,
                 seed: int = 0) -> tuple[float, float] | None:
    """Percentile bootstrap CI of the mean of `values`: [P] per-problem values, or [S, P] per
    seed and problem (problems and seeds both resampled, the same problem draw for every seed:
    the seeds are evaluated on the same problems). NaN entries are missing values (left out of a
    replicate's mean). Returns (low, high), or None when no value is finite. Deterministic in `seed`."""
    v = np.asarray(values, dtype=np.float64)
    if v.ndim == 1:
        v = v[None, :]
    if v.ndim != 2 or v.shape[1] == 0:
        raise ValueError(f"values must be [P] or [S, P] with P >= 1, got shape {np.shape(values)}")
    if not 0.0 < level < 1.0:
        raise ValueError(f"level={level!r} must lie in (0, 1)")
    if isinstance(replicates, bool) or not isinstance(replicates, int) or replicates < 10:
        raise ValueError(f"replicates={replicates!r} must be an int >= 10")
    finite = np.isfinite(v)
    if not finite.any():
        return None
    s, p = v.shape
    rng = np.random.default_rng(seed)
    probs = rng.integers(0, p, size=(replicates, p))
    seeds = rng.integers(0, s, size=(replicates, s)) if s > 1 else np.zeros((replicates, 1), dtype=int)
    # per replicate: sum and count over the drawn seeds x drawn problems (missing entries left out)
    filled = np.where(finite, v, 0.0)
    total = np.zeros(replicates)
    count = np.zeros(replicates)
    for j in range(seeds.shape[1]):
        rows = seeds[:, j]
        total += np.take_along_axis(filled[rows], probs, axis=1).sum(1)
        count += np.take_along_axis(finite[rows], probs, axis=1).sum(1)
    means = total[count > 0] / count[count > 0]
    alpha = (1.0 - level) / 2.0
    low, high = np.quantile(means, [alpha, 1.0 - alpha])
    return float(low), float(high)
