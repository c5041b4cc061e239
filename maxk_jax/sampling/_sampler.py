"""Jit-compiled generation for the Qwen2 model: n samples per prompt from one shared-prefix prefill.

    out = generate(config, params, prompts, n=8, max_new_tokens=256, key=jax.random.key(0),
                   temperature=1.0, top_p=1.0, top_k=0, eos_id=config.eos_token_id)
    out.tokens    # [P, n, T] int32, T = max_new_tokens; pad_id after the end of each sample
    out.logprobs  # [P, n, T] float32 log-prob of each token under the distribution sampled from
    out.lengths   # [P, n] int32 generated tokens INCLUDING the stop token; padding excluded

How it runs (two jit-compiled functions, config and :class:`SamplerSettings` static):

1. **Prefill** (:func:`prefill_prompts`): the P prompts are left-padded to a bucket length
   ``Tp = prompt_length_bucket(max(longest prompt, min_prompt_bucket))``: the next power of two
   up to 128 (16, 32, 64, 128 with the default minimum 16), then the next multiple of
   ``PROMPT_BUCKET_STEP`` = 128 (256, 384, 512, ...: at most 127 padding slots, one compiled
   shape per 128 tokens of prompt length). The batch is padded to
   ``Pb = prompt_batch_bucket(P, batch shards)`` rows (1, 2, 4, 8, then multiples of 8, rounded
   up to a multiple of the shard count; dummy one-token prompts, discarded), so new prompt
   lengths / counts reuse a compiled program. Each prompt is run through the model ONCE and its
   K/V are stored ONCE in a shared-prefix :class:`maxk_jax.models.kv_cache.KVCache`: the prompt
   block (per layer [Pb, K, Tp, D]) and, per sample row (row p*n + i = sample i of prompt p), a block of
   ``max(T - 1, 1)`` generated-token slots (per layer [Pb*n, K, T-1, D]); only the last-position logits
   are repeated n times ([Pb*n, V]).
2. **Decode** (:func:`decode_loop`, cache donated): token 0 is drawn from the prefill logits, then a
   ``lax.while_loop`` runs one ``models.decode.decode_step`` per token and stops as soon as every row has
   produced a stop token or T tokens were generated (``num_steps`` reports how many). Each step
   attends to the row's prompt (read from the shared block by an einsum that broadcasts over
   the n samples, never an n-fold copy) and to its own generated slots under ONE softmax
   (:func:`maxk_jax.models.kv_cache.attend_decode`): exactly attention over prompt + completion.
   Every step runs the layers unrolled over per-layer weights
   (:func:`maxk_jax.models.decode.unstack_layers`), so no step copies a weight or a cache block (on
   GPU a scanned layer loop copied ~1.1x the weight bytes per token). Per-layer ``params`` (the
   rollout copy, :meth:`maxk_jax.sampling.rollout_copy.RolloutLayout.copy`, or ``unstack_layers``
   called once outside ``jit``) are used as they are, by the prefill too
   (:func:`maxk_jax.models.decode.prefill`): the call holds ONE copy of the weights. Stacked
   ``params`` (the trainer's ``[L, ...]`` leaves) are split inside the decode program, a second copy
   of the layer weights for its duration.
   With ``Qwen2Config.decode_draw="pallas"`` (plain temperature sampling, threefry keys, one device)
   the LM head and the draw run as one kernel per vocabulary tile, without a logits array
   (:mod:`maxk_jax.sampling.lm_head_draw`; the same draw up to the rounding of the logits).

Sampling distribution: :func:`maxk_jax.sampling._filters.sampling_logprobs` (temperature, top-k,
top-p in that order; truncated and renormalised; temperature 0 = greedy with log-prob 0). The
returned ``logprobs`` are entries of exactly that distribution, float32, 0 at padding.

PRNG keys (a key is required; there is no default seed). One key per sample:
``key`` is either a single key, split as ``jax.random.split(key, (P, n))``, or an array of keys of
shape [P, n] used as is (typed ``jax.random.key`` keys or raw uint32 [..., 2]). Token t of a sample
is drawn with ``jax.random.fold_in(sample_key, t)``; nothing else enters. A sample therefore
depends only on its prompt, its own key and the settings, not on its batch slot, the padding
bucket or the other prompts: ``generate([p], n=m, key=ks.reshape(1, m))`` and
``generate([p] * m, n=1, key=ks.reshape(m, 1))`` give the same tokens (up to floating-point
differences in the logits, which can flip a draw in rare near-ties).

Stop tokens and padding: ``eos_id`` is None (no stop: every sample has T tokens; note this is
NOT ``config.eos_token_id`` -- pass that explicitly), an int or a sequence of ints. A stop token
is part of the sample (its log-prob counts for the policy gradient) and of ``lengths``; every
later position holds ``pad_id`` (default ``config.pad_token_id``, or 0 when the config has none)
with log-prob 0 and ``mask`` False. Stop ids and the pad id are runtime data (stop ids padded to
a power-of-two array >= 8 with -1), so changing them does not recompile; n, T, temperature,
top-k and top-p are static (:class:`SamplerSettings`) and each new value compiles once.

Sharding: with ``mesh`` (see :mod:`maxk_jax.runtime.sharding`) the prompt batch, keys, KV cache (the
prompt block over its Pb rows, the sample block over its Pb*n rows: a shard holds whole prompts
and their samples, since Pb is a multiple of the shard count) and outputs are split along the
mesh's batch axes ``('data', 'fsdp')`` and the model's activation
constraints are active. Parameters are used as placed by the caller (e.g.
``sharding.shard_params``); leaves not already on ``mesh`` are replicated onto it on every call.
Multi-host (a mesh spanning several JAX processes): every host calls ``generate`` at the same
time with ITS OWN prompts (possibly none) and their [P_h, n] keys; the global batch is the
hosts' blocks side by side, and each host gets back only its own rows (numpy arrays).
A data-only mesh gives bit-identical results to the unsharded run (tested on 8 devices); with
fsdp/tensor axes the matmul reductions are split, so log-probs agree to float rounding and a
token can differ only in a near-tie.

Cost notes: KV-cache bytes are ``2 * L * K * D * itemsize * (Pb * Tp + Pb * n * (T - 1))``
(prompt once + samples' own tokens; before the shared prefix: ``Pb * n * (Tp + T - 1)`` rows
with a power-of-two Tp). The prefill projects only the last prompt position to logits
(``qwen2.prefill(..., last_only=True)``: no [Pb, Tp, V] array). Decode work is proportional to the
row count Pb * n, so the prompt-count bucket (:func:`prompt_batch_bucket`) grows in steps of 8
above 8 prompts (powers of two below) instead of doubling: at most 7 dummy prompts, and still
few distinct compiled shapes.
"""
from __future__ import annotations

