"""Tokenformer (Wang et al., ICLR 2025): every Linear in the blocks becomes token-parameter attention.

Follows the official GPU code (`megatron/model/tokenformer.py`), which matches the paper except where noted:

* Pattention (paper Eq. 3-4): ``Theta(X K_P^T) V_P`` with ``Theta = GELU(sqrt(n) * A / ||A||_2)`` row-wise over the n
  parameter tokens; no biases. `normalization` also offers the code's ``gelu_l2_norm`` and ``softmax``
  (``n softmax``, computed stably here, unlike the code), and ``gelu_l1_norm`` (``n GELU(A) / ||GELU(A)||_1``: the
  softmax with GELU for exp, our reading of Table 4's "GeLU + L1 norm", which no released code has). `eps` is added
  to the row norm (official GPU code: none, TPU code: 1e-5); an all-zero score row normalises to zero here, where the
  GPU code gives NaN. `tau_tokens` pins the sqrt(n) scale to a fixed count (the TPU code's `zoom_dim`).
* Block (paper Eq. 5-8): non-parametric pre-LN, separate Q/K/V Pattentions, softmax token-token attention with
  partial RoPE on 25% of each head, output Pattention, and a single Pattention as the whole FFN (n_ffn = 4d tokens).
* Parametric final LayerNorm, tied embedding head; init keys N(0, 0.02), values N(0, (2 / (L sqrt(d)))^2),
  embedding N(0, 0.02).

Growth (paper Eq. 9-10, section 3.3): new key/value tokens are appended. The paper says zero-initialised new keys
let the grown model "perfectly resume" the old one. That holds only when tau stays sqrt(n_old): the official code
(and so every run of the paper) recomputes tau from the new n, which multiplies every old normalised score by
sqrt(n_new / n_old) inside the GELU. `modules.growth.tokenformer.grow` does the same by default; `pin_tau=True`
keeps tau, the exact variant.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from scaling_axes.kernels import Kernel, check_kernel, fused, use_triton
from scaling_axes.modules.architectures.layers import (
    SMOKE_SHAPE,
    CausalSelfAttention,
    DecoderConfig,
    DecoderLM,
    PreNormBlock,
    RotaryEmbedding,
    decoder_flops,
    decoder_lookup_params,
    decoder_params,
)
from scaling_axes.modules.registry import Architecture, Example, register

Normalization = Literal["l2_norm_gelu", "gelu_l2_norm", "gelu_l1_norm", "softmax"]
NORMALIZATIONS = ("l2_norm_gelu", "gelu_l2_norm", "gelu_l1_norm", "softmax")
TOKEN_FIELDS = ("qkv_tokens", "proj_tokens", "ffn_tokens")
TAU_FIELDS = ("tau_qkv_tokens", "tau_proj_tokens", "tau_ffn_tokens")


def normalize_scores(
    scores: Tensor, normalization: str, tau_tokens: int, eps: float = 0.0, gelu: Literal["none", "tanh"] = "none"
) -> Tensor:
    """Theta of paper Eq. 4 over the last dim of `scores` (= X K_P^T), with tau from `tau_tokens` and GELU exact or
    `tanh` (the TPU code's Flax default). A row of zero scores (all-zero keys, or a zero input) stays zero even with
    eps 0, where the formula would give 0 / 0."""
    if normalization == "l2_norm_gelu":
        norm = torch.linalg.vector_norm(scores, dim=-1, keepdim=True)
        return F.gelu(scores * (math.sqrt(tau_tokens) / _nonzero(norm + eps)), approximate=gelu)
    if normalization == "gelu_l2_norm":
        activated = F.gelu(scores, approximate=gelu)
        norm = torch.linalg.vector_norm(activated, dim=-1, keepdim=True)
        return activated * (math.sqrt(tau_tokens) / _nonzero(norm + eps))
    if normalization == "gelu_l1_norm":  # softmax's n exp(A) / ||exp(A)||_1 with GELU for exp: Table 4's middle row
        activated = F.gelu(scores, approximate=gelu)
        norm = torch.linalg.vector_norm(activated, ord=1, dim=-1, keepdim=True)
        return activated * (tau_tokens / _nonzero(norm + eps))
    if normalization == "softmax":
        return tau_tokens * torch.softmax(scores, dim=-1)
    raise ValueError(f"normalization={normalization!r}; allowed: {', '.join(NORMALIZATIONS)}")


def _nonzero(denominator: Tensor) -> Tensor:
    return torch.where(denominator > 0, denominator, torch.ones_like(denominator))


class Pattention(nn.Module):
    """Token-parameter attention: inputs are queries, `key_param_tokens`/`value_param_tokens` the keys/values."""

    def __init__(
        self,
        d_in: int,
        d_out: int,
        num_param_tokens: int,
        normalization: Normalization = "l2_norm_gelu",
        eps: float = 0.0,
        tau_tokens: int | None = None,
        kernel: Kernel = "auto",
        gelu: Literal["none", "tanh"] = "none",
    ) -> None:
        super().__init__()
        check_kernel(kernel)
        self.kernel, self.gelu = kernel, gelu
        if normalization not in NORMALIZATIONS:
            raise ValueError(f"normalization={normalization!r}; allowed: {', '.join(NORMALIZATIONS)}")
        if num_param_tokens <= 0:
            raise ValueError(f"num_param_tokens={num_param_tokens} must be positive")
        self.normalization, self.eps, self.tau_tokens = normalization, eps, tau_tokens
        self.key_param_tokens = nn.Parameter(torch.empty(num_param_tokens, d_in))
        self.value_param_tokens = nn.Parameter(torch.empty(num_param_tokens, d_out))

    @property
    def num_param_tokens(self) -> int:
        return self.key_param_tokens.shape[0]

    @property
    def tau(self) -> int:
        return self.tau_tokens or self.num_param_tokens

    def runs_fused(self, x: Tensor) -> bool:
        """Whether forward(x) runs the Triton kernel (only `l2_norm_gelu` with the exact GELU has one)."""
        return self.normalization == "l2_norm_gelu" and self.gelu == "none" and use_triton(self.kernel, x, "pattention")

    def forward(self, x: Tensor) -> Tensor:
        if self.runs_fused(x):
            return fused("pattention:pattention")(x, self.key_param_tokens, self.value_param_tokens, self.tau, self.eps)
        scores = x @ self.key_param_tokens.T
        return normalize_scores(scores, self.normalization, self.tau, self.eps, self.gelu) @ self.value_param_tokens

    def extra_repr(self) -> str:
        d_in, d_out = self.key_param_tokens.shape[1], self.value_param_tokens.shape[1]
        return f"{d_in} -> {d_out}, tokens={self.num_param_tokens}, {self.normalization}, tau_tokens={self.tau_tokens}"


class QKVPattention(nn.Module):
    """The three independent Q, K, V Pattentions of one attention layer, outputs concatenated.

    With the fused kernel the three run as one grouped launch (they share the input and, unless grown apart, the
    shapes, tau and eps); otherwise one after another.
    """

    def __init__(self, make: Callable[[], Pattention]) -> None:
        super().__init__()
        self.query, self.key, self.value = make(), make(), make()

    def forward(self, x: Tensor) -> Tensor:
        parts = (self.query, self.key, self.value)
        alike = {(p.key_param_tokens.shape, p.value_param_tokens.shape, p.tau, p.eps) for p in parts}
        if len(alike) == 1 and all(p.runs_fused(x) for p in parts):
            keys, values = [p.key_param_tokens for p in parts], [p.value_param_tokens for p in parts]
            return fused("pattention:grouped_pattention")(x, keys, values, self.query.tau, self.query.eps)
        return torch.cat([p(x) for p in parts], dim=-1)


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


class Tokenformer(DecoderLM):
    def __init__(self, config: TokenformerConfig) -> None:
        gelu = "tanh" if config.numerics == "tpu" else "none"

        def pattention(tokens: int, tau: int | None) -> Pattention:
            d = config.d_model
            return Pattention(d, d, tokens, config.normalization, config.eps, tau, config.kernel, gelu)

        def make_block(_: int, rotary: RotaryEmbedding | None) -> nn.Module:
            qkv = QKVPattention(lambda: pattention(config.qkv_tokens, config.tau_qkv_tokens))
            attn = CausalSelfAttention(
                qkv, pattention(config.proj_tokens, config.tau_proj_tokens), config.n_head, rotary
            )
            return PreNormBlock(attn, pattention(config.ffn_tokens, config.tau_ffn_tokens), config)

        super().__init__(config, make_block)
        if config.numerics == "tpu":
            self.logit_multiplier = 1 / math.sqrt(config.d_model)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Official init: keys and embedding N(0, init_std) (the TPU code's embedding N(0, 1)); values "wang_init"
        N(0, (2 / (L sqrt(d)))^2)."""
        value_std = self.config.value_init_std or 2.0 / (self.config.n_layer * math.sqrt(self.config.d_model))
        key_std = self.config.key_init_std or self.config.init_std
        embedding_std = 1.0 if self.config.numerics == "tpu" else self.config.init_std
        nn.init.normal_(self.token_embedding.weight, 0.0, embedding_std)
        for module in (self.position_embedding, self.lm_head):
            if module is not None:
                nn.init.normal_(module.weight, 0.0, self.config.init_std)
        for module in self.modules():
            if isinstance(module, Pattention):
                nn.init.normal_(module.key_param_tokens, 0.0, key_std)
                nn.init.normal_(module.value_param_tokens, 0.0, value_std)


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
    build=Tokenformer,
    params=lambda c: decoder_params(c, *_token_parameters(c)),
    flops=lambda c, seq_len: decoder_flops(c, seq_len, *_token_parameters(c)),
    lookup_params=decoder_lookup_params,
    grow="scaling_axes.modules.growth.tokenformer:grow",
    growing_fields=(*TOKEN_FIELDS, *TAU_FIELDS),
    examples={
        "tokenformer": Example("tokenformer_124m", {**SMOKE_SHAPE, "qkv_tokens": 8, "proj_tokens": 8, "ffn_tokens": 32})
    },
)

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
