"""Token log-probs (and entropy) from hidden states, over vocabulary chunks: no [B, T, V] float32.

The one log-prob path of the train step, the reference / behaviour log-prob passes and the
supervised warm-up::

    logp, ent = completion_logprobs(config, params, tokens, attention_mask, completion_len,
                                    temperature=1.0, top_k=0, top_p=1.0, with_entropy=True)
    # tokens / attention_mask [B, S] -> logp, ent [B, T]; row t predicts tokens[:, S - T + t]

1. ``qwen2.hidden_states`` runs the backbone (no LM head) -> final-normed h [B, S, E];
2. only the T positions that predict completion tokens are kept (a static slice) -> [B, T, E];
3. the LM head is applied to them chunk by chunk over the vocabulary (``lax.scan`` over
   ``ceil(V / C)`` chunks of C columns, each chunk ``jax.checkpoint``-ed so the backward pass
   recomputes its [B, T, C] logits instead of storing them), with an online log-sum-exp
   (running max m, Σ exp(l − m), Σ exp(l − m)·l for the entropy, and the target's logit).

So the largest float32 buffer is [B, T, C], never [B, T, V] (C = ``vocab_chunk``; the default
``pick_vocab_chunk`` prefers a divisor of V in [4096, 8192], so Qwen2.5's V = 152064 gives 22
chunks of 6912).  When C divides V, chunk i holds the columns i, i + n, i + 2n, ... (n = V / C):
the weight is only reshaped, [E, V] -> [E, C, n], and indexed on its last axis, so a vocabulary
sharded over the 'tensor' mesh axis stays sharded (each device projects its own columns of every
chunk; no all-gather of the LM head).  A chunk size that does not divide V takes contiguous
chunks without padding the weight: the last chunk's start is clamped to V − C and the columns
already counted by earlier chunks are masked.
The running max is a ``stop_gradient`` constant (log-sum-exp is invariant to it), so the
gradient is the exact softmax gradient.

Sampling truncation (top_k > 0 or top_p < 1): the kept set needs a sort over the whole
vocabulary (top-p), so that path chunks over ROWS instead: ``row_chunk`` positions at a time get
their full [row_chunk, V] logits (again checkpointed per chunk), truncated with the sampler's own
``sampling_filters.top_k_mask`` / ``top_p_mask`` (same rules and ties), the target always kept,
renormalised — exactly `truncated_logprobs` (the full-logits reference path below) without the [B, T, V] tensor.

Entropy is that of the tempered, untruncated distribution softmax(logits / temperature) (the
quantity ``losses.token_entropy`` computes), in float32, differentiable.
"""
from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp

from maxk_jax.models import qwen2
from maxk_jax.rl import losses
from maxk_jax.sampling import top_k_mask, top_p_mask

Params = Any
DEFAULT_VOCAB_CHUNK = 8192
DEFAULT_ROW_CHUNK = 256


