"""Layers shared by every decoder in the suite: rotary embedding, attention, pre-LN block, LM shell, and incremental
decoding (a key/value cache) for all of them; their config and counts are `configs/decoder_config.py`.

The Transformer and the Tokenformer differ only in what maps d -> d inside a block (nn.Linear vs Pattention) and
how those weights are initialised; everything else lives here once.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import threading
from collections.abc import Callable, Iterator
from typing import Any, Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from scaling_axes.modules.configs.decoder_config import DecoderConfig


@dataclasses.dataclass
class Decoding:
    """One forward of incremental decoding: `cache` holds the keys and values of the `start` tokens before this
    forward's (transformers' `Cache`: `update(keys, values, layer) -> all keys, all values`); each attention layer
    extends it with its own and attends over all of them, numbered in the order they attend (the same every step).
    `prefix`: the token ids before this forward's, for a model that looks back at ids (MoT's byte pull, RMT's
    document mask); None where the caller has none."""

    cache: Any
    start: int
    prefix: Tensor | None = None
    layer: int = 0

    def extend(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """This layer's keys and values [batch, heads, seq, head_dim] after the cached ones."""
        k, v = self.cache.update(k, v, self.layer)
        self.layer += 1
        return k, v

    def prefix_ids(self) -> Tensor:
        if self.prefix is None or self.prefix.shape[1] != self.start:
            raise ValueError(
                f"this model looks back at token ids: pass the {self.start} ids the cache holds as prefix_ids, "
                "model(next_ids, past_key_values=cache, prefix_ids=ids_so_far), as generate does"
            )
        return self.prefix


_DECODING: contextvars.ContextVar[Decoding | None] = contextvars.ContextVar("decoding", default=None)
# the call's own: a ContextVar is per thread (and per asyncio task), so two threads generating with one model each see
# only their own step
_OPEN = [0]  # decoding() contexts open in any thread: while none is, a forward never reads the ContextVar, whose
# get() breaks torch 2.11's Dynamo graph (seen on the H200, 2026-11-30); Dynamo guards on this list's item instead
_OPENING = threading.Lock()


@contextlib.contextmanager
def decoding(cache: Any, prefix: Tensor | None = None) -> Iterator[Decoding]:
    """Run the models' forwards inside as incremental decoding over `cache` (positions after the cached ones)."""
    step = Decoding(cache, cache.get_seq_length(), prefix)
    with _OPENING:
        _OPEN[0] += 1
    token = _DECODING.set(step)
    try:
        yield step
    finally:
        _DECODING.reset(token)
        with _OPENING:
            _OPEN[0] -= 1


def current_decoding() -> Decoding | None:
    """The decoding step a forward runs in, or None (a whole sequence)."""
    return _DECODING.get() if _OPEN[0] else None


def first_position() -> int:
    """The position of a forward's first token: 0, or after the cached tokens."""
    step = current_decoding()
    return 0 if step is None else step.start


def windowed(forward: Callable[[Tensor], Tensor], ids: Tensor, window: int) -> Tensor:
    """Every position's logits of `ids` [batch, seq], however long: cut into windows from its end (the last `window`
    tokens, the `window` before them, ...), each run on its own, as lm-eval's rolling windows are disjoint. The last
    window's logits are exactly those of the sequence truncated to it, as lm-eval truncates a context."""
    if ids.size(1) <= window:
        return forward(ids)
    ends = range(ids.size(1), 0, -window)
    return torch.cat([forward(ids[:, max(0, end - window) : end]) for end in reversed(ends)], dim=1)


class RotaryEmbedding(nn.Module):
    """Partial rotary embedding (Su et al. 2021) in GPT-NeoX's rotate_half layout on the first `dims` dims.

    `ladder="neox"`: frequencies base^(-2i/dims). `ladder="half_truncated"` (modded-nanogpt): (1/base)^linspace(0, 1,
    dims/4) for the first half of the pairs and 0 for the rest, negated because that code rotates the other way.
    """

    def __init__(self, dims: int, base: float = 10000.0, ladder: Literal["neox", "half_truncated"] = "neox") -> None:
        super().__init__()
        if ladder not in ("neox", "half_truncated"):
            raise ValueError(f"ladder={ladder!r}; allowed: 'neox', 'half_truncated'")
        self.dims, self.base, self.ladder = dims, base, ladder

    def frequencies(self, device: torch.device, dtype: torch.dtype) -> Tensor:
        if self.ladder == "neox":
            return self.base ** (-torch.arange(0, self.dims, 2, device=device, dtype=dtype) / self.dims)
        quarter = self.dims // 4
        ladder = -((1 / self.base) ** torch.linspace(0, 1, quarter, device=device, dtype=dtype))
        return torch.cat((ladder, ladder.new_zeros(self.dims // 2 - quarter)))

    def forward(self, x: Tensor, start: int = 0) -> Tensor:
        """x: [batch, heads, seq, head_dim] at positions start, start + 1, ..."""
        seq, dtype = x.shape[-2], torch.promote_types(x.dtype, torch.float32)  # angles never in half precision
        positions = torch.arange(start, start + seq, device=x.device, dtype=dtype)
        angles = torch.outer(positions, self.frequencies(x.device, dtype))
        angles = torch.cat((angles, angles), dim=-1)
        cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
        rot, rest = x[..., : self.dims], x[..., self.dims :]
        first, second = rot.chunk(2, dim=-1)
        rotated = rot * cos + torch.cat((-second, first), dim=-1) * sin
        return torch.cat((rotated, rest), dim=-1)


def causal_attention(
    q: Tensor, k: Tensor, v: Tensor, scale: float | None = None, upcast: bool = False, bias: Tensor | None = None
) -> Tensor:
    """softmax(q k^T * scale, causal) v over [batch, heads, seq, head_dim]. `upcast` computes it in fp32 even under
    autocast (Mistral's GPT-2 "attention upcasting"); `bias` is an additive mask that already holds the causal -inf.
    Fewer queries than keys are the last queries (incremental decoding): each sees the keys up to its own.
    """
    dtype = q.dtype
    if upcast:  # to fp32 at least: float64 stays float64
        precise = torch.promote_types(dtype, torch.float32)
        q, k, v = q.to(precise), k.to(precise), v.to(precise)
    no_autocast = upcast and q.device.type in ("cuda", "cpu")
    with torch.autocast(q.device.type, enabled=False) if no_autocast else contextlib.nullcontext():
        if bias is None and q.shape[-2] != k.shape[-2]:  # is_causal aligns the queries with the first keys
            past = k.shape[-2] - q.shape[-2]
            causal = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool, device=q.device).tril(past)
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=causal, scale=scale)
        elif bias is None:
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale)
        else:
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=bias.to(q.dtype), scale=scale)
    return out.to(dtype)


