"""Registry of advantage estimators with ONE call signature for all of them.

    fn = get_estimator(name, **options)
    adv = fn(rewards, *, k, log_ratio=None, mask=None, answer_ids=None)   # -> [..., n]

rewards [..., n] (n samples of a prompt on the last axis); k static int; log_ratio [..., n] =
log pi_theta(y) - log pi_old(y) per sequence (summed over completion tokens; recompute it at
every PPO iteration) -- ignored by estimators that do not need it, ValueError when a
log-ratio estimator gets None; mask [..., n] bool (False = sample excluded, e.g. sandbox_error:
it behaves as absent and gets 0; rows with fewer than k valid samples get all zeros -- count
them with `rows_below_k`); answer_ids [..., n] int, used only by `majority_vote` (the trainer
passes ids of each program's judged behaviour, `maxk_jax.rl.rollout.answer_ids`; -1 = undetermined,
masked out of the vote).

What each name computes (coefficient c_i of grad log pi(y_i), or the advantage A_i for PPO):

  grpo            z-score of rewards (max@k paper eq. 5); options eps=1e-6, ddof=0.
  rloo            r_i - mean_{j != i} r_j (Ahmadian et al. / Kool et al.).
  bon_max_mean    App. A (Chow et al.): r_i - mean(r) on samples attaining the row maximum, else 0.
  bon_max_second  App. A: r_i - (largest reward below the maximum) on maximal samples, else 0;
                  every tied maximum gets the advantage; all rewards equal -> all 0.
  bon_loo1        App. A BoN LOO-1: C(n,k)^-1 sum_{I ni i}(max r_I - max r_{I\\i}) (`loo1_advantage`).
  bon_mean        App. A "BoN mean": z-score of r~ (eq. 9); options eps, ddof.
  maxk            on-policy r~ (eq. 9) with a variance-reduction `baseline` (below).
  maxk_offpolicy  first-order off-policy r~' (§3.3), needs log_ratio; `baseline` (below).
  maxk_offpolicy_exact  exact importance-weighted eq. (10), needs log_ratio; `baseline` (below).
  tang_loo        Tang et al. eq. 2 for f = max (pass@k / max@k), any k <= n, subset-averaged.
                  Mathematically identical to bon_loo1 (the max@k paper attributes BoN LOO-1 to Tang).
  tang_loo_biased Tang et al. eq. 3 (mean-subtracted), subset-averaged.
  tang_leave_p_out Tang et al. App. B eq. 5; option p=1 (1 <= p <= k-1).
  tang_softmax    Tang et al. App. B softmax objective, LOO advantage; options beta=1.0,
                  biased=False, max_subsets=20000 (exact subset enumeration).
  majority_vote   Tang et al. §3.1 majority voting, LOO advantage; needs answer_ids; options
                  biased=False, max_subsets=20000.

Baseline of the maxk family (option `baseline`, default "zscore" = the paper as it ran):
  "zscore" z-score of the transform, GRPO's eq. 5 applied to r~ / r~' / the exact eq.-10
           transform (paper §3.1, §3.2 "all variance reduction techniques can be applied to the
           new reward", §4.3 "BoN mean", §4.5 "mean is preferable to LOO-1").  Biased (the row
           statistics depend on y_i) but scale-free: the update size does not depend on the reward
           scale, like GRPO's.  maxk(baseline="zscore") == bon_mean.  Use it to run the paper.
  "loo1"   subtract b_i = C(n,k)^-1 sum_{I ni i} w_I max r_{I\\i} with the estimator's own
           weights w_I (1, 1 + sum_I delta, prod_I rho).  b_i does not depend on y_i beyond the
           factor rho_i, so the estimator stays UNBIASED (exactly for maxk and
           maxk_offpolicy_exact, to first order for maxk_offpolicy).  The lowest-variance unbiased
           choice in closed form; use it when unbiasedness matters (bandits, analysis) -- its
           coefficients are ~k/n-scaled, so updates are much smaller than z-scored ones at the
           same learning rate.  maxk(baseline="loo1") == bon_loo1.  For k = 1 (no I \\ i) it
           falls back to the leave-one-out mean: w_i (r_i - mean_{j != i} r_j) / n, also unbiased.
  "none"   the raw transform (unbiased, high variance) -- Listing 2/3 of the paper.
  "mean"   subtract the row mean of the transform (biased, zero-sum).

Options `zero_flat_rows` and `zero_flat_transform` of the maxk family (both default False; Table 2's
isolations): the coefficients of a row are set to 0 when its valid rewards are all equal
(`zero_flat_rows`), or more generally when its on-policy transform r~ is flat (`zero_flat_transform`:
max - min of r~ over the valid samples <= 1e-5 * max |r~|) -- e.g. n = 8, k = 4 with five samples at
the row maximum: every k-subset holds a maximum, so r~ is the same for all eight and the on-policy
(z-scored) coefficients are 0, while the z-score of the off-policy r~' rescales its delta terms alone
to unit variance: coefficients that are pure importance-ratio noise, whatever the size of delta.

Option `clamp_delta` of the off-policy pair (paper Listing 3, "clamping deltas in case of
outliers"): None = off, or c > 0.  maxk_offpolicy clamps delta = rho - 1 to [-c, c] before forming
the weights 1 + sum_I delta; maxk_offpolicy_exact clamps rho to [1 - c, 1 + c].  Both are one clip
of the log-ratio to [log(max(1 - c, 0)), log(1 + c)].  Without a clamp a finite log-ratio above
~88 overflows float32: concrete inputs then raise ValueError naming the largest log-ratio; the
train step counts non-finite coefficients (metric ``nonfinite_coefficients``) and the RL loop
stops with an error -- never a silent inf/NaN.

Metadata (`estimator_info(name)`): which loss form a method uses by default, whether it needs
log-ratios, its minimum k.  Loss forms (maxk_jax.rl.losses.KINDS): "clipped" = PPO/GRPO's clipped
surrogate eq. 4 on the coefficients (what the paper's pipeline does for every method, incl.
off-policy BoN); "is_weighted" = sg(c_i) log pi(y_i) with the PPO trust-region mask, the
gradient of the §3.3 derivation (c_i already carries the importance weights, no extra ratio).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

import jax.numpy as jnp

from maxk_jax.estimators._core import (Array, check_finite, masked_center, masked_zscore,
                                      prepare_log_ratio, prepare_mask, prepare_rewards, rows_view,
                                      validate_k)
from maxk_jax.estimators._exact import (loo1_advantage_offpolicy_exact,
                                       maxk_reward_transform_offpolicy_exact)
from maxk_jax.estimators._maxk import (loo1_advantage, loo1_advantage_offpolicy,
                                      maxk_reward_transform, maxk_reward_transform_offpolicy)
from maxk_jax.estimators._tang import (majority_vote_advantage, tang_leave_p_out_advantage,
                                      tang_loo_biased_advantage, tang_softmax_advantage)

EstimatorFn = Callable[..., Array]
BASELINES = ("loo1", "none", "mean", "zscore")
SCALES = ("none", "batch_rms", "loo_rms")
UNBIASED_BASELINES = ("loo1", "none")   # the maxk family's baselines whose expected update is exact


@dataclass(frozen=True)
class EstimatorInfo:
    """What the trainer needs to know about a registered estimator.

    loss_form: default loss form ("clipped" | "is_weighted", see module docstring);
    needs_log_ratio: True if the estimator reads ``log_ratio`` (behaviour log-ratios, recomputed at
    every PPO iteration); needs_answer_ids: True if it reads ``answer_ids``; min_k: smallest k.
    """

    name: str
    summary: str
    loss_form: str = "clipped"
    needs_log_ratio: bool = False
    needs_answer_ids: bool = False
    min_k: int = 1


@dataclass(frozen=True)
class _Spec:
    build: Callable[..., EstimatorFn]
    defaults: dict
    summary: str
    needs_log_ratio: bool = False
    needs_answer_ids: bool = False
    min_k: int = 1


def _common(rewards, k, mask, *, name: str, min_k: int = 1):
    r = prepare_rewards(rewards)
    k = validate_k(k, r.shape[-1], minimum=min_k)
    m = prepare_mask(mask, r.shape)
    check_finite(r, name="rewards", mask=m)
    keep = m & (jnp.sum(m, axis=-1, keepdims=True) >= k)
    return r, k, m, keep


def _row_range(x: Array, m: Array) -> tuple[Array, Array]:
    """([..., 1], [..., 1]): the max and min of each row of x [..., n] over its valid samples m."""
    hi = jnp.max(jnp.where(m, x, -jnp.inf), axis=-1, keepdims=True)
    lo = jnp.min(jnp.where(m, x, jnp.inf), axis=-1, keepdims=True)
    return hi, lo


def _flat_transform(r: Array, k: int, m: Array) -> Array:
    """[..., 1] bool: the row's on-policy max@k transform r~ (valid samples) is flat to 1e-5 relative."""
    hi, lo = _row_range(maxk_reward_transform(r, k, mask=m), m)
    return hi - lo <= 1e-5 * jnp.maximum(jnp.abs(hi), jnp.abs(lo))


