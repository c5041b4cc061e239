"""Qwen2 / Qwen2.5(-Coder) decoder in Flax linen, with a KV cache for sampling.

Architecture (matches transformers' ``Qwen2ForCausalLM``): token embedding -> L x [RMSNorm ->
grouped-query attention (q/k/v biases, no o bias, RoPE in the HF ``rotate_half`` convention) ->
residual -> RMSNorm -> SwiGLU MLP -> residual] -> RMSNorm -> lm_head (tied to the embedding or not).
The L layers are one ``nn.scan`` so every per-layer parameter has a leading ``layers`` axis.

Parameter tree (shapes; logical axis names in brackets, see :func:`logical_axes`)::

    embed/embedding            [V, E]          ('vocab', 'embed')
    layers/input_norm/scale    [L, E]          ('layers', 'norm')
    layers/attn/q_kernel       [L, E, H, D]    ('layers', 'embed', 'heads', 'head_dim')
    layers/attn/q_bias         [L, H, D]       ('layers', 'heads', 'head_dim')
    layers/attn/{k,v}_kernel   [L, E, K, D]    ('layers', 'embed', 'kv_heads', 'head_dim')
    layers/attn/{k,v}_bias     [L, K, D]       ('layers', 'kv_heads', 'head_dim')
    layers/attn/o_kernel       [L, H, D, E]    ('layers', 'heads', 'head_dim', 'embed')
    layers/post_attn_norm/scale[L, E]          ('layers', 'norm')
    layers/mlp/{gate,up}_kernel[L, E, F]       ('layers', 'embed', 'mlp')
    layers/mlp/down_kernel     [L, F, E]       ('layers', 'mlp', 'embed')
    final_norm/scale           [E]             ('norm',)
    lm_head/kernel             [E, V]          ('embed', 'vocab')   -- only if not tied

Dtype policy: parameters are stored in ``config.param_dtype`` and cast to ``config.dtype`` for the
matmuls; RMSNorm statistics, RoPE angles, attention scores/softmax and the output logits are
always float32.

Padding: batches are LEFT-padded; ``attention_mask[b, t] = 1`` marks real tokens and positions are
``clip(cumsum(mask) - 1, 0)`` (as HF ``generate``). Outputs at padded positions are meaningless.

KV-cache API: a SHARED-PREFIX cache for n samples of each of P prompts (all functions are
jit-compiled with the config static; n = 1 is an ordinary per-sequence cache)::

    cache = init_cache(config, batch=P, prompt_len=Tp, new_len=S, n=n)    # empty KVCache
    logits, cache = prefill(config, params, tokens, attention_mask, cache, last_only=False)
        # tokens, attention_mask: [P, T] (T <= Tp, left-padded); logits [P, T, V] float32
        # ([P, V] of the last position with last_only=True); the prompts' K/V go to prompt
        # slots 0..T-1 ONCE per prompt, prompt_valid[:, :T] = attention_mask, length = 0.
    logits, cache = decode.decode_step(config, params, tokens, positions, cache)   # models.decode
        # tokens, positions: [P*n] int32 (row p*n + i = sample i of prompt p; position = number
        # of real tokens before this one); attends over the row's prompt (valid prompt slots)
        # and its own generated slots 0..length-1 plus itself, writes its K/V into generated
        # slot ``length`` of every row, returns logits [P*n, V] float32 and length + 1. The
        # caller keeps length < S (a write past the end is dropped).

The cache itself (:class:`KVCache`, :func:`init_cache`, :func:`cache_logical_axes`) and its
one-token attention (:func:`attend_decode`) live in :mod:`maxk_jax.models.kv_cache` and are
re-exported here; the building blocks (``dense`` with its written-out backward pass, RMSNorm, RoPE,
the remat policies) live in :mod:`maxk_jax.models.layers`, re-exported too. The decode step (:func:`maxk_jax.models.decode.decode_step`) runs the layers
UNROLLED over per-layer weights and cache blocks: inside the sampler's ``while_loop`` a scanned layer loop made
XLA:GPU copy every layer's weights and cache block out of the stacked arrays at every token, while
static per-layer arrays are read in place. The layers only READ the cache; all layers' new K/V are
written into slot ``length`` at once afterwards (in place when the cache is donated). Training and
prefill keep the scan.
"""
from __future__ import annotations

