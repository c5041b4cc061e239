"""One-token decode attention as two Pallas GPU (Triton) kernels: K/V read once, in place, live slots only.

The same function as :func:`maxk_jax.models.kv_cache.attend_decode` (one query token per sample
row against its prompt's shared block, the row's own generated slots and itself), restricted to
what the decode step passes: own slots ``0 .. length - 1`` valid for every row. XLA builds that
attention from several fusions that write float32 score arrays the size of a K block and read
them back (scores, max, exponentials, the weighted sums: about 2.8x the bytes of K and V at the
1.5B preset) and reads every generated slot, live or not. Here, flash-decoding style:

* **prompt kernel**, one program per (prompt, KV head, tile of up to ``Q_TILE`` queries): the
  ``n * G`` queries of that prompt's ``n`` sample rows and the KV head's ``G`` query heads (no
  repetition of K/V per query head) against the prompt's K/V block, in blocks of ``block_k``
  slots with an online softmax, writing a float32 partial result and its softmax statistics;
  each prompt block is read once per query tile (once for 16 x 8 rollouts; 13 times, mostly
  from L2, for the 1 x 128 evaluation shape);
* **own kernel**, one program per (row, KV head): the row's ``G`` queries against its own cache,
  looping over ``ceil(length / block_k)`` blocks only (the slots not generated yet are not read),
  then merging that with the prompt kernel's partial result for the row and the token's own key
  by their softmax statistics (max, denominator) in float32, and storing the row's ``G`` heads
  of the output in place (masked store: no padded copy, no merge kernel); on request
  (``write_cache``) it then writes the token's key and value into the row's cache slot, in place
  (outputs aliased to the cache). The queries, keys and values reach both kernels in one array
  (:func:`_pack`), so one XLA fusion prepares all three (bias, RoPE, layout). The result equals
  attention over the concatenated keys up to float rounding. K and V are read in their own
  dtype, scores and sums accumulate in float32 and the probabilities enter the V products in the
  cache dtype (as ``attend_decode`` does).

Off GPU the kernels run in Pallas' interpret mode (what the tests use on CPU); shapes the Triton
kernels cannot tile (head dim or slot count below 16) fall back to ``attend_decode``. On a sharded
mesh (XLA cannot partition a custom call) the kernels run per device under ``shard_map``: rows and
their prompts split along the cache's batch axes (``data``, ``fsdp``), KV heads with their query
heads along ``tensor`` when the KV-head count divides by it (else every tensor shard attends all
heads of its rows: the cache is replicated there anyway). Selected by
``Qwen2Config.decode_attention = "pallas"``, or ``"auto"`` (the default) when compiling for a GPU of
compute capability >= 8.0 (``maxk_jax.models.auto``).
"""
from __future__ import annotations

import functools
from typing import Any, Mapping

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as plgpu
from jax.sharding import PartitionSpec

from maxk_jax.runtime import sharding as sh
from maxk_jax.models import auto
from maxk_jax.models.attention import compiling_for_gpu, context_platform
from maxk_jax.models.kv_cache import attend_decode, write_slot
from maxk_jax.models.qwen2_config import DECODE_ATTENTION

NEG = -0.7 * float(jnp.finfo(jnp.float32).max)   # a finite "minus infinity" (exp underflows to 0)
MIN_TILE = 16                                     # Triton's smallest matmul tile
SPLIT_TARGET = 128  # prompt-kernel programs wanted (split along the prompt's slots, flash-decoding style):
                    # 16 prompts x 2 KV heads alone are 32 programs for a GPU of 132 SMs
Q_TILE = 64       # prompt-kernel query rows per program (the queries of many rows on one prompt are tiled:
                  # one program holding all of 1 prompt x n = 128 rows would exceed an H100's shared memory)


