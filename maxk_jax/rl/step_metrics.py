"""The train step's metrics: per-micro-batch sums combined into one record per optimizer update."""
from __future__ import annotations

import jax
import jax.numpy as jnp

from maxk_jax.rl import staleness

DELTA_THRESHOLDS = (0.2, 0.5, 1.0)   # |delta| = |rho - 1| levels counted in the step metrics
LOSS_KEYS = ("loss", "loss_policy", "loss_kl", "loss_entropy", "kl_ref")
TOKEN_MEAN_KEYS = ("clip_fraction", "ratio_out_of_range_fraction", "ratio_mean", "approx_kl_old",
                    "entropy")


def combine(mb: dict[str, jax.Array], weights: jax.Array) -> dict[str, jax.Array]:
    """Per-micro-batch metrics (each [M]) and the micro-batches' loss weights [M] -> the batch's
    scalar metrics (see ``training.make_train_step``): loss terms weighted like the loss, token means
    by token counts, extrema over micro-batches, coefficient / ratio statistics over valid samples."""
    tokens = mb["num_tokens"]
    total_tokens = jnp.sum(tokens)
    out = {key: jnp.sum(weights * mb[key]) for key in LOSS_KEYS if key in mb}
    for key in TOKEN_MEAN_KEYS:
        if key in mb:
            out[key] = jnp.sum(jnp.where(tokens > 0, tokens * mb[key], 0.0)) / total_tokens
    out["ratio_min"] = jnp.nanmin(mb["ratio_min"])
    out["ratio_max"] = jnp.nanmax(mb["ratio_max"])
    out["num_tokens"] = total_tokens
    valid = jnp.sum(mb["valid_samples"])
    nan = jnp.float32(jnp.nan)
    mean = jnp.sum(mb["coef_sum"]) / valid
    out.update(
        advantage_mean=mean,
        advantage_std=jnp.sqrt(jnp.maximum(jnp.sum(mb["coef_sq_sum"]) / valid - mean ** 2, 0.0)),
        advantage_min=jnp.where(valid > 0, jnp.min(mb["coef_min"]), nan),
        advantage_max=jnp.where(valid > 0, jnp.max(mb["coef_max"]), nan),
        advantage_nonzero_fraction=jnp.sum(mb["coef_nonzero"]) / valid,
        is_ratio_mean=jnp.sum(mb["seq_ratio_sum"]) / valid,
        is_ratio_min=jnp.where(valid > 0, jnp.min(mb["seq_ratio_min"]), nan),
        is_ratio_max=jnp.where(valid > 0, jnp.max(mb["seq_ratio_max"]), nan),
        is_log_ratio_abs_max=jnp.max(mb["seq_log_ratio_abs_max"]),
        nonfinite_coefficients=jnp.sum(mb["nonfinite_coefficients"]),
        **{f"is_delta_gt_{t:g}_fraction": jnp.sum(mb[f"delta_gt_{t:g}_count"]) / valid
           for t in DELTA_THRESHOLDS},
        valid_samples=valid, rows_below_k=jnp.sum(mb["rows_below_k"]),
        logprob_mismatch_mean=jnp.sum(mb["mismatch_sum"]) / jnp.maximum(jnp.sum(mb["counted_tokens"]), 1.0),
        logprob_mismatch_max=jnp.max(mb["mismatch_max"]))
    if "stale_ess_rows" in mb:
        out.update(staleness.combine_stale(mb, valid))
    return out