def pick_vocab_chunk(vocab: int, target: int = DEFAULT_VOCAB_CHUNK) -> int:
    """Chunk size for a vocabulary of ``vocab``: V itself if V <= target, else the largest divisor
    of V in [target/2, target] (no ragged last chunk), else ``target``."""
    if vocab < 1 or target < 1:
        raise ValueError(f"vocab={vocab!r} and target={target!r} must be >= 1")
    if vocab <= target:
        return vocab
    for c in range(target, (target + 1) // 2 - 1, -1):
        if vocab % c == 0:
            return c
    return target


def _project(hidden: jax.Array, weight: jax.Array, vocab_axis: int) -> jax.Array:
    """hidden [..., E] x weight ([C, E] if vocab_axis == 0 else [E, C]) -> float32 [..., C]."""
    w = weight.astype(hidden.dtype)
    return qwen2.dense(hidden, w.T if vocab_axis == 0 else w, jnp.float32)


def _check(hidden: jax.Array, weight: jax.Array, vocab_axis: int, targets: jax.Array) -> int:
    if vocab_axis not in (0, 1) or weight.ndim != 2:
        raise ValueError(f"weight must be [V, E] (vocab_axis=0) or [E, V] (vocab_axis=1), got shape "
                         f"{weight.shape} with vocab_axis={vocab_axis!r}")
    e = weight.shape[1 - vocab_axis]
    if hidden.shape[-1] != e or targets.shape != hidden.shape[:-1]:
        raise ValueError(f"need hidden [..., E={e}] and targets [...] with the same leading shape, got "
                         f"hidden {hidden.shape}, targets {targets.shape}")
    return weight.shape[vocab_axis]


def _vocab_chunked(hidden: jax.Array, weight: jax.Array, vocab_axis: int, targets: jax.Array,
                   temperature: float, chunk: int, with_entropy: bool
                   ) -> tuple[jax.Array, jax.Array | None]:
    """Online log-sum-exp over vocabulary chunks (untruncated softmax)."""
    v = weight.shape[vocab_axis]
    inv_t = 1.0 / float(temperature)
    lead = hidden.shape[:-1]
    targets = targets.astype(jnp.int32)

    n_chunks = -(-v // chunk)
    strided = v % chunk == 0 and n_chunks > 1
    if strided:  # chunk i = columns i, i + n, i + 2n, ... (n = n_chunks): a free reshape
        shape = (chunk, n_chunks, weight.shape[1]) if vocab_axis == 0 else (weight.shape[0], chunk, n_chunks)
        w_split = weight.reshape(shape)

    def stats(i: jax.Array, carry: tuple[jax.Array, ...]) -> tuple[jax.Array, ...]:
        m, s, u, tgt = carry
        if strided:
            axis = 1 if vocab_axis == 0 else 2
            w = jax.lax.dynamic_index_in_dim(w_split, i, axis=axis, keepdims=False)
            col = jnp.arange(chunk, dtype=jnp.int32) * n_chunks + i
            fresh = jnp.ones((chunk,), jnp.bool_)
        else:  # contiguous; the ragged last chunk starts at V - C and skips the columns seen
            start = jnp.minimum(i * chunk, v - chunk)
            w = jax.lax.dynamic_slice_in_dim(weight, start, chunk, axis=vocab_axis)
            col = start + jnp.arange(chunk, dtype=jnp.int32)
            fresh = col >= i * chunk
        logits = _project(hidden, w, vocab_axis) * inv_t  # [..., C]
        masked = jnp.where(fresh, logits, -jnp.inf)
        m_new = jnp.maximum(m, jax.lax.stop_gradient(jnp.max(masked, axis=-1)))
        scale = jnp.exp(m - m_new)
        e = jnp.exp(masked - m_new[..., None])  # exactly 0 on stale columns
        s = s * scale + jnp.sum(e, axis=-1)
        if with_entropy:
            u = u * scale + jnp.sum(e * jnp.where(fresh, logits, 0.0), axis=-1)
        hit = fresh & (col == targets[..., None])
        tgt = tgt + jnp.sum(jnp.where(hit, logits, 0.0), axis=-1)
        return m_new, s, u, tgt

    zeros = jnp.zeros(lead, jnp.float32)
    init = (jnp.full(lead, -jnp.inf, jnp.float32), zeros, zeros, zeros)
    if n_chunks == 1:
        m, s, u, tgt = stats(jnp.int32(0), init)
    else:
        body = jax.checkpoint(lambda c, i: (stats(i, c), None), prevent_cse=False)
        (m, s, u, tgt), _ = jax.lax.scan(body, init, jnp.arange(n_chunks, dtype=jnp.int32))
    lse = m + jnp.log(s)
    entropy = lse - u / s if with_entropy else None
    return tgt - lse, entropy


def _row_chunked_truncated(hidden: jax.Array, weight: jax.Array, vocab_axis: int,
                           targets: jax.Array, temperature: float, top_k: int, top_p: float,
                           with_entropy: bool, row_chunk: int) -> tuple[jax.Array, jax.Array | None]:
    """Top-k / top-p truncated log-probs, ``row_chunk`` positions (full vocabulary) at a time."""
    lead = hidden.shape[:-1]
    n = math.prod(lead)
    r = max(1, min(row_chunk, n))
    n_chunks = -(-n // r)
    h = hidden.reshape(n, hidden.shape[-1])
    y = targets.reshape(n).astype(jnp.int32)
    pad = n_chunks * r - n
    if pad:
        h = jnp.concatenate([h, jnp.zeros((pad, h.shape[-1]), h.dtype)])
        y = jnp.concatenate([y, jnp.zeros((pad,), y.dtype)])
    inv_t = 1.0 / float(temperature)

    def rows(_: None, xs: tuple[jax.Array, jax.Array]) -> tuple[None, tuple[jax.Array, jax.Array]]:
        hc, yc = xs
        logits = _project(hc, weight, vocab_axis) * inv_t  # [r, V]
        x = logits
        if top_k > 0:
            x = jnp.where(top_k_mask(x, top_k), x, -jnp.inf)
        if top_p < 1.0:
            x = jnp.where(top_p_mask(x, top_p), x, -jnp.inf)
        is_target = jnp.arange(x.shape[-1]) == yc[:, None]
        x = jnp.where(is_target, logits, x)
        logp = jnp.sum(jnp.where(is_target, x, 0.0), axis=-1) - jax.nn.logsumexp(x, axis=-1)
        if with_entropy:
            lp = jax.nn.log_softmax(logits, axis=-1)
            ent = -jnp.sum(jnp.exp(lp) * lp, axis=-1)
        else:
            ent = jnp.zeros_like(logp)
        return None, (logp, ent)

    body = jax.checkpoint(rows, prevent_cse=False)
    _, (logp, ent) = jax.lax.scan(body, None, (h.reshape(n_chunks, r, -1), y.reshape(n_chunks, r)))
    logp = logp.reshape(-1)[:n].reshape(lead)
    return logp, (ent.reshape(-1)[:n].reshape(lead) if with_entropy else None)


def token_logprobs(hidden: jax.Array, weight: jax.Array, vocab_axis: int, targets: jax.Array, *,
                   temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0,
                   with_entropy: bool = False, vocab_chunk: int | None = None,
                   row_chunk: int = DEFAULT_ROW_CHUNK) -> tuple[jax.Array, jax.Array | None]:
    """log p(targets) under softmax(hidden @ W / temperature), truncated to the sampler's top-k /
    top-p set (target always kept) when top_k > 0 or top_p < 1.

    hidden [..., E] (any float dtype; the matmul accumulates in float32), weight [V, E]
    (vocab_axis=0, tied embedding) or [E, V] (vocab_axis=1), targets int [...].  Returns float32
    (logp [...], entropy [...] of the tempered untruncated distribution or None).  vocab_chunk:
    columns per chunk (None = ``pick_vocab_chunk(V)``); row_chunk: positions per chunk of the
    truncated path.  Settings are Python scalars (static).
    """
    v = _check(hidden, weight, vocab_axis, targets)
    if not (isinstance(temperature, (int, float)) and math.isfinite(temperature) and temperature > 0):
        raise ValueError(f"temperature={temperature!r} must be a finite number > 0")
    if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 0:
        raise ValueError(f"top_k={top_k!r} must be an int >= 0 (0 = off)")
    if not 0 < top_p <= 1:
        raise ValueError(f"top_p={top_p!r} must be in (0, 1]")
    chunk = pick_vocab_chunk(v) if vocab_chunk is None else vocab_chunk
    if isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 1:
        raise ValueError(f"vocab_chunk={vocab_chunk!r} must be an int >= 1")
    if isinstance(row_chunk, bool) or not isinstance(row_chunk, int) or row_chunk < 1:
        raise ValueError(f"row_chunk={row_chunk!r} must be an int >= 1")
    if top_k > 0 or top_p < 1.0:
        return _row_chunked_truncated(hidden, weight, vocab_axis, targets, temperature, top_k,
                                      top_p, with_entropy, row_chunk)
    return _vocab_chunked(hidden, weight, vocab_axis, targets, temperature, min(chunk, v),
                          with_entropy)


def completion_hidden(config: qwen2.Qwen2Config, params: Params, tokens: jax.Array,
                      attention_mask: jax.Array, completion_len: int) -> jax.Array:
    """Hidden states at the T = completion_len positions predicting the completion tokens:
    tokens / attention_mask [B, S] -> [B, T, E] (row t predicts tokens[:, S - T + t])."""
    s = tokens.shape[1]
    if not 0 < completion_len < s:
        raise ValueError(f"completion_len={completion_len} must be in (0, S={s})")
    h = qwen2.hidden_states(config, params, tokens, attention_mask)
    return h[:, s - completion_len - 1: s - 1]


def completion_logprobs(config: qwen2.Qwen2Config, params: Params, tokens: jax.Array,
                        attention_mask: jax.Array, completion_len: int, *, temperature: float = 1.0,
                        top_k: int = 0, top_p: float = 1.0, with_entropy: bool = False,
                        vocab_chunk: int | None = None, row_chunk: int = DEFAULT_ROW_CHUNK
                        ) -> tuple[jax.Array, jax.Array | None]:
    """Log-probs of the completion tokens (the last T = completion_len columns of tokens [B, S])
    under the sampling distribution (temperature, top-k, top-p) of ``params``: float32 (logp
    [B, T], entropy [B, T] or None).  The LM head only sees the T completion positions; see the
    module docstring for the chunking."""
    hidden = completion_hidden(config, params, tokens, attention_mask, completion_len)
    weight, axis = qwen2.lm_head_weight(config, params)
    return token_logprobs(hidden, weight, axis, tokens[:, -completion_len:], temperature=temperature,
                          top_k=top_k, top_p=top_p, with_entropy=with_entropy,
                          vocab_chunk=vocab_chunk, row_chunk=row_chunk)


# ------------------------------------------------------------------ reference path (full logits) -----

def completion_logits(model_config: qwen2.Qwen2Config, params: Params, tokens: jax.Array,
                      attention_mask: jax.Array, completion_len: int, temperature: float) -> jax.Array:
    """Tempered logits (logits / temperature) predicting each completion token: tokens and
    attention_mask [B, S] -> float32 [B, T, V], T = completion_len (row t predicts tokens[:, S-T+t]).
    The full-logits reference path (tests, small models); the train step uses `completion_logprobs`."""
    s = tokens.shape[1]
    if not 0 < completion_len < s:
        raise ValueError(f"completion_len={completion_len} must be in (0, S={s})")
    logits = qwen2.logits(model_config, params, tokens, attention_mask)
    return logits[:, s - completion_len - 1: s - 1].astype(jnp.float32) / temperature


def truncated_logprobs(logits: jax.Array, targets: jax.Array, top_k: int = 0,
                       top_p: float = 1.0) -> jax.Array:
    """log-prob of targets [B, T] under softmax(logits [B, T, V]) restricted to the sampler's
    top-k, then top-p set (``sampling_filters.top_k_mask`` / ``top_p_mask``: same rules and tie
    handling as the sampler), renormalised, with the target token always in the set.
    top_k=0, top_p=1 -> plain log_softmax.  float32 [B, T]."""
    if top_k == 0 and top_p >= 1.0:
        return losses.token_logprobs(logits, targets)
    x = logits.astype(jnp.float32)
    if top_k > 0:
        x = jnp.where(top_k_mask(x, top_k), x, -jnp.inf)
    if top_p < 1.0:
        x = jnp.where(top_p_mask(x, top_p), x, -jnp.inf)
    is_target = jnp.arange(x.shape[-1]) == targets[..., None]
    return losses.token_logprobs(jnp.where(is_target, logits.astype(jnp.float32), x), targets)
