"""The decoder's building blocks, shared by the scanned model (:mod:`maxk_jax.models.qwen2`) and
the unrolled decode step (:mod:`maxk_jax.models.decode`): parameters with logical axes, the dense
matmul with its hand-written backward pass, RMSNorm, RoPE, and the remat (``jax.checkpoint``)
policies of a layer.

    y = dense(x, w)                       # x [..., K] @ w [K, N] -> [..., N]
    cos, sin = rope_tables(positions, head_dim, theta)   # positions [B, T] -> [B, T, D] each
    q = apply_rope(q, cos, sin)           # q [B, T, N, D]
    policy = remat_policy("dots")         # keeps the tensors named in SAVED_BY_DOTS
"""
from __future__ import annotations

import functools
from typing import Any, Callable

import flax.linen as nn
import jax
import jax.numpy as jnp

from maxk_jax.models.attention import compiling_for_gpu
from maxk_jax.models.qwen2_config import REMAT_POLICIES, Qwen2Config


def param(module: nn.Module, name: str, init: Any, shape: tuple[int, ...],
          names: tuple[str, ...], dtype: jnp.dtype) -> jax.Array:
    """``module``'s parameter ``name`` of ``shape`` / ``dtype``, annotated with the logical axis ``names``."""
    return module.param(name, nn.with_logical_partitioning(init, names), shape, dtype)


dense_init = nn.initializers.normal(stddev=0.02)


@functools.partial(jax.custom_vjp, nondiff_argnums=(2,))
def dense(x: jax.Array, w: jax.Array, out_dtype: Any = None) -> jax.Array:
    """x [..., K] @ w [K, N] -> [..., N] (``out_dtype``: the matmul's preferred element type, e.g.
    float32 logits from bf16 operands; None = the operands' type).

    Same values as ``jnp.einsum``; only the backward pass is written out: the weight gradient is
    ``x2.T @ g2`` (or ``(g2.T @ x2).T`` when N < K) with the smaller transposed operand
    materialised first (behind an optimisation barrier).  Left to autodiff, XLA:CPU computes dW = dot(x, g, contracting dims 0 and 0),
    which its matmul kernels do not take, so it transposes the cotangent g inside the loop
    fusion that produces it (e.g. the SwiGLU backward): a strided elementwise pass that cost as
    much as all the matmuls of the backward together (experiments/bench_train.py).
    """
    return jnp.einsum("...k,kn->...n", x, w, preferred_element_type=out_dtype)


def _dense_fwd(x: jax.Array, w: jax.Array, out_dtype: Any) -> tuple[jax.Array, tuple[jax.Array, jax.Array]]:
    return dense(x, w, out_dtype), (x, w)


def _dense_bwd(out_dtype: Any, res: tuple[jax.Array, jax.Array], g: jax.Array
               ) -> tuple[jax.Array, jax.Array]:
    x, w = res
    k, n = w.shape
    acc = jnp.promote_types(jnp.promote_types(x.dtype, w.dtype), jnp.float32)
    dx = jnp.einsum("...n,kn->...k", g.astype(x.dtype) if out_dtype is None else g, w,
                    preferred_element_type=acc).astype(x.dtype)
    x2 = x.reshape(-1, k)
    g2 = g.reshape(-1, n).astype(x.dtype) if out_dtype is None else g.reshape(-1, n)
    if k <= n:  # transpose the smaller operand, materialised row-major before the matmul
        dw = jnp.einsum("kr,rn->kn", jax.lax.optimization_barrier(x2.T), g2,
                        preferred_element_type=acc)
    else:
        dw = jnp.einsum("nr,rk->nk", jax.lax.optimization_barrier(g2.T), x2,
                        preferred_element_type=acc).T
    return dx, dw.astype(w.dtype)


dense.defvjp(_dense_fwd, _dense_bwd)

#: Logical axes of the hidden state [B, T, E].
ACT_BTE = ("activation_batch", "activation_length", "activation_embed")


class RMSNorm(nn.Module):
    """``x / rms(x) * scale`` over the last axis; statistics in float32. x: [..., E]."""

    config: Qwen2Config

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        cfg = self.config
        scale = param(self, "scale", nn.initializers.ones, (cfg.hidden_size,), ("norm",),
                       cfg.params_dtype)
        x32 = x.astype(jnp.float32)
        normed = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + cfg.rms_norm_eps)
        return scale.astype(cfg.compute_dtype) * normed.astype(cfg.compute_dtype)


def rope_tables(positions: jax.Array, head_dim: int, theta: float) -> tuple[jax.Array, jax.Array]:
    """cos, sin tables [B, T, D] (float32) for integer positions [B, T] (HF default RoPE)."""
    inv_freq = 1.0 / (theta ** (jnp.arange(0, head_dim, 2, dtype=jnp.float32) / head_dim))
    freqs = positions.astype(jnp.float32)[..., None] * inv_freq
    emb = jnp.concatenate([freqs, freqs], axis=-1)
    return jnp.cos(emb), jnp.sin(emb)


def apply_rope(x: jax.Array, cos: jax.Array, sin: jax.Array) -> jax.Array:
    """Rotate x [B, T, N, D] with cos/sin [B, T, D] (``rotate_half`` convention)."""
    half = x.shape[-1] // 2
    x32 = x.astype(jnp.float32)
    rotated = jnp.concatenate([-x32[..., half:], x32[..., :half]], axis=-1)
    out = x32 * cos[:, :, None, :] + rotated * sin[:, :, None, :]
    return out.astype(x.dtype)


#: What ``remat_policy="dots"`` keeps of a layer's forward pass (``checkpoint_name`` tags): the
#: projections' outputs, so the backward pass recomputes no matmul but the attention's.
SAVED_BY_DOTS = ("attn_qkv", "attn_out", "mlp_gate_up")


def resolve_remat_policy(name: str, platform: str | None = None) -> str:
    """The remat policy ``name`` selects on ``platform`` (default: the one being compiled for):
    ``"auto"`` -> ``"dots"`` on GPU, ``"nothing"`` elsewhere; the others unchanged."""
    if name not in REMAT_POLICIES:
        raise ValueError(f"remat_policy={name!r}; expected one of {REMAT_POLICIES}")
    if name != "auto":
        return name
    return "dots" if compiling_for_gpu(platform) else "nothing"


def remat_policy(name: str) -> Callable[..., bool]:
    """The ``jax.checkpoint`` policy of ``Qwen2Config.remat_policy`` ``name``: "nothing" recomputes
    the whole layer in the backward pass; "dots" keeps the tensors named in :data:`SAVED_BY_DOTS`
    (q, k, v after RoPE, the attention output, the MLP's gate and up projections); "auto" is
    :func:`resolve_remat_policy`'s choice for the platform being compiled for."""
    name = resolve_remat_policy(name)
    if name == "nothing":
        return jax.checkpoint_policies.nothing_saveable
    if name == "dots":
        return jax.checkpoint_policies.save_only_these_names(*SAVED_BY_DOTS)
    raise ValueError(f"remat_policy={name!r}; expected one of {REMAT_POLICIES}")
