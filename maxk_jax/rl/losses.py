"""Policy losses for PPO-style RL fine-tuning: clipped surrogate, IS-weighted form, KL, entropy.

Pure ``jax.numpy``; every input is an explicit array, every function is jit/vmap/grad friendly.
Nothing here knows about the model or the estimators: ``training.py`` wires them together.

Shapes and conventions (B = sequences in the batch, T = completion positions, V = vocabulary)
-------------------------------------------------------------------------------------------
* ``logp``      [B, T] float32 — log π_θ(y_{b,t} | x_b, y_{b,<t}) of the *sampled* tokens under
  the current parameters (differentiated).
* ``old_logp``  [B, T] — log π_old of the same tokens, as reported by the sampler (the
  distribution actually sampled from).  Treated as a constant.
* ``ref_logp``  [B, T] — log π_ref (frozen reference policy) for the KL penalty.  Constant.
* ``mask``      [B, T] bool (or 0/1) — True for completion tokens that count.  Prompt tokens,
  padding after EOS and whole samples the trainer drops (e.g. ``sandbox_error``) are False.
  Values at masked positions are never read: NaN/inf there change neither the loss nor the
  gradient (inputs are replaced by 0 with ``jnp.where`` *before* any arithmetic).
* ``advantages`` [B] — one scalar per sequence: A_i (clipped surrogate) or the estimator
  coefficient c_i (IS-weighted form).  Treated as a constant (``stop_gradient``).
* ``logits``    [B, T, V] — ``logits[b, t]`` is the distribution that produced token ``t`` (same
  alignment as ``logp``; already divided by the sampling temperature if one was used).

Per-token terms (ρ_t = exp(logp_t − old_logp_t), ε_l = ``eps_low``, ε_h = ``eps_high``)
------------------------------------------------------------------------------------
* clipped surrogate (max@k paper eq. 4, GRPO; token-level ratios as in GRPO implementations;
  asymmetric ε_h as in DAPO):  ℓ_t = −min(ρ_t A, clip(ρ_t, 1−ε_l, 1+ε_h) A).
  ∂ℓ_t/∂logp_t = −ρ_t A, except 0 on the *clipped* tokens
  C = {A > 0 ∧ ρ_t > 1+ε_h} ∪ {A < 0 ∧ ρ_t < 1−ε_l}.
* IS-weighted form (paper §3.3, eq. 10 and its first-order version):
  ℓ_t = −sg(c) · logp_t · 1[t ∉ C], with C defined exactly as above (A replaced by c).
  Its gradient is −c ∇logp_t on unclipped tokens — NOT multiplied by ρ_t: the estimator's
  c_i already contains the importance weights.
  At ρ = 1 (first PPO iteration) it equals the clipped surrogate's gradient −ρ_t A ∇logp_t
  exactly; off-policy, both zero the gradient on the same token set C (the PPO trust region).
  The *value* of this term is only a gradient carrier (Σ c · logp), not an objective estimate.
* KL to the reference (Schulman's estimators, with log r_t = ref_logp_t − logp_t, samples from
  π_old ≈ π_θ):  k1 = −log r,  k2 = ½ (log r)²,  k3 = r − 1 − log r  (≥ 0; the GRPO default).
  Added as  + β · agg(k).
* entropy H_t = −Σ_v p_v log p_v from ``logits`` in float32; added as − entropy_coef · agg(H).

Aggregation ``agg`` of a per-token quantity q [B, T] (n_seq = rows with ≥ 1 counted token)
-----------------------------------------------------------------------------------------
* ``"token"``:        Σ_{b,t} m q / Σ_{b,t} m                                   (DAPO token mean)
* ``"sequence"``:     (1/n_seq) Σ_b [Σ_t m q / Σ_t m]                   (GRPO original, eq. 4)
* ``"seq_sum_norm"``: (1/n_seq) Σ_b Σ_t m q / L, L = ``LossConfig.norm_length`` fixed (Dr.GRPO)
An all-masked batch aggregates to 0 (there is nothing to learn from), never NaN.
With ``"seq_sum_norm"`` the IS-weighted gradient is exactly −(1/(n_seq L)) Σ_i c_i ∇log π(y_i)
(the paper's estimator up to a constant); ``"token"``/``"sequence"`` reweight sequences by length.

Use in a PPO iteration (what ``training.py`` is expected to do)
---------------------------------------------------------------
Off-policy estimators need the sequence log-ratio recomputed under the *current* parameters at
every PPO iteration; one forward pass serves both::

    def loss_fn(params):
        logits = model_logits(params, batch.tokens)            # [B, T, V]
        logp = token_logprobs(logits, batch.targets)           # [B, T]
        log_ratio = sequence_log_ratio(jax.lax.stop_gradient(logp), batch.old_logp, batch.mask)
        coef = estimator(batch.rewards, k=k, log_ratio=log_ratio.reshape(P, n)).reshape(-1)
        return policy_loss(logp, batch.old_logp, coef, batch.mask, config,
                           ref_logp=batch.ref_logp, logits=logits)
    (loss, metrics), grads = jax.value_and_grad(loss_fn, has_aux=True)(params)

``config`` is a frozen, hashable ``LossConfig``: close over it or pass it as a static argument.

Ratios are exp(logp − old_logp) without clamping.  Clipped tokens never see the overflowing
branch (zero gradient even for ρ = inf); an *unclipped* token with log-ratio > ~88 (A < 0,
ρ → inf) gives an inf loss/gradient rather than being silently clamped — with PPO-sized steps
this does not happen, and an inf loss is the signal that it did.
"""
from __future__ import annotations