import dataclasses
import functools
import numbers
from collections.abc import Sequence
from typing import Any

import flax
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from maxk_jax.runtime import multihost
from maxk_jax.runtime import sharding as sharding_lib
from maxk_jax.models import decode, qwen2
from maxk_jax.cli.fields import check_int
from maxk_jax.sampling import lm_head_draw
from maxk_jax.sampling._draw import draw_tokens
from maxk_jax.sampling._filters import filtered_logits, sampling_logprobs, validate_filters
from maxk_jax.sampling._inputs import check_prompts, sample_keys, stop_id_array
from maxk_jax.sampling._buckets import (MIN_PROMPT_BUCKET, batch_shards, pad_prompts, prompt_batch_bucket,
                                        prompt_length_bucket)

Params = Any
@dataclasses.dataclass(frozen=True)
class SamplerSettings:
    """Static (hashable) sampler settings: a static jit argument, one compilation per value.
    The one declaration of the sampling distribution: the rollout, the periodic evaluation and
    the train step (whose policy log-probs use the same distribution) all hold one of these."""

    n: int  # samples per prompt
    max_new_tokens: int  # T: token budget per sample (0 only where a config section reads it as "inherit")
    temperature: float = 1.0  # 0 = greedy
    top_k: int = 0  # 0 = disabled
    top_p: float = 1.0  # 1.0 = disabled

    def __post_init__(self) -> None:
        """The one validation of sampler settings: ValueError ``<field>=<value> must ...`` (a config
        section prefixes its path, e.g. ``rollout.sampler.n=0 must ...``)."""
        check_int(self.n, "n")
        check_int(self.max_new_tokens, "max_new_tokens", 0)
        validate_filters(self.temperature, self.top_k, self.top_p)


