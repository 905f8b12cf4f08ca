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

import math
from collections.abc import Callable
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from scaling_axes.kernels import Kernel, check_kernel, fused, use_triton
from scaling_axes.modules.architectures.layers import CausalSelfAttention, DecoderLM, PreNormBlock, RotaryEmbedding
from scaling_axes.modules.configs.tokenformer_config import NORMALIZATIONS, Normalization, TokenformerConfig
from scaling_axes.modules.registry import register_model


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


register_model(TokenformerConfig, Tokenformer)
