"""The config every decoder-only language model here shares, and the parameter and FLOP counts of `layers.DecoderLM`
(the shell the Transformer and the Tokenformer fill with their blocks). No torch: what plans runs reads it."""

from __future__ import annotations

import dataclasses
from typing import Literal

Position = Literal["rope", "learned", "none"]
SMOKE_SHAPE = {"n_layer": 2, "d_model": 32, "n_head": 4, "max_seq_len": 64, "vocab_size": 256}  # a decoder's examples


@dataclasses.dataclass(frozen=True)
class DecoderConfig:
    """Fields every decoder-only language model here shares.

    position: "rope" rotates the first `rotary_pct` of each head's dims (GPT-NeoX rotate_half, base `rope_base`);
    "learned" adds absolute position embeddings (GPT-2); "none" is NoPE, as in Tokenformer's TPU scaling runs.
    """

    vocab_size: int = 50304
    n_layer: int = 12
    d_model: int = 768
    n_head: int = 12
    max_seq_len: int = 2048
    position: Position = "rope"
    rotary_pct: float = 0.25
    rope_base: float = 10000.0
    tie_embeddings: bool = True
    block_norm_parametric: bool = True
    final_norm_parametric: bool = True
    norm_bias: bool = True
    norm_eps: float = 1e-5
    init_std: float = 0.02

    def __post_init__(self) -> None:
        for name in ("vocab_size", "n_layer", "d_model", "n_head", "max_seq_len"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name}={getattr(self, name)} must be positive")
        if self.d_model % self.n_head:
            raise ValueError(f"d_model={self.d_model} is not divisible by n_head={self.n_head}")
        if self.position not in ("rope", "learned", "none"):
            raise ValueError(f"position={self.position!r}; allowed: 'rope', 'learned', 'none'")
        if self.position == "rope" and (self.rotary_dims == 0 or self.rotary_dims % 2):
            raise ValueError(
                f"rotary_pct={self.rotary_pct} gives {self.rotary_dims} rotary dims of a {self.d_head}-dim head; "
                "need an even number > 0 (use position='none' for no positional encoding)"
            )

    @property
    def d_head(self) -> int:
        return self.d_model // self.n_head

    @property
    def rotary_dims(self) -> int:
        return int(self.d_head * self.rotary_pct)


def decoder_params(c: DecoderConfig, qkv: int, out: int, ffn: int) -> dict[str, int]:
    """Parameters per component of a `DecoderLM` whose blocks hold `qkv`, `out` and `ffn` parameters each: the
    token (and learned position) tables, the untied head and the parametric norms added."""
    d, affine = c.d_model, c.d_model * (1 + c.norm_bias)  # per parametric norm: gain and bias
    return {
        "embedding": c.vocab_size * d + (c.max_seq_len * d if c.position == "learned" else 0),
        "qkv": c.n_layer * qkv,
        "attention": 0,
        "out": c.n_layer * out,
        "ffn": c.n_layer * ffn,
        "norms": 2 * c.n_layer * affine * c.block_norm_parametric + affine * c.final_norm_parametric,
        "head": 0 if c.tie_embeddings else c.vocab_size * d,
        "other": 0,
    }


def decoder_flops(c: DecoderConfig, seq_len: int, qkv: int, out: int, ffn: int) -> dict[str, int]:
    """Forward matmul FLOPs per token of a `DecoderLM` whose blocks multiply `qkv`, `out` and `ffn` weights: 2 per
    weight, QK^T and AV over the whole `seq_len` square, and the logits."""
    return {
        "embedding": 0,
        "qkv": c.n_layer * 2 * qkv,
        "attention": c.n_layer * 4 * seq_len * c.n_head * c.d_head,
        "out": c.n_layer * 2 * out,
        "ffn": c.n_layer * 2 * ffn,
        "norms": 0,
        "head": 2 * c.d_model * c.vocab_size,
        "other": 0,
    }


def decoder_lookup_params(c: DecoderConfig) -> int:
    """The token and position tables and the untied head: what a non-embedding count of a `DecoderLM` leaves out."""
    tables = decoder_params(c, qkv=0, out=0, ffn=0)
    return tables["embedding"] + tables["head"]
