"""Decoding over per-layer weights: the prefill and the one-token step with the layers unrolled.

Training and prefill run the L decoder layers as one ``nn.scan`` over weights stacked ``[L, ...]``.
Inside the sampler's decode ``while_loop`` that structure costs a copy per layer and step on GPU:
XLA:GPU materialises every ``dynamic-slice`` of a stacked weight (and of the stacked KV cache) that
the scan's body reads, about 1.1x the model's weight bytes per generated token on the 1.5B preset
(``experiments/plan_sample.py --target=h100`` prints it). Here the layers are a Python loop over
**per-layer weight trees** (:func:`unstack_layers`, made once per :func:`maxk_jax.sampling.generate`
call, before the decode loop), so each layer's matmuls read their weights in place, and the cache
holds one array per layer (:class:`maxk_jax.models.kv_cache.KVCache`), read and written in place
too. Every layer runs the same :class:`maxk_jax.models.qwen2.DecoderLayer` as the scanned model, so
the logits equal ``qwen2``'s for the same weights (float32 bit for bit; see the tests).

**One copy of the weights.** Splitting stacked weights inside a jitted program makes a second copy
of every layer weight for the program's duration (the stacked argument stays alive beside its
slices): 7B on one TPU v6e then needs twice its weight bytes. Weights that are already per-layer
(the rollout copy, :meth:`maxk_jax.sampling.rollout_copy.RolloutLayout.copy`, or
``unstack_layers`` called once outside ``jit``, after which the caller drops the stacked tree) are
used as they are: :func:`prefill` runs the prompt through them unrolled too, and
:func:`maxk_jax.sampling.generate` then holds one copy.

    layered = unstack_layers(params)                      # params["layers"]: a tuple of L trees
    last, cache = prefill(config, layered, tokens, mask, cache, last_only=True)
    logits, cache = decode_step(config, layered, tokens, positions, cache)   # or stacked params
"""
from __future__ import annotations

import functools
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from maxk_jax.models import decode_attention, qwen2
from maxk_jax.models.kv_cache import KVCache, write_slot

Params = Any


def is_unstacked(params: Params) -> bool:
    """True when ``params["layers"]`` is a tuple of per-layer trees (:func:`unstack_layers`)."""
    return isinstance(params["layers"], (tuple, list))


def unstack_layers(params: Params) -> Params:
    """The same weights with ``params["layers"]`` (leaves ``[L, ...]``) split into a tuple of L
    per-layer trees (leaves ``[...]``); other entries unchanged. Inside ``jit`` this is L static
    slices of every stacked leaf (one copy of the layer weights); already split params are
    returned as they are."""
    if is_unstacked(params):
        return params
    layers = params["layers"]
    num = jax.tree.leaves(layers)[0].shape[0]
    return {**params, "layers": tuple(jax.tree.map(lambda x, i=i: x[i], layers) for i in range(num))}


@functools.partial(jax.jit, static_argnums=0, static_argnames="last_only")
def prefill(config: qwen2.Qwen2Config, params: Params, tokens: jax.Array, attention_mask: jax.Array,
            cache: KVCache, *, last_only: bool = False) -> tuple[jax.Array, KVCache]:
    """:func:`maxk_jax.models.qwen2.prefill` with the layers unrolled over per-layer weights
    (:func:`unstack_layers`; stacked params go to ``qwen2.prefill``, which scans them): P prompts
    [P,T] (left-padded, mask [P,T]) through the cache's prompt block -> (float32 logits [P,T,V],
    ``last_only``: [P,V]; the cache with prompt slots 0..T-1 filled, ``prompt_valid[:, :T] =
    mask``, ``length = 0``). The same layers, in the same order, as the scanned prefill: the same
    values (float32 bit for bit, see the tests)."""
    if not is_unstacked(params):
        return qwen2.prefill(config, params, tokens, attention_mask, cache, last_only=last_only)
    mask = qwen2.check_tokens(tokens, attention_mask)
    b, t = tokens.shape
    if cache.prompt_k[0].shape[0] != b:
        raise ValueError(f"cache prompt batch {cache.prompt_k[0].shape[0]} != tokens batch {b}")
    if t > cache.prompt_len:
        raise ValueError(f"prompt length {t} exceeds cache prompt_len {cache.prompt_len}")
    if len(params["layers"]) != cache.num_layers:
        raise ValueError(f"params have {len(params['layers'])} layers, the cache {cache.num_layers}")
    h = nn.with_logical_constraint(qwen2.Embed(config).apply({"params": params["embed"]}, tokens), qwen2.ACT_BTE)
    rope = qwen2.rope_tables(qwen2.positions_from_mask(mask), config.head_dim_, config.rope_theta)
    causal = qwen2.causal_mask(mask)
    layer = qwen2.DecoderLayer(config, "prefill")
    ks, vs = [], []
    for i, layer_params in enumerate(params["layers"]):
        h, (k_i, v_i) = layer.apply({"params": layer_params}, h, None, rope, causal)
        # [P,T,K,D] -> [P,K,T,D], written into prompt slots 0..T-1 of layer i
        ks.append(jax.lax.dynamic_update_slice(cache.prompt_k[i], k_i.swapaxes(1, 2).astype(cache.prompt_k[i].dtype),
                                               (0, 0, 0, 0)))
        vs.append(jax.lax.dynamic_update_slice(cache.prompt_v[i], v_i.swapaxes(1, 2).astype(cache.prompt_v[i].dtype),
                                               (0, 0, 0, 0)))
    if last_only:
        h = h[:, -1:]
    out = qwen2.output_logits(config, params, h)
    valid = jax.lax.dynamic_update_slice(jnp.zeros_like(cache.prompt_valid), mask, (0, 0))
    out = out[:, -1] if last_only else out
    return out, cache.replace(prompt_k=tuple(ks), prompt_v=tuple(vs), prompt_valid=valid,
                              length=jnp.zeros((), jnp.int32))