import dataclasses
import math
import numbers

import jax
import jax.numpy as jnp

KINDS = ("clipped", "is_weighted")
KL_ESTIMATORS = ("k1", "k2", "k3")
AGGREGATIONS = ("token", "sequence", "seq_sum_norm")
RATIO_LEVELS = ("token", "sequence")   # ρ_t per token, or the paper's eq. 4 ρ_i = π_θ(y_i|x) / π_old(y_i|x)
KL_TARGETS = ("reference", "old")      # KL to the frozen initial policy, or to π_old (eq. 4 as printed)


@dataclasses.dataclass(frozen=True)
class LossConfig:
    """Static loss settings (hashable; safe as a jit static argument).

    kind: "clipped" (PPO/GRPO surrogate, on-policy-type advantages) or "is_weighted"
      (−sg(c)·logp with the trust-region mask, for off-policy max@k coefficients).
    eps_low, eps_high: trust region [1 − eps_low, 1 + eps_high] for token ratios (paper: 0.2;
      DAPO uses eps_high = 0.28).  0 < eps_low < 1, eps_high > 0.
    kl_beta: β ≥ 0 for the KL penalty to the reference (paper: 0.01; 0 disables the term).
    kl_estimator: "k1" | "k2" | "k3".
    aggregation: "token" | "sequence" | "seq_sum_norm".
    entropy_coef: ≥ 0, weight of the entropy bonus (needs ``logits``).
    norm_length: the fixed length L of "seq_sum_norm" (e.g. max_new_tokens); required there.
    ratio_level: "token" (ρ_t = π_θ(y_t|·)/π_old(y_t|·) per token, clipped per token) or
      "sequence" (the max@k paper's eq. 4: ρ_i = π_θ(y_i|x)/π_old(y_i|x), the product over the
      sequence, clipped once per sequence and shared by its tokens).
    kl_target: "reference" (the frozen initial policy, needs ``ref_logp``) or "old" (π_old, as eq. 4
      prints it: the KL term uses ``old_logp``).
    """

    kind: str = "clipped"
    eps_low: float = 0.2
    eps_high: float = 0.2
    kl_beta: float = 0.0
    kl_estimator: str = "k3"
    aggregation: str = "sequence"
    entropy_coef: float = 0.0
    norm_length: int | None = None
    ratio_level: str = "token"
    kl_target: str = "reference"

    @property
    def needs_reference(self) -> bool:
        """Whether the loss needs the frozen reference policy's log-probs (a KL term to it)."""
        return self.kl_beta > 0 and self.kl_target == "reference"

    def __post_init__(self) -> None:
        if self.ratio_level not in RATIO_LEVELS:
            raise ValueError(f"LossConfig.ratio_level={self.ratio_level!r} is not one of {RATIO_LEVELS}")
        if self.kl_target not in KL_TARGETS:
            raise ValueError(f"LossConfig.kl_target={self.kl_target!r} is not one of {KL_TARGETS}")
        if self.kind not in KINDS:
            raise ValueError(f"LossConfig.kind={self.kind!r} is not one of {KINDS}")
        if self.kl_estimator not in KL_ESTIMATORS:
            raise ValueError(
                f"LossConfig.kl_estimator={self.kl_estimator!r} is not one of {KL_ESTIMATORS}")
        if self.aggregation not in AGGREGATIONS:
            raise ValueError(
                f"LossConfig.aggregation={self.aggregation!r} is not one of {AGGREGATIONS}")
        _check_eps(self.eps_low, self.eps_high)
        for name in ("kl_beta", "entropy_coef"):
            value = getattr(self, name)
            if not (isinstance(value, numbers.Real) and math.isfinite(value) and value >= 0):
                raise ValueError(f"LossConfig.{name}={value!r} must be a finite number >= 0")
        if self.norm_length is not None and (
                not isinstance(self.norm_length, int) or isinstance(self.norm_length, bool)
                or self.norm_length <= 0):
            raise ValueError(f"LossConfig.norm_length={self.norm_length!r} must be an int > 0")
        if self.aggregation == "seq_sum_norm" and self.norm_length is None:
            raise ValueError("LossConfig.aggregation='seq_sum_norm' needs norm_length (the fixed "
                             "maximum completion length), got norm_length=None")


