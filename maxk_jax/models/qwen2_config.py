"""Static configuration of the Qwen2 family: ``Qwen2Config`` (HF config.json both ways) and the
real Qwen2.5-Coder presets. Re-exported by :mod:`maxk_jax.models.qwen2`."""
from __future__ import annotations

import dataclasses
import json
from typing import Any, Mapping

import jax.numpy as jnp
import numpy as np

#: Supported dtype names (config fields `dtype` and `param_dtype`).
DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16, "float16": jnp.float16}
#: Implementations of the one-token decode attention (config field `decode_attention`).
DECODE_ATTENTION = ("auto", "xla", "pallas")
#: Implementations of the decode step's LM head + token draw (config field `decode_draw`).
DECODE_DRAW = ("xla", "pallas")
#: Values of Qwen2Config.remat_policy (``qwen2.remat_policy`` gives each one's jax.checkpoint policy).
REMAT_POLICIES = ("auto", "nothing", "dots")
#: The one default of each device-dependent knob (Qwen2Config and the RL run config's model section both take
#: it from here; what "auto" resolves to on a device: maxk_jax.models.auto).
DEFAULT_DECODE_ATTENTION = "auto"
DEFAULT_REMAT_POLICY = "auto"


@dataclasses.dataclass(frozen=True)
class Qwen2Config:
    """Static model hyper-parameters (frozen and hashable: usable as a static jit argument)."""

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int | None = None  # None -> hidden_size // num_heads (HF default)
    rope_theta: float = 1_000_000.0
    rms_norm_eps: float = 1e-6
    tie_word_embeddings: bool = False
    max_position_embeddings: int = 32768
    bos_token_id: int | None = None
    eos_token_id: int | tuple[int, ...] | None = None
    pad_token_id: int | None = None
    dtype: str = "float32"  # compute dtype of the matmuls: float32 | bfloat16 | float16
    param_dtype: str = "float32"  # storage dtype of the parameters
    remat: bool = False  # rematerialise each decoder layer in the backward pass
    # what a rematerialised layer keeps from its forward pass (REMAT_POLICIES): nothing (recompute the
    # whole layer: least memory) | dots (keep q, k, v, the attention output and the MLP's gate / up:
    # no matmul recomputed but the attention's; more memory) | auto = nothing off GPU; on a GPU the RL
    # loop picks dots when its compiled train step fits the card's memory (memory_plan.train_step_remat),
    # and a bare trace on a GPU takes dots (faster there, measured)
    remat_policy: str = DEFAULT_REMAT_POLICY
    # full/prefill attention: auto | xla | chunked | dot_product (models.attention); auto = dot_product
    # (cuDNN flash) when compiling for a GPU, chunked elsewhere
    attention: str = "auto"
    attention_chunk: int = 512  # queries per block of the chunked attention
    # one-token decode attention over the KV cache: auto | xla (kv_cache.attend_decode) | pallas (the
    # Pallas GPU kernels of models.decode_attention: K/V read once, live slots only; interpreted off GPU);
    # auto = pallas when compiling for a GPU of compute capability >= 8.0 (faster at every measured shape),
    # xla elsewhere (models.auto.decode_attention)
    decode_attention: str = DEFAULT_DECODE_ATTENTION
    # decode_attention="pallas": programs per (prompt, KV head, query tile) along the prompt's slots
    # (flash-decoding splits; 0 = chosen by models.decode_attention.prompt_splits, 1 = unsplit)
    decode_attention_splits: int = 0
    # the decode step's LM head and token draw: xla (the LM head GEMM writes float32 logits, the draw
    # reads them) | pallas (one Pallas GPU kernel per vocabulary tile: logits, Gumbel noise and the
    # draw's partial reductions, no logits array: sampling.lm_head_draw; plain temperature sampling
    # with threefry keys, else the xla path; opt-in, not yet measured on a GPU)
    decode_draw: str = "xla"

    def __post_init__(self) -> None:
        for name in ("vocab_size", "hidden_size", "intermediate_size", "num_layers", "num_heads",
                     "num_kv_heads"):
            value = getattr(self, name)
            if not isinstance(value, (int, np.integer)) or value <= 0:
                raise ValueError(f"Qwen2Config.{name} must be a positive int, got {value!r}")
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"num_heads={self.num_heads} is not a multiple of "
                             f"num_kv_heads={self.num_kv_heads}")
        if self.head_dim is None and self.hidden_size % self.num_heads:
            raise ValueError(f"hidden_size={self.hidden_size} is not divisible by "
                             f"num_heads={self.num_heads}; set head_dim explicitly")
        if self.head_dim is not None and self.head_dim <= 0:
            raise ValueError(f"head_dim must be positive, got {self.head_dim}")
        if self.head_dim_ % 2:
            raise ValueError(f"RoPE needs an even head_dim, got {self.head_dim_}")
        for name in ("dtype", "param_dtype"):
            if getattr(self, name) not in DTYPES:
                raise ValueError(f"Qwen2Config.{name}={getattr(self, name)!r}; expected one of "
                                 f"{sorted(DTYPES)}")
        if self.attention not in ("auto", "xla", "chunked", "dot_product"):
            raise ValueError(f"Qwen2Config.attention={self.attention!r}; expected one of "
                             "('auto', 'xla', 'chunked', 'dot_product')")
        if self.remat_policy not in REMAT_POLICIES:
            raise ValueError(f"Qwen2Config.remat_policy={self.remat_policy!r}; expected one of {REMAT_POLICIES}")
        if self.decode_attention not in DECODE_ATTENTION:
            raise ValueError(f"Qwen2Config.decode_attention={self.decode_attention!r}; expected one of "
                             f"{DECODE_ATTENTION}")
        if self.decode_draw not in DECODE_DRAW:
            raise ValueError(f"Qwen2Config.decode_draw={self.decode_draw!r}; expected one of {DECODE_DRAW}")
        if isinstance(self.decode_attention_splits, bool) or not isinstance(
                self.decode_attention_splits, (int, np.integer)) or self.decode_attention_splits < 0:
            raise ValueError(f"Qwen2Config.decode_attention_splits must be an int >= 0 (0: chosen per shape), got "
                             f"{self.decode_attention_splits!r}")
        if not isinstance(self.attention_chunk, (int, np.integer)) or self.attention_chunk < 1:
            raise ValueError(f"Qwen2Config.attention_chunk must be an int >= 1, got {self.attention_chunk!r}")
        if not (self.rope_theta > 0 and self.rms_norm_eps > 0):
            raise ValueError(f"rope_theta={self.rope_theta} and rms_norm_eps={self.rms_norm_eps} "
                             "must be positive")
        if isinstance(self.eos_token_id, list):
            object.__setattr__(self, "eos_token_id", tuple(self.eos_token_id))

    @property
    def head_dim_(self) -> int:
        """Resolved per-head dimension D."""
        return self.head_dim if self.head_dim is not None else self.hidden_size // self.num_heads

    @property
    def compute_dtype(self) -> jnp.dtype:
        """Matmul dtype as a numpy dtype."""
        return jnp.dtype(DTYPES[self.dtype])

    @property
    def params_dtype(self) -> jnp.dtype:
        """Parameter storage dtype as a numpy dtype."""
        return jnp.dtype(DTYPES[self.param_dtype])

    def replace(self, **changes: Any) -> "Qwen2Config":
        """Copy with some fields changed (e.g. ``dtype='bfloat16', remat=True``)."""
        return dataclasses.replace(self, **changes)

    @classmethod
    def from_hf_dict(cls, d: Mapping[str, Any], **overrides: Any) -> "Qwen2Config":
        """Build from a HF ``config.json`` dict (transformers 4 or 5 layout); rejects unsupported
        features (rope scaling, sliding window, other activations) with a ValueError."""
        if d.get("model_type", "qwen2") != "qwen2":
            raise ValueError(f"model_type={d.get('model_type')!r} is not 'qwen2'")
        if d.get("hidden_act", "silu") != "silu":
            raise ValueError(f"hidden_act={d['hidden_act']!r} unsupported (only 'silu')")
        if d.get("use_sliding_window", False):
            raise ValueError("use_sliding_window=True is unsupported (Qwen2.5 checkpoints ship with "
                             "it disabled)")
        rope = d.get("rope_parameters") or d.get("rope_scaling") or {}
        rope_type = rope.get("rope_type", rope.get("type", "default"))
        if rope_type != "default":
            raise ValueError(f"unsupported rope scaling type {rope_type!r} (rope parameters {rope})"
                             "; only 'default' RoPE is implemented")
        theta = rope.get("rope_theta", d.get("rope_theta", 10000.0))
        missing = [k for k in ("vocab_size", "hidden_size", "intermediate_size",
                               "num_hidden_layers", "num_attention_heads") if k not in d]
        if missing:
            raise ValueError(f"HF config is missing required keys {missing}")
        heads = int(d["num_attention_heads"])
        kwargs = dict(
            vocab_size=int(d["vocab_size"]), hidden_size=int(d["hidden_size"]),
            intermediate_size=int(d["intermediate_size"]),
            num_layers=int(d["num_hidden_layers"]), num_heads=heads,
            num_kv_heads=int(d.get("num_key_value_heads") or heads),
            head_dim=d.get("head_dim"), rope_theta=float(theta),
            rms_norm_eps=float(d.get("rms_norm_eps", 1e-6)),
            tie_word_embeddings=bool(d.get("tie_word_embeddings", False)),
            max_position_embeddings=int(d.get("max_position_embeddings", 32768)),
            bos_token_id=d.get("bos_token_id"), eos_token_id=d.get("eos_token_id"),
            pad_token_id=d.get("pad_token_id"))
        kwargs.update(overrides)
        return cls(**kwargs)

    @classmethod
    def from_json_file(cls, path: str, **overrides: Any) -> "Qwen2Config":
        """Read a HF ``config.json`` file (see :meth:`from_hf_dict`)."""
        with open(path) as f:
            return cls.from_hf_dict(json.load(f), **overrides)

    def to_hf_dict(self) -> dict[str, Any]:
        """HF ``config.json`` dict in the transformers-5 layout (``rope_parameters``)."""
        eos = list(self.eos_token_id) if isinstance(self.eos_token_id, tuple) else self.eos_token_id
        d = {
            "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2",
            "vocab_size": self.vocab_size, "hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size, "num_hidden_layers": self.num_layers,
            "num_attention_heads": self.num_heads, "num_key_value_heads": self.num_kv_heads,
            "hidden_act": "silu", "max_position_embeddings": self.max_position_embeddings,
            "rms_norm_eps": self.rms_norm_eps, "tie_word_embeddings": self.tie_word_embeddings,
            "rope_parameters": {"rope_type": "default", "rope_theta": self.rope_theta},
            "use_sliding_window": False, "attention_dropout": 0.0, "use_cache": True,
            "bos_token_id": self.bos_token_id, "eos_token_id": eos,
            "pad_token_id": self.pad_token_id, "dtype": self.param_dtype,
        }
        if self.head_dim is not None:
            d["head_dim"] = self.head_dim
        return d


