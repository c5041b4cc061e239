"""Shared machinery of the k-sample estimators: validation, per-row sorting, binomial weights.

Every estimator works on rows `[..., n]` (the n completions of one prompt on the last axis).
Internally a row is sorted once (stable, invalid samples last, ties grouped; without log-ratios
by a two-pass radix argsort of single-operand uint32 sorts, `stable_argsort_keys`), all combinatorial
weights are derived from ONE log-space ratio table that never forms C(n, k) in floating point,
and results are scattered back to input order.

Binomial weights.  For the sorted valid samples j = 1..n_v (n_v = number of valid samples) the
on-policy weights are

    a_j = C(j-1, k-1) / C(n_v, k)   (subsets of size k whose maximum is sample j)
    b_j = C(j-2, k-2) / C(n_v, k)   = a_j (k-1)/(j-1)
    c_j = C(j-3, k-3) / C(n_v, k)   = b_j (k-2)/(j-2)

log a_j = log(k / n_v) + sum_{y=j}^{n_v-1} log1p(-(k-1)/y)  is a reverse cumulative sum of
terms that are each accurate to one ulp, so the
error is O(eps * |log a_j - log a_n|) (XLA lowers lax.cumsum to a blocked tree scan): float32
stays accurate to ~1e-5 relative for n = 65536 (tests/estimators/test_core.py checks this against
a float64 reference).  Forming
gammaln differences instead loses ~0.06 absolute in log space at n = 65536 in float32.
"""
from __future__ import annotations

import numbers
from typing import NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

Array = jax.Array


# --------------------------------------------------------------------------------------------
# validation (trace time: shapes and k are static; value checks only for concrete inputs)
# --------------------------------------------------------------------------------------------

def is_concrete(x) -> bool:
    """True when `x` holds concrete values (not a jit/vmap tracer)."""
    return not isinstance(x, jax.core.Tracer)


def validate_k(k, n: int, *, name: str = "k", minimum: int = 1) -> int:
    """Check that `k` is a Python/NumPy integer with minimum <= k <= n; return it as int."""
    if isinstance(k, (bool, np.bool_)) or not isinstance(k, numbers.Integral):
        raise ValueError(f"{name} must be a Python integer (static), got {k!r} of type {type(k).__name__}")
    k = int(k)
    if k < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {name}={k}")
    if k > n:
        raise ValueError(f"{name}={k} exceeds the number of samples n={n} on the last axis")
    return k


def as_rows(x, *, name: str, n: Optional[int] = None, shape: Optional[tuple] = None) -> Array:
    """Convert `x` to a jnp array `[..., n]` and check its shape (`shape` must match exactly)."""
    try:
        arr = jnp.asarray(x)
    except TypeError as e:
        raise ValueError(f"{name} must be real numbers, got {type(x).__name__}: {e}") from None
    if arr.ndim < 1:
        raise ValueError(f"{name} must have at least one axis [..., n], got a scalar")
    if arr.shape[-1] < 1:
        raise ValueError(f"{name} has an empty last axis (n = 0); need n >= 1 samples")
    if shape is not None and tuple(arr.shape) != tuple(shape):
        raise ValueError(f"{name} has shape {tuple(arr.shape)}, expected {tuple(shape)} (same as rewards)")
    if n is not None and arr.shape[-1] != n:
        raise ValueError(f"{name} has {arr.shape[-1]} samples on the last axis, expected {n}")
    return arr


def float_dtype(x: Array):
    """Floating dtype used for computations on `x` (at least float32)."""
    return jnp.promote_types(x.dtype, jnp.float32)


def prepare_rewards(rewards, *, name: str = "rewards") -> Array:
    """Rewards `[..., n]` as a float array; rejects complex / non-numeric dtypes."""
    arr = as_rows(rewards, name=name)
    if not (jnp.issubdtype(arr.dtype, jnp.floating) or jnp.issubdtype(arr.dtype, jnp.integer)
            or arr.dtype == jnp.bool_):
        raise ValueError(f"{name} must be real numbers, got dtype {arr.dtype}")
    return arr.astype(float_dtype(arr))


