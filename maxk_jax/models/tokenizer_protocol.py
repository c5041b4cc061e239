"""`Tokenizer`: what the library needs of a tokenizer (a transformers ``PreTrainedTokenizerBase``
satisfies it; so does any object with these members).  Kept apart from ``tokenizer.py`` so that
annotating with it does not import transformers."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Optional, Protocol, runtime_checkable


@runtime_checkable
class Tokenizer(Protocol):
    """Encode / decode / chat-format text; the ids used to pad and stop generation."""

    eos_token_id: Optional[int]
    pad_token_id: Optional[int]

    def __call__(self, text: Any, **kwargs: Any) -> Any:
        """Encode ``text`` (a str or list of str); ``["input_ids"]`` holds the ids."""

    def encode(self, text: str, **kwargs: Any) -> list[int]:
        """Token ids of one text."""

    def batch_decode(self, sequences: Sequence[Sequence[int]], **kwargs: Any) -> list[str]:
        """Texts of token id sequences [B][T] (``skip_special_tokens=True`` drops specials)."""

    def apply_chat_template(self, conversation: list[dict[str, str]], **kwargs: Any) -> Any:
        """The chat-formatted prompt of a conversation (text with ``tokenize=False``)."""

    def convert_tokens_to_ids(self, tokens: Any) -> Any:
        """Id(s) of token string(s)."""