def resolve(name: str, platform: str | None = None, device: Any = None) -> str:
    """The decode attention ``name`` (``Qwen2Config.decode_attention``) selects on ``platform``
    (default: the one being compiled for, :func:`maxk_jax.models.attention.context_platform`) and
    ``device`` (default: :func:`maxk_jax.models.auto.context_device` when resolving for the context;
    none when ``platform`` is given): ``"auto"`` -> :func:`maxk_jax.models.auto.decode_attention`
    (``"pallas"`` on a GPU of compute capability >= 8.0 or unknown, ``"xla"`` elsewhere: CPU, TPU,
    older GPUs); the others unchanged."""
    if name not in DECODE_ATTENTION:
        raise ValueError(f"decode attention {name!r} is not one of {DECODE_ATTENTION}")
    if name != "auto":
        return name
    if platform is None:
        platform = context_platform()
        if device is None and compiling_for_gpu(platform):
            device = auto.context_device(platform)
    return auto.decode_attention("gpu" if compiling_for_gpu(platform) else platform, device)


def _pow2(x: int) -> int:
    """The smallest power of two >= max(x, MIN_TILE)."""
    return max(MIN_TILE, 1 << (max(x, 1) - 1).bit_length())


def _block(slots: int, block_k: int) -> int:
    """Slots per K/V block: ``block_k`` (a power of two), halved until it fits in ``slots``."""
    b = block_k
    while b > slots and b > MIN_TILE:
        b //= 2
    return b


def _online_block(q, k, v, ok, carry, scale):
    """One online-softmax step: q [Q, D], k/v [bk, D], ok [bk] bool, carry (o [Q, D], m [Q], l [Q])."""
    o, m, l = carry
    s = plgpu.dot(q, k, trans_b=True) * scale          # [Q, bk]
    s = jnp.where(ok[None, :], s, NEG)
    m_new = jnp.maximum(m, jnp.max(s, axis=1))
    p = jnp.where(ok[None, :], jnp.exp(s - m_new[:, None]), 0.0)
    alpha = jnp.exp(m - m_new)
    l = l * alpha + jnp.sum(p, axis=1)
    o = o * alpha[:, None] + plgpu.dot(p.astype(v.dtype), v)
    return o, m_new, l


def _block_at(i, bk: int, slots: int) -> tuple[jax.Array, jax.Array]:
    """(start, fresh [bk] bool) of block ``i`` of ``bk`` slots out of ``slots``: the last block is
    shifted back to end at ``slots`` (no out-of-bounds read); ``fresh`` masks the slots it repeats."""
    start = jnp.minimum(i * bk, slots - bk)
    return start, start + jnp.arange(bk) >= i * bk


def _prompt_kernel(q_ref, k_ref, v_ref, valid_ref, o_ref, m_ref, l_ref, *, bk, slots, scale, per_split):
    """Program (prompt p, KV head k, query tile, split s): q_ref [Q, D], k_ref/v_ref [Tp, D],
    valid_ref [Tp] int32; attends blocks ``s * per_split ..`` (at most ``per_split`` of them)."""
    q = q_ref[...]
    nq, d = q.shape
    first = pl.program_id(3) * per_split

    def body(i, carry):
        start, fresh = _block_at(i, bk, slots)
        ok = fresh & (valid_ref[pl.ds(start, bk)] != 0)
        return _online_block(q, k_ref[pl.ds(start, bk), :], v_ref[pl.ds(start, bk), :], ok, carry, scale)

    init = (jnp.zeros((nq, d), jnp.float32), jnp.full((nq,), NEG, jnp.float32), jnp.zeros((nq,), jnp.float32))
    o, m, l = jax.lax.fori_loop(first, jnp.minimum(first + per_split, pl.cdiv(slots, bk)), body, init)
    o_ref[...], m_ref[...], l_ref[...] = o, m, l