def _check_eps(eps_low: float, eps_high: float) -> None:
    """Raise ValueError unless 0 < eps_low < 1 and eps_high > 0 (finite floats)."""
    if not (isinstance(eps_low, numbers.Real) and math.isfinite(eps_low) and 0 < eps_low < 1):
        raise ValueError(f"eps_low={eps_low!r} must satisfy 0 < eps_low < 1")
    if not (isinstance(eps_high, numbers.Real) and math.isfinite(eps_high) and eps_high > 0):
        raise ValueError(f"eps_high={eps_high!r} must be a finite number > 0")


def _check_tokens(name: str, x: jax.Array, mask: jax.Array) -> None:
    """Raise ValueError unless ``x`` is [B, T] with the shape of ``mask``."""
    if mask.ndim != 2:
        raise ValueError(f"mask must be [B, T], got shape {mask.shape}")
    if x.shape != mask.shape:
        raise ValueError(f"{name} has shape {x.shape}, expected mask's shape {mask.shape}")


def _check_per_sequence(name: str, x: jax.Array, mask: jax.Array) -> None:
    """Raise ValueError unless ``x`` is [B] matching ``mask`` [B, T]."""
    if x.shape != mask.shape[:1]:
        raise ValueError(f"{name} has shape {x.shape}, expected [B] = {mask.shape[:1]}")


def _bool_mask(mask: jax.Array) -> jax.Array:
    """mask [B, T] (bool or 0/1) -> bool [B, T]."""
    return mask if mask.dtype == jnp.bool_ else mask != 0


def _masked(x: jax.Array, mask: jax.Array) -> jax.Array:
    """x [B, T] as float32 with masked-out entries replaced by 0 (no NaN leaks into grads)."""
    return jnp.where(mask, x.astype(jnp.float32), 0.0)