def _rloo(r: Array, m: Array) -> Array:
    cnt = jnp.sum(m, axis=-1, keepdims=True).astype(r.dtype)
    return jnp.where(cnt > 1, masked_center(r, m) * cnt / jnp.maximum(cnt - 1, 1), 0)


# ------------------------------------------------------------------ simple baselines ---------

def _check_zscore_options(eps: float, ddof: int) -> None:
    if not (isinstance(eps, (int, float)) and eps >= 0):
        raise ValueError(f"eps must be a number >= 0, got eps={eps!r}")
    if ddof not in (0, 1):
        raise ValueError(f"ddof must be 0 or 1, got ddof={ddof!r}")


def _build_grpo(eps: float, ddof: int) -> EstimatorFn:
    _check_zscore_options(eps, ddof)
    def grpo(rewards, *, k, log_ratio=None, mask=None, answer_ids=None):
        """GRPO z-score advantage (eq. 5) [..., n]; k only selects rows with >= k valid samples."""
        r, k, m, keep = _common(rewards, k, mask, name="grpo")
        return jnp.where(keep, masked_zscore(r, m, eps=eps, ddof=ddof), 0)
    return grpo


def _build_rloo() -> EstimatorFn:
    def rloo(rewards, *, k, log_ratio=None, mask=None, answer_ids=None):
        """RLOO advantage r_i - mean_{j != i} r_j [..., n] (0 for rows with one valid sample)."""
        r, k, m, keep = _common(rewards, k, mask, name="rloo")
        return jnp.where(keep, _rloo(r, m), 0)
    return rloo