def _own_kernel(length_ref, q_ref, k_ref, v_ref, o_p_ref, m_p_ref, l_p_ref, out_ref, *cache_refs,
                bk, slots, scale, n, g, gp, nq_pad, splits):
    """Program (row b, KV head k): q_ref [Q + 2n, D] (the row's prompt's block of the packed layout
    of :func:`_pack`: its n*G queries, padding to ``nq_pad`` rows, then the n rows' new keys and
    their new values; the row's G heads from row ``(b % n) * G``, its key at ``nq_pad + b % n``,
    its value n rows further), k_ref/v_ref [S, D] (slots < length are live), o_p_ref [Q, D] /
    m_p_ref, l_p_ref [Q] (the prompt kernel's partial results, one per split of the prompt block:
    [splits, Q, D] and [splits, Q], the queries' layout) -> out_ref
    [Gp, D] (a window whose first G rows are the row's heads): the attention over prompt, own
    slots and the token itself. Works on windows of ``gp`` (a power of two >= G) rows; the rows
    past G belong to other rows, heads or padding and are not stored. With ``cache_refs`` =
    (k_out_ref, v_out_ref) [S, D], aliases of k_ref/v_ref, the token's key and value are then
    written into slot ``length`` (nothing when ``length >= S``): the slots read are all below it,
    so the write cannot change what this or any other program reads."""
    row = pl.program_id(0) % n
    rows = pl.ds(row * g, gp)
    q = q_ref[rows, :]
    k_new, v_new = q_ref[pl.ds(nq_pad + row, 1), :], q_ref[pl.ds(nq_pad + n + row, 1), :]   # [1, D]
    nq, d = q.shape
    length = jnp.minimum(length_ref[0], slots)

    def body(i, carry):
        start, fresh = _block_at(i, bk, slots)
        ok = fresh & (start + jnp.arange(bk) < length)
        return _online_block(q, k_ref[pl.ds(start, bk), :], v_ref[pl.ds(start, bk), :], ok, carry, scale)

    init = (jnp.zeros((nq, d), jnp.float32), jnp.full((nq,), NEG, jnp.float32), jnp.zeros((nq,), jnp.float32))
    o, m, l = jax.lax.fori_loop(0, pl.cdiv(length, bk), body, init)   # only the live blocks

    # merge with the prompt block and the token's own key by their softmax statistics (float32)
    o_p, m_p, l_p = o_p_ref[0, rows, :], m_p_ref[0, rows], l_p_ref[0, rows]
    if splits > 1:   # the prompt block's splits merged by their softmax statistics
        parts = [(o_p_ref[s, rows, :], m_p_ref[s, rows], l_p_ref[s, rows]) for s in range(splits)]
        m_p = parts[0][1]
        for part in parts[1:]:
            m_p = jnp.maximum(m_p, part[1])
        weights = [jnp.exp(m_s - m_p) for _, m_s, _ in parts]
        o_p = sum(o_s * w[:, None] for (o_s, _, _), w in zip(parts, weights))
        l_p = sum(l_s * w for (_, _, l_s), w in zip(parts, weights))
    s_self = jnp.sum(q.astype(jnp.float32) * k_new.astype(jnp.float32), axis=1) * scale
    m_all = jnp.maximum(jnp.maximum(m_p, m), s_self)
    w_p, w_c, w_s = jnp.exp(m_p - m_all), jnp.exp(m - m_all), jnp.exp(s_self - m_all)
    denom = l_p * w_p + l * w_c + w_s
    out = o_p * w_p[:, None] + o * w_c[:, None] + w_s[:, None] * v_new.astype(jnp.float32)
    # out_ref [Gp, D] is a window over the row's G heads: its rows past G are not stored
    keep = (jnp.arange(nq) < g)[:, None]
    plgpu.store(out_ref, (out / denom[:, None]).astype(out_ref.dtype), mask=keep)
    if cache_refs:
        slot = jnp.minimum(length_ref[0], slots - 1)
        live = jnp.broadcast_to(length_ref[0] < slots, (1, d))
        for new, cache_ref in zip((k_new, v_new), cache_refs):
            plgpu.store(cache_ref.at[pl.ds(slot, 1), :], new.astype(cache_ref.dtype), mask=live)


def _compiler_params(interpret: bool) -> plgpu.CompilerParams | None:
    """Triton launch parameters (the Triton backend, not Mosaic GPU); none when interpreted."""
    return None if interpret else plgpu.CompilerParams(num_warps=4, num_stages=2)


def _partial_outputs(grid: tuple[int, int, int, int], rows: int, d: int) -> dict:
    """``out_specs`` / ``out_shape`` of the prompt kernel on ``grid`` = (prompts, kv, row tiles,
    splits): its float32 partial results o [prompts, kv, splits, rows, D] and softmax statistics
    m, l [prompts, kv, splits, rows], each program writing its tile of ``rows // grid[2]`` rows."""
    programs, kv, tiles, splits = grid
    tile = rows // tiles
    specs = [pl.BlockSpec((None, None, None, tile, d), lambda i, j, t, s: (i, j, s, t, 0))] + [
        pl.BlockSpec((None, None, None, tile), lambda i, j, t, s: (i, j, s, t))] * 2
    shapes = [jax.ShapeDtypeStruct((programs, kv, splits, rows, d), jnp.float32)] + [
        jax.ShapeDtypeStruct((programs, kv, splits, rows), jnp.float32)] * 2
    return {"out_specs": specs, "out_shape": shapes}


