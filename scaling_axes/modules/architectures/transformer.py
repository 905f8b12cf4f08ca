"""The standard decoder-only Transformer baseline (GPT-2 / GPT-NeoX family), pre-LN.

Its config, presets and counts are `configs/transformer_config.py`.
"""

from __future__ import annotations

import math

from torch import nn

from scaling_axes.modules.architectures.layers import CausalSelfAttention, DecoderLM, PreNormBlock, RotaryEmbedding
from scaling_axes.modules.configs.transformer_config import TransformerConfig
from scaling_axes.modules.registry import register_model


class MLP(nn.Sequential):
    def __init__(self, d: int, d_ff: int, bias: bool) -> None:
        super().__init__(nn.Linear(d, d_ff, bias=bias), nn.GELU(), nn.Linear(d_ff, d, bias=bias))


def make_attention(config: TransformerConfig, layer: int, rotary: RotaryEmbedding | None) -> CausalSelfAttention:
    """Fused QKV and output projections; the RMT paper's inverse layer scaling divides layer i's logits by i + 1."""
    d = config.d_model
    scale = None  # SDPA's 1/sqrt(d_head)
    if config.mup:
        scale = config.attention_multiplier * math.sqrt(config.mup_base_head_dim) / config.d_head
    if config.inverse_layer_scaling:
        scale = (scale or 1 / math.sqrt(config.d_head)) / (layer + 1)
    width = config.n_head * config.d_head
    qkv, out = nn.Linear(d, 3 * width, bias=config.bias), nn.Linear(width, d, bias=config.bias)
    return CausalSelfAttention(qkv, out, config.n_head, rotary, scale, config.attention_fp32)


class Transformer(DecoderLM):
    """GPT-style decoder. Init as GPT-2: N(0, init_std), residual output projections scaled by 1/sqrt(2L)."""

    def __init__(self, config: TransformerConfig) -> None:
        super().__init__(config, self.make_block)
        if config.mup:
            self.input_multiplier = config.input_multiplier
            self.logit_multiplier = config.output_multiplier * config.mup_base_width / config.d_model
        self.reset_parameters()

    def make_block(self, layer: int, rotary: RotaryEmbedding | None) -> nn.Module:
        mlp = MLP(self.config.d_model, self.config.ffn_dim, self.config.bias)
        return PreNormBlock(make_attention(self.config, layer, rotary), mlp, self.config)

    def reset_parameters(self) -> None:
        """Every matrix N(0, std^2) with its std from `init` (norms keep (1, 0)); biases zero; muP's head zero."""
        hidden = self._hidden_fan_in()
        tables = {id(m.weight) for m in self.modules() if isinstance(m, nn.Embedding)}
        for name, p in self.named_parameters():
            if p.dim() >= 2:
                nn.init.normal_(p, 0.0, self._init_std(name, p, id(p) in tables, hidden))
        for m in self.modules():
            if isinstance(m, nn.Linear) and m.bias is not None:
                nn.init.zeros_(m.bias)
        if self.config.mup and self.lm_head is not None:
            nn.init.zeros_(self.lm_head.weight)  # the code's output_zero_init

    def _init_std(self, name: str, p: nn.Parameter, is_table: bool, hidden: dict[str, tuple[int, int]]) -> float:
        """LeCun: 1 / sqrt(fan_in) (weights are [out, in]: Linear, LSTM), tables 1. GPT-2: init_std, residual outputs
        / sqrt(2L); under muP hidden matrices also / sqrt(fan_in)."""
        c = self.config
        if c.init == "lecun":
            return 1.0 if is_table else 1 / math.sqrt(p.shape[1])
        scale = 1 / math.sqrt(hidden[name][0]) if name in hidden else 1.0
        depth = 1 / math.sqrt(2 * c.n_layer) if name.endswith(("attn.out.weight", "ffn.2.weight")) else 1.0
        return c.init_std * scale * depth

    def _hidden_fan_in(self) -> dict[str, tuple[int, int]]:
        """muP: (fan_in, the proxy's fan_in) of each hidden matrix by parameter name; empty without muP."""
        c = self.config
        if not c.mup:
            return {}
        return {
            f"{name}.weight": (m.in_features, c.mup_base_ffn if m.in_features == c.ffn_dim else c.mup_base_width)
            for name, m in self.named_modules()
            if isinstance(m, nn.Linear) and m is not self.lm_head
        }

    def lr_scales(self) -> dict[str, float]:
        """Per-parameter Adam lr multipliers (read by `LanguageModel`): muP's 1 / width ratio for hidden matrices."""
        return {name: base / fan_in for name, (fan_in, base) in self._hidden_fan_in().items()}


register_model(TransformerConfig, Transformer)