def _build_bon_max(second: bool, divide_std: bool = False) -> EstimatorFn:
    if not isinstance(divide_std, bool):
        raise ValueError(f"divide_std must be a bool, got divide_std={divide_std!r}")

    def bon_max(rewards, *, k, log_ratio=None, mask=None, answer_ids=None):
        """BoN-max advantage (App. A) [..., n]: only samples attaining the row maximum are non-zero
        (r_i - mean, or with ``divide_std`` (r_i - mean) / std: §4.3's "as in vanilla GRPO")."""
        r, k, m, keep = _common(rewards, k, mask, name="bon_max")
        rmax = jnp.max(jnp.where(m, r, -jnp.inf), axis=-1, keepdims=True)
        top = m & (r == rmax)
        if second:
            r2 = jnp.max(jnp.where(m & ~top, r, -jnp.inf), axis=-1, keepdims=True)
            adv = jnp.where(top & jnp.isfinite(r2), r - jnp.where(jnp.isfinite(r2), r2, 0), 0)
        else:
            centred = masked_zscore(r, m, eps=1e-6, ddof=0) if divide_std else masked_center(r, m)
            adv = jnp.where(top, centred, 0)
        return jnp.where(keep, adv, 0)
    bon_max.__name__ = "bon_max_second" if second else "bon_max_mean"
    return bon_max


def _build_bon_mean(eps: float, ddof: int) -> EstimatorFn:
    return _build_maxk("onpolicy", baseline="zscore", eps=eps, ddof=ddof)


# ------------------------------------------------------------------ max@k family ------------