import functools
import math
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
from jax.ad_checkpoint import checkpoint_name

from maxk_jax.models import decode_attention
from maxk_jax.models.attention import attend, attention, compiling_for_gpu  # noqa: F401  (attend: re-exported)
from maxk_jax.models.layers import (ACT_BTE, SAVED_BY_DOTS, RMSNorm, apply_rope, dense,  # noqa: F401
                                    dense_init, param, remat_policy, resolve_remat_policy, rope_tables)
from maxk_jax.models.kv_cache import (KVCache, attend_decode, cache_logical_axes,  # noqa: F401
                                      init_cache)
from maxk_jax.models.qwen2_config import (DECODE_ATTENTION, DECODE_DRAW, DTYPES, PRESETS, REMAT_POLICIES,  # noqa: F401
                                          Qwen2Config, preset)

Params = Any


class Attention(nn.Module):
    """GQA self-attention with q/k/v biases; optionally reads/writes a one-layer KV cache."""

    config: Qwen2Config
    mode: str  # 'full' | 'prefill' | 'decode'
    write_cache: bool = False  # decode with decode_attention="pallas": write k/v into the cache in place

    @nn.compact
    def __call__(self, x: jax.Array, rope: tuple[jax.Array, jax.Array], mask: jax.Array,
                 layer_cache: tuple[jax.Array, jax.Array] | None
                 ) -> tuple[jax.Array, tuple[jax.Array, jax.Array] | None]:
        """x [B,T,E] -> ([B,T,E], this call's new (k, v) or None).

        'full': no cache, returns None. 'prefill': returns k, v [B,T,K,D]. 'decode' (T = 1):
        reads layer_cache (prompt_k, prompt_v [P,K,Tp,D], k, v [B,K,S,D]) with mask
        (prompt_valid [P,Tp], valid [S]) = the slots to attend to (see :func:`attend_decode`)
        and returns the token's k, v [B,K,D]; the caller writes them into the cache. With
        ``write_cache`` (Pallas decode attention only) the attention kernel writes them into slot
        ``length`` of k, v itself and the updated k, v [B,K,S,D] are returned instead.
        """
        cfg, pd, cd = self.config, self.config.params_dtype, self.config.compute_dtype
        pallas = decode_attention.resolve(cfg.decode_attention) == "pallas"
        if self.write_cache and (self.mode != "decode" or not pallas):
            raise ValueError(f"write_cache is for mode='decode' with decode_attention='pallas', got mode="
                             f"{self.mode!r}, decode_attention={cfg.decode_attention!r} (the xla path writes "
                             f"after the step)")
        e, h, k_, d = cfg.hidden_size, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim_
        zeros = nn.initializers.zeros
        wq = param(self, "q_kernel", dense_init, (e, h, d), ("embed", "heads", "head_dim"), pd)
        bq = param(self, "q_bias", zeros, (h, d), ("heads", "head_dim"), pd)
        wk = param(self, "k_kernel", dense_init, (e, k_, d), ("embed", "kv_heads", "head_dim"), pd)
        bk = param(self, "k_bias", zeros, (k_, d), ("kv_heads", "head_dim"), pd)
        wv = param(self, "v_kernel", dense_init, (e, k_, d), ("embed", "kv_heads", "head_dim"), pd)
        bv = param(self, "v_bias", zeros, (k_, d), ("kv_heads", "head_dim"), pd)
        wo = param(self, "o_kernel", dense_init, (h, d, e), ("heads", "head_dim", "embed"), pd)

        x = x.astype(cd)
        b, t = x.shape[:2]
        q = dense(x, wq.astype(cd).reshape(e, h * d)).reshape(b, t, h, d) + bq.astype(cd)
        k = dense(x, wk.astype(cd).reshape(e, k_ * d)).reshape(b, t, k_, d) + bk.astype(cd)
        v = dense(x, wv.astype(cd).reshape(e, k_ * d)).reshape(b, t, k_, d) + bv.astype(cd)
        cos, sin = rope
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        q, k, v = (checkpoint_name(a, "attn_qkv") for a in (q, k, v))   # kept by remat_policy="dots"

        if self.mode == "decode":
            pk, pv, ck, cv = layer_cache
            prompt_valid, valid = mask
            if pallas:   # valid is the prefix 0 .. length-1 (the decode step's)
                if valid.ndim != 1:
                    raise ValueError(f"decode_attention='pallas' needs the own-slot mask as a prefix [S], got "
                                     f"shape {valid.shape}")
                length = jnp.sum(valid.astype(jnp.int32))
                if self.write_cache:   # the kernel writes k, v into the cache in place (it keeps its dtype)
                    out, ck, cv = decode_attention.attend_decode_pallas(
                        q[:, 0], k[:, 0].astype(ck.dtype), v[:, 0].astype(cv.dtype), pk.astype(cd), pv.astype(cd),
                        prompt_valid, ck, cv, length, write_cache=True,
                        splits=int(cfg.decode_attention_splits))
                else:
                    out = decode_attention.attend_decode_pallas(
                        q[:, 0], k[:, 0], v[:, 0], pk.astype(cd), pv.astype(cd), prompt_valid, ck.astype(cd),
                        cv.astype(cd), length, splits=int(cfg.decode_attention_splits))
                out = out[:, None]
            else:
                out = attend_decode(q[:, 0], k[:, 0], v[:, 0], pk.astype(cd), pv.astype(cd),
                                    prompt_valid, ck.astype(cd), cv.astype(cd), valid)[:, None]
            # [B, K, S, D] written in place, or [B, K, D]: written into the cache after the scan / step
            new_kv = (ck, cv) if self.write_cache else (k[:, 0], v[:, 0])
        else:
            out = attention(q, k, v, mask, cfg.attention, cfg.attention_chunk)
            new_kv = (k, v) if self.mode == "prefill" else None  # [B, T, K, D]
        out = nn.with_logical_constraint(out, ("activation_batch", "activation_length",
                                               "activation_heads", "head_dim"))
        out = checkpoint_name(out, "attn_out")
        return dense(out.reshape(b, t, h * d), wo.astype(cd).reshape(h * d, e)), new_kv


