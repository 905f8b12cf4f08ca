"""The bytes of a tokenizer's tokens (GPT-2's, as the Mixture of Tokenizers ran, or any byte-level tokenizer of the
suite) for the Mixture of Tokenizers: fixed slots per token, and pulling across tokens.

Each token id maps to `bytes_per_token` slots (MoT reference section 1.2): the input table is left-padded and keeps
a long token's *last* slots, the target table is right-padded and keeps its *first* slots; end-of-text fills every
slot with the end-of-text id. Two vocabularies:

* ``chars`` (the original code's): the 456 Unicode characters that occur in GPT-2's per-token decodes, sorted by
  code point, then pad = 456 and end-of-text = 457. Tokens that are partial UTF-8 sequences decode to U+FFFD.
* ``utf8`` (what the write-up says it meant): the 256 byte values, then pad = 256 and end-of-text = 257.

Pulling across tokens (section 1.4-1.5) is in `byte_slots` and the vocabularies' ids in `byte_vocabulary`, which
need no tokenizer. Counting the vocabulary imports no torch (a MoT's parameter count reads it); a table does.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

from scaling_axes.datamodules.byte_vocabulary import ByteVocabulary, Padding, vocabulary_without_tokenizer

if TYPE_CHECKING:
    from torch import Tensor
from scaling_axes.datamodules.tokenizers import load_tokenizer


@functools.lru_cache(maxsize=4)
def _token_texts(vocabulary: str, tokenizer: str = "gpt2") -> tuple[tuple[int, ...], ...]:
    """Per token id of `tokenizer`, its symbols in `vocabulary` (end-of-text excluded: it has its own id)."""
    tok = load_tokenizer(tokenizer)
    ids = range(tok.vocab_size)
    if vocabulary == "utf8":
        return tuple(tuple(tok.decode_bytes([i])) for i in ids)
    texts = [tok.decode([i]) for i in ids]
    alphabet = {c: n for n, c in enumerate(sorted(set().union(*texts)))}
    return tuple(tuple(alphabet[c] for c in text) for text in texts)


def byte_vocabulary(name: str, synthetic: bool = False, tokenizer: str = "gpt2") -> ByteVocabulary:
    """The vocabulary `name` (of `tokenizer`'s decodes, for `chars`); `synthetic` gives its size without reading the
    tokenizer (see `synthetic_token_byte_table`)."""
    fixed = vocabulary_without_tokenizer(name)
    if name == "utf8" or synthetic:
        return fixed
    return ByteVocabulary("chars", 1 + max(max(t, default=0) for t in _token_texts("chars", tokenizer)))


@functools.lru_cache(maxsize=8)
def token_byte_table(vocabulary: str, bytes_per_token: int, padding: Padding, tokenizer: str = "gpt2") -> Tensor:
    """[tokens, bytes_per_token] byte ids of every token of `tokenizer`: `left` padding keeps the last slots (input
    table), `right` the first (target table)."""
    if padding not in ("left", "right"):
        raise ValueError(f"padding={padding!r}; allowed: 'left' (input table), 'right' (target table)")
    import torch

    texts = _token_texts(vocabulary, tokenizer)
    vocab, eot_token = byte_vocabulary(vocabulary, tokenizer=tokenizer), load_tokenizer(tokenizer).eot_id
    # on the CPU whatever the default device: the cached table outlives a meta-device model build
    table = torch.full((len(texts), bytes_per_token), vocab.pad_id, dtype=torch.int16, device="cpu")
    for token, symbols in enumerate(texts):
        kept = symbols[-bytes_per_token:] if padding == "left" else symbols[:bytes_per_token]
        if kept:
            start = bytes_per_token - len(kept) if padding == "left" else 0
            table[token, start : start + len(kept)] = torch.tensor(kept, dtype=torch.int16, device="cpu")
    table[eot_token] = vocab.eot_id
    return table
