"""The byte vocabulary of the Mixture of Tokenizers (MoT reference sections 1.2-1.5): its size, pad and end-of-text
ids, and its size without a tokenizer. No torch: a MoT config's parameter count reads it (`token_bytes` counts the
real vocabulary off a tokenizer; `byte_slots` fills tokens' byte slots)."""

from __future__ import annotations

import dataclasses
from typing import Literal

VOCABULARIES = ("chars", "utf8")
GPT2_CHARS = 456  # distinct characters in GPT-2's per-token decodes: the `chars` vocabulary without the tokenizer
GPT2_TOKENS = 50257
Padding = Literal["left", "right"]


@dataclasses.dataclass(frozen=True)
class ByteVocabulary:
    """Byte ids 0..size-1; the last two are pad and end-of-text. `head_size` pads the classes to a multiple of 128."""

    name: str
    symbols: int

    @property
    def pad_id(self) -> int:
        return self.symbols

    @property
    def eot_id(self) -> int:
        return self.symbols + 1

    @property
    def size(self) -> int:
        return self.symbols + 2

    @property
    def head_size(self) -> int:
        return -(-self.size // 128) * 128


def vocabulary_without_tokenizer(name: str) -> ByteVocabulary:
    """`utf8`'s 256 bytes, or `chars` at GPT-2's size (what a synthetic table draws from)."""
    if name not in VOCABULARIES:
        raise KeyError(f"unknown byte vocabulary {name!r}; available: {', '.join(VOCABULARIES)}")
    return ByteVocabulary(name, 256 if name == "utf8" else GPT2_CHARS)