class MLP(nn.Module):
    """SwiGLU: down(silu(gate(x)) * up(x)). x [B,T,E] -> [B,T,E]."""

    config: Qwen2Config

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        cfg, pd, cd = self.config, self.config.params_dtype, self.config.compute_dtype
        e, f = cfg.hidden_size, cfg.intermediate_size
        wg = param(self, "gate_kernel", dense_init, (e, f), ("embed", "mlp"), pd)
        wu = param(self, "up_kernel", dense_init, (e, f), ("embed", "mlp"), pd)
        wd = param(self, "down_kernel", dense_init, (f, e), ("mlp", "embed"), pd)
        x = x.astype(cd)
        gate = checkpoint_name(dense(x, wg.astype(cd)), "mlp_gate_up")
        up = checkpoint_name(dense(x, wu.astype(cd)), "mlp_gate_up")
        hidden = jax.nn.silu(gate) * up
        hidden = nn.with_logical_constraint(hidden, ("activation_batch", "activation_length",
                                                     "activation_mlp"))
        return dense(hidden, wd.astype(cd))


class DecoderLayer(nn.Module):
    """Pre-norm decoder block; scanned over layers (carry = hidden state [B,T,E])."""

    config: Qwen2Config
    mode: str
    write_cache: bool = False  # see :class:`Attention`

    @nn.compact
    def __call__(self, h: jax.Array, layer_cache: Any, rope: Any, mask: jax.Array
                 ) -> tuple[jax.Array, Any]:
        """h [B,T,E] -> (h [B,T,E], this layer's new k/v or None; see :class:`Attention`)."""
        cfg = self.config
        attn_out, new_cache = Attention(cfg, self.mode, self.write_cache, name="attn")(
            RMSNorm(cfg, name="input_norm")(h), rope, mask, layer_cache)
        h = h + attn_out
        h = h + MLP(cfg, name="mlp")(RMSNorm(cfg, name="post_attn_norm")(h))
        return nn.with_logical_constraint(h, ACT_BTE), new_cache