class CausalSelfAttention(nn.Module):
    """Multi-head causal attention; `qkv` maps d -> 3w (q, k, v concatenated), `out` maps w -> d."""

    def __init__(
        self,
        qkv: nn.Module,
        out: nn.Module,
        n_head: int,
        rotary: RotaryEmbedding | None,
        scale: float | None = None,
        upcast: bool = False,
    ) -> None:
        super().__init__()
        self.qkv, self.out, self.n_head, self.rotary = qkv, out, n_head, rotary
        self.scale, self.upcast = scale, upcast

    def forward(self, x: Tensor) -> Tensor:
        batch, seq, _ = x.shape
        q, k, v = (t.view(batch, seq, self.n_head, -1).transpose(1, 2) for t in self.qkv(x).chunk(3, dim=-1))
        step = current_decoding()
        if self.rotary is not None:
            start = 0 if step is None else step.start
            q, k = self.rotary(q, start), self.rotary(k, start)
        if step is not None:
            k, v = step.extend(k, v)
        y = causal_attention(q, k, v, self.scale, self.upcast)
        return self.out(y.transpose(1, 2).reshape(batch, seq, -1))


def layer_norm(d: int, parametric: bool, eps: float, bias: bool = True) -> nn.LayerNorm:
    """LayerNorm with weight and (unless `bias` is False) bias, or without any (Tokenformer's non-parametric norm)."""
    return nn.LayerNorm(d, eps=eps, elementwise_affine=parametric, bias=parametric and bias)


class PreNormBlock(nn.Module):
    """x + attn(LN(x)), then + ffn(LN(.)): the sequential pre-LN residual of GPT-2/NeoX and Tokenformer."""

    def __init__(self, attn: nn.Module, ffn: nn.Module, config: DecoderConfig) -> None:
        super().__init__()
        self.attn_norm = layer_norm(config.d_model, config.block_norm_parametric, config.norm_eps, config.norm_bias)
        self.attn = attn
        self.ffn_norm = layer_norm(config.d_model, config.block_norm_parametric, config.norm_eps, config.norm_bias)
        self.ffn = ffn

    def forward(self, x: Tensor) -> Tensor:
        x = x + self.attn(self.attn_norm(x))
        return x + self.ffn(self.ffn_norm(x))


class DecoderLM(nn.Module):
    """Token (and optional position) embedding, `n_layer` blocks from `make_block`, final norm, LM head."""

    def __init__(self, config: DecoderConfig, make_block: Callable[[int, RotaryEmbedding | None], nn.Module]) -> None:
        super().__init__()
        self.config = config
        self.token_embedding = nn.Embedding(config.vocab_size, config.d_model)
        self.position_embedding = (
            nn.Embedding(config.max_seq_len, config.d_model) if config.position == "learned" else None
        )
        rotary = RotaryEmbedding(config.rotary_dims, config.rope_base) if config.position == "rope" else None
        self.blocks = nn.ModuleList(make_block(i, rotary) for i in range(config.n_layer))
        self.final_norm = layer_norm(config.d_model, config.final_norm_parametric, config.norm_eps, config.norm_bias)
        self.lm_head = None if config.tie_embeddings else nn.Linear(config.d_model, config.vocab_size, bias=False)

    # forward multipliers of the embedding and the logits (1 unless a parametrisation such as muP sets them)
    input_multiplier: float = 1.0
    logit_multiplier: float = 1.0

    def forward(self, idx: Tensor) -> Tensor:
        """idx: [batch, seq] token ids -> logits [batch, seq, vocab_size]."""
        if idx.dim() != 2:
            raise ValueError(f"expected token ids of shape [batch, seq], got {tuple(idx.shape)}")
        start = first_position()
        if self.position_embedding is not None and start + idx.shape[1] > self.config.max_seq_len:
            raise ValueError(f"sequence length {start + idx.shape[1]} exceeds max_seq_len={self.config.max_seq_len}")
        x = self.token_embedding(idx)
        if self.position_embedding is not None:
            x = x + self.position_embedding(torch.arange(start, start + idx.shape[1], device=idx.device))
        if self.input_multiplier != 1.0:
            x = x * self.input_multiplier
        x = self.run_blocks(x)
        head = self.token_embedding.weight if self.lm_head is None else self.lm_head.weight
        logits = F.linear(self.final_norm(x), head)
        return logits * self.logit_multiplier if self.logit_multiplier != 1.0 else logits

    def run_blocks(self, x: Tensor) -> Tensor:
        """The residual path through the blocks; architectures that rewire it (`variants`) override this."""
        for block in self.blocks:
            x = block(x)
        return x
