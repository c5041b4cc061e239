"""The decode step's LM head and Gumbel-max draw as one Pallas GPU (Triton) kernel: no logits array.

    tokens, logp = draw_from_hidden(h, weight, tied, key_data, temperature)
    # h [B, E] (the final-normed hidden state), weight [V, E] (tied embedding) or [E, V] (lm_head),
    # key_data uint32 [B, 2] (each row's step key: fold_in(sample key, step)) -> [B] int32, [B] float32

On the sampler's usual path the LM head GEMM writes float32 logits [B, V] (78 MB at 128 rows x
151,936 tokens), and the draw (:mod:`maxk_jax.sampling._draw`) reads them back and computes, for every
logit, the Gumbel noise ``jax.random.gumbel`` defines for that row's key and position: one threefry2x32
evaluation per element (~80 integer instructions), a compute-bound pass of its own while the GEMM before
it is memory-bound. Here one kernel does both per tile of the vocabulary: program (vocabulary tile j,
row tile i) computes its logits tile ``h @ W[j]`` (bf16 operands, float32 accumulation), divides by the
temperature, adds the same noise (:func:`threefry_bits`, :func:`gumbel_from_bits`: bit for bit
``jax.random.gumbel(key, (V,))``, tested) and reduces the tile to five numbers per row: the max and
the sum of exponentials (an online log-sum-exp), the best perturbed value, its first index and its
scaled logit. The row tiles of one vocabulary tile are adjacent programs, so the weight tile the
second reads is in L2. :func:`merge_partials` combines the [tiles, B] partials with the one-pass
draw's combiner, in XLA. The draw equals :func:`maxk_jax.sampling._draw.draw_one_pass` of the XLA
logits up to the rounding of the logits themselves (the GEMM sums in another order): log-probs to
~1e-6, and a token can differ only where two perturbed values are within rounding of each other.

Plain temperature sampling only (top-k / top-p need the whole row first) with threefry keys under
jax's partitionable bits and the default Gumbel mode; :func:`applies` says when. Off GPU the kernel
runs in Pallas' interpret mode (the tests). Selected by ``Qwen2Config.decode_draw = "pallas"``
(opt-in: not yet measured on a GPU).
"""
from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as plgpu

from maxk_jax.models.attention import compiling_for_gpu
from maxk_jax.sampling._buckets import next_pow2
from maxk_jax.sampling._draw import combine_partials

#: threefry2x32's rotation constants, alternating by group of four rounds
_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))
_PARITY = np.uint32(0x1BD11BDA)
_TINY = np.float32(np.finfo(np.float32).tiny)
BLOCK_V = 128      # vocabulary columns per program
BLOCK_ROWS = 64    # rows per program at most (the float32 accumulator is rows x BLOCK_V); untuned
INT_MAX = np.iinfo(np.int32).max


def threefry_bits(k0: jax.Array, k1: jax.Array, position: jax.Array) -> jax.Array:
    """uint32 bits of ``jax.random.bits(key, (n,))`` at ``position`` (< 2**32) for the threefry key
    (k0, k1): jax's partitionable form, one threefry2x32 of the counter (0, position) with its two
    output words xored. Arguments are uint32 arrays that broadcast together (usable in a kernel)."""
    keys = (k0, k1, k0 ^ k1 ^ _PARITY)
    x0 = jnp.zeros_like(position) + k0          # the counter's high word is 0
    x1 = position + k1
    for group in range(5):
        for r in _ROTATIONS[group % 2]:
            x0 = x0 + x1
            x1 = (x1 << np.uint32(r)) | (x1 >> np.uint32(32 - r))
            x1 = x0 ^ x1
        x0 = x0 + keys[(group + 1) % 3]
        x1 = x1 + keys[(group + 2) % 3] + np.uint32(group + 1)
    return x0 ^ x1