class Embed(nn.Module):
    """Token embedding table [V, E]; tokens [B,T] -> [B,T,E] in the compute dtype."""

    config: Qwen2Config

    def setup(self) -> None:
        cfg = self.config
        self.embedding = param(self, "embedding", dense_init, (cfg.vocab_size, cfg.hidden_size),
                                ("vocab", "embed"), cfg.params_dtype)

    def __call__(self, tokens: jax.Array) -> jax.Array:
        return jnp.take(self.embedding, tokens, axis=0).astype(self.config.compute_dtype)


class LMHead(nn.Module):
    """Untied output projection [E, V]; h [B,T,E] -> float32 logits [B,T,V]."""

    config: Qwen2Config

    @nn.compact
    def __call__(self, h: jax.Array) -> jax.Array:
        cfg = self.config
        w = param(self, "kernel", dense_init, (cfg.hidden_size, cfg.vocab_size),
                   ("embed", "vocab"), cfg.params_dtype)
        return dense(h, w.astype(h.dtype), jnp.float32)


class Qwen2(nn.Module):
    """The full causal LM. tokens [B,T] -> (logits [B,T,V] float32, updated cache K/V).

    ``mode``: "full" (training, :func:`logits`), "prefill" (:func:`prefill`) or "decode". The
    library's decode step is :func:`maxk_jax.models.decode.decode_step` (layers unrolled over
    per-layer weights); ``mode="decode"`` here, one ``nn.scan`` over the STACKED weights and a
    stacked cache, is kept only as that step's test reference (tests/models/test_decode.py
    compares the two exactly in float32) and is not used by the library.
    """

    config: Qwen2Config
    mode: str = "full"
    last_only: bool = False  # project only the last position to logits ([B,1,V])
    head: bool = True  # False: return the final-normed hidden states [B,T,E] (no LM head)

    @nn.compact
    def __call__(self, tokens: jax.Array, positions: jax.Array, mask: jax.Array,
                 cache_kv: tuple[jax.Array, jax.Array] | None = None
                 ) -> tuple[jax.Array, Any]:
        """tokens/positions [B,T] int, mask [B,T,S] bool; decode mode: mask = (prompt_valid
        [P,Tp], valid [S]) and cache_kv = (prompt_k, prompt_v [L,P,K,Tp,D], k, v [L,B,K,S,D])
        (read only), else cache_kv None. Returns (logits, new k/v stacked over layers: prefill
        ([L,B,T,K,D],)*2, decode ([L,B,K,D],)*2, full None); with ``head=False`` the first
        element is the final-normed hidden state [B,T,E] in the compute dtype instead of logits."""
        cfg = self.config
        embed = Embed(cfg, name="embed")
        h = nn.with_logical_constraint(embed(tokens), ACT_BTE)
        rope = rope_tables(positions, cfg.head_dim_, cfg.rope_theta)
        layer_cls = DecoderLayer
        if cfg.remat:
            layer_cls = nn.remat(layer_cls, prevent_cse=False, policy=remat_policy(cfg.remat_policy))
        scanned = nn.scan(layer_cls, variable_axes={"params": 0}, split_rngs={"params": True},
                          in_axes=(0, nn.broadcast, nn.broadcast),
                          length=cfg.num_layers, metadata_params={nn.PARTITION_NAME: "layers"})
        h, new_cache = scanned(cfg, self.mode, name="layers")(h, cache_kv, rope, mask)
        if self.last_only:
            h = h[:, -1:]
        h = RMSNorm(cfg, name="final_norm")(h)
        if not self.head:
            return nn.with_logical_constraint(h, ACT_BTE), new_cache
        if cfg.tie_word_embeddings:
            logits = tied_logits(h, embed.embedding)
        else:
            logits = LMHead(cfg, name="lm_head")(h)
        return nn.with_logical_constraint(logits, ACT_BTV), new_cache


#: Logical axes of the logits [B, T, V].
ACT_BTV = ("activation_batch", "activation_length", "activation_vocab")


def tied_logits(h: jax.Array, embedding: jax.Array) -> jax.Array:
    """Logits of the tied LM head: h [B,T,E] (compute dtype) x embedding [V,E] -> float32 [B,T,V]."""
    return jnp.einsum("bte,ve->btv", h, embedding.astype(h.dtype), preferred_element_type=jnp.float32)


def final_norm(config: Qwen2Config, params: Params, h: jax.Array) -> jax.Array:
    """The final RMSNorm of the last layer's hidden state h [..., E] (compute dtype): what the LM
    head multiplies."""
    return RMSNorm(config).apply({"params": params["final_norm"]}, h)


