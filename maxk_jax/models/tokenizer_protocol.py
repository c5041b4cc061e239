"""`Tokenizer`: what the library needs of a tokenizer (a transformers ``PreTrainedTokenizerBase``
satisfies it; so does any object with these members).  Kept apart from ``tokenizer.py`` so that
annotating with it does not import transformers.

Not ``runtime_checkable``: since Python 3.12 ``isinstance`` against a protocol looks members up
statically, and a transformers tokenizer serves ``eos_token_id`` / ``pad_token_id`` through
``__getattr__``, so the check would answer False for the tokenizer the library is built around.
:func:`missing_members` checks an object the way the library uses it."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Optional, Protocol


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


#: The members of :class:`Tokenizer` (its ids and methods).
MEMBERS: tuple[str, ...] = tuple(sorted({*Tokenizer.__annotations__, *(
    name for name, value in vars(Tokenizer).items() if callable(value) and (name == "__call__" or name[0] != "_"))}))


def missing_members(tokenizer: object) -> list[str]:
    """The :data:`MEMBERS` that ``tokenizer`` lacks (``hasattr``, so members served by
    ``__getattr__`` count); [] for a tokenizer the library can use."""
    return [name for name in MEMBERS if not hasattr(tokenizer, name)]
