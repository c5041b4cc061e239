"""Shared-prefix KV cache for sampling n completions of each of P prompts, and its attention.

Layout (a ``flax.struct.dataclass``, i.e. a plain pytree; ONE ARRAY PER LAYER, so a decode step
reads and writes each layer's block in place instead of slicing it out of a stacked array, which
XLA:GPU materialises as a copy)::

    prompt_k, prompt_v  L x [P, K, Tp, D]     the P prompts' keys/values, stored ONCE per prompt
    prompt_valid        [P, Tp] bool          prompt slot holds a real (non-padding) token
    k, v                L x [P*n, K, S, D]    each sample's own generated keys/values
                                              (row p*n + i = sample i of prompt p)
    length              [] int32              generated slots filled; every row decodes in
                                              lockstep, so one counter serves all

Batch axes: 0 of every layer's prompt_k/v/k/v and of prompt_valid (see :func:`cache_logical_axes`). With n = 1
it is an ordinary per-sequence cache. The heads-before-slots layout makes each (row, kv head) a
contiguous [S, D] block, contracted without repeating K/V over the query groups.

Attention (:func:`attend_decode`): the grouped queries of a prompt's n samples [P, n, K, G, D]
are scored against the prompt block by ONE einsum that broadcasts over n (the prompt's K/V are
never copied n times), each sample's own block and the token's own key/value are scored apart,
and the three score blocks are normalised by one softmax (shared running max and denominator):
the result equals attention over the concatenated [prompt, generated, self] keys.

:func:`maxk_jax.models.qwen2.prefill` fills the prompt block and
:func:`maxk_jax.models.decode.decode_step` writes one generated slot per step; ``qwen2``
re-exports this module's names.
"""
from __future__ import annotations

from typing import Any

import flax
import jax
import jax.numpy as jnp

from maxk_jax.models.qwen2_config import Qwen2Config


@flax.struct.dataclass
class KVCache:
    """Shared-prefix KV cache of P prompts x n samples (a plain pytree; see the module
    docstring): the prompts' keys/values once, each sample's generated keys/values apart."""

    prompt_k: tuple[jax.Array, ...]  # L x [P, K, Tp, D]
    prompt_v: tuple[jax.Array, ...]  # L x [P, K, Tp, D]
    prompt_valid: jax.Array  # [P, Tp] bool: prompt slot holds a real (non-padding) token
    k: tuple[jax.Array, ...]  # L x [P*n, K, S, D]: generated tokens; row p*n + i = sample i of prompt p
    v: tuple[jax.Array, ...]  # L x [P*n, K, S, D]
    length: jax.Array  # [] int32: generated slots filled (= the next one to write), every row

    @property
    def num_layers(self) -> int:
        """Number of layers L (arrays per field)."""
        return len(self.k)

    @property
    def prompt_len(self) -> int:
        """Number of prompt slots Tp."""
        return self.prompt_k[0].shape[2]

    @property
    def max_len(self) -> int:
        """Number of generated-token slots S."""
        return self.k[0].shape[2]

    @property
    def n(self) -> int:
        """Samples per prompt (rows of k / rows of prompt_k)."""
        return self.k[0].shape[0] // self.prompt_k[0].shape[0]