def _preset(**kw: Any) -> Qwen2Config:
    base = dict(rope_theta=1_000_000.0, rms_norm_eps=1e-6, max_position_embeddings=32768,
                bos_token_id=151643, eos_token_id=151643)
    base.update(kw)
    return Qwen2Config(**base)


#: Real dimensions of the released Qwen2.5-Coder checkpoints (config.json of each HF repo).
PRESETS: dict[str, Qwen2Config] = {
    "qwen2.5-coder-0.5b": _preset(vocab_size=151936, hidden_size=896, intermediate_size=4864,
                                  num_layers=24, num_heads=14, num_kv_heads=2,
                                  tie_word_embeddings=True),
    "qwen2.5-coder-1.5b": _preset(vocab_size=151936, hidden_size=1536, intermediate_size=8960,
                                  num_layers=28, num_heads=12, num_kv_heads=2,
                                  tie_word_embeddings=True),
    "qwen2.5-coder-7b": _preset(vocab_size=152064, hidden_size=3584, intermediate_size=18944,
                                num_layers=28, num_heads=28, num_kv_heads=4,
                                tie_word_embeddings=False),
}


def preset(name: str, **overrides: Any) -> Qwen2Config:
    """A :data:`PRESETS` config by name, optionally with fields replaced (dtype, remat, ...)."""
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; available: {sorted(PRESETS)}")
    return PRESETS[name].replace(**overrides)