def prompt_splits(programs: int, blocks: int, target: int = SPLIT_TARGET) -> int:
    """Splits of the prompt block along its slots: the largest power of two <= ``blocks`` (K/V
    blocks of the prompt) that keeps ``programs`` (prompts x KV heads x query tiles) x splits
    within ``target`` programs; 1 where ``programs`` alone reaches it."""
    splits = 1
    while splits * 2 <= blocks and programs * splits * 2 <= target:
        splits *= 2
    return splits


def _pack(q: jax.Array, k_new: jax.Array, v_new: jax.Array, prompts: int, nq: int) -> jax.Array:
    """q [B,H,D], k_new/v_new [B,K,D] (rows p*n .. p*n+n-1 on prompt p) -> [P, K, nq + 2n, D]: per
    (prompt, KV head) its n rows' G query heads (row-major: row r's heads at r*G ...), zeros to
    ``nq`` rows, the n rows' keys, then their values. The prompt kernel reads the first ``nq``
    rows; the own kernel its row's query window, key and value."""
    b, h, d = q.shape
    kv = k_new.shape[1]
    n, g = b // prompts, h // kv
    per_prompt = lambda x, heads: x.reshape(prompts, n, kv, heads, d).transpose(0, 2, 1, 3, 4).reshape(
        prompts, kv, n * heads, d)
    pad = jnp.zeros((prompts, kv, nq - n * g, d), q.dtype)
    return jnp.concatenate([per_prompt(q, g), pad, per_prompt(k_new, 1), per_prompt(v_new, 1)], axis=2)


def supported(q: jax.Array, prompt_k: jax.Array, cache_k: jax.Array) -> bool:
    """Whether the kernels tile these shapes: head dim and both slot counts >= 16, head dim a power of two."""
    d = q.shape[-1]
    return d >= MIN_TILE and d & (d - 1) == 0 and prompt_k.shape[2] >= MIN_TILE and cache_k.shape[2] >= MIN_TILE