def init_cache(config: Qwen2Config, batch: int, prompt_len: int, new_len: int, n: int = 1,
               dtype: Any | None = None) -> KVCache:
    """Empty shared-prefix cache for ``batch`` = P prompts of up to ``prompt_len`` = Tp tokens and
    ``n`` samples each with ``new_len`` = S generated-token slots: prompt_k/v zeros [L,P,K,Tp,D],
    k/v zeros [L,P*n,K,S,D], each field one array per layer (dtype defaults to the compute dtype), no
    valid slot, length 0."""
    for name, value in (("batch", batch), ("prompt_len", prompt_len), ("new_len", new_len),
                        ("n", n)):
        if value <= 0:
            raise ValueError(f"init_cache needs {name} > 0, got {value}")
    dtype = config.compute_dtype if dtype is None else jnp.dtype(dtype)
    l, kv, d = config.num_layers, config.num_kv_heads, config.head_dim_
    prompt = (batch, kv, prompt_len, d)
    own = (batch * n, kv, new_len, d)

    def layers(shape: tuple[int, ...]) -> tuple[jax.Array, ...]:
        return tuple(jnp.zeros(shape, dtype) for _ in range(l))

    return KVCache(prompt_k=layers(prompt), prompt_v=layers(prompt),
                   prompt_valid=jnp.zeros((batch, prompt_len), jnp.bool_),
                   k=layers(own), v=layers(own), length=jnp.zeros((), jnp.int32))


def write_slot(block: jax.Array, new: jax.Array, length: jax.Array) -> jax.Array:
    """One layer's generated block [B, K, S, D] with ``new`` [B, K, D] (cast to the block's dtype) in
    slot ``length`` (a scalar); unchanged when ``length >= S`` (the write is dropped)."""
    return block.at[:, :, length].set(new.astype(block.dtype), mode="drop")


def cache_logical_axes(num_layers: int) -> KVCache:
    """Logical axis names of every :class:`KVCache` field of ``num_layers`` layers (for sharding a
    cache): the prompt and the sample blocks are both split along their batch axis ('cache_batch')."""
    kv = (jax.sharding.PartitionSpec("cache_batch", "cache_kv_heads", "cache_length", "head_dim"),) * num_layers
    return KVCache(prompt_k=kv, prompt_v=kv,
                   prompt_valid=jax.sharding.PartitionSpec("cache_batch", "cache_length"),
                   k=kv, v=kv, length=jax.sharding.PartitionSpec())


#: Own-cache slots per block of :func:`attend_decode`'s live-slot path (TPU): a step reads on average
#: about half a block more than its live slots.
LIVE_BLOCK = 32


