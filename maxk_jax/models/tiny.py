"""A tiny Qwen2 checkpoint for laptop-scale runs: own byte-level BPE tokenizer + ~1M-param config.

The directory written by `build_tiny_checkpoint` loads exactly like a real Qwen2 checkpoint:
``AutoTokenizer.from_pretrained(dir)`` (tokenizer.json + tokenizer_config.json + chat template),
``transformers.Qwen2ForCausalLM.from_pretrained(dir)`` and ``maxk_jax.models.convert.load_hf(dir)``
(config.json + model.safetensors, written by ``convert.save_hf`` from randomly initialised params).

Tokenizer (`train_tokenizer`): byte-level BPE trained with the ``tokenizers`` library on a corpus
(e.g. `maxk_jax.data.synthetic_solutions.tokenizer_corpus`), pre-tokenised with Qwen2's own split regex
(single digits, words, punctuation runs) followed by the GPT-2 byte-to-unicode map, so any text
round-trips exactly. Special tokens get ids 0..3::

    <|endoftext|> (bos/document end)  <|im_start|>  <|im_end|> (eos)  <|pad|> (pad)

Chat template (`CHAT_TEMPLATE`): the Qwen2.5 ChatML layout without Qwen's default system message
(keeps prompts short)::

    <|im_start|>user\\n{content}<|im_end|>\\n<|im_start|>assistant\\n

Model (`tiny_qwen2_config`): HF Qwen2 ``config.json`` fields; the default (hidden 128, 4 layers,
4 query / 2 KV heads, SwiGLU width 512, tied embeddings, 256 positions) has
``count_params = 4 * 246,272 + 128 * (V + 1)`` parameters (1,083,520 for V = 768).
"""
from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any, Optional

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

ENDOFTEXT, IM_START, IM_END, PAD = "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|pad|>"
SPECIAL_TOKENS = (ENDOFTEXT, IM_START, IM_END, PAD)
# Qwen2's pre-tokenizer regex (tokenizer.json of Qwen2.5): digits are split one by one.
QWEN2_SPLIT_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                       r"|\s*[\r\n]+|\s+(?!\S)|\s+")
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
# Chat-role words are added to every training corpus so that "user\n" etc. become single tokens.
_ROLE_TEXTS = ("system\n", "user\n", "assistant\n")


def train_tokenizer(corpus: Iterable[str], vocab_size: int = 768, *, min_frequency: int = 2,
                    model_max_length: int = 256) -> PreTrainedTokenizerFast:
    """Train a byte-level BPE tokenizer (Qwen2 pre-tokenisation, `SPECIAL_TOKENS`, `CHAT_TEMPLATE`).

    corpus: texts (statements, programs). The vocabulary has at most `vocab_size` entries (fewer
    when the corpus runs out of pairs seen `min_frequency` times); the 256 byte symbols and the
    4 special tokens are always in it. Deterministic for a given corpus.
    """
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, int) or vocab_size < 256 + len(SPECIAL_TOKENS):
        raise ValueError(f"vocab_size must be an int >= {256 + len(SPECIAL_TOKENS)} (bytes + specials), "
                         f"got {vocab_size!r}")
    if isinstance(min_frequency, bool) or not isinstance(min_frequency, int) or min_frequency < 1:
        raise ValueError(f"min_frequency must be a positive int, got {min_frequency!r}")
    texts = list(corpus)
    bad = [i for i, t in enumerate(texts) if not isinstance(t, str)]
    if bad:
        raise ValueError(f"corpus[{bad[0]}] is a {type(texts[bad[0]]).__name__}, expected str")
    if not any(texts):
        raise ValueError("corpus is empty: the tokenizer needs some text to learn merges from")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_SPLIT_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=min_frequency,
                                  special_tokens=list(SPECIAL_TOKENS), show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts + list(_ROLE_TEXTS) * min_frequency, trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token=None, eos_token=IM_END, pad_token=PAD, unk_token=None,
        extra_special_tokens=[ENDOFTEXT, IM_START], chat_template=CHAT_TEMPLATE,
        model_max_length=model_max_length, padding_side="left", clean_up_tokenization_spaces=False)


