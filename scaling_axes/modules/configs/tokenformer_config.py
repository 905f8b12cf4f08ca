"""Tokenformer's config and presets (`architectures/tokenformer.py` is the model): the Pile models of Table 1 as the
official GPU code configures them, the OpenWebText family of the progressive-scaling runs (Fig. 3, TPU code), and the
released incremental-scaling example; their parameter and FLOP counts from the config alone."""

from __future__ import annotations

import dataclasses
from typing import Literal

from scaling_axes.kernels import Kernel
from scaling_axes.modules.configs.decoder_config import (
    SMOKE_SHAPE,
    DecoderConfig,
    decoder_flops,
    decoder_lookup_params,
    decoder_params,
)
from scaling_axes.modules.registry import Architecture, Example, register

Normalization = Literal["l2_norm_gelu", "gelu_l2_norm", "gelu_l1_norm", "softmax"]
NORMALIZATIONS = ("l2_norm_gelu", "gelu_l2_norm", "gelu_l1_norm", "softmax")
TOKEN_FIELDS = ("qkv_tokens", "proj_tokens", "ffn_tokens")
TAU_FIELDS = ("tau_qkv_tokens", "tau_proj_tokens", "tau_ffn_tokens")


@dataclasses.dataclass(frozen=True)
class TokenformerConfig(DecoderConfig):
    """Tokenformer; token counts per Pattention, and optional tau pins (None: tau from the current count).

    `numerics`: the official code the model follows where its two codebases differ. "gpu" (Megatron, the Pile models
    of Table 1): exact GELU, embeddings N(0, init_std), Pattention eps 0, logits as computed. "tpu" (MaxText, which
    ran Figs. 3, 4 and 7): tanh GELU (Flax's default), embeddings N(0, 1), eps 1e-5, logits / sqrt(d_model)
    (`normalize_embedding_logits`). `pattention_eps` overrides the eps of either.
    """

    qkv_tokens: int = 768
    proj_tokens: int = 768
    ffn_tokens: int = 3072
    normalization: Normalization = "l2_norm_gelu"
    pattention_eps: float | None = None
    numerics: Literal["gpu", "tpu"] = "gpu"
    kernel: Kernel = "auto"  # l2_norm_gelu Pattention: fused Triton (kernels/pattention.py) or eager PyTorch
    tau_qkv_tokens: int | None = None
    tau_proj_tokens: int | None = None
    tau_ffn_tokens: int | None = None
    block_norm_parametric: bool = False
    key_init_std: float | None = None  # None: init_std (both released codes' 0.02)
    value_init_std: float | None = None  # None: "wang_init", 2 / (L sqrt(d))

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.normalization not in NORMALIZATIONS:
            raise ValueError(f"normalization={self.normalization!r}; allowed: {', '.join(NORMALIZATIONS)}")
        if self.numerics not in ("gpu", "tpu"):
            raise ValueError(f"numerics={self.numerics!r}; allowed: 'gpu', 'tpu'")
        for name in (*TOKEN_FIELDS, *TAU_FIELDS):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise ValueError(f"{name}={value} must be positive")

    @property
    def eps(self) -> float:
        """The Pattention eps: `pattention_eps`, else the numerics' own (TPU code 1e-5, GPU code 0)."""
        return self.pattention_eps if self.pattention_eps is not None else (1e-5 if self.numerics == "tpu" else 0.0)


def _pile(n_layer: int, d: int, n_head: int) -> TokenformerConfig:
    return TokenformerConfig(n_layer=n_layer, d_model=d, n_head=n_head, qkv_tokens=d, proj_tokens=d, ffn_tokens=4 * d)


def _progressive(tokens: int) -> TokenformerConfig:
    """Paper's OpenWebText family (TPU code): 12 x 768, one count n for Q/K/V/O, 4n for the FFN, no positions, and
    the TPU code's numerics (tanh GELU, N(0, 1) embeddings, eps 1e-5, logits / sqrt(d)); its other differences (fan-in
    key and value init, query pre-scaling) are not reproduced."""
    return TokenformerConfig(
        max_seq_len=1024, position="none", qkv_tokens=tokens, proj_tokens=tokens, ffn_tokens=4 * tokens, numerics="tpu"
    )


def _owt2(tokens: int) -> TokenformerConfig:
    """Released GPU incremental-scaling example (OpenWebText2): 24 x 1024, partial RoPE."""
    return TokenformerConfig(
        n_layer=24,
        d_model=1024,
        n_head=16,
        max_seq_len=1024,
        qkv_tokens=tokens,
        proj_tokens=tokens,
        ffn_tokens=4 * tokens,
    )


def _token_parameters(c: TokenformerConfig) -> tuple[int, int, int]:
    """Key and value tokens of one block's three Q/K/V Pattentions, its output and its FFN Pattention."""
    d = c.d_model
    return 3 * c.qkv_tokens * 2 * d, c.proj_tokens * 2 * d, c.ffn_tokens * 2 * d


ARCHITECTURE = Architecture(
    params=lambda c: decoder_params(c, *_token_parameters(c)),
    flops=lambda c, seq_len: decoder_flops(c, seq_len, *_token_parameters(c)),
    lookup_params=decoder_lookup_params,
    grow="scaling_axes.modules.growth.tokenformer:grow",
    growing_fields=(*TOKEN_FIELDS, *TAU_FIELDS),
    examples={
        "tokenformer": Example("tokenformer_124m", {**SMOKE_SHAPE, "qkv_tokens": 8, "proj_tokens": 8, "ffn_tokens": 32})
    },
)

# the Pile models' released weights on the Hub (`architectures/official_weights.py` loads them)
OFFICIAL_REPOS = {
    "tokenformer_150m": "Haiyang-W/TokenFormer-150M",
    "tokenformer_450m": "Haiyang-W/TokenFormer-450M",
    "tokenformer_900m": "Haiyang-W/TokenFormer-900M",
    "tokenformer_1_5b": "Haiyang-W/TokenFormer-1-5B",
}


register(
    ARCHITECTURE,
    {
        "tokenformer_150m": _pile(12, 768, 12),
        "tokenformer_450m": _pile(24, 1024, 16),
        "tokenformer_900m": _pile(32, 1280, 16),
        "tokenformer_1_5b": _pile(40, 1536, 16),
        "tokenformer_124m": _progressive(576),
        "tokenformer_354m": _progressive(2140),
        "tokenformer_757m": _progressive(4850),
        "tokenformer_1_4b": _progressive(9232),
        "tokenformer_owt2_354m": _owt2(768),
        "tokenformer_owt2_757m": _owt2(1792),
    },
)