@flax.struct.dataclass
class SampleOutput:
    """Samples of :func:`generate` (P prompts, n samples each, T = max_new_tokens)."""

    tokens: jax.Array  # [P, n, T] int32; pad_id after the stop token
    logprobs: jax.Array  # [P, n, T] float32 under the sampled-from distribution; 0 at padding
    lengths: jax.Array  # [P, n] int32 generated tokens incl. the stop token
    mask: jax.Array  # [P, n, T] bool: t < lengths
    finished: jax.Array  # [P, n] bool: the sample ended with a stop token (not the budget)
    prompt_lengths: jax.Array  # [P] int32
    num_steps: jax.Array  # [] int32: tokens generated by the longest sample (loop iterations + 1)


@flax.struct.dataclass
class _LoopState:
    """Carry of the decode ``while_loop`` (B = Pb * n rows, T = max_new_tokens)."""

    step: jax.Array  # [] int32: index of the next token to generate
    cache: qwen2.KVCache  # per layer: prompt block [Pb, K, Tp, D], samples' own [B, K, T-1, D]
    done: jax.Array  # [B] bool: the row has emitted a stop token (or is a dummy row)
    tokens: jax.Array  # [B, T] int32
    logprobs: jax.Array  # [B, T] float32
    lengths: jax.Array  # [B] int32


# ----------------------------------------------------------------------------------------------
# Small pure helpers
# ----------------------------------------------------------------------------------------------

def _constrain(x: jax.Array, mesh: Mesh | None, batch_axis: int = 0) -> jax.Array:
    """Shard x [.., B, ..] along the mesh batch axes on ``batch_axis`` (no-op without a mesh)."""
    if mesh is None:
        return x
    spec = [None] * x.ndim
    spec[batch_axis] = sharding_lib.BATCH_AXES
    return jax.lax.with_sharding_constraint(x, NamedSharding(mesh, PartitionSpec(*spec)))


def _constrain_draw_rows(x: jax.Array, mesh: Mesh | None) -> jax.Array:
    """The logits [B, V] the next token is drawn from, rows split over EVERY mesh axis when B
    allows (else over the batch axes). With tensor parallelism the LM head leaves the logits
    split over the vocabulary; drawing from whole rows then costs one all-to-all of
    B / (batch shards) * V values per device instead of gathering every row's logits on every
    tensor device (tensor times fewer bytes, and each device draws for fewer rows)."""
    if mesh is None:
        return x
    axes = sharding_lib.BATCH_AXES + ("tensor",)
    if x.shape[0] % int(np.prod([mesh.shape[a] for a in axes])):
        return _constrain(x, mesh)
    return jax.lax.with_sharding_constraint(x, NamedSharding(mesh, PartitionSpec(axes, None)))


def cache_shardings(cache: qwen2.KVCache, mesh: Mesh) -> qwen2.KVCache:
    """``NamedSharding`` of every cache field on ``mesh``: each layer's prompt block over its Pb
    rows (axis 0; prompt_valid axis 0) and each layer's samples' block over its Pb*n rows along the
    batch axes ('data', 'fsdp'); the K/V head axis (1) over ``tensor`` when that axis divides the
    KV-head count (as the K/V projections of the weights are split), so a tensor-parallel decode
    step writes and reads its own heads' cache without a gather; ``length`` replicated."""
    tensor = mesh.shape.get("tensor", 1)

    def kv(x: jax.Array) -> NamedSharding:
        heads = "tensor" if tensor > 1 and x.shape[1] % tensor == 0 else None
        return NamedSharding(mesh, PartitionSpec(sharding_lib.BATCH_AXES, heads, None, None))

    def layers(blocks: tuple[jax.Array, ...]) -> tuple[NamedSharding, ...]:
        return tuple(kv(x) for x in blocks)

    return cache.replace(prompt_k=layers(cache.prompt_k), prompt_v=layers(cache.prompt_v),
                         prompt_valid=NamedSharding(mesh, PartitionSpec(sharding_lib.BATCH_AXES, None)),
                         k=layers(cache.k), v=layers(cache.v), length=NamedSharding(mesh, PartitionSpec()))