def _check_clamp_delta(clamp_delta: float | None) -> None:
    if clamp_delta is None:
        return
    if isinstance(clamp_delta, bool) or not isinstance(clamp_delta, (int, float)) or not (
            math.isfinite(clamp_delta) and clamp_delta > 0):
        raise ValueError(f"clamp_delta must be None (off) or a finite number > 0, got "
                         f"clamp_delta={clamp_delta!r}")


def clamp_log_ratio(log_ratio: Array, clamp_delta: float | None) -> Array:
    """Clip log_ratio [..., n] so that delta = exp(log_ratio) - 1 lies in [-c, c] (c = clamp_delta;
    equivalently rho in [max(1 - c, 0), 1 + c]); None returns it unchanged."""
    if clamp_delta is None:
        return log_ratio
    lo = math.log1p(-clamp_delta) if clamp_delta < 1 else -jnp.inf
    return jnp.clip(log_ratio, lo, math.log1p(clamp_delta))


def batch_scale(coef: Array, mask: Array, mode: str) -> Array:
    """Divide coefficients [..., n] by ONE batch-level scale (option ``scale`` of the maxk family).

    The scale is the RMS of the coefficients over the valid samples (``mask``) of the *signal rows*
    (rows with a non-zero coefficient) of the whole call -- every leading index, i.e. one
    micro-batch in the train step.  "batch_rms": that RMS, the same for every row; "loo_rms": row b
    is divided by the RMS over the OTHER rows only (its own row's when no other row has a signal),
    so row b's scale does not depend on row b's samples and, with independent rows, its expected
    update is the unbiased one times E[1/scale] > 0.  "none": unchanged.  A call whose coefficients
    are all 0 stays 0."""
    if mode == "none":
        return coef
    rows, lead = rows_view(coef)
    m = jnp.broadcast_to(mask, coef.shape).reshape(rows.shape)
    sq = jnp.where(m, rows * rows, 0)
    signal = jnp.any(m & (rows != 0), axis=-1)
    row_sq = jnp.where(signal, jnp.sum(sq, axis=-1), 0)
    row_cnt = jnp.where(signal, jnp.sum(m, axis=-1), 0).astype(rows.dtype)
    tot_sq, tot_cnt = jnp.sum(row_sq), jnp.sum(row_cnt)
    tiny = jnp.finfo(rows.dtype).tiny
    own = jnp.sqrt(tot_sq / jnp.maximum(tot_cnt, 1))
    if mode == "batch_rms":
        scale = jnp.broadcast_to(own, row_sq.shape)
    else:
        other_sq, other_cnt = tot_sq - row_sq, tot_cnt - row_cnt
        other = jnp.sqrt(jnp.maximum(other_sq, 0) / jnp.maximum(other_cnt, 1))
        scale = jnp.where((other_cnt > 0) & (other > tiny), other, own)
    out = jnp.where(scale[:, None] > tiny, rows / jnp.maximum(scale, tiny)[:, None], 0)
    return out.reshape(lead + (coef.shape[-1],))


