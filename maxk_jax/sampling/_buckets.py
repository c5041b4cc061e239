"""Padding and bucketing of prompt batches: the few padded shapes every sampler call compiles for.

    Tp = prompt_length_bucket(longest_prompt)          # 16, 32, 64, 128, 256, 384, ...
    Pb = prompt_batch_bucket(num_prompts, batch_shards(mesh))
    tokens, mask = pad_prompts(prompts, Tp, Pb, pad_id)  # left-padded [Pb, Tp] int32
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from jax.sharding import Mesh

from maxk_jax.runtime import sharding as sharding_lib

#: Smallest prompt-length bucket (see :func:`prompt_length_bucket`).
MIN_PROMPT_BUCKET = 16
#: Prompt-length bucket granularity above it: lengths > 128 are padded to a multiple of this.
PROMPT_BUCKET_STEP = 128


def next_pow2(x: int, minimum: int = 1) -> int:
    """Smallest power of two >= max(x, minimum)."""
    x = max(int(x), int(minimum), 1)
    return 1 << (x - 1).bit_length()


def prompt_length_bucket(length: int, minimum: int = MIN_PROMPT_BUCKET) -> int:
    """Padded prompt length Tp >= max(length, minimum): the next power of two while that is
    <= ``PROMPT_BUCKET_STEP`` (128), else the next multiple of 128 (e.g. 16, 32, 64, 128, 256,
    384, ...; 1,024 -> 1,024, 1,025 -> 1,152). Idempotent: ``prompt_length_bucket(Tp) == Tp``."""
    x = max(int(length), int(minimum), 1)
    if x <= PROMPT_BUCKET_STEP:
        return next_pow2(x)
    return -(-x // PROMPT_BUCKET_STEP) * PROMPT_BUCKET_STEP


def prompt_batch_bucket(num_prompts: int, shards: int = 1) -> int:
    """Rows Pb >= num_prompts the prompt batch is padded to: next_pow2 up to 8, then the next
    multiple of 8 (so at most 7 dummy prompts, not up to 2x), rounded up to a multiple of
    ``shards`` (the mesh batch shard count)."""
    if num_prompts < 1 or shards < 1:
        raise ValueError(f"prompt_batch_bucket needs num_prompts >= 1 and shards >= 1, got "
                         f"{num_prompts}, {shards}")
    rows = next_pow2(num_prompts) if num_prompts <= 8 else -(-num_prompts // 8) * 8
    return -(-rows // shards) * shards


def batch_shards(mesh: Mesh | None) -> int:
    if mesh is None:
        return 1
    return int(np.prod([mesh.shape[a] for a in sharding_lib.BATCH_AXES if a in mesh.shape]))


def pad_prompts(prompts: Sequence[Sequence[int]], bucket_len: int, bucket_batch: int,
                pad_id: int) -> tuple[np.ndarray, np.ndarray]:
    """Left-pad token lists into (tokens [bucket_batch, bucket_len] int32, mask same shape int32);
    rows past ``len(prompts)`` are dummy one-token prompts (``pad_id``, mask 1)."""
    tokens = np.full((bucket_batch, bucket_len), pad_id, np.int32)
    mask = np.zeros((bucket_batch, bucket_len), np.int32)
    for i in range(bucket_batch):
        p = prompts[i] if i < len(prompts) else [pad_id]
        tokens[i, bucket_len - len(p):] = p
        mask[i, bucket_len - len(p):] = 1
    return tokens, mask