def sequence_log_ratio(logp: jax.Array, old_logp: jax.Array, mask: jax.Array) -> jax.Array:
    """Σ_t mask·(logp − old_logp): [B, T] x3 -> [B] = log π_θ(y_b)/π_old(y_b).

    This is the ``log_ratio`` the off-policy estimators take; recompute it at every PPO
    iteration (pass ``stop_gradient(logp)`` so the coefficients stay constants).
    """
    _check_tokens("logp", logp, mask)
    _check_tokens("old_logp", old_logp, mask)
    m = _bool_mask(mask)
    return jnp.sum(_masked(logp, m) - _masked(old_logp, m), axis=-1)


def level_log_ratio(logp: jax.Array, old_logp: jax.Array, mask: jax.Array, level: str = "token") -> jax.Array:
    """log ρ at each counted token [B, T] (0 where masked): the token's own log-ratio ("token"), or
    its sequence's summed log-ratio log π_θ(y|x) − log π_old(y|x) shared by every token of the
    sequence ("sequence")."""
    _check_tokens("logp", logp, mask)
    _check_tokens("old_logp", old_logp, mask)
    if level not in RATIO_LEVELS:
        raise ValueError(f"level={level!r} is not one of {RATIO_LEVELS}")
    m = _bool_mask(mask)
    per_token = _masked(logp, m) - _masked(old_logp, m)
    if level == "token":
        return per_token
    return jnp.where(m, jnp.sum(per_token, axis=-1, keepdims=True), 0.0)


def trust_region_mask(ratio: jax.Array, advantages: jax.Array, mask: jax.Array,
                      eps_low: float, eps_high: float) -> jax.Array:
    """bool [B, T]: counted tokens whose gradient the clipped surrogate keeps (t ∉ C).

    C = {A_b > 0 ∧ ρ_t > 1+eps_high} ∪ {A_b < 0 ∧ ρ_t < 1−eps_low}; ratio [B, T], advantages [B].
    """
    _check_eps(eps_low, eps_high)
    _check_tokens("ratio", ratio, mask)
    _check_per_sequence("advantages", advantages, mask)
    a = advantages[:, None]
    clipped = ((a > 0) & (ratio > 1.0 + eps_high)) | ((a < 0) & (ratio < 1.0 - eps_low))
    return _bool_mask(mask) & ~clipped


def clipped_surrogate(logp: jax.Array, old_logp: jax.Array, advantages: jax.Array,
                      mask: jax.Array, eps_low: float, eps_high: float, level: str = "token") -> jax.Array:
    """Per-token −min(ρ_t A, clip(ρ_t, 1−eps_low, 1+eps_high) A): [B, T] (0 where masked).

    logp, old_logp, mask [B, T]; advantages [B] (stop-gradient).  Paper eq. 4 / GRPO / DAPO.
    Evaluated in the equivalent form −ρ_t A on kept tokens and the constant −clip(ρ_t) A on the
    clipped set C (where the min picks the clipped branch), so a clipped token whose ratio
    overflows float32 gives a zero gradient instead of 0·inf = NaN. level: the ratio's level
    (`level_log_ratio`); "sequence" = eq. 4's ρ_i on every token of sequence i.
    """
    _check_eps(eps_low, eps_high)
    _check_per_sequence("advantages", advantages, mask)
    m = _bool_mask(mask)
    log_ratio = level_log_ratio(logp, old_logp, m, level)
    a = jax.lax.stop_gradient(advantages.astype(jnp.float32))
    keep = trust_region_mask(jax.lax.stop_gradient(jnp.exp(log_ratio)), a, m, eps_low, eps_high)
    ratio_kept = jnp.exp(jnp.where(keep, log_ratio, 0.0))
    clipped_value = jnp.clip(jax.lax.stop_gradient(jnp.exp(log_ratio)), 1.0 - eps_low,
                             1.0 + eps_high)
    a = a[:, None]
    return jnp.where(m, -jnp.where(keep, ratio_kept * a, clipped_value * a), 0.0)