def _build_maxk(kind: str, baseline: str, eps: float, ddof: int,
                clamp_delta: float | None = None, zero_flat_rows: bool = False,
                zero_flat_transform: bool = False, scale: str = "none") -> EstimatorFn:
    if baseline not in BASELINES:
        raise ValueError(f"baseline must be one of {BASELINES}, got baseline={baseline!r}")
    if scale not in SCALES:
        raise ValueError(f"scale must be one of {SCALES}, got scale={scale!r}")
    for option, value in (("zero_flat_rows", zero_flat_rows), ("zero_flat_transform", zero_flat_transform)):
        if not isinstance(value, bool):
            raise ValueError(f"{option} must be a bool, got {option}={value!r}")
    _check_zscore_options(eps, ddof)
    _check_clamp_delta(clamp_delta)
    needs_lr = kind != "onpolicy"
    name = {"onpolicy": "maxk", "first_order": "maxk_offpolicy", "exact": "maxk_offpolicy_exact"}[kind]

    def maxk(rewards, *, k, log_ratio=None, mask=None, answer_ids=None):
        """max@k policy-gradient coefficients [..., n] (see module docstring for the baseline)."""
        r, k, m, keep = _common(rewards, k, mask, name=name)
        lr = prepare_log_ratio(log_ratio, r.shape, required=needs_lr, estimator=name)
        if zero_flat_rows:   # rows whose valid rewards are all equal carry no signal, only delta noise
            hi, lo = _row_range(r, m)
            keep = keep & (hi > lo)
        if zero_flat_transform:   # rows whose on-policy r~ is flat: 0 on-policy, delta noise off-policy
            keep = keep & ~_flat_transform(r, k, m)
        if needs_lr:
            lr = clamp_log_ratio(lr, clamp_delta)
            out = _coefficients(r, lr, k, m)
            check_finite(out, name=f"{name} coefficients", mask=m, log_ratio=lr)
            return batch_scale(jnp.where(keep, out, 0), keep, scale)
        return batch_scale(jnp.where(keep, _coefficients(r, lr, k, m), 0), keep, scale)

    def _coefficients(r, lr, k, m):
        if baseline == "loo1" and k >= 2:
            if kind == "onpolicy":
                out = loo1_advantage(r, k, mask=m)
            elif kind == "first_order":
                out = loo1_advantage_offpolicy(r, lr, k, mask=m)
            else:
                out = loo1_advantage_offpolicy_exact(r, lr, k, mask=m)
            return out
        if kind == "onpolicy":
            raw = maxk_reward_transform(r, k, mask=m)
            weight = jnp.ones_like(r)
        elif kind == "first_order":
            raw = maxk_reward_transform_offpolicy(r, lr, k, mask=m)
            weight = jnp.expm1(lr.astype(r.dtype)) + 1
        else:
            raw = maxk_reward_transform_offpolicy_exact(r, lr, k, mask=m)
            weight = jnp.exp(lr.astype(r.dtype))
        if baseline == "none":
            out = raw
        elif baseline == "mean":
            out = masked_center(raw, m)
        elif baseline == "zscore":
            out = masked_zscore(raw, m, eps=eps, ddof=ddof)
        else:  # "loo1" with k = 1: leave-one-out mean baseline, weighted like the estimator
            cnt = jnp.sum(m, axis=-1, keepdims=True).astype(r.dtype)
            out = weight * _rloo(r, m) / jnp.maximum(cnt, 1)
        return out
    maxk.__name__ = name
    return maxk


# ------------------------------------------------------------------ Tang et al. --------------

def _build_tang_loo() -> EstimatorFn:
    def tang_loo(rewards, *, k, log_ratio=None, mask=None, answer_ids=None):
        """Tang et al. eq. 2 (f = max) averaged over k-subsets [..., n]; k >= 2."""
        return loo1_advantage(rewards, k, mask=mask)
    return tang_loo


def _build_tang_loo_biased() -> EstimatorFn:
    def tang_loo_biased(rewards, *, k, log_ratio=None, mask=None, answer_ids=None):
        """Tang et al. eq. 3 (f = max, mean-subtracted) averaged over k-subsets [..., n]; k >= 2."""
        return tang_loo_biased_advantage(rewards, k, mask=mask)
    return tang_loo_biased


def _build_leave_p_out(p: int) -> EstimatorFn:
    def tang_leave_p_out(rewards, *, k, log_ratio=None, mask=None, answer_ids=None):
        """Tang et al. App. B leave-p-out (f = max) averaged over k-subsets [..., n]; 1 <= p < k."""
        return tang_leave_p_out_advantage(rewards, k, p, mask=mask)
    return tang_leave_p_out


def _build_softmax(beta: float, biased: bool, max_subsets: int) -> EstimatorFn:
    def tang_softmax(rewards, *, k, log_ratio=None, mask=None, answer_ids=None):
        """Tang et al. App. B softmax objective, LOO advantage [..., n]; k >= 2."""
        return tang_softmax_advantage(rewards, k, beta=beta, biased=biased, mask=mask,
                                      max_subsets=max_subsets)
    return tang_softmax