def prepare_mask(mask, shape: tuple) -> Array:
    """Mask `[..., n]` (True = valid sample) as bool; None means all valid."""
    if mask is None:
        return jnp.ones(shape, dtype=bool)
    m = as_rows(mask, name="mask", shape=shape)
    if m.dtype != jnp.bool_:
        if is_concrete(m) and not bool(jnp.all((m == 0) | (m == 1))):
            raise ValueError(f"mask must be boolean or 0/1, got values {np.unique(np.asarray(m))[:8]}")
        m = m != 0
    return m


def prepare_log_ratio(log_ratio, shape: tuple, *, required: bool, estimator: str) -> Optional[Array]:
    """log pi_theta(y) - log pi_old(y) per sequence `[..., n]`; ValueError when required and None."""
    if log_ratio is None:
        if required:
            raise ValueError(f"{estimator} needs log_ratio=[..., n] (log pi_theta - log pi_old per "
                             "sequence), got log_ratio=None")
        return None
    lr = as_rows(log_ratio, name="log_ratio", shape=shape)
    if not jnp.issubdtype(lr.dtype, jnp.floating):
        lr = lr.astype(jnp.float32)
    return lr


def check_finite(x, *, name: str = "rewards", mask=None, log_ratio=None) -> None:
    """Raise ValueError if a concrete array has NaN/inf at a valid (mask=True) position.

    `x` is `[...]`; `mask` (True = valid) and `log_ratio` have its shape. Pass `log_ratio` when
    `x` was computed from it (off-policy estimator outputs): a non-finite value then means the
    importance weights overflowed, and the error names the largest valid log_ratio and
    `clamp_delta`. No-op for traced values (inside jit/vmap), so it never breaks compilation;
    call it outside jit (the public estimator functions call it automatically on concrete inputs).
    """
    if not all(a is None or is_concrete(a) for a in (x, mask, log_ratio)):
        return
    arr = np.asarray(x)
    if not np.issubdtype(arr.dtype, np.floating):
        return
    valid = np.ones(arr.shape, bool) if mask is None else np.broadcast_to(np.asarray(mask, bool), arr.shape)
    bad = ~np.isfinite(arr) & valid
    if not bad.any():
        return
    where = tuple(int(i) for i in np.argwhere(bad)[0])
    found = (f"{name} contains a non-finite value {float(arr[where])} at index {where} "
             f"({int(bad.sum())} non-finite valid entries)")
    if log_ratio is None:
        raise ValueError(f"{found}; mask such samples out")
    top = float(np.max(np.where(valid, np.asarray(log_ratio, dtype=np.float64), -np.inf)))
    raise ValueError(f"{found}: importance weights overflow (largest valid log_ratio {top:.4g}); "
                     "set clamp_delta, or mask such samples out")


def rows_below_k(mask, k: int) -> Array:
    """Rows `[...]` (bool) whose number of valid samples is below k (they get zero advantages).

    `mask` is `[..., n]` (True = valid).  `jnp.sum(rows_below_k(mask, k))` counts such rows.
    """
    m = as_rows(mask, name="mask")
    validate_k(k, m.shape[-1])
    return jnp.sum(m != 0, axis=-1) < k


# --------------------------------------------------------------------------------------------
# per-row sorting
# --------------------------------------------------------------------------------------------

class SortedRows(NamedTuple):
    """Rows `[B, n]` sorted ascending by (invalid, reward, log_ratio), invalid samples last.

    r, lr: sorted rewards / log-ratios (0 at invalid positions); perm: original index of each
    sorted position; valid: position < n_valid; n_valid: [B] int32; last: index of the last
    position of each tie group (equal reward AND log_ratio) -- used to make tied samples get
    bit-identical results.
    """
    r: Array
    lr: Array
    perm: Array
    valid: Array
    n_valid: Array
    last: Array