def _constrain_cache(cache: qwen2.KVCache, mesh: Mesh | None) -> qwen2.KVCache:
    """Constrain every cache field to :func:`cache_shardings` (no-op without a mesh)."""
    if mesh is None:
        return cache
    return jax.lax.with_sharding_constraint(cache, cache_shardings(cache, mesh))


def is_stop(tokens: jax.Array, stop_ids: jax.Array) -> jax.Array:
    """Bool like tokens [...]: the token is one of stop_ids [S] int32 (-1 entries never match)."""
    return jnp.any(tokens[..., None] == stop_ids, axis=-1)


def _step_keys(keys: jax.Array, step: jax.Array) -> jax.Array:
    """The keys token ``step`` of each row is drawn with: keys [B] -> [B] ``fold_in(key, step)``."""
    return jax.vmap(jax.random.fold_in, in_axes=(0, None))(keys, step)


def draw(keys: jax.Array, step: jax.Array, logits: jax.Array, settings: SamplerSettings
         ) -> tuple[jax.Array, jax.Array]:
    """Draw one token per row. keys [B] (per-sample keys), step [] int, logits [B, V] ->
    (tokens [B] int32, their log-probs [B] float32 under the sampling distribution).

    Gumbel-max over the filtered, scaled logits with the noise of ``fold_in(key, step)``; the [B, V]
    log-probs are never stored (:func:`maxk_jax.sampling._draw.draw_tokens`: on CPU three reductions
    whose values are those of ``sampling_logprobs``, so tokens and log-probs equal a draw from its
    output; on GPU / TPU one reduction that reads the logits once, equal up to rounding)."""
    if settings.temperature == 0:
        logp = sampling_logprobs(logits, 0.0)
        tokens = jnp.argmax(logp, axis=-1).astype(jnp.int32)
        return tokens, jnp.take_along_axis(logp, tokens[:, None], axis=-1)[:, 0]
    scaled = filtered_logits(logits, settings.temperature, settings.top_k, settings.top_p)
    gumbels = jax.vmap(lambda k: jax.random.gumbel(k, scaled.shape[1:], scaled.dtype))(_step_keys(keys, step))
    return draw_tokens(gumbels, scaled)


def record(state: _LoopState, tokens: jax.Array, logp: jax.Array, stop_ids: jax.Array,
           pad_id: jax.Array) -> _LoopState:
    """Write token ``state.step`` of every row: tokens [B], logp [B] (pad_id [] and log-prob 0
    for finished rows); mark rows that wrote one of stop_ids [S] done; step + 1."""
    live = ~state.done
    tokens = jnp.where(live, tokens, pad_id)
    logp = jnp.where(live, logp, 0.0)
    col = state.step
    new = state.replace(
        step=state.step + 1,
        done=state.done | (live & is_stop(tokens, stop_ids)),
        tokens=jax.lax.dynamic_update_slice_in_dim(state.tokens, tokens[:, None], col, axis=1),
        logprobs=jax.lax.dynamic_update_slice_in_dim(state.logprobs, logp[:, None], col, axis=1),
        lengths=state.lengths + live.astype(jnp.int32))
    return new


# ----------------------------------------------------------------------------------------------
# Jit-compiled stages
# ----------------------------------------------------------------------------------------------

