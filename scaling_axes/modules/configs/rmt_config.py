"""The Residual Matrix Transformer's config and presets (`architectures/rmt.py` is the model): Table 9's models
(its last two rows corrected), Fig. 6's residual ladder, and their parameter and FLOP counts from the config alone."""

from __future__ import annotations

import dataclasses
from typing import Literal

from scaling_axes.kernels import Kernel, check_kernel
from scaling_axes.modules.registry import Architecture, Example, register

_SMOKE = {"n_layer": 2, "d_key": 6, "d_value": 5, "rank": 3, "d_ff": 16, "vocab_size": 256, "max_seq_len": 64}


@dataclasses.dataclass(frozen=True)
class RMTConfig:
    vocab_size: int = 50257
    n_layer: int = 12
    d_key: int = 32  # D_k
    d_value: int = 64  # D_v, also the head size
    rank: int = 12  # R: heads, FF retrievals/storages, embedding and unembedding rank
    d_ff: int = 3072
    max_seq_len: int = 512
    norm: Literal["layernorm", "rmsnorm"] = "layernorm"
    norm_eps: float = 1e-6
    norm_bias: bool = False  # LayerNorm only; App. C.1: no bias terms (the official code's RMSNorm has none)
    position: Literal["learned", "alibi"] = "learned"
    document_mask: bool = False  # attention does not cross `bos_token_id` (the official code, with ALiBi)
    bos_token_id: int = 50256
    gelu: Literal["none", "tanh"] = "none"
    zero_init_unembedding: bool = False
    init_std: float = 0.02
    init: Literal["official", "lecun"] = "official"  # lecun: App. C.4's, every matrix N(0, 1 / fan_in)
    input_alpha: float = 1.0
    attention_alpha: float = 1.0
    output_alpha: float = 1.0
    inverse_layer_scaling: bool = True
    attention_fp32: bool = False
    kernel: Kernel = "auto"

    def __post_init__(self) -> None:
        for name in ("vocab_size", "n_layer", "d_key", "d_value", "rank", "d_ff", "max_seq_len"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name}={getattr(self, name)} must be positive")
        choices = {
            "norm": ("layernorm", "rmsnorm"),
            "position": ("learned", "alibi"),
            "gelu": ("none", "tanh"),
            "init": ("official", "lecun"),
        }
        for name, allowed in choices.items():
            if getattr(self, name) not in allowed:
                raise ValueError(f"{name}={getattr(self, name)!r}; allowed: {', '.join(map(repr, allowed))}")
        check_kernel(self.kernel)

    @property
    def residual_size(self) -> int:
        return self.d_key * self.d_value


def _rmt(n_layer: int, d_key: int, d_value: int, rank: int, d_ff: int) -> RMTConfig:
    return RMTConfig(n_layer=n_layer, d_key=d_key, d_value=d_value, rank=rank, d_ff=d_ff)


def _rmt_params(c: RMTConfig) -> dict[str, int]:
    """RMT: tables and keys of the embedding, 3R + R keys per attention, FF with its 2R keys, readout + W_U."""
    keys, width = c.rank * c.d_key, c.rank * c.d_value
    learned = c.position == "learned"
    return {
        "embedding": (c.vocab_size + (c.max_seq_len if learned else 0)) * width + keys * (2 if learned else 1),
        "qkv": c.n_layer * 3 * keys,
        "attention": 0,
        "out": c.n_layer * keys,
        "ffn": c.n_layer * (2 * keys + 2 * width * c.d_ff),
        "norms": (2 * c.n_layer + 1) * c.residual_size * (2 if c.norm == "layernorm" and c.norm_bias else 1),
        "head": keys + width * c.vocab_size,
        "other": 0,
    }


def _rmt_flops(c: RMTConfig, seq_len: int) -> dict[str, int]:
    """RMT: every retrieval/storage costs 2 D_k D_v per key; attention is R heads of size D_v."""
    key, width = 2 * c.d_key * c.d_value, c.rank * c.d_value
    return {
        "embedding": key * c.rank * (2 if c.position == "learned" else 1),
        "qkv": c.n_layer * key * 3 * c.rank,
        "attention": c.n_layer * 4 * seq_len * width,
        "out": c.n_layer * key * c.rank,
        "ffn": c.n_layer * (2 * key * c.rank + 2 * 2 * width * c.d_ff),
        "norms": 0,
        "head": key * c.rank + 2 * width * c.vocab_size,
        "other": 0,
    }


def _rmt_lookup_params(c: RMTConfig) -> int:
    """The token (and position) tables and W_U; the storage and readout keys stay in, as in the RMT code's
    `non_embedding_size` (reference rmt.md section 5)."""
    width = c.rank * c.d_value
    return (2 * c.vocab_size + (c.max_seq_len if c.position == "learned" else 0)) * width


register(
    Architecture(
        params=_rmt_params,
        flops=_rmt_flops,
        lookup_params=_rmt_lookup_params,
        width=lambda c: c.residual_size,
        components=((r"^embed\.", "embedding"), (r"^readout", "head")),
        examples={
            "rmt": Example("rmt_46m", _SMOKE),
            "rmt_official": Example(  # the official code's: RMSNorm, ALiBi, attention kept within documents
                "rmt_46m", {**_SMOKE, "norm": "rmsnorm", "position": "alibi", "document_mask": True, "bos_token_id": 7}
            ),
        },
    ),
    {
        "rmt_46m": _rmt(6, 32, 32, 12, 1536),
        "rmt_134m": _rmt(12, 32, 64, 12, 3072),
        # Table 9's last two rows are garbled in the paper (D_k 896 / D_v 48, D_k 1024): corrected as in the
        # reference notes, section 4 (R * D_v = the Transformer's D; 305M is GPT2-medium's residual x 4).
        "rmt_206m": _rmt(18, 48, 64, 14, 3584),
        "rmt_305m": _rmt(24, 64, 64, 16, 4096),
        # Fig. 6: GPT2-small-sized, D_v 64, R 12, residual D_k * 64 from 384 to 4096
        **{f"rmt_residual_dk{d_key}": _rmt(12, d_key, 64, 12, 3072) for d_key in (6, 12, 24, 32, 48, 64)},
    },
)