def order_keys(r: Array, mask: Array) -> Array:
    """uint32 keys `[..., n]` whose unsigned order is the float order of float32 `r`, masked last.

    -0.0 and +0.0 get the same key (so do denormals where XLA flushes them to zero, matching its
    float comparisons), every NaN the key of the canonical (positive) NaN, which sorts
    above +inf; masked samples get 0xFFFFFFFF, above every valid key (valid keys are clipped to
    0xFFFFFFFE, which only a NaN can reach).
    """
    if r.dtype != jnp.float32:
        raise ValueError(f"order_keys needs float32 rewards, got dtype {r.dtype}")
    u = jnp.uint32
    r = jnp.where(jnp.isnan(r), jnp.float32(jnp.nan), jnp.where(r == 0, jnp.float32(0), r))
    bits = lax.bitcast_convert_type(r, u)
    key = jnp.where((bits >> 31) == 1, ~bits, bits | u(0x80000000))
    return jnp.where(mask, jnp.minimum(key, u(0xFFFFFFFE)), u(0xFFFFFFFF))


RADIX_MAX_N = 1 << 16  # stable_argsort_keys: index bits <= 16 leaves >= 16 key bits per pass (2 passes)


def stable_argsort_keys(keys: Array) -> Array:
    """Stable ascending argsort of uint32 keys `[B, n]` (n <= RADIX_MAX_N) -> int32 perm `[B, n]`.

    An LSD radix sort whose passes are single-operand sorts: each pass sorts the uint32 words
    (key digit << b | index) with b = bit_length(n - 1) index bits, so equal digits keep their
    index order (stable) and the permutation is read from the low bits.  Two passes of
    32 - b >= 16 key bits cover the key.  XLA:CPU sorts one operand with a plain `<` (no
    comparator call per comparison), several times faster than a (key, index) payload sort.
    """
    if keys.dtype != jnp.uint32 or keys.ndim != 2:
        raise ValueError(f"stable_argsort_keys needs uint32 keys [B, n], got {keys.dtype} {keys.shape}")
    n = keys.shape[-1]
    if n > RADIX_MAX_N:
        raise ValueError(f"stable_argsort_keys supports n <= {RADIX_MAX_N}, got n={n}")
    u = jnp.uint32
    ib = max(1, (n - 1).bit_length())                     # index bits
    db = 32 - ib                                          # key bits per pass (>= 16)
    idx = lax.broadcasted_iota(u, keys.shape, 1)
    shifts = list(range(0, 32, db))                       # least significant digit first
    perm, cur = None, keys
    for i, sh in enumerate(shifts):
        digit = (cur >> u(sh)) & u((1 << min(db, 32 - sh)) - 1)
        packed = lax.sort((digit << u(ib)) | idx, dimension=1, is_stable=False)
        p = (packed & u((1 << ib) - 1)).astype(jnp.int32)
        perm = p if perm is None else jnp.take_along_axis(perm, p, axis=-1)
        if i + 1 < len(shifts):
            cur = jnp.take_along_axis(cur, p, axis=-1)
    return perm


def sort_rows(r: Array, mask: Array, lr: Optional[Array] = None) -> SortedRows:
    """Stable sort of rows `[B, n]`; masked samples behave as absent (moved last, zeroed).

    Without `lr` (float32, n <= RADIX_MAX_N) the permutation comes from `stable_argsort_keys`
    on `order_keys` (same order as the general path: invalid last, then reward, then index);
    otherwise one stable multi-key `lax.sort` over (invalid, reward, [log_ratio], index).
    """
    idx = lax.broadcasted_iota(jnp.int32, r.shape, r.ndim - 1)
    n = r.shape[-1]
    n_valid = jnp.sum(mask, axis=-1).astype(jnp.int32)
    pos = lax.broadcasted_iota(jnp.int32, r.shape, r.ndim - 1)
    valid = pos < n_valid[..., None]
    if lr is None and r.dtype == jnp.float32 and r.ndim == 2 and n <= RADIX_MAX_N:
        perm = stable_argsort_keys(order_keys(r, mask))
        rs = jnp.where(valid, jnp.take_along_axis(r, perm, axis=-1), 0).astype(r.dtype)
        lrs = jnp.zeros_like(rs)
    elif lr is None:
        inv = (~mask).astype(jnp.int32)
        r0 = jnp.where(mask, r, 0).astype(r.dtype)
        _, rs, perm = lax.sort((inv, r0, idx), dimension=r.ndim - 1, is_stable=True, num_keys=2)
        lrs = jnp.zeros_like(rs)
    else:
        inv = (~mask).astype(jnp.int32)
        r0 = jnp.where(mask, r, 0).astype(r.dtype)
        lr0 = jnp.where(mask, lr, 0).astype(lr.dtype)
        _, rs, lrs, perm = lax.sort((inv, r0, lr0, idx), dimension=r.ndim - 1, is_stable=True,
                                    num_keys=3)
    same_next = (rs[..., 1:] == rs[..., :-1]) & (lrs[..., 1:] == lrs[..., :-1]) & valid[..., 1:]
    is_last = jnp.concatenate([~same_next, jnp.ones(r.shape[:-1] + (1,), dtype=bool)], axis=-1)
    last = lax.cummin(jnp.where(is_last, pos, n - 1), axis=r.ndim - 1, reverse=True)
    return SortedRows(rs, lrs, perm, valid, n_valid, last)


