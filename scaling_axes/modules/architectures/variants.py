"""The residual-path variants of the RMT paper's Table 10 (Highway, depth-wise LSTM, hierarchical aggregation).

Its presets are at GPT2-small shapes (12 x 768, 12 heads, D_FF 3072): `configs/variants_config.py`.

Each is the RMT paper's Transformer (`transformer_rmt_160m`: learned positions, untied, no biases) with its residual
path rewired. The papers' exact layer designs are not in the material this suite was built from; these follow
their published descriptions and are sized to the parameter counts of the RMT paper's Table 10:

* Highway Transformer (Chai et al. 2020): a self-dependency unit beside each sublayer,
  SDU(u) = tanh(u W_t) * sigmoid(u W_g), added to the residual with the sublayer's output. 191M.
* Depth-wise LSTM (Xu et al. 2024): an LSTM over depth replaces the residual connections and absorbs the FFN: from
  the attention output a and the previous hidden state h, gates i, f, o = sigmoid(W [a; h]) and the candidate
  W2 GELU(W1 [a; h]) (hidden 4D); c = f * c + i * candidate, h = o * tanh(c). 233M.
* Hierarchical layer aggregation (Dou et al. 2018): the 12 layers form 3 stages of 4; stage outputs are merged by
  aggregation nodes LayerNorm(W [left; right]) in a chain, the last node feeding the final norm. 165M.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from scaling_axes.modules.architectures.layers import PreNormBlock, RotaryEmbedding, layer_norm
from scaling_axes.modules.architectures.transformer import MLP, Transformer, make_attention
from scaling_axes.modules.configs.transformer_config import TransformerConfig
from scaling_axes.modules.configs.variants_config import VariantConfig
from scaling_axes.modules.registry import register_model


class SelfDependencyUnit(nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.transform, self.gate = nn.Linear(d, d, bias=False), nn.Linear(d, d, bias=False)

    def forward(self, u: Tensor) -> Tensor:
        return torch.tanh(self.transform(u)) * torch.sigmoid(self.gate(u))


class HighwayBlock(PreNormBlock):
    def __init__(self, attn: nn.Module, ffn: nn.Module, config: TransformerConfig) -> None:
        super().__init__(attn, ffn, config)
        self.attn_sdu, self.ffn_sdu = SelfDependencyUnit(config.d_model), SelfDependencyUnit(config.d_model)

    def forward(self, x: Tensor) -> Tensor:
        u = self.attn_norm(x)
        x = x + self.attn(u) + self.attn_sdu(u)
        u = self.ffn_norm(x)
        return x + self.ffn(u) + self.ffn_sdu(u)


class DepthLSTMBlock(nn.Module):
    """One step of the depth-wise LSTM: attention, then gates and an FFN candidate over [attention; hidden]."""

    def __init__(self, attn: nn.Module, config: TransformerConfig) -> None:
        super().__init__()
        d = config.d_model
        self.attn_norm, self.attn = layer_norm(d, True, config.norm_eps, config.norm_bias), attn
        self.gates = nn.Linear(2 * d, 3 * d, bias=False)
        self.candidate = nn.Sequential(
            nn.Linear(2 * d, config.ffn_dim, bias=False), nn.GELU(), nn.Linear(config.ffn_dim, d, bias=False)
        )

    def forward(self, state: tuple[Tensor, Tensor]) -> tuple[Tensor, Tensor]:
        hidden, cell = state
        both = torch.cat((self.attn(self.attn_norm(hidden)), hidden), dim=-1)
        i, f, o = torch.sigmoid(self.gates(both)).chunk(3, dim=-1)
        cell = f * cell + i * self.candidate(both)
        return o * torch.tanh(cell), cell


class TransformerVariant(Transformer):
    def __init__(self, config: VariantConfig) -> None:
        self.variant = config.variant
        super().__init__(config)
        if config.variant == "layer_aggregation":
            d = config.d_model
            self.aggregators = nn.ModuleList(
                nn.Sequential(nn.Linear(2 * d, d, bias=False), layer_norm(d, True, config.norm_eps, config.norm_bias))
                for _ in range(config.aggregation_stages - 1)
            )
            self.reset_parameters()

    def make_block(self, layer: int, rotary: RotaryEmbedding | None) -> nn.Module:
        attn = make_attention(self.config, layer, rotary)
        if self.variant == "depth_lstm":
            return DepthLSTMBlock(attn, self.config)
        block = HighwayBlock if self.variant == "highway" else PreNormBlock
        return block(attn, MLP(self.config.d_model, self.config.ffn_dim, self.config.bias), self.config)

    def run_blocks(self, x: Tensor) -> Tensor:
        if self.variant == "depth_lstm":
            state = (x, torch.zeros_like(x))
            for block in self.blocks:
                state = block(state)
            return state[0]
        if self.variant == "highway":
            return super().run_blocks(x)
        stage_length = len(self.blocks) // (len(self.aggregators) + 1)
        stages = []
        for i, block in enumerate(self.blocks):
            x = block(x)
            if (i + 1) % stage_length == 0:
                stages.append(x)
        merged = stages[0]
        for aggregator, stage in zip(self.aggregators, stages[1:], strict=True):
            merged = aggregator(torch.cat((merged, stage), dim=-1))
        return merged


register_model(VariantConfig, TransformerVariant)