def output_logits(config: Qwen2Config, params: Params, h: jax.Array) -> jax.Array:
    """The model's head as a function of its weights: final RMSNorm, then the tied embedding or
    ``lm_head`` -> float32 logits [B,T,V] for the last layer's hidden state h [B,T,E] (the same
    operations as :class:`Qwen2`'s last lines)."""
    h = final_norm(config, params, h)
    if config.tie_word_embeddings:
        logits = tied_logits(h, params["embed"]["embedding"])
    else:
        logits = LMHead(config).apply({"params": params["lm_head"]}, h)
    return nn.with_logical_constraint(logits, ACT_BTV)


# ----------------------------------------------------------------------------------------------
# Functional API
# ----------------------------------------------------------------------------------------------

def positions_from_mask(attention_mask: jax.Array) -> jax.Array:
    """Positions [B,T] int32 = clip(cumsum(mask) - 1, 0) for a left-padded mask [B,T]."""
    mask = attention_mask.astype(jnp.int32)
    return jnp.maximum(jnp.cumsum(mask, axis=-1) - 1, 0)


def check_tokens(tokens: jax.Array, attention_mask: jax.Array | None) -> jax.Array:
    """tokens [B,T] and attention_mask [B,T] (or None: all real) -> the mask as bool [B,T];
    ValueError naming a wrong shape."""
    if tokens.ndim != 2:
        raise ValueError(f"tokens must be [B, T], got shape {tokens.shape}")
    if attention_mask is None:
        return jnp.ones(tokens.shape, jnp.bool_)
    if attention_mask.shape != tokens.shape:
        raise ValueError(f"attention_mask shape {attention_mask.shape} != tokens shape "
                         f"{tokens.shape}")
    return attention_mask.astype(jnp.bool_)


def causal_mask(mask: jax.Array) -> jax.Array:
    """[B,T] key validity -> [B,T,T] bool: query t sees real keys s <= t."""
    t = mask.shape[1]
    causal = jnp.tril(jnp.ones((t, t), jnp.bool_))
    return causal[None] & mask[:, None, :]


@functools.partial(jax.jit, static_argnums=0)
def logits(config: Qwen2Config, params: Params, tokens: jax.Array,
           attention_mask: jax.Array | None = None) -> jax.Array:
    """Full forward without cache. tokens [B,T] int, attention_mask [B,T] (1 = real token, left
    padding allowed; None = all real) -> float32 logits [B,T,V]."""
    mask = check_tokens(tokens, attention_mask)
    out, _ = Qwen2(config).apply({"params": params}, tokens, positions_from_mask(mask),
                                 causal_mask(mask))
    return out


@functools.partial(jax.jit, static_argnums=0)
def hidden_states(config: Qwen2Config, params: Params, tokens: jax.Array,
                  attention_mask: jax.Array | None = None) -> jax.Array:
    """Full forward without cache and WITHOUT the LM head: tokens [B,T] int, attention_mask [B,T]
    (as :func:`logits`) -> final-normed hidden states [B,T,E] in ``config.dtype``.
    ``logits == hidden_states @ lm_head_weight`` (see :func:`lm_head_weight`)."""
    mask = check_tokens(tokens, attention_mask)
    out, _ = Qwen2(config, head=False).apply({"params": params}, tokens, positions_from_mask(mask),
                                             causal_mask(mask))
    return out


def lm_head_weight(config: Qwen2Config, params: Params) -> tuple[jax.Array, int]:
    """(output projection, its vocabulary axis): the tied embedding [V,E] (axis 0) or the
    untied ``lm_head/kernel`` [E,V] (axis 1), in the parameter dtype."""
    if config.tie_word_embeddings:
        return params["embed"]["embedding"], 0
    return params["lm_head"]["kernel"], 1