def canonical(s: SortedRows, x: Array) -> Array:
    """Replace each sorted value by the value at the end of its tie group (bit-identical ties)."""
    return jnp.take_along_axis(x, s.last, axis=-1)


def unsort(s: SortedRows, x: Array) -> Array:
    """Scatter sorted-order values `[B, n]` back to input order."""
    rows = lax.broadcasted_iota(jnp.int32, x.shape, 0)
    return jnp.zeros_like(x).at[rows, s.perm].set(x)


def finish(s: SortedRows, x: Array, k) -> Array:
    """Canonicalise ties, zero invalid samples and rows with n_valid < k, restore input order."""
    x = canonical(s, x)
    keep = s.valid & (s.n_valid[..., None] >= k)
    return unsort(s, jnp.where(keep, x, 0).astype(x.dtype))


def rows_view(x: Array) -> tuple[Array, tuple]:
    """Flatten `[..., n]` to `[B, n]`; return it and the leading shape."""
    lead = tuple(x.shape[:-1])
    return x.reshape((-1, x.shape[-1])), lead


# --------------------------------------------------------------------------------------------
# binomial weights in log space (never C(n, k) in floating point)
# --------------------------------------------------------------------------------------------

class Weights(NamedTuple):
    """log a_j, log b_j, log c_j for sorted positions j = 1..n (arrays [B, n], -inf where 0)."""
    log_a: Array
    log_b: Array
    log_c: Array


def log_weights(n_valid: Array, k, n: int, dtype) -> Weights:
    """Log of a_j = C(j-1,k-1)/C(n_v,k), b_j = C(j-2,k-2)/C(n_v,k), c_j = C(j-3,k-3)/C(n_v,k).

    n_valid: [B] int; k: int or scalar array (may be traced); returns three [B, n] arrays for
    j = 1..n, -inf where the binomial is zero or j > n_valid.  Rows with n_valid < k are garbage
    (callers zero them).
    """
    kf = jnp.asarray(k, dtype)
    nv = n_valid.astype(dtype)[:, None]                       # [B, 1]
    y = jnp.arange(1, n + 1, dtype=dtype)[None, :]            # y = 1..n
    # term_y = log(C(y-1, k-1) / C(y, k-1)) = log1p(-(k-1)/y), -inf when y <= k-1;
    # sum_{y=j}^{n_v-1} term_y = log C(j-1, k-1) / C(n_v-1, k-1)
    safe = y > kf - 1
    term = jnp.where(safe, jnp.log1p(-(kf - 1) / jnp.where(safe, y, 1)), -jnp.inf)
    term = jnp.where(y < nv, term, 0)                         # sum only y = j .. n_v - 1
    g = lax.cumsum(term, axis=1, reverse=True)                # g[j-1] = sum_{y>=j}
    log_a = g + jnp.log(kf) - jnp.log(jnp.maximum(nv, 1))   # C(n-1,k-1)/C(n,k) = k/n
    pos = jnp.arange(1, n + 1, dtype=dtype)[None, :]          # j
    valid = pos <= nv
    log_a = jnp.where(valid, log_a, -jnp.inf)
    neg = jnp.full_like(log_a, -jnp.inf)
    k_ge2 = kf >= 2
    log_b = jnp.where(k_ge2 & (pos >= 2),
                      log_a + jnp.log(jnp.maximum(kf - 1, 1)) - jnp.log(jnp.maximum(pos - 1, 1)), neg)
    k_ge3 = kf >= 3
    log_c = jnp.where(k_ge3 & (pos >= 3),
                      log_b + jnp.log(jnp.maximum(kf - 2, 1)) - jnp.log(jnp.maximum(pos - 2, 1)), neg)
    return Weights(log_a, log_b, log_c)