@functools.partial(jax.jit, static_argnums=(0, 1, 2))
def prefill_prompts(config: qwen2.Qwen2Config, settings: SamplerSettings, mesh: Mesh | None,
             params: Params, tokens: jax.Array, mask: jax.Array
             ) -> tuple[jax.Array, qwen2.KVCache]:
    """Prefill Pb prompts once. tokens/mask [Pb, Tp] (left-padded) -> (last-position logits
    [Pb*n, V] float32 (row p*n + i = sample i of prompt p), shared-prefix cache: prompt block
    L x [Pb, K, Tp, D] filled, samples' block L x [Pb*n, K, max(T - 1, 1), D] empty)."""
    pb, tp = tokens.shape
    cache = _constrain_cache(qwen2.init_cache(config, pb, tp, max(settings.max_new_tokens - 1, 1),
                                              settings.n), mesh)
    last, cache = decode.prefill(config, params, tokens, mask, cache, last_only=True)   # stacked: qwen2.prefill
    last = _constrain(jnp.repeat(last, settings.n, axis=0), mesh)
    return last, _constrain_cache(cache, mesh)


@functools.partial(jax.jit, static_argnums=(0, 1, 2), donate_argnums=(5,))
def decode_loop(config: qwen2.Qwen2Config, settings: SamplerSettings, mesh: Mesh | None,
            params: Params, first_logits: jax.Array, cache: qwen2.KVCache, keys: jax.Array,
            prompt_lengths: jax.Array, dummy: jax.Array, stop_ids: jax.Array, pad_id: jax.Array
            ) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array, jax.Array, qwen2.KVCache]:
    """Generate up to T tokens for B rows.

    first_logits [B, V] (prefill), cache (:func:`prefill_prompts`'s, B = Pb * n sample rows; donated
    and returned so XLA updates it in place), keys [B] per-sample keys, prompt_lengths [B]
    int32, dummy [B] bool (padding rows, never sampled), stop_ids [S] int32 (-1 = unused
    slot), pad_id [] int32 ->
    (tokens [B, T] int32, logprobs [B, T] float32, lengths [B] int32, finished [B] bool,
    steps [] int32, final cache).
    """
    b, t_max = first_logits.shape[0], settings.max_new_tokens
    params = decode.unstack_layers(params)   # once, before the loop: each layer reads its own arrays
    state = _LoopState(
        step=jnp.zeros((), jnp.int32), cache=cache, done=dummy,
        tokens=_constrain(jnp.full((b, t_max), pad_id, jnp.int32), mesh),
        logprobs=_constrain(jnp.zeros((b, t_max), jnp.float32), mesh),
        lengths=jnp.zeros((b,), jnp.int32))
    state = record(state, *draw(keys, state.step, first_logits, settings), stop_ids, pad_id)

    def cond(s: _LoopState) -> jax.Array:
        return (s.step < t_max) & ~jnp.all(s.done)

    # the LM head and the draw as one Pallas kernel (Qwen2Config.decode_draw="pallas") where it gives
    # this draw: plain temperature sampling, threefry keys, one device; else logits, then draw
    fused = config.decode_draw == "pallas" and lm_head_draw.applies(
        settings.temperature, settings.top_k, settings.top_p, keys, mesh, config.hidden_size)

    def body(s: _LoopState) -> _LoopState:
        prev = jax.lax.dynamic_index_in_dim(s.tokens, s.step - 1, axis=1, keepdims=False)
        out, cache = decode.decode_step(config, params, prev, prompt_lengths + s.step - 1,
                                       s.cache, head=not fused)
        s = s.replace(cache=_constrain_cache(cache, mesh))
        if fused:
            weight, axis = qwen2.lm_head_weight(config, params)
            tokens, logp = lm_head_draw.draw_from_hidden(out, weight, axis == 0,
                                                         jax.random.key_data(_step_keys(keys, s.step)),
                                                         settings.temperature)
        else:
            tokens, logp = draw(keys, s.step, _constrain_draw_rows(out, mesh), settings)
        return record(s, _constrain(tokens, mesh), _constrain(logp, mesh), stop_ids, pad_id)

    state = jax.lax.while_loop(cond, body, state)
    return (state.tokens, state.logprobs, state.lengths, state.done & ~dummy, state.step,
            state.cache)


def _place_params(params: Params, mesh: Mesh) -> Params:
    """Replicate onto ``mesh`` every leaf that is not already placed on it."""
    def put(x: jax.Array) -> jax.Array:
        s = getattr(x, "sharding", None)
        if isinstance(s, NamedSharding) and s.mesh == mesh:
            return x
        return jax.device_put(x, NamedSharding(mesh, PartitionSpec()))
    return jax.tree.map(put, params)