def is_weighted_surrogate(logp: jax.Array, old_logp: jax.Array, coefficients: jax.Array,
                          mask: jax.Array, eps_low: float, eps_high: float, level: str = "token") -> jax.Array:
    """Per-token −sg(c_b) · logp_t on trust-region tokens (t ∉ C), else 0: [B, T].

    logp, old_logp, mask [B, T]; coefficients [B] already contain the importance weights, so no
    PPO ratio multiplies them.  Gradient: −c_b ∇logp_t on kept tokens (see module docstring); the
    trust region tests the ratio at `level` (`level_log_ratio`).
    """
    _check_per_sequence("coefficients", coefficients, mask)
    m = _bool_mask(mask)
    c = jax.lax.stop_gradient(coefficients.astype(jnp.float32))
    ratio = jax.lax.stop_gradient(jnp.exp(level_log_ratio(logp, old_logp, m, level)))
    keep = trust_region_mask(ratio, c, m, eps_low, eps_high)
    return jnp.where(keep, -c[:, None] * _masked(logp, m), 0.0)


def kl_penalty(logp: jax.Array, ref_logp: jax.Array, mask: jax.Array,
               estimator: str = "k3") -> jax.Array:
    """Per-token estimate of KL(π_θ ‖ π_ref): [B, T] (0 where masked).

    With log r = ref_logp − logp: k1 = −log r, k2 = ½ (log r)², k3 = exp(log r) − log r − 1.
    """
    if estimator not in KL_ESTIMATORS:
        raise ValueError(f"kl estimator {estimator!r} is not one of {KL_ESTIMATORS}")
    _check_tokens("logp", logp, mask)
    _check_tokens("ref_logp", ref_logp, mask)
    m = _bool_mask(mask)
    log_r = _masked(ref_logp, m) - _masked(logp, m)
    if estimator == "k1":
        k = -log_r
    elif estimator == "k2":
        k = 0.5 * jnp.square(log_r)
    else:
        k = jnp.expm1(log_r) - log_r
    return jnp.where(m, k, 0.0)


def token_logprobs(logits: jax.Array, targets: jax.Array) -> jax.Array:
    """log softmax(logits)[targets] in float32: logits [B, T, V], targets int [B, T] -> [B, T]."""
    if logits.ndim != 3 or targets.shape != logits.shape[:2]:
        raise ValueError(f"token_logprobs needs logits [B, T, V] and targets [B, T], got "
                         f"{logits.shape} and {targets.shape}")
    log_probs = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
    return jnp.take_along_axis(log_probs, targets[..., None].astype(jnp.int32), axis=-1)[..., 0]


def token_entropy(logits: jax.Array) -> jax.Array:
    """Entropy −Σ_v p_v log p_v of softmax(logits) in float32: [B, T, V] -> [B, T]."""
    if logits.ndim != 3:
        raise ValueError(f"logits must be [B, T, V], got shape {logits.shape}")
    log_probs = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
    return -jnp.sum(jnp.exp(log_probs) * log_probs, axis=-1)


def aggregate(values: jax.Array, mask: jax.Array, mode: str,
              norm_length: int | None = None) -> jax.Array:
    """Reduce per-token ``values`` [B, T] over counted tokens ``mask`` [B, T] to a scalar.

    Modes "token" | "sequence" | "seq_sum_norm" (needs ``norm_length``) as in the module
    docstring.  Masked entries are never read; an all-masked input gives 0.
    """
    if mode not in AGGREGATIONS:
        raise ValueError(f"aggregation {mode!r} is not one of {AGGREGATIONS}")
    _check_tokens("values", values, mask)
    m = _bool_mask(mask)
    v = _masked(values, m)
    if mode == "token":
        return jnp.sum(v) / jnp.maximum(jnp.sum(m), 1)
    tokens_per_seq = jnp.sum(m, axis=-1)
    n_seq = jnp.maximum(jnp.sum(tokens_per_seq > 0), 1)
    if mode == "sequence":
        per_seq = jnp.sum(v, axis=-1) / jnp.maximum(tokens_per_seq, 1)
        return jnp.sum(per_seq) / n_seq
    if norm_length is None or norm_length <= 0:
        raise ValueError(f"aggregation 'seq_sum_norm' needs norm_length > 0, got {norm_length!r}")
    return jnp.sum(v) / (n_seq * float(norm_length))