def _build_majority(biased: bool, max_subsets: int) -> EstimatorFn:
    def majority_vote(rewards, *, k, log_ratio=None, mask=None, answer_ids=None):
        """Tang et al. majority-voting objective, LOO advantage [..., n]; needs answer_ids; k >= 2."""
        if answer_ids is None:
            raise ValueError("majority_vote needs answer_ids=[..., n] (int id of each sample's final "
                             "answer), got answer_ids=None")
        return majority_vote_advantage(rewards, answer_ids, k, biased=biased, mask=mask,
                                       max_subsets=max_subsets)
    return majority_vote


_ZS = dict(eps=1e-6, ddof=0)
_MAXK = dict(baseline="zscore", eps=1e-6, ddof=0, zero_flat_rows=False, zero_flat_transform=False, scale="none")
# Default clamp of the off-policy pair: see "clamp_delta" in docs/results/laptop_table2.md for the measurement.
DEFAULT_CLAMP_DELTA = 1.0
_MAXK_OFF = dict(_MAXK, clamp_delta=DEFAULT_CLAMP_DELTA)
_REGISTRY: dict[str, _Spec] = {
    "grpo": _Spec(_build_grpo, _ZS, "z-scored rewards (eq. 5)"),
    "rloo": _Spec(_build_rloo, {}, "leave-one-out mean baseline"),
    "bon_max_mean": _Spec(lambda **o: _build_bon_max(False, **o), dict(divide_std=False),
                          "BoN-max, mean baseline (App. A)"),
    "bon_max_second": _Spec(lambda: _build_bon_max(True), {}, "BoN-max, second-best baseline (App. A)"),
    "bon_loo1": _Spec(_build_tang_loo, {}, "BoN LOO-1 (App. A)", min_k=2),
    "bon_mean": _Spec(_build_bon_mean, _ZS, "z-scored max@k transform r~ (App. A)"),
    "maxk": _Spec(lambda **o: _build_maxk("onpolicy", **o), _MAXK, "on-policy max@k r~ (eq. 9)"),
    "maxk_offpolicy": _Spec(lambda **o: _build_maxk("first_order", **o), _MAXK_OFF,
                            "first-order off-policy max@k (§3.3)", needs_log_ratio=True),
    "maxk_offpolicy_exact": _Spec(lambda **o: _build_maxk("exact", **o), _MAXK_OFF,
                                  "exact off-policy max@k (eq. 10)", needs_log_ratio=True),
    "tang_loo": _Spec(_build_tang_loo, {}, "Tang eq. 2, f = max", min_k=2),
    "tang_loo_biased": _Spec(_build_tang_loo_biased, {}, "Tang eq. 3, f = max", min_k=2),
    "tang_leave_p_out": _Spec(_build_leave_p_out, dict(p=1), "Tang App. B leave-p-out", min_k=2),
    "tang_softmax": _Spec(_build_softmax, dict(beta=1.0, biased=False, max_subsets=20000),
                          "Tang App. B softmax objective", min_k=2),
    "majority_vote": _Spec(_build_majority, dict(biased=False, max_subsets=20000),
                           "Tang §3.1 majority voting", needs_answer_ids=True, min_k=2),
}


@dataclass(frozen=True)
class UpdateClaim:
    """What the docs claim about the expected update E[sum_i c_i grad log pi(y_i)] of a setting.

    objective: the objective whose gradient it estimates -- "max@k", "max@(k-p)" (leave-p-out),
    "mean" (= max@1), "tang_eq4" (Tang's eq. 4: E[(k-1)/k r_(k) + 1/k r_(k-1)]) or "own" (an
    objective of its own: softmax, majority vote); on_policy: unbiased for it with samples from
    pi_theta (log_ratio = 0); off_policy: "exact" / "first_order" (in delta) with samples from mu
    and log_ratio = log pi_theta/mu, "no" otherwise; unit_scale: the factor is exactly 1 (per row,
    summed over its samples), else some positive scalar; clamped: a clamp_delta is set (unbiased
    only while no ratio reaches it); needs_rows: the claim needs >= 2 independent rows per call
    (scale="loo_rms")."""

    objective: str
    on_policy: bool
    off_policy: str = "no"
    unit_scale: bool = False
    clamped: bool = False
    needs_rows: bool = False


