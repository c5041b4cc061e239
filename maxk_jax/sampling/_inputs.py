"""Host-side checks of :func:`maxk_jax.sampling.generate`'s inputs, before any compilation: the prompts
(token-id lists), the stop ids (a padded int32 array) and the per-sample PRNG keys."""
from __future__ import annotations

import numbers
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from maxk_jax.models import qwen2
from maxk_jax.sampling._buckets import next_pow2



def stop_id_array(eos_id: int | Sequence[int] | None, vocab: int) -> np.ndarray:
    """Stop ids as int32 [S], S = next_pow2(count) >= 8 (padded with -1, which never matches, so
    changing the stop ids rarely recompiles). ValueError for ids outside [0, vocab)."""
    if eos_id is None:
        ids: list[Any] = []
    elif isinstance(eos_id, (numbers.Integral, np.integer)):
        ids = [eos_id]
    elif isinstance(eos_id, (str, bytes)) or not isinstance(eos_id, (Sequence, np.ndarray)):
        raise ValueError(f"eos_id must be None, an int or a sequence of ints, got {eos_id!r}")
    else:
        ids = list(eos_id)
    for i in ids:
        if isinstance(i, bool) or not isinstance(i, (numbers.Integral, np.integer)) or not (
                0 <= i < vocab):
            raise ValueError(f"eos_id entries must be ints in [0, {vocab}), got {eos_id!r}")
    uniq = sorted({int(i) for i in ids})
    out = np.full((next_pow2(len(uniq), 8),), -1, np.int32)
    out[:len(uniq)] = uniq
    return out


def check_prompts(prompts: Sequence[Sequence[int]], config: qwen2.Qwen2Config,
                   max_new_tokens: int, allow_empty: bool = False) -> list[list[int]]:
    """The P prompts as lists of Python ints, each non-empty, in the vocabulary and at most
    ``max_position_embeddings - max_new_tokens`` long (ValueError naming the prompt otherwise);
    ``allow_empty``: no prompt at all is fine (a host without prompts on a multi-host mesh)."""
    if isinstance(prompts, (str, bytes)) or not isinstance(prompts, Sequence) or (
            not prompts and not allow_empty):
        raise ValueError(f"prompts must be a non-empty list of token-id lists, got {prompts!r:.80}")
    limit = config.max_position_embeddings - max_new_tokens
    out = []
    for i, p in enumerate(prompts):
        if isinstance(p, (np.ndarray, jax.Array)):
            p = np.asarray(p)
            if p.ndim != 1 or not np.issubdtype(p.dtype, np.integer):
                raise ValueError(f"prompts[{i}] must be a 1-D integer array, got {p.dtype}{p.shape}")
            p = p.tolist()
        if isinstance(p, (str, bytes)) or not isinstance(p, Sequence):
            raise ValueError(f"prompts[{i}] must be a list of token ids, got {type(p).__name__}")
        if not p:
            raise ValueError(f"prompts[{i}] is empty: every prompt needs at least one token")
        bad = [x for x in p if isinstance(x, bool) or not isinstance(x, numbers.Integral)]
        if bad:
            raise ValueError(f"prompts[{i}] contains non-int token {bad[0]!r}")
        bad = [x for x in p if not 0 <= x < config.vocab_size]
        if bad:
            raise ValueError(f"prompts[{i}] token {bad[0]} outside the vocabulary "
                             f"[0, {config.vocab_size})")
        if len(p) > limit:
            raise ValueError(f"prompts[{i}] has {len(p)} tokens > max_position_embeddings "
                             f"({config.max_position_embeddings}) - max_new_tokens "
                             f"({max_new_tokens}) = {limit}")
        out.append([int(x) for x in p])
    return out


def sample_keys(key: Any, num_prompts: int, n: int) -> jax.Array:
    """Per-sample typed keys [P, n] from one key (split) or a [P, n] key array (as is)."""
    if key is None or isinstance(key, (numbers.Number, np.random.Generator)):
        raise ValueError(f"key must be a jax.random key (e.g. jax.random.key(seed)), got {key!r}")
    if not isinstance(key, jax.Array):
        try:
            key = jnp.asarray(key)
        except TypeError as err:
            raise ValueError(f"key must be a jax.random key, got {key!r:.80}") from err
    if not jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
        if key.dtype != jnp.uint32 or key.ndim < 1 or key.shape[-1] != 2:
            raise ValueError(f"key must be a jax.random.key or a raw uint32 [..., 2] key, got "
                             f"dtype {key.dtype} shape {key.shape}")
        key = jax.random.wrap_key_data(key)
    if key.shape == ():
        return jax.random.split(key, (num_prompts, n))
    if key.shape != (num_prompts, n):
        raise ValueError(f"key array shape {key.shape} must be () or (P, n) = {(num_prompts, n)}")
    return key
