"""Byte slots of tokens without the tokenizer: random tables for timing, and pulling bytes across tokens (MoT
reference sections 1.2-1.5; `byte_vocabulary` is their vocabulary, `token_bytes` reads the real tables off a
tokenizer).

Torch and the standard library only: the Mixture of Tokenizers model imports this, and an exported model's remote
code carries a copy of it.
"""

from __future__ import annotations

import torch
from torch import Tensor

from scaling_axes.datamodules.byte_vocabulary import GPT2_TOKENS, Padding, vocabulary_without_tokenizer


def synthetic_token_byte_table(vocabulary: str, bytes_per_token: int, padding: Padding, seed: int = 0) -> Tensor:
    """A table shaped and padded as `token_byte_table`'s, of random symbols, 1 to 8 per token (GPT-2 tokens average
    about 4.5 characters): for timing a model on random ids where the tokenizer file is absent. A model built on it
    sees the wrong bytes of every token and is not for training."""
    vocab = vocabulary_without_tokenizer(vocabulary)
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