@functools.partial(jax.jit, static_argnums=0, static_argnames=("head",))
def decode_step(config: qwen2.Qwen2Config, params: Params, tokens: jax.Array, positions: jax.Array,
                cache: KVCache, head: bool = True) -> tuple[jax.Array, KVCache]:
    """One token per sample row with the layers unrolled: tokens [B], positions [B] int32, params
    stacked or per-layer (:func:`unstack_layers`), cache with B sample rows -> (float32 logits
    [B, V], the cache with these tokens' K/V in generated slot ``length`` and length + 1).
    ``head=False``: the final-normed hidden state [B, E] (compute dtype) instead of the logits, for
    a caller that applies the LM head itself (:mod:`maxk_jax.sampling.lm_head_draw`).

    The model's decode step (jit-compiled, config static), with the values of the scanned model's
    decode mode (``qwen2.Qwen2(mode="decode")``) for the same weights: the token attends to the
    valid prompt slots, the generated slots before ``length`` and itself; the new K/V of all layers
    are written into slot ``length`` after the last layer has read the cache (dropped when
    ``length >= S``), or, with ``decode_attention="pallas"`` and a cache in the compute dtype, by
    each layer's attention kernel into the block it has just read."""
    if tokens.ndim != 1 or positions.shape != tokens.shape:
        raise ValueError(f"decode_step needs tokens [B] and positions [B], got {tokens.shape} "
                         f"and {positions.shape}")
    if cache.k[0].ndim != 4 or cache.prompt_k[0].ndim != 4:
        raise ValueError(f"cache k / prompt_k must be L arrays [B,K,S,D], got shapes {cache.k[0].shape}, "
                         f"{cache.prompt_k[0].shape}")
    if cache.k[0].shape[0] != tokens.shape[0]:
        raise ValueError(f"cache sample batch {cache.k[0].shape[0]} != tokens batch {tokens.shape[0]}")
    params = unstack_layers(params)
    if len(params["layers"]) != cache.num_layers:
        raise ValueError(f"params have {len(params['layers'])} layers, the cache {cache.num_layers}")
    h = nn.with_logical_constraint(qwen2.Embed(config).apply({"params": params["embed"]}, tokens[:, None]),
                                   qwen2.ACT_BTE)
    rope = qwen2.rope_tables(positions[:, None].astype(jnp.int32), config.head_dim_, config.rope_theta)
    mask = (cache.prompt_valid, jnp.arange(cache.max_len) < cache.length)
    # The Pallas attention writes each layer's new K/V into its cache block itself (in place, after
    # reading it; a cache in the compute dtype, as init_cache makes it); else they are written below.
    in_kernel = (decode_attention.resolve(config.decode_attention) == "pallas"
                 and cache.k[0].dtype == config.compute_dtype)
    layer = qwen2.DecoderLayer(config, "decode", write_cache=in_kernel)
    new_k, new_v = [], []
    for i, layer_params in enumerate(params["layers"]):
        h, (k_i, v_i) = layer.apply({"params": layer_params}, h, (cache.prompt_k[i], cache.prompt_v[i],
                                                                  cache.k[i], cache.v[i]), rope, mask)   # in place
        new_k.append(k_i)
        new_v.append(v_i)
    logits = (qwen2.output_logits(config, params, h) if head else qwen2.final_norm(config, params, h))[:, 0]
    if in_kernel:
        return logits, cache.replace(k=tuple(new_k), v=tuple(new_v), length=cache.length + 1)
    # The barrier makes the writes wait for the logits, i.e. for every layer's read of the old
    # cache; otherwise XLA may schedule a write first and copy that layer's cache block.
    logits, new_k, new_v = jax.lax.optimization_barrier((logits, tuple(new_k), tuple(new_v)))

    k = tuple(write_slot(c, x, cache.length) for c, x in zip(cache.k, new_k))
    v = tuple(write_slot(c, x, cache.length) for c, x in zip(cache.v, new_v))
    return logits, cache.replace(k=k, v=v, length=cache.length + 1)