def suffix_sum(x: Array, *, exclusive: bool = True) -> Array:
    """Sum over later positions along the last axis (exclusive: strictly later)."""
    s = lax.cumsum(x, axis=x.ndim - 1, reverse=True)
    if exclusive:
        s = jnp.concatenate([s[..., 1:], jnp.zeros_like(s[..., :1])], axis=-1)
    return s


def prefix_sum(x: Array, *, exclusive: bool = True) -> Array:
    """Sum over earlier positions along the last axis (exclusive: strictly earlier)."""
    s = lax.cumsum(x, axis=x.ndim - 1)
    if exclusive:
        s = jnp.concatenate([jnp.zeros_like(s[..., :1]), s[..., :-1]], axis=-1)
    return s


def row_sum(x: Array, *, keepdims: bool = False) -> Array:
    """Sum over the last axis via lax.cumsum (a blocked tree scan on XLA CPU).

    A plain jnp.sum fused into a jit program may accumulate sequentially (2.5e-5 relative error
    for a mean of 65536 float32 values); the scan keeps it at ~1e-7.
    """
    s = lax.cumsum(x, axis=x.ndim - 1)[..., -1:]
    return s if keepdims else s[..., 0]


def gaps(s: SortedRows) -> Array:
    """gap[q] = r_(q) - r_(q-1) >= 0 for sorted valid positions q >= 1 (0 at q = 0 / invalid)."""
    g = jnp.concatenate([jnp.zeros_like(s.r[..., :1]), s.r[..., 1:] - s.r[..., :-1]], axis=-1)
    return jnp.where(s.valid, g, 0)


def row_min(s: SortedRows) -> Array:
    """Smallest valid reward per row `[B, 1]` (0 for rows without valid samples)."""
    return s.r[..., :1]


# --------------------------------------------------------------------------------------------
# standardisation helpers used by baselines
# --------------------------------------------------------------------------------------------

def masked_center(x: Array, mask: Array) -> Array:
    """x - mean(x over valid) per row; exactly 0 when all valid values are equal."""
    ref = jnp.min(jnp.where(mask, x, jnp.inf), axis=-1, keepdims=True)
    ref = jnp.where(jnp.isfinite(ref), ref, 0)
    d = jnp.where(mask, x - ref, 0)
    cnt = jnp.maximum(jnp.sum(mask, axis=-1, keepdims=True), 1).astype(x.dtype)
    return jnp.where(mask, d - row_sum(d, keepdims=True) / cnt, 0)


def masked_zscore(x: Array, mask: Array, *, eps: float, ddof: int) -> Array:
    """(x - mean) / (std + eps) over valid entries per row (eq. 5); 0 when all values are equal.

    A spread at float-rounding level (std <= 16 * machine-eps * max|x|) counts as a constant row
    and gives 0: values that are mathematically equal but computed along different paths (e.g.
    the exact off-policy transform with n_valid = k) must not turn rounding noise into O(1e-2)
    advantages after the division.
    """
    c = masked_center(x, mask)
    cnt = jnp.sum(mask, axis=-1, keepdims=True).astype(x.dtype)
    var = row_sum(c * c, keepdims=True) / jnp.maximum(cnt - ddof, 1)
    std = jnp.sqrt(var)
    scale = jnp.max(jnp.where(mask, jnp.abs(x), 0), axis=-1, keepdims=True)
    flat = std <= 16 * jnp.finfo(x.dtype).eps * scale
    return jnp.where(mask & ~flat, c / (std + eps), 0)