def gumbel_from_bits(bits: jax.Array) -> jax.Array:
    """float32 Gumbel noise from uint32 ``bits``, operation for operation ``jax.random.gumbel``'s
    default ("low") mode: a uniform in [tiny, 1) from the 23 mantissa bits, then -log(-log(u))."""
    floats = jax.lax.bitcast_convert_type((bits >> np.uint32(9)) | np.uint32(0x3F800000), jnp.float32)
    floats = floats - np.float32(1.0)
    u = jnp.maximum(_TINY, floats * (np.float32(1.0) - _TINY) + _TINY)
    return -jnp.log(-jnp.log(u))


def applies(temperature: float, top_k: int, top_p: float, keys: jax.Array, mesh: Any = None,
            hidden_size: int = 16) -> bool:
    """Whether the fused draw reproduces the sampler's draw for these settings: temperature > 0 with
    no top-k / top-p, typed threefry keys under partitionable bits and the default Gumbel mode, one
    device (no mesh, or a mesh of one), and a hidden size the kernel tiles (a multiple of 16)."""
    return (temperature > 0 and top_k == 0 and top_p == 1.0
            and jnp.issubdtype(keys.dtype, jax.dtypes.prng_key)
            and str(jax.random.key_impl(keys)) == "threefry2x32"
            and bool(getattr(jax.config, "jax_threefry_partitionable", True))       # jax's default since 0.5
            and not bool(getattr(jax.config, "jax_high_dynamic_range_gumbel", False))
            and (mesh is None or mesh.size == 1) and hidden_size % 16 == 0)


def _block_k(e: int) -> int:
    """Contraction block: the largest of 64, 32, 16 dividing the hidden size ``e``."""
    for bk in (64, 32, 16):
        if e % bk == 0:
            return bk
    raise ValueError(f"draw_from_hidden: hidden size {e} is not a multiple of 16")