def generate(config: qwen2.Qwen2Config, params: Params, prompts: Sequence[Sequence[int]], *,
             n: int, max_new_tokens: int, key: jax.Array, temperature: float = 1.0,
             top_p: float = 1.0, top_k: int = 0, eos_id: int | Sequence[int] | None = None,
             pad_id: int | None = None, mesh: Mesh | None = None,
             min_prompt_bucket: int = MIN_PROMPT_BUCKET) -> SampleOutput:
    """Sample n completions of each of the P prompts (lists of token ids).

    Returns a :class:`SampleOutput` with tokens/logprobs/mask [P, n, T], lengths/finished [P, n]
    (T = max_new_tokens). See the module docstring for bucketing, keys, stop tokens and sharding.
    Raises ValueError for n < 1, max_new_tokens < 1, temperature < 0, top_k < 0, top_p outside
    (0, 1], empty or non-int prompts, out-of-vocabulary ids, prompts longer than
    ``max_position_embeddings - max_new_tokens`` and malformed keys.
    """
    SamplerSettings(n=n, max_new_tokens=max_new_tokens, temperature=temperature, top_k=top_k,
                    top_p=top_p)   # raises for a bad setting (before the canonical copy below)
    check_int(max_new_tokens, "max_new_tokens")
    check_int(min_prompt_bucket, "min_prompt_bucket")
    multi = multihost.spans_processes(mesh)
    prompts = check_prompts(prompts, config, max_new_tokens, allow_empty=multi)
    stop_ids = stop_id_array(eos_id, config.vocab_size)
    pad_id = (config.pad_token_id or 0) if pad_id is None else pad_id
    if isinstance(pad_id, bool) or not isinstance(pad_id, numbers.Integral) or not (
            0 <= pad_id < config.vocab_size):
        raise ValueError(f"pad_id must be an int in [0, {config.vocab_size}), got {pad_id!r}")
    settings = SamplerSettings(n=int(n), max_new_tokens=int(max_new_tokens), temperature=float(temperature),
                               top_k=int(top_k), top_p=float(top_p))   # canonical types: one compilation per value

    if multi:
        return _generate_host_block(config, params, prompts, key, settings, stop_ids, int(pad_id), mesh,
                                    min_prompt_bucket)
    num_p = len(prompts)
    keys = sample_keys(key, num_p, settings.n)
    shards = batch_shards(mesh)
    pb = prompt_batch_bucket(num_p, shards)
    tp = prompt_length_bucket(max(len(p) for p in prompts), min_prompt_bucket)
    tokens, mask = pad_prompts(prompts, tp, pb, int(pad_id))
    lens = np.repeat(mask.sum(axis=1).astype(np.int32), settings.n)
    dummy = np.repeat(np.arange(pb) >= num_p, settings.n)
    # Dummy rows reuse the first sample's key: they are never sampled (done from the start).
    row_keys = jnp.concatenate([keys.reshape(-1),
                                jnp.broadcast_to(keys[0, 0], ((pb - num_p) * settings.n,))])

    pad = np.asarray(pad_id, np.int32)
    if mesh is not None:
        params = _place_params(params, mesh)
        tokens, mask, lens, dummy, row_keys = sharding_lib.shard_batch(
            (tokens, mask, lens, dummy, row_keys), mesh)
        with sharding_lib.activation_sharding(mesh):
            first, cache = prefill_prompts(config, settings, mesh, params, tokens, mask)
            out = decode_loop(config, settings, mesh, params, first, cache, row_keys, lens, dummy,
                          stop_ids, pad)
    else:
        first, cache = prefill_prompts(config, settings, None, params, tokens, mask)
        out = decode_loop(config, settings, None, params, first, cache, row_keys, lens, dummy,
                      stop_ids, pad)
    toks, logp, lengths, finished, steps, _ = out

    def per_prompt(x: jax.Array) -> jax.Array:
        return x.reshape((pb, settings.n) + x.shape[1:])[:num_p]

    lengths = per_prompt(lengths)
    return SampleOutput(
        tokens=per_prompt(toks), logprobs=per_prompt(logp), lengths=lengths,
        mask=jnp.arange(settings.max_new_tokens) < lengths[..., None],
        finished=per_prompt(finished),
        prompt_lengths=jnp.asarray([len(p) for p in prompts], jnp.int32), num_steps=steps)