def attend_decode(q: jax.Array, k_new: jax.Array, v_new: jax.Array, prompt_k: jax.Array,
                  prompt_v: jax.Array, prompt_valid: jax.Array, cache_k: jax.Array,
                  cache_v: jax.Array, valid: jax.Array, live: bool | None = None,
                  block: int = LIVE_BLOCK) -> jax.Array:
    """One-token GQA attention over a shared prompt block, the row's own cache and the token.

    q [B,H,D], k_new/v_new [B,K,D] (this token, not yet in the cache); prompt_k/prompt_v
    [P,K,Tp,D] with prompt_valid [P,Tp] bool, shared by the n = B // P consecutive rows
    p*n .. p*n+n-1; cache_k/cache_v [B,K,S,D] with valid [S] or [B,S] bool (the row's own
    cached slots) -> [B,H,D]. Query heads are grouped as [.., K, G, D] (G = H // K); the prompt
    block is contracted against the n rows' queries by one einsum that broadcasts over n (no
    n-fold copy), and the three score blocks share one softmax (common max and denominator),
    so the result equals attention over the concatenated keys. The token always sees itself,
    so no row is empty. Scores and softmax in float32; K and V are read in their own dtype by
    matmuls accumulating in float32 (with bfloat16 K/V the probabilities enter the V products
    rounded to bfloat16, as in flash attention), so no float32 copy of the cache is made.

    ``live`` (default: when compiling for TPU, :func:`maxk_jax.models.attention.context_platform`)
    with a shared ``valid`` [S]: the own cache is read only up to its last valid slot, in blocks of
    ``block`` slots by a loop of ``ceil(live slots / block)`` trips (:func:`_attend_live`; equal up
    to float rounding). Elsewhere every slot is read and the invalid ones masked.
    """
    from maxk_jax.models.attention import context_platform

    if live is None:
        live = context_platform() == "tpu"
    if live and valid.ndim == 1:
        return _attend_live(q, k_new, v_new, prompt_k, prompt_v, prompt_valid, cache_k, cache_v, valid, block)
    qg, s_prompt, s_self = _prompt_and_self_scores(q, k_new, prompt_k, prompt_valid)
    b, h, d = q.shape
    p, kv, _, _ = prompt_k.shape
    n, g = b // p, h // kv
    scale = d ** -0.5
    neg = jnp.finfo(jnp.float32).min
    f32 = jnp.float32
    # Own block, scores [B, K, G, S]: a matmul per (row, kv head) reading the cache in its dtype.
    s_cache = jnp.einsum("bkgd,bksd->bkgs", qg, cache_k, preferred_element_type=f32) * scale
    s_cache = jnp.where(jnp.broadcast_to(valid, (b, cache_k.shape[2]))[:, None, None, :],
                        s_cache, neg)
    m_prompt = jnp.max(s_prompt, axis=-1).transpose(0, 2, 1, 3).reshape(b, kv, g)
    m = jnp.maximum(jnp.maximum(m_prompt, jnp.max(s_cache, axis=-1)), s_self)  # [B, K, G]
    m_pkng = m.reshape(p, n, kv, g).transpose(0, 2, 1, 3)
    p_prompt = jnp.exp(s_prompt - m_pkng[..., None])
    p_cache = jnp.exp(s_cache - m[..., None])
    p_self = jnp.exp(s_self - m)
    denom = (jnp.sum(p_prompt, axis=-1).transpose(0, 2, 1, 3).reshape(b, kv, g)
             + jnp.sum(p_cache, axis=-1) + p_self)
    # The weighted sums read V in its own dtype (the probabilities cast to it, as flash attention
    # does), accumulated in float32: no float32 copy of the cache.
    out_prompt = jnp.einsum("pkngs,pksd->pkngd", p_prompt.astype(prompt_v.dtype), prompt_v,
                            preferred_element_type=f32)
    out = out_prompt.transpose(0, 2, 1, 3, 4).reshape(b, kv, g, d)
    out = out + jnp.einsum("bkgs,bksd->bkgd", p_cache.astype(cache_v.dtype), cache_v,
                           preferred_element_type=f32)
    out = (out + p_self[..., None] * v_new[:, :, None, :].astype(f32)) / denom[..., None]
    return out.astype(q.dtype).reshape(b, h, d)