def _kernel(h_ref, w_ref, k0_ref, k1_ref, m_ref, s_ref, best_ref, idx_ref, logit_ref, *, vocab: int, block_v: int,
            block_k: int, hidden: int, tied: bool, temperature: float):
    """Program (vocabulary tile j, row tile i): h_ref [bm, E], w_ref the whole weight, k0/k1 [bm]
    -> the tile's five per-row partials ([bm] each) of the draw over columns j*bn ... j*bn + bn - 1."""
    start = pl.program_id(0) * block_v
    cols = start + jnp.arange(block_v, dtype=jnp.int32)
    valid = cols < vocab

    def body(step, acc):
        k = pl.multiple_of(step * block_k, block_k)
        x = h_ref[:, pl.ds(k, block_k)]
        if tied:   # embedding rows [V, E]: the tile's bn rows, bk columns
            w = plgpu.load(w_ref.at[pl.ds(start, block_v), pl.ds(k, block_k)], mask=valid[:, None], other=0.0)
            return acc + plgpu.dot(x, w.astype(x.dtype), trans_b=True).astype(jnp.float32)
        w = plgpu.load(w_ref.at[pl.ds(k, block_k), pl.ds(start, block_v)], mask=valid[None, :], other=0.0)
        return acc + plgpu.dot(x, w.astype(x.dtype)).astype(jnp.float32)

    acc = jax.lax.fori_loop(0, hidden // block_k, body, jnp.zeros((h_ref.shape[0], block_v), jnp.float32))
    scaled = jnp.where(valid[None, :], acc / np.float32(temperature), -jnp.inf)
    noise = gumbel_from_bits(threefry_bits(k0_ref[...][:, None], k1_ref[...][:, None],
                                           cols.astype(jnp.uint32)[None, :]))
    perturbed = noise + scaled
    top = jnp.max(scaled, axis=1)
    m_ref[...] = top
    s_ref[...] = jnp.sum(jnp.where(valid[None, :], jnp.exp(scaled - top[:, None]), 0.0), axis=1)
    best = jnp.max(perturbed, axis=1)
    idx = jnp.min(jnp.where(perturbed == best[:, None], cols[None, :], INT_MAX), axis=1)
    best_ref[...] = best
    idx_ref[...] = idx
    logit_ref[...] = jnp.max(jnp.where(cols[None, :] == idx[:, None], scaled, -jnp.inf), axis=1)


def merge_partials(parts: tuple[jax.Array, ...]) -> tuple[jax.Array, jax.Array]:
    """The kernel's partials (max, sum of exponentials, best value, its index, its scaled logit),
    each [tiles, B] -> (tokens [B] int32, log-probs [B] float32), combined over the tiles as the
    one-pass draw combines single logits."""
    init = (np.float32(-np.inf), np.float32(0.0), np.float32(-np.inf), np.int32(INT_MAX), np.float32(-np.inf))
    top, total, _, tokens, picked = jax.lax.reduce(parts, init, combine_partials, (0,))
    return tokens, (picked - top) - jnp.log(total)


@functools.partial(jax.jit, static_argnames=("tied", "temperature", "interpret", "block_v", "block_rows"))
def draw_from_hidden(h: jax.Array, weight: jax.Array, tied: bool, key_data: jax.Array, temperature: float,
                     interpret: bool | None = None, block_v: int = BLOCK_V, block_rows: int = BLOCK_ROWS
                     ) -> tuple[jax.Array, jax.Array]:
    """h [B, E] (compute dtype), weight [V, E] (``tied``) or [E, V], key_data uint32 [B, 2] (each
    row's threefry step key), temperature > 0 -> (tokens [B] int32, log-probs [B] float32): the
    LM head and the Gumbel-max draw of :func:`maxk_jax.sampling._draw.draw_tokens` in one kernel
    (module docstring). ``interpret`` None: compiled on GPU, interpreted elsewhere. ``block_v`` /
    ``block_rows``: vocabulary columns / rows per program (powers of two >= 16)."""
    if h.ndim != 2 or weight.ndim != 2 or key_data.shape != (h.shape[0], 2):
        raise ValueError(f"draw_from_hidden needs h [B, E], weight 2-D and key_data [B, 2], got {h.shape}, "
                         f"{weight.shape}, {key_data.shape}")
    b, e = h.shape
    vocab = weight.shape[0] if tied else weight.shape[1]
    if (weight.shape[1] if tied else weight.shape[0]) != e:
        raise ValueError(f"draw_from_hidden: weight {weight.shape} (tied={tied}) does not match hidden size {e}")
    if not temperature > 0:
        raise ValueError(f"draw_from_hidden needs temperature > 0, got {temperature!r}")
    for name, size in (("block_v", block_v), ("block_rows", block_rows)):
        if size < 16 or size & (size - 1):
            raise ValueError(f"{name}={size} must be a power of two >= 16")
    if interpret is None:
        interpret = not compiling_for_gpu()
    bm = min(next_pow2(b, 16), block_rows)
    rows = -(-b // bm) * bm
    h = jnp.pad(h, ((0, rows - b), (0, 0)))    # the weight is read as it is stored, each tile cast to h's dtype
    k0, k1 = (jnp.pad(key_data[:, i].astype(jnp.uint32), (0, rows - b)) for i in range(2))
    tiles = -(-vocab // block_v)
    row_block = pl.BlockSpec((bm,), lambda j, i: (i,))
    out_block = pl.BlockSpec((None, bm), lambda j, i: (j, i))
    params = None if interpret else plgpu.CompilerParams(num_warps=8 if bm * block_v >= 128 * 128 else 4,
                                                         num_stages=3)
    parts = pl.pallas_call(
        functools.partial(_kernel, vocab=vocab, block_v=block_v, block_k=_block_k(e), hidden=e, tied=tied,
                          temperature=float(temperature)),
        grid=(tiles, rows // bm),   # the row tiles of one vocabulary tile run next to each other
        in_specs=[pl.BlockSpec((bm, e), lambda j, i: (i, 0)), pl.BlockSpec(weight.shape, lambda j, i: (0, 0)),
                  row_block, row_block],
        out_specs=[out_block] * 5,
        out_shape=[jax.ShapeDtypeStruct((tiles, rows), t) for t in
                   (jnp.float32, jnp.float32, jnp.float32, jnp.int32, jnp.float32)],
        compiler_params=params, interpret=interpret, name="lm_head_draw",
    )(h, weight, k0, k1)
    tokens, logp = merge_partials(tuple(p[:, :b] for p in parts))
    return tokens, logp