def _masked_stats(x: jax.Array, m: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """(mean, min, max) of x [B, T] over m; NaN when nothing is counted."""
    count = jnp.sum(m)
    nan = jnp.float32(jnp.nan)
    mean = jnp.sum(jnp.where(m, x, 0.0)) / count
    lo = jnp.where(count > 0, jnp.min(jnp.where(m, x, jnp.inf)), nan)
    hi = jnp.where(count > 0, jnp.max(jnp.where(m, x, -jnp.inf)), nan)
    return mean, lo, hi


def _check_loss_inputs(logp: jax.Array, old_logp: jax.Array, advantages: jax.Array, mask: jax.Array,
                       config: LossConfig, ref_logp: jax.Array | None, logits: jax.Array | None,
                       entropy: jax.Array | None) -> None:
    """`policy_loss`'s input checks (shapes as there): one ValueError naming the bad input."""
    if not isinstance(config, LossConfig):
        raise ValueError(f"config must be a LossConfig, got {type(config).__name__}")
    _check_tokens("logp", logp, mask)
    _check_tokens("old_logp", old_logp, mask)
    _check_per_sequence("advantages", advantages, mask)
    if config.needs_reference and ref_logp is None:
        raise ValueError(f"kl_beta={config.kl_beta} > 0 needs ref_logp, got None")
    if logits is not None and entropy is not None:
        raise ValueError("pass logits or entropy, not both")
    if config.entropy_coef > 0 and logits is None and entropy is None:
        raise ValueError(f"entropy_coef={config.entropy_coef} > 0 needs logits or entropy, got None")
    if entropy is not None:
        _check_tokens("entropy", entropy, mask)
    if logits is not None and logits.shape[:2] != mask.shape:
        raise ValueError(f"logits has shape {logits.shape}, expected [B, T, V] with [B, T] = "
                         f"{mask.shape}")


def ratio_metrics(logp: jax.Array, old_logp: jax.Array, advantages: jax.Array, mask: jax.Array,
                  config: LossConfig) -> dict[str, jax.Array]:
    """The trust-region statistics of `policy_loss` (no gradient): logp, old_logp [B, T], advantages
    [B], mask [B, T] bool -> clip_fraction, ratio_out_of_range_fraction, ratio_mean / min / max,
    approx_kl_old, num_tokens (scalars; see `policy_loss`)."""
    m = mask
    eps_l, eps_h, level = config.eps_low, config.eps_high, config.ratio_level
    ratio = jax.lax.stop_gradient(jnp.exp(level_log_ratio(logp, old_logp, m, level)))
    adv = jax.lax.stop_gradient(advantages.astype(jnp.float32))
    count = jnp.sum(m).astype(jnp.float32)
    kept = trust_region_mask(ratio, adv, m, eps_l, eps_h)
    out_of_range = m & ((ratio > 1.0 + eps_h) | (ratio < 1.0 - eps_l))
    ratio_mean, ratio_min, ratio_max = _masked_stats(ratio, m)
    log_ratio = jax.lax.stop_gradient(_masked(logp, m) - _masked(old_logp, m))
    return {
        "clip_fraction": jnp.sum(m & ~kept) / count,
        "ratio_out_of_range_fraction": jnp.sum(out_of_range) / count,
        "ratio_mean": ratio_mean,
        "ratio_min": ratio_min,
        "ratio_max": ratio_max,
        "approx_kl_old": _masked_stats(jnp.expm1(log_ratio) - log_ratio, m)[0],
        "num_tokens": count,
    }


def policy_loss(logp: jax.Array, old_logp: jax.Array, advantages: jax.Array, mask: jax.Array,
                config: LossConfig, *, ref_logp: jax.Array | None = None,
                logits: jax.Array | None = None, entropy: jax.Array | None = None
                ) -> tuple[jax.Array, dict[str, jax.Array]]:
    """Total loss (to minimise) and scalar metrics for one batch.

    logp, old_logp, mask [B, T]; advantages [B] (A_i for kind "clipped", c_i for
    "is_weighted"); ref_logp [B, T] (required when kl_beta > 0 with kl_target "reference"); logits [B, T, V] or the
    per-token entropy [B, T] already computed from them (e.g. ``maxk_jax.rl.logprobs``, without a
    [B, T, V] tensor; one of the two is required when entropy_coef > 0, never both).
    loss = agg(policy term) + β·agg(k) − entropy_coef·agg(H).

    Metrics (float32 scalars; ratio statistics are NaN for an all-masked batch):
      loss, loss_policy, loss_kl, loss_entropy; clip_fraction (counted tokens in the clipped
      set C, i.e. whose gradient the trust region zeroes); ratio_out_of_range_fraction
      (ρ_t ∉ [1−ε_l, 1+ε_h] regardless of sign of A); ratio_mean / ratio_min / ratio_max;
      approx_kl_old (token mean of ρ−1−log ρ, k3 estimate of KL(π_old‖π_θ)); num_tokens;
      kl_ref (agg of the selected estimator, if ref_logp given); entropy (token mean, if
      logits given).
    """
    _check_loss_inputs(logp, old_logp, advantages, mask, config, ref_logp, logits, entropy)
    m = _bool_mask(mask)
    agg = lambda v: aggregate(v, m, config.aggregation, config.norm_length)  # noqa: E731
    surrogate = clipped_surrogate if config.kind == "clipped" else is_weighted_surrogate
    per_token = surrogate(logp, old_logp, advantages, m, config.eps_low, config.eps_high, config.ratio_level)
    loss_policy = agg(per_token)

    metrics = {"loss_policy": loss_policy, **ratio_metrics(logp, old_logp, advantages, m, config)}

    loss_kl = jnp.float32(0.0)
    if ref_logp is not None:   # KL to the reference: the term (kl_target "reference") or a metric
        kl_ref = agg(kl_penalty(logp, ref_logp, m, config.kl_estimator))
        metrics["kl_ref"] = jax.lax.stop_gradient(kl_ref)
        if config.needs_reference:
            loss_kl = config.kl_beta * kl_ref
    if config.kl_target == "old":   # eq. 4 as printed: KL(π_θ || π_old)
        kl_old = agg(kl_penalty(logp, old_logp, m, config.kl_estimator))
        metrics["kl_old"] = jax.lax.stop_gradient(kl_old)
        if config.kl_beta > 0:
            loss_kl = config.kl_beta * kl_old
    loss_entropy = jnp.float32(0.0)
    if logits is not None:
        entropy = token_entropy(jnp.where(m[..., None], logits, 0))
    if entropy is not None:
        metrics["entropy"] = jax.lax.stop_gradient(_masked_stats(entropy, m)[0])
        if config.entropy_coef > 0:
            loss_entropy = -config.entropy_coef * agg(entropy)
    loss = loss_policy + loss_kl + loss_entropy
    metrics.update(loss=loss, loss_kl=loss_kl, loss_entropy=loss_entropy)
    metrics = {k: jax.lax.stop_gradient(v).astype(jnp.float32) for k, v in metrics.items()}
    return loss, metrics