def tiny_qwen2_config(vocab_size: int, *, hidden_size: int = 128, num_layers: int = 4,
                      num_heads: int = 4, num_kv_heads: int = 2, intermediate_size: Optional[int] = None,
                      max_position_embeddings: int = 256, rope_theta: float = 10_000.0,
                      tie_word_embeddings: bool = True, bos_token_id: Optional[int] = None,
                      eos_token_id: Optional[int] = None, pad_token_id: Optional[int] = None) -> dict[str, Any]:
    """HF ``config.json`` fields (transformers-5 layout) of a tiny Qwen2; ``intermediate_size``
    defaults to ``4 * hidden_size``. See `count_params` for the size."""
    inter = 4 * hidden_size if intermediate_size is None else intermediate_size
    for name, v in (("vocab_size", vocab_size), ("hidden_size", hidden_size), ("num_layers", num_layers),
                    ("num_heads", num_heads), ("num_kv_heads", num_kv_heads), ("intermediate_size", inter),
                    ("max_position_embeddings", max_position_embeddings)):
        if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
            raise ValueError(f"{name} must be a positive int, got {v!r}")
    if hidden_size % num_heads or num_heads % num_kv_heads or (hidden_size // num_heads) % 2:
        raise ValueError(f"need hidden_size={hidden_size} divisible by num_heads={num_heads} into an even "
                         f"head dim, and num_heads divisible by num_kv_heads={num_kv_heads}")
    if not rope_theta > 0:
        raise ValueError(f"rope_theta must be positive, got {rope_theta!r}")
    return {
        "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "vocab_size": vocab_size,
        "hidden_size": hidden_size, "intermediate_size": inter, "num_hidden_layers": num_layers,
        "num_attention_heads": num_heads, "num_key_value_heads": num_kv_heads, "hidden_act": "silu",
        "max_position_embeddings": max_position_embeddings, "rms_norm_eps": 1e-6,
        "rope_parameters": {"rope_type": "default", "rope_theta": float(rope_theta)},
        "tie_word_embeddings": tie_word_embeddings, "use_sliding_window": False, "sliding_window": None,
        "max_window_layers": num_layers, "attention_dropout": 0.0, "initializer_range": 0.02,
        "use_cache": True, "bos_token_id": bos_token_id, "eos_token_id": eos_token_id,
        "pad_token_id": pad_token_id, "dtype": "float32",
    }


def count_params(hf_config: Mapping[str, Any]) -> int:
    """Exact parameter count of a Qwen2 HF config (q/k/v biases, untied head counted if untied)."""
    e, f, v = hf_config["hidden_size"], hf_config["intermediate_size"], hf_config["vocab_size"]
    h, k = hf_config["num_attention_heads"], hf_config["num_key_value_heads"]
    d = hf_config.get("head_dim") or e // h
    attn = e * h * d + h * d + 2 * (e * k * d + k * d) + h * d * e
    layer = attn + 3 * e * f + 2 * e
    head = 0 if hf_config.get("tie_word_embeddings", False) else e * v
    return hf_config["num_hidden_layers"] * layer + v * e + e + head


def build_tiny_checkpoint(out_dir: str | os.PathLike, corpus: Iterable[str], seed: int, *,
                          vocab_size: int = 768, **config_kwargs: Any) -> str:
    """Write a complete tiny Qwen2 checkpoint to `out_dir` and return its path.

    Trains the tokenizer on `corpus` (`train_tokenizer`), builds `tiny_qwen2_config` with the
    tokenizer's exact vocabulary size and special-token ids (plus `config_kwargs`), initialises
    Flax params from ``jax.random.key(seed)`` (`maxk_jax.models.qwen2.init_params`: normal(0.02)
    weights) and saves config.json + model.safetensors with `maxk_jax.models.convert.save_hf`.
    """
    import jax

    from maxk_jax.models import convert, qwen2

    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ValueError(f"seed must be an int, got {seed!r}")
    for key in ("bos_token_id", "eos_token_id", "pad_token_id"):
        if key in config_kwargs:
            raise ValueError(f"{key} is taken from the trained tokenizer; do not pass it")
    tokenizer = train_tokenizer(corpus, vocab_size)
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in SPECIAL_TOKENS}
    hf = tiny_qwen2_config(len(tokenizer), bos_token_id=ids[ENDOFTEXT], eos_token_id=ids[IM_END],
                           pad_token_id=ids[PAD], **config_kwargs)
    path = os.fspath(out_dir)
    os.makedirs(path, exist_ok=True)
    tokenizer.save_pretrained(path)
    config = qwen2.Qwen2Config.from_hf_dict(hf)
    params = qwen2.init_params(config, jax.random.key(seed))
    return convert.save_hf(config, params, path)