@functools.partial(jax.jit, static_argnums=0)
def init_params(config: Qwen2Config, key: jax.Array) -> Params:
    """Random parameters with the HF init (normal(0.02) weights, zero biases, unit norm scales).

    All normal weights come from ONE flat ``jax.random.normal`` draw split into leaves (one PRNG
    kernel instead of one per parameter: ~10x faster to compile on CPU); same tree, shapes and
    dtypes as ``Qwen2(config).init``. For sharded init wrap it as
    ``jax.jit(init_params, static_argnums=0, out_shardings=...)``.
    """
    leaves, treedef = jax.tree_util.tree_flatten_with_path(abstract_params(config))
    kinds = [str(getattr(path[-1], "key", path[-1])) for path, _ in leaves]
    sizes = [math.prod(x.shape) for _, x in leaves]
    total = sum(n for n, kind in zip(sizes, kinds) if kind != "scale" and "bias" not in kind)
    draw = jax.random.normal(key, (total,), jnp.float32) * 0.02
    out, offset = [], 0
    for (_, x), kind, n in zip(leaves, kinds, sizes):
        if kind == "scale":
            value = jnp.ones(x.shape, x.dtype)
        elif "bias" in kind:
            value = jnp.zeros(x.shape, x.dtype)
        else:
            value = draw[offset: offset + n].reshape(x.shape).astype(x.dtype)
            offset += n
        out.append(value)
    return jax.tree_util.tree_unflatten(treedef, out)


@functools.partial(jax.jit, static_argnums=0)
def _init_boxed(config: Qwen2Config, key: jax.Array) -> Any:
    tokens = jnp.zeros((1, 1), jnp.int32)
    mask = jnp.ones((1, 1, 1), jnp.bool_)
    return Qwen2(config).init(key, tokens, tokens, mask)["params"]


def abstract_params(config: Qwen2Config) -> Params:
    """Parameter tree of ``jax.ShapeDtypeStruct`` (no allocation)."""
    return nn.meta.unbox(jax.eval_shape(_init_boxed, config, jax.random.key(0)))


def logical_axes(config: Qwen2Config) -> Params:
    """Tree (same structure as params) of ``PartitionSpec`` of logical axis names."""
    boxed = jax.eval_shape(_init_boxed, config, jax.random.key(0))
    return nn.get_partition_spec(boxed)


def param_count(config: Qwen2Config) -> int:
    """Exact number of parameters (computed abstractly)."""
    return int(sum(math.prod(x.shape) for x in jax.tree.leaves(abstract_params(config))))


@functools.partial(jax.jit, static_argnums=0, static_argnames="last_only")
def prefill(config: Qwen2Config, params: Params, tokens: jax.Array, attention_mask: jax.Array,
            cache: KVCache, *, last_only: bool = False) -> tuple[jax.Array, KVCache]:
    """Run P prompts [P,T] (left-padded, mask [P,T]) through the cache's prompt block, once each.

    Returns float32 logits [P,T,V] (``last_only=True``: only the last position, [P,V], without
    materialising the others) and the cache with prompt slots 0..T-1 filled,
    ``prompt_valid[:, :T] = mask`` and ``length = 0`` (no generated token yet).
    """
    mask = check_tokens(tokens, attention_mask)
    b, t = tokens.shape
    if cache.prompt_k[0].shape[0] != b:
        raise ValueError(f"cache prompt batch {cache.prompt_k[0].shape[0]} != tokens batch {b}")
    if t > cache.prompt_len:
        raise ValueError(f"prompt length {t} exceeds cache prompt_len {cache.prompt_len}")
    out, (k, v) = Qwen2(config, mode="prefill", last_only=last_only).apply(
        {"params": params}, tokens, positions_from_mask(mask), causal_mask(mask))
    # Layer i's [P,T,K,D] -> [P,K,T,D], written into its prompt slots 0..T-1.
    k = tuple(jax.lax.dynamic_update_slice(c, k[i].swapaxes(1, 2).astype(c.dtype), (0, 0, 0, 0))
              for i, c in enumerate(cache.prompt_k))
    v = tuple(jax.lax.dynamic_update_slice(c, v[i].swapaxes(1, 2).astype(c.dtype), (0, 0, 0, 0))
              for i, c in enumerate(cache.prompt_v))
    valid = jax.lax.dynamic_update_slice(jnp.zeros_like(cache.prompt_valid), mask, (0, 0))
    out = out[:, -1] if last_only else out
    return out, cache.replace(prompt_k=k, prompt_v=v, prompt_valid=valid,
                              length=jnp.zeros((), jnp.int32))