def _prompt_and_self_scores(q: jax.Array, k_new: jax.Array, prompt_k: jax.Array,
                            prompt_valid: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """What both decode attentions start from: ``qg`` = q [B,H,D] as [B,K,G,D]; the prompt block's
    scores [P,K,n,G,Tp] (one matmul per (prompt, kv head) over its n*G queries; invalid prompt slots at
    float32's min) and the token's own score [B,K,G], float32, scaled by D^-0.5."""
    b, h, d = q.shape
    p, kv, _, _ = prompt_k.shape
    if b % p:
        raise ValueError(f"attend_decode: {b} query rows are not a multiple of {p} prompts")
    n, g = b // p, h // kv
    qg = q.reshape(b, kv, g, d)
    scale = d ** -0.5
    s_prompt = jnp.einsum("pnkgd,pksd->pkngs", qg.reshape(p, n, kv, g, d), prompt_k,
                          preferred_element_type=jnp.float32) * scale
    s_prompt = jnp.where(prompt_valid[:, None, None, None, :], s_prompt, jnp.finfo(jnp.float32).min)
    s_self = jnp.einsum("bkgd,bkd->bkg", qg, k_new, preferred_element_type=jnp.float32) * scale
    return qg, s_prompt, s_self


def _attend_live(q: jax.Array, k_new: jax.Array, v_new: jax.Array, prompt_k: jax.Array, prompt_v: jax.Array,
                 prompt_valid: jax.Array, cache_k: jax.Array, cache_v: jax.Array, valid: jax.Array,
                 block: int) -> jax.Array:
    """:func:`attend_decode` reading only the own-cache blocks up to the last valid slot of
    ``valid`` [S]: the prompt block and the token itself first, then an online softmax (running
    max, denominator and weighted sum, as flash attention) over ``ceil(live / block)`` blocks of
    ``block`` slots, each a ``dynamic_slice`` of cache_k / cache_v [B,K,S,D] (the last block
    starts at ``S - block`` and masks the slots earlier blocks read). Same shapes and dtypes."""
    qg, s_prompt, s_self = _prompt_and_self_scores(q, k_new, prompt_k, prompt_valid)
    b, h, d = q.shape
    p, kv, _, _ = prompt_k.shape
    n, g, slots = b // p, h // kv, cache_k.shape[2]
    bk = min(block, slots)
    scale = d ** -0.5
    neg = jnp.finfo(jnp.float32).min
    f32 = jnp.float32
    m = jnp.maximum(jnp.max(s_prompt, axis=-1).transpose(0, 2, 1, 3).reshape(b, kv, g), s_self)
    m_pkng = m.reshape(p, n, kv, g).transpose(0, 2, 1, 3)
    p_prompt = jnp.exp(s_prompt - m_pkng[..., None])
    p_self = jnp.exp(s_self - m)
    denom = jnp.sum(p_prompt, axis=-1).transpose(0, 2, 1, 3).reshape(b, kv, g) + p_self
    acc = jnp.einsum("pkngs,pksd->pkngd", p_prompt.astype(prompt_v.dtype), prompt_v, preferred_element_type=f32)
    acc = acc.transpose(0, 2, 1, 3, 4).reshape(b, kv, g, d) + p_self[..., None] * v_new[:, :, None, :].astype(f32)
    # live slots: up to the last valid one
    live = jnp.where(jnp.any(valid), slots - jnp.argmax(valid[::-1]), 0)

    def body(i: jax.Array, carry: tuple[jax.Array, jax.Array, jax.Array]) -> tuple[jax.Array, jax.Array, jax.Array]:
        m, denom, acc = carry
        start = jnp.minimum(i * bk, slots - bk)
        k_blk = jax.lax.dynamic_slice_in_dim(cache_k, start, bk, axis=2)
        v_blk = jax.lax.dynamic_slice_in_dim(cache_v, start, bk, axis=2)
        slot = start + jnp.arange(bk)
        ok = (jax.lax.dynamic_slice_in_dim(valid, start, bk) & (slot >= i * bk))[None, None, None, :]
        s = jnp.where(ok, jnp.einsum("bkgd,bksd->bkgs", qg, k_blk, preferred_element_type=f32) * scale, neg)
        m_new = jnp.maximum(m, jnp.max(s, axis=-1))
        corr = jnp.exp(m - m_new)
        pr = jnp.exp(s - m_new[..., None])
        acc = acc * corr[..., None] + jnp.einsum("bkgs,bksd->bkgd", pr.astype(cache_v.dtype), v_blk,
                                                 preferred_element_type=f32)
        return m_new, denom * corr + jnp.sum(pr, axis=-1), acc

    m, denom, acc = jax.lax.fori_loop(0, (live + bk - 1) // bk, body, (m, denom, acc))
    return (acc / denom[..., None]).astype(q.dtype).reshape(b, h, d)


def mean_live_blocks(new_tokens: int, block: int = LIVE_BLOCK) -> float:
    """Own-cache blocks :func:`attend_decode`'s live-slot path reads per decode step, averaged over
    the ``new_tokens - 1`` steps of a sample (step t sees t live slots of ``max(new_tokens - 1, 1)``)."""
    slots = max(new_tokens - 1, 1)
    bk = min(block, slots)
    return sum(-(-t // bk) for t in range(new_tokens - 1)) / max(new_tokens - 1, 1)