@functools.partial(jax.jit, static_argnames=("block_k", "interpret", "write_cache", "splits"))
def attend_decode_pallas(q: jax.Array, k_new: jax.Array, v_new: jax.Array, prompt_k: jax.Array,
                         prompt_v: jax.Array, prompt_valid: jax.Array, cache_k: jax.Array, cache_v: jax.Array,
                         length: jax.Array, block_k: int = 64, interpret: bool | None = None,
                         write_cache: bool = False, splits: int = 0
                         ) -> jax.Array | tuple[jax.Array, jax.Array, jax.Array]:
    """:func:`attend_decode` with own slots ``0 .. length - 1`` valid, by the Pallas kernels above.

    q [B,H,D], k_new/v_new [B,K,D]; prompt_k/prompt_v [P,K,Tp,D] with prompt_valid [P,Tp] bool
    (rows p*n .. p*n+n-1 share prompt p); cache_k/cache_v [B,K,S,D]; length [] int32 -> [B,H,D] in
    q's dtype. ``block_k`` slots per K/V block (a power of two >= 16); ``interpret`` None runs the
    kernels compiled on GPU and interpreted elsewhere. Shapes :func:`supported` rejects go to
    :func:`attend_decode` (same result). Under an ambient mesh of several devices the kernels run
    per shard (:func:`shard_specs`).

    ``write_cache``: also write k_new/v_new into slot ``length`` of the cache (dropped when
    ``length >= S``) and return (out, cache_k, cache_v). The own kernel does it in place, through
    outputs aliased to the cache (no write kernels; no copy where the caller's cache buffers can be
    reused, as in the decode loop); k_new/v_new must then have the cache's dtype.

    ``splits``: programs per (prompt, KV head, query tile) along the prompt's slots, each writing a
    partial result the own kernel merges (more programs where prompts x KV heads alone leave a GPU's
    multiprocessors idle); 0 chooses :func:`prompt_splits`, 1 is the unsplit kernel."""
    b, h, d = q.shape
    p, kv = prompt_k.shape[:2]
    if b % p:
        raise ValueError(f"attend_decode_pallas: {b} query rows are not a multiple of {p} prompts")
    if h % kv:
        raise ValueError(f"attend_decode_pallas: {h} query heads are not a multiple of {kv} KV heads")
    if block_k < MIN_TILE or block_k & (block_k - 1):
        raise ValueError(f"block_k={block_k} must be a power of two >= {MIN_TILE}")
    if isinstance(splits, bool) or not isinstance(splits, int) or splits < 0:
        raise ValueError(f"splits={splits!r} must be an int >= 0 (0: chosen by prompt_splits)")
    if interpret is None and context_platform() == "tpu":
        raise ValueError("decode_attention='pallas' is Triton (GPU) kernels, which a TPU would only interpret "
                         "(slowly): use decode_attention='xla' on TPU")
    if k_new.dtype != q.dtype or v_new.dtype != q.dtype:
        raise ValueError(f"attend_decode_pallas: the new key/value ({k_new.dtype}, {v_new.dtype}) must have the "
                         f"queries' dtype ({q.dtype}): the kernels read them from one array")
    if write_cache and (k_new.dtype != cache_k.dtype or v_new.dtype != cache_v.dtype):
        raise ValueError(f"write_cache: the new key/value ({k_new.dtype}, {v_new.dtype}) must have the cache's "
                         f"dtype ({cache_k.dtype}, {cache_v.dtype})")
    args = (q, k_new, v_new, prompt_k, prompt_v, prompt_valid, cache_k, cache_v, length)
    local = functools.partial(_attend_local, block_k=block_k, interpret=interpret, write_cache=write_cache,
                              splits=splits)
    mesh = jax.sharding.get_abstract_mesh()
    if mesh.empty or mesh.size == 1:
        return local(*args)
    rows, heads = shard_specs(dict(mesh.shape), p, kv)
    row_spec, kv_spec = PartitionSpec(rows, heads, None), PartitionSpec(rows, heads, None, None)
    in_specs = (row_spec, row_spec, row_spec, kv_spec, kv_spec, PartitionSpec(rows, None), kv_spec, kv_spec,
                PartitionSpec())
    out_specs = (row_spec, kv_spec, kv_spec) if write_cache else row_spec
    return jax.shard_map(local, mesh=mesh, in_specs=in_specs, out_specs=out_specs, check_vma=False)(*args)


def shard_specs(mesh_shape: Mapping[str, int], prompts: int, kv_heads: int
                ) -> tuple[str | tuple[str, ...] | None, str | tuple[str, ...] | None]:
    """(row axes, head axes) the kernels split over on a mesh of ``mesh_shape`` (axis name -> size):
    the KV cache's own split (the ``cache_batch`` and ``cache_kv_heads`` sharding rules) fitted to
    ``prompts`` x ``kv_heads`` (axes dropped, innermost first, where they do not divide), so every
    shard holds whole prompts with their rows and whole KV heads with their query heads."""
    spec = sh.fit_spec(sh.logical_to_mesh(("cache_batch", "cache_kv_heads")), (prompts, kv_heads), mesh_shape,
                       "decode attention (prompts, KV heads)")
    return spec[0], spec[1]