def _generate_host_block(config: qwen2.Qwen2Config, params: Params, prompts: list[list[int]], key: Any,
                         settings: SamplerSettings, stop_ids: np.ndarray, pad_id: int, mesh: Mesh,
                         min_prompt_bucket: int) -> SampleOutput:
    """:func:`generate` on a mesh spanning several processes: ``prompts`` / ``key`` [P_h, n] are
    this host's; the global prompt batch is the hosts' blocks side by side (each padded to the
    same ``Pb_h = prompt_batch_bucket(max_h P_h, shards / hosts)`` rows and the same global
    prompt bucket), built with ``make_array_from_process_local_data``; the output holds this
    host's rows only (numpy)."""
    num_p, n = len(prompts), settings.n
    if tuple(getattr(key, "shape", ()))[:2] != (num_p, n):
        raise ValueError(f"on a mesh spanning processes, key must be this host's per-sample key array "
                         f"of shape (P, n) = {(num_p, n)}, got {getattr(key, 'shape', key)!r}")
    keys = sample_keys(key, num_p, n)   # [P_h, n]; P_h may be 0
    _, count = multihost.batch_block(mesh)
    sizes = multihost.allgather_objects([num_p, max((len(p) for p in prompts), default=1)])
    max_p, max_len = max(max(s[0] for s in sizes), 1), max(s[1] for s in sizes)
    pb = prompt_batch_bucket(max_p, batch_shards(mesh) // count)
    tp = prompt_length_bucket(max_len, min_prompt_bucket)
    tokens, mask = pad_prompts(prompts, tp, pb, pad_id)
    lens = np.repeat(mask.sum(axis=1).astype(np.int32), n)
    dummy = np.repeat(np.arange(pb) >= num_p, n)
    impl = jax.random.key_impl(keys)
    raw = np.asarray(jax.random.key_data(keys))
    raw = raw.reshape((num_p * n,) + raw.shape[2:])
    # Dummy rows (never sampled) reuse the first key, or zeros on a host without prompts.
    filler = raw[:1] if num_p else np.zeros((1,) + raw.shape[1:], np.uint32)
    raw = np.concatenate([raw, np.repeat(filler, (pb - num_p) * n, axis=0)])
    params = _place_params(params, mesh)
    tokens, mask, lens, dummy, raw = multihost.global_batch((tokens, mask, lens, dummy, raw), mesh)
    row_keys = jax.random.wrap_key_data(raw, impl=impl)
    with sharding_lib.activation_sharding(mesh):
        first, cache = prefill_prompts(config, settings, mesh, params, tokens, mask)
        toks, logp, lengths, finished, steps, _ = decode_loop(
            config, settings, mesh, params, first, cache, row_keys, lens, dummy, stop_ids,
            np.asarray(pad_id, np.int32))

    def mine(x: jax.Array) -> np.ndarray:
        start, stop = multihost.host_row_range(x.shape[0], mesh)
        rows = multihost.host_rows(x, start, stop)
        return rows.reshape((pb, n) + rows.shape[1:])[:num_p]

    lengths = mine(lengths)
    return SampleOutput(
        tokens=mine(toks), logprobs=mine(logp), lengths=lengths,
        mask=np.arange(settings.max_new_tokens) < lengths[..., None], finished=mine(finished),
        prompt_lengths=np.asarray([len(p) for p in prompts], np.int32),
        num_steps=multihost.replicated_value(steps))


def to_token_lists(out: SampleOutput) -> list[list[list[int]]]:
    """Completions as Python lists [P][n][lengths] (padding removed; stop tokens kept)."""
    tokens, lengths = np.asarray(out.tokens), np.asarray(out.lengths)
    return [[tokens[p, i, :lengths[p, i]].tolist() for i in range(tokens.shape[1])]
            for p in range(tokens.shape[0])]
