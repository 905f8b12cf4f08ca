"""The bytes of a tokenizer's tokens (GPT-2's, as the Mixture of Tokenizers ran, or any byte-level tokenizer of the
suite) for the Mixture of Tokenizers: fixed slots per token, and pulling across tokens.

Each token id maps to `bytes_per_token` slots (MoT reference section 1.2): the input table is left-padded and keeps
a long token's *last* slots, the target table is right-padded and keeps its *first* slots; end-of-text fills every
slot with the end-of-text id. Two vocabularies:

* ``chars`` (the original code's): the 456 Unicode characters that occur in GPT-2's per-token decodes, sorted by
  code point, then pad = 456 and end-of-text = 457. Tokens that are partial UTF-8 sequences decode to U+FFFD.
* ``utf8`` (what the write-up says it meant): the 256 byte values, then pad = 256 and end-of-text = 257.

Pulling (section 1.4-1.5) fills a token's pad slots with its neighbours' bytes, never across an end-of-text or the
edges of a row: at the input, the most recent bytes up to and including the token's own; at the output, the bytes
from the token on.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Literal

import torch
from torch import Tensor

from scaling_axes.datamodules.tokenizers import load_tokenizer

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
    if name == "utf8":
        return ByteVocabulary("utf8", 256)
    if name == "chars" and synthetic:
        return ByteVocabulary("chars", GPT2_CHARS)
    if name == "chars":
        texts = _token_texts("chars", tokenizer)
        return ByteVocabulary("chars", 1 + max(max(t, default=0) for t in texts))
    raise KeyError(f"unknown byte vocabulary {name!r}; available: {', '.join(VOCABULARIES)}")


@functools.lru_cache(maxsize=8)
def token_byte_table(vocabulary: str, bytes_per_token: int, padding: Padding, tokenizer: str = "gpt2") -> Tensor:
    """[tokens, bytes_per_token] byte ids of every token of `tokenizer`: `left` padding keeps the last slots (input
    table), `right` the first (target table)."""
    if padding not in ("left", "right"):
        raise ValueError(f"padding={padding!r}; allowed: 'left' (input table), 'right' (target table)")
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


def synthetic_token_byte_table(vocabulary: str, bytes_per_token: int, padding: Padding, seed: int = 0) -> Tensor:
    """A table shaped and padded as `token_byte_table`'s, of random symbols, 1 to 8 per token (GPT-2 tokens average
    about 4.5 characters): for timing a model on random ids where the tokenizer file is absent. A model built on it
    sees the wrong bytes of every token and is not for training."""
    vocab = byte_vocabulary(vocabulary, synthetic=True)
    generator = torch.Generator().manual_seed(seed)
    symbols = torch.randint(0, vocab.symbols, (GPT2_TOKENS, bytes_per_token), generator=generator)
    lengths = torch.randint(1, min(8, bytes_per_token) + 1, (GPT2_TOKENS, 1), generator=generator)
    slot = torch.arange(bytes_per_token)
    real = slot >= bytes_per_token - lengths if padding == "left" else slot < lengths
    table = torch.where(real, symbols, vocab.pad_id).to(torch.int16)
    table[GPT2_TOKENS - 1] = vocab.eot_id
    return table


def _compact(slots: Tensor, pad_id: int, eot_id: int) -> tuple[Tensor, Tensor, Tensor]:
    """Each row's real bytes back to back, the bytes per token, and each token's end in that stream."""
    real = (slots != pad_id) & (slots != eot_id)  # [B, T, S]
    batch, seq, width = slots.shape
    flat_real = real.reshape(batch, -1)
    position = flat_real.long().cumsum(-1) - 1
    stream = torch.full((batch, seq * width + 1), pad_id, dtype=slots.dtype, device=slots.device)
    stream.scatter_(1, torch.where(flat_real, position, seq * width), slots.reshape(batch, -1))
    lengths = real.sum(-1)
    return stream, lengths, lengths.cumsum(-1)


def pull_from_left(slots: Tensor, pad_id: int, eot_id: int) -> Tensor:
    """Left-padded [B, T, S] slots -> per token the last S bytes of its document so far, right-aligned.

    Tokens that are end-of-text keep all-`eot_id` slots and bound the pull; so does the start of the row."""
    stream, _, ends = _compact(slots, pad_id, eot_id)
    batch, seq, width = slots.shape
    is_eot = (slots == eot_id).all(-1)
    positions = torch.arange(seq, device=slots.device).expand(batch, seq)
    last_eot = torch.where(is_eot, positions, -1).cummax(-1).values
    doc_start = torch.where(last_eot >= 0, ends.gather(1, last_eot.clamp(min=0)), 0)
    source = ends.unsqueeze(-1) - width + torch.arange(width, device=slots.device)  # [B, T, S]
    valid = source >= doc_start.unsqueeze(-1)
    pulled = stream.gather(1, source.clamp(min=0).reshape(batch, -1)).reshape(batch, seq, width)
    pulled = torch.where(valid, pulled, pad_id)
    return torch.where(is_eot.unsqueeze(-1), slots, pulled)


def pull_from_right(slots: Tensor, pad_id: int, eot_id: int) -> Tensor:
    """Right-padded [B, T, S] slots -> per token the first S bytes from it to the next end-of-text or the row's
    end, left-aligned. End-of-text tokens keep all-`eot_id` slots."""
    stream, lengths, ends = _compact(slots, pad_id, eot_id)
    batch, seq, width = slots.shape
    is_eot = (slots == eot_id).all(-1)
    positions = torch.arange(seq, device=slots.device).expand(batch, seq)
    next_eot = torch.where(is_eot, positions, seq).flip(-1).cummin(-1).values.flip(-1)
    row_end = ends[:, -1:].expand(batch, seq)
    doc_end = torch.where(next_eot < seq, ends.gather(1, next_eot.clamp(max=seq - 1)), row_end)
    source = (ends - lengths).unsqueeze(-1) + torch.arange(width, device=slots.device)
    valid = source < doc_end.unsqueeze(-1)
    pulled = stream.gather(1, source.clamp(max=seq * width).reshape(batch, -1)).reshape(batch, seq, width)
    pulled = torch.where(valid, pulled, pad_id)
    return torch.where(is_eot.unsqueeze(-1), slots, pulled)