_OFF_KIND = {"maxk": "no", "maxk_offpolicy": "first_order", "maxk_offpolicy_exact": "exact"}


def update_claim(name: str, **options: Any) -> UpdateClaim:
    """The documented `UpdateClaim` of estimator `name` with `options` (the registry's defaults
    for unset ones); the test of tests/rl/test_exactness.py checks every claim exactly."""
    spec = _spec(name)
    o = {**spec.defaults, **options}
    if name in _OFF_KIND:
        unbiased = (o["baseline"] in UNBIASED_BASELINES and not o["zero_flat_rows"]
                    and not o["zero_flat_transform"] and o["scale"] in ("none", "loo_rms"))
        return UpdateClaim("max@k", unbiased, _OFF_KIND[name] if unbiased else "no",
                           unit_scale=unbiased and o["scale"] == "none",
                           clamped=o.get("clamp_delta") is not None, needs_rows=o["scale"] == "loo_rms")
    if name in ("bon_loo1", "tang_loo"):
        return UpdateClaim("max@k", True, unit_scale=True)
    if name == "rloo":
        return UpdateClaim("mean", True)
    if name == "tang_leave_p_out":
        return UpdateClaim("max@(k-p)", True)
    if name == "tang_loo_biased":
        return UpdateClaim("tang_eq4", True)
    if name in ("tang_softmax", "majority_vote"):
        return UpdateClaim("own", not o["biased"])
    return UpdateClaim("max@k" if name.startswith("bon") else "mean", False)   # grpo, bon_max_*, bon_mean


def behaviour_refusal(name: str, **options: Any) -> str | None:
    """None when estimator `name` with `options` may take the behaviour log-ratio (its expected
    update stays grad max@k up to a positive scalar under a stale sampler), else ONE line saying
    what to use instead."""
    claim = update_claim(name, **options)
    if claim.off_policy in ("exact", "first_order"):
        return None
    o = {**_spec(name).defaults, **options}
    bad = [f"baseline={o['baseline']!r}"] if o.get("baseline") not in UNBIASED_BASELINES else []
    bad += [f"scale={o['scale']!r}"] if o.get("scale") not in ("none", "loo_rms") else []
    bad += [f"{key}=True" for key in ("zero_flat_rows", "zero_flat_transform") if o.get(key)]
    return (f"{name} with {', '.join(bad) or 'these options'} has a biased "
            f"expected update under importance weights; use baseline='loo1' with scale='loo_rms' "
            f"(method maxk_offpolicy_exact_loo1_rms) or stale_correction='tis'")


def list_estimators() -> tuple[str, ...]:
    """Names accepted by `get_estimator`, sorted."""
    return tuple(sorted(_REGISTRY))


def estimator_options(name: str) -> dict:
    """Default options of estimator `name` (a copy)."""
    return dict(_spec(name).defaults)


def estimator_info(name: str) -> EstimatorInfo:
    """Metadata of estimator `name` (loss form, log-ratio / answer-id needs, minimum k)."""
    spec = _spec(name)
    return EstimatorInfo(name=name, summary=spec.summary, needs_log_ratio=spec.needs_log_ratio,
                         needs_answer_ids=spec.needs_answer_ids, min_k=spec.min_k)


def _spec(name: str) -> _Spec:
    if name not in _REGISTRY:
        raise ValueError(f"unknown estimator {name!r}; valid names: {', '.join(list_estimators())}")
    return _REGISTRY[name]


def get_estimator(name: str, **options: Any) -> EstimatorFn:
    """Estimator `name` configured with `options`; returns fn(rewards, *, k, log_ratio=None,
    mask=None, answer_ids=None) -> advantages [..., n].  Unknown names/options -> ValueError."""
    spec = _spec(name)
    unknown = sorted(set(options) - set(spec.defaults))
    if unknown:
        valid = ", ".join(sorted(spec.defaults)) or "none"
        raise ValueError(f"estimator {name!r} got unknown option(s) {unknown}; valid options: {valid}")
    fn = spec.build(**{**spec.defaults, **options})
    fn.__qualname__ = fn.__name__ = name
    return fn