def _attend_local(q: jax.Array, k_new: jax.Array, v_new: jax.Array, prompt_k: jax.Array, prompt_v: jax.Array,
                  prompt_valid: jax.Array, cache_k: jax.Array, cache_v: jax.Array, length: jax.Array,
                  block_k: int, interpret: bool | None, write_cache: bool = False, splits: int = 0
                  ) -> jax.Array | tuple[jax.Array, jax.Array, jax.Array]:
    """:func:`attend_decode_pallas` on one device (or one shard): the same arguments and result."""
    b, h, d = q.shape
    p, kv, tp, _ = prompt_k.shape
    s_own = cache_k.shape[2]
    if not supported(q, prompt_k, cache_k):
        out = attend_decode(q, k_new, v_new, prompt_k, prompt_v, prompt_valid, cache_k, cache_v,
                            jnp.arange(s_own) < length)
        if not write_cache:
            return out
        return out, write_slot(cache_k, k_new, length), write_slot(cache_v, v_new, length)
    if interpret is None:
        interpret = not compiling_for_gpu()
    n, g = b // p, h // kv
    scale = d ** -0.5
    params = _compiler_params(interpret)

    # Prompt block: queries [P, K, n*G (padded), D], one program per (prompt, KV head, tile of
    # at most Q_TILE query rows). Padded so that every row's window of Gp rows (below) is in range;
    # the rows' new keys and values follow (read by the own kernel only): one XLA fusion makes all.
    ng = _pow2(g)
    qt = min(_pow2(n * g), Q_TILE)
    nq = -(-max(n * g, (n - 1) * g + ng) // qt) * qt
    qp = _pack(q, k_new, v_new, p, nq)
    bk = _block(tp, block_k)
    blocks = -(-tp // bk)
    splits = min(splits or prompt_splits(p * kv * (nq // qt), blocks), blocks)
    per_split = -(-blocks // splits)
    splits = -(-blocks // per_split)   # none empty
    o_p, m_p, l_p = pl.pallas_call(
        functools.partial(_prompt_kernel, bk=bk, slots=tp, scale=scale, per_split=per_split),
        grid=(p, kv, nq // qt, splits),
        in_specs=[pl.BlockSpec((None, None, qt, d), lambda i, j, t, s: (i, j, t, 0)),
                  pl.BlockSpec((None, None, tp, d), lambda i, j, t, s: (i, j, 0, 0)),
                  pl.BlockSpec((None, None, tp, d), lambda i, j, t, s: (i, j, 0, 0)),
                  pl.BlockSpec((None, tp), lambda i, j, t, s: (i, 0))],
        **_partial_outputs((p, kv, nq // qt, splits), nq, d),
        compiler_params=params, interpret=interpret, name="decode_attention_prompt",
    )(qp, prompt_k, prompt_v, prompt_valid.astype(jnp.int32))

    # Own generated slots, then the merge with the prompt block's partial result and the token's
    # own key: one program per (row, KV head), reading the row's queries and partial result in the
    # prompt kernel's layout (its G heads at rows (b % n) * G ... of its prompt's). With
    # ``write_cache`` it also writes the token's key and value into the cache it read, in place.
    bk = _block(s_own, block_k)
    cache_spec = pl.BlockSpec((None, None, s_own, d), lambda i, j: (i, j, 0, 0))
    # the output block is the Gp-row window (Triton tiles are powers of two) over the row's G heads:
    # the kernel stores the first G rows (masked), so the rows past G (the next head's) are untouched
    out_spec = pl.BlockSpec((None, None, ng, d), lambda i, j: (i, j, 0, 0))
    out_shape = jax.ShapeDtypeStruct((b, kv, g, d), q.dtype)
    outs = pl.pallas_call(
        functools.partial(_own_kernel, bk=bk, slots=s_own, scale=scale, n=n, g=g, gp=ng, nq_pad=nq, splits=splits),
        grid=(b, kv),
        in_specs=[pl.BlockSpec((1,), lambda i, j: (0,)),
                  pl.BlockSpec((None, None, nq + 2 * n, d), lambda i, j: (i // n, j, 0, 0)),
                  cache_spec, cache_spec,
                  pl.BlockSpec((None, None, splits, nq, d), lambda i, j: (i // n, j, 0, 0, 0)),
                  pl.BlockSpec((None, None, splits, nq), lambda i, j: (i // n, j, 0, 0)),
                  pl.BlockSpec((None, None, splits, nq), lambda i, j: (i // n, j, 0, 0))],
        out_specs=[out_spec, cache_spec, cache_spec] if write_cache else out_spec,
        out_shape=[out_shape, jax.ShapeDtypeStruct(cache_k.shape, cache_k.dtype),
                   jax.ShapeDtypeStruct(cache_v.shape, cache_v.dtype)] if write_cache else out_shape,
        input_output_aliases={2: 1, 3: 2} if write_cache else {},
        compiler_params=params, interpret=interpret, name="decode_attention_own",
    )(jnp.reshape(length, (1,)).astype(jnp.int32), qp, cache_k, cache_v, o_p, m_p, l_p)
    if not write_cache:
        return outs.reshape(b, h, d)
    return outs[0].reshape(b, h, d), outs[1], outs[2]
